"""``client.signatures``: a method made from a dataclass or from another function takes exactly
its parameters, for callers and for ``inspect.signature``."""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

import pytest

from client.signatures import arguments_of, same_parameters, takes


@dataclass(frozen=True)
class Options:
    topic: str
    size: int = 10
    name: str | None = None


@dataclass(frozen=True)
class MoreOptions(Options):
    listener: str | None = None


def source(schema: object, content: bytes, key: str | None = None, *, tag: str = "") -> str:
    return f"{schema}:{content!r}:{key}:{tag}"


class Made:
    @takes(Options)
    def open(self, options: Options) -> Options:
        """Open it."""
        return options

    @takes(MoreOptions)
    def open_more(self, options: MoreOptions) -> dict[str, Any]:
        return arguments_of(options, Options)

    @same_parameters(source)
    def send(self, *args: Any, **kwargs: Any) -> str:
        return source("s", *args, **kwargs)

    @same_parameters(source)
    def send_with(
        self, content: bytes, callback: str | None = None, *args: Any, **kwargs: Any
    ) -> str:
        return f"{callback}/" + source("s", content, *args, **kwargs)


def test_takes_builds_the_options_from_the_fields_in_order() -> None:
    made = Made()
    assert made.open("t") == Options("t")
    assert made.open("t", 3, name="n") == Options("t", 3, "n")
    with pytest.raises(TypeError):
        made.open("t", bogus=1)  # type: ignore[call-arg]
    assert Made.open.__doc__ == "Open it."
    assert str(inspect.signature(Made.open)) == (
        "(self, topic: 'str', size: 'int' = 10, name: 'str | None' = None) -> 'Options'"
    )


def test_a_subclass_adds_its_fields_last_and_gives_back_the_base_ones() -> None:
    parameters = list(inspect.signature(Made.open_more).parameters)
    assert parameters == ["self", "topic", "size", "name", "listener"]
    assert Made().open_more("t", 1, "n", "l") == {"topic": "t", "size": 1, "name": "n"}


def test_same_parameters_are_the_sources_after_its_first() -> None:
    made = Made()
    assert made.send(b"c", "k", tag="x") == "s:b'c':k:x"
    assert str(inspect.signature(Made.send)) == (
        "(self, content: 'bytes', key: 'str | None' = None, *, tag: 'str' = '') -> 'str'"
    )


def test_parameters_the_method_names_itself_stay_where_it_puts_them() -> None:
    assert list(inspect.signature(Made.send_with).parameters) == [
        "self",
        "content",
        "callback",
        "key",
        "tag",
    ]
    assert Made().send_with(b"c", "cb", "k") == "cb/s:b'c':k:"
