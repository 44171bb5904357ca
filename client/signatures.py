"""One definition of a method's parameters, shared by the asyncio client and the blocking facade.

The blocking ``Client`` mirrors the official API's long parameter lists (``create_producer``
takes 23), and two hand-written copies of a list drift apart: ``ordering_key`` once took bytes
in ``AsyncProducer.send`` and not in ``Producer.send``. So each list is written once, and the
methods that take it are made from it:

* ``takes(Options)``: the method's parameters are the fields of the dataclass ``Options``
  (``ProducerOptions``, ``SubscribeOptions``, ...), in order and with their defaults, and its
  body receives them as one ``Options`` value. A facade that takes more (the blocking
  ``message_listener``) subclasses ``Options``: dataclass fields of a subclass come last.
* ``same_parameters(source)``: the method's parameters are ``source``'s after its first one
  (``self``, or the schema ``prepare_send`` takes); the body takes ``*args, **kwargs`` and
  passes them on. No wrapper is added, so hot paths (``send``, ``send_async``) pay nothing.

Both are typed with ``ParamSpec``, so mypy and editors that read types see the real parameters,
and both set ``__signature__``, so ``inspect.signature``, ``help()`` and editors that introspect
see them too.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable
from typing import Any, Concatenate, ParamSpec, TypeVar

__all__ = ["arguments_of", "copy_parameters", "same_parameters", "takes"]

P = ParamSpec("P")
R = TypeVar("R")
S = TypeVar("S")
Opts = TypeVar("Opts")

_NAMED = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


def takes(
    options: Callable[P, Opts], *, placed: dict[str, int] | None = None
) -> Callable[[Callable[[S, Opts], R]], Callable[Concatenate[S, P], R]]:
    """Give the decorated ``method(self, options)`` the parameters of ``options``'s fields.

    ``placed`` moves fields to other positions (name -> index among the parameters after
    ``self``): the official ``subscribe`` has ``message_listener`` fifth, and a subclass's
    fields come last. Positional arguments then follow the published order.
    """
    fields = list(inspect.signature(options).parameters.values())
    for name, index in (placed or {}).items():
        moved = next(field for field in fields if field.name == name)
        fields.remove(moved)
        fields.insert(index, moved)
    published = inspect.Signature(fields)

    def decorate(method: Callable[[S, Opts], R]) -> Callable[Concatenate[S, P], R]:
        if placed:

            @functools.wraps(method)
            def with_options(self: S, /, *args: P.args, **kwargs: P.kwargs) -> R:
                # By name: the dataclass's own order is not the published one.
                build: Callable[..., Opts] = options
                return method(self, build(**published.bind(*args, **kwargs).arguments))
        else:

            @functools.wraps(method)
            def with_options(self: S, /, *args: P.args, **kwargs: P.kwargs) -> R:
                return method(self, options(*args, **kwargs))

        own = inspect.signature(method)
        this = next(iter(own.parameters.values()))
        with_options.__signature__ = own.replace(  # type: ignore[attr-defined]
            parameters=[this, *fields]
        )
        return with_options

    return decorate


def same_parameters(
    source: Callable[Concatenate[Any, P], Any],
) -> Callable[[Callable[..., R]], Callable[Concatenate[Any, P], R]]:
    """Give the decorated ``method(self, *args, **kwargs)`` the parameters of ``source``."""

    def decorate(method: Callable[..., R]) -> Callable[Concatenate[Any, P], R]:
        copy_parameters(method, source)
        return method

    return decorate


def copy_parameters(method: Callable[..., Any], source: Callable[..., Any]) -> None:
    """Set ``method``'s signature: its own named parameters (``self``, and any it spells out
    itself, such as the blocking ``send_async``'s ``callback``), then ``source``'s after its
    first that ``method`` does not name, in ``source``'s order."""
    own = inspect.signature(method)
    named = [p for p in own.parameters.values() if p.kind in _NAMED]
    names = {p.name for p in named}
    rest = [
        p for p in list(inspect.signature(source).parameters.values())[1:] if p.name not in names
    ]
    method.__signature__ = own.replace(parameters=[*named, *rest])  # type: ignore[attr-defined]


def arguments_of(options: object, base: type) -> dict[str, Any]:
    """The fields of the dataclass ``base`` in ``options`` (of a subclass), as keyword arguments:
    what a facade taking more than ``base`` passes on to the method taking ``base``."""
    return {field.name: getattr(options, field.name) for field in dataclasses.fields(base)}
