"""The ``Authentication`` base class."""

from __future__ import annotations

from client.arguments import check_type
from client.errors import OperationNotSupported

__all__ = ["Authentication"]


class Authentication:
    """Base class: the method name and the credentials sent with CONNECT.

    The official constructor loads a C++ authentication plugin from a shared library; there
    is no such library here, so it only checks its arguments as the official one does and
    raises ``OperationNotSupported``. Subclasses define their own constructors.
    """

    method_name = "none"

    def __init__(self, dynamicLibPath: str, authParamsString: str) -> None:
        check_type(str, dynamicLibPath, "dynamicLibPath")
        check_type(str, authParamsString, "authParamsString")
        raise OperationNotSupported(
            "authentication plugins in shared libraries are not supported; use "
            "AuthenticationToken, AuthenticationBasic, AuthenticationTLS or AuthenticationOauth2"
        )

    async def prepare(self, renew: bool = False) -> None:
        """Make the credentials current; awaited before ``auth_data`` or
        ``http_authorization`` is read (an OAuth2 token is fetched or renewed here).

        ``renew``: the broker has found the credentials expired (AUTH_CHALLENGE), so whatever
        is cached must not be sent again whatever our clock says.
        """

    def auth_data(self) -> bytes:
        return b""

    def http_authorization(self) -> str | None:
        """The ``Authorization`` header value for HTTP requests, if this method has one."""
        return None

    def __repr__(self) -> str:  # never the credentials
        return f"{type(self).__name__}()"
