"""``PulsarException`` as ``pulsar.asyncio`` has it, and the translation of our errors into it.

The official asyncio module raises one class, ``PulsarException(result, msg=None)``, whose
``error()`` is the ``Result`` code and whose text is ``"<value> <Name>: <msg>"``. Our client
raises one class per code (``client.errors``). Each error leaving ``client.asyncio`` is turned
into a class deriving from both, so ``except client.asyncio.PulsarException`` (the ported code)
and ``except client.Timeout`` (our own names) both catch it, with the original as its cause.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from client import errors
from client.errors import Result

__all__ = ["PulsarException", "official", "translated"]


class PulsarException(errors.PulsarException):
    """The exception that wraps a Pulsar ``Result`` code (``pulsar.asyncio.PulsarException``).

    It declares no ``result`` of its own, so ``client.errors`` sees it as a refinement and
    ``for_result`` stays the exact inverse of the code table.
    """

    def __init__(self, result: Result, msg: str | None = None) -> None:
        self._result = Result(result)
        self._msg = msg
        super().__init__(str(self))

    def error(self) -> Result:
        """The ``Result`` code."""
        return self._result

    def __str__(self) -> str:
        if self._msg:
            return f"{self._result.value} {self._result.name}: {self._msg}"
        return f"{self._result.value} {self._result.name}"


# One class per class of ours (made once, on first use): both catch clauses keep working.
_BOTH: dict[type[errors.PulsarException], type[PulsarException]] = {}


def official(exc: errors.PulsarException) -> PulsarException:
    """``exc`` as the official asyncio module raises it (``exc`` itself when already so)."""
    if isinstance(exc, PulsarException):
        return exc
    cls = type(exc)
    both = _BOTH.get(cls)
    if both is None:
        both = type(cls.__name__, (PulsarException, cls), {"__module__": __name__})
        _BOTH[cls] = both
    return both(exc.result, str(exc))


@contextlib.contextmanager
def translated() -> Iterator[None]:
    """Raise our client's errors as ``PulsarException``; a bare ``TimeoutError`` (an operation
    timeout inside our client) as ``Result.Timeout``, the code the C++ client gives it."""
    try:
        yield
    except PulsarException:
        raise
    except errors.PulsarException as exc:
        raise official(exc) from exc
    except TimeoutError as exc:
        raise official(errors.Timeout(str(exc) or "operation timed out")) from exc
