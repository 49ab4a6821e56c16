"""Strict reading of JSON bodies into typed values.

Required members must be present (a required member that may be null must
still be present); optional members may be absent and read as None. No
default is ever made up for a required member: a body that lacks one is a
`DecodeError`. Members this module is not asked about are ignored, so the
document may add members without breaking the client.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ._base import DecodeError

_MISSING: Any = object()


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def parse_time(value: str, path: str) -> datetime:
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise DecodeError(f"{path}: {value!r} is not an RFC 3339 timestamp") from None
    if parsed.tzinfo is None:
        raise DecodeError(f"{path}: {value!r} has no time zone")
    return parsed


class Obj:
    """A JSON object being read, with its path for error messages."""

    __slots__ = ("data", "path")

    def __init__(self, value: Any, path: str) -> None:
        if not isinstance(value, dict):
            raise DecodeError(f"{path}: expected an object, got {_kind(value)}")
        self.data: dict[str, Any] = value
        self.path = path

    def _at(self, name: str) -> str:
        return f"{self.path}.{name}"

    def _get(self, name: str, required: bool) -> Any:
        if name in self.data:
            return self.data[name]
        if required:
            raise DecodeError(f"{self._at(name)}: required member is missing")
        return _MISSING

    def _wrong(self, name: str, want: str, value: Any) -> DecodeError:
        return DecodeError(f"{self._at(name)}: expected {want}, got {_kind(value)}")

    # Integers (a JSON boolean is not one).

    def _int(self, name: str, required: bool, nullable: bool) -> int | None:
        value = self._get(name, required)
        if value is _MISSING:
            return None
        if value is None and nullable:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            raise self._wrong(name, "an integer" + (" or null" if nullable else ""), value)
        return value

    def integer(self, name: str) -> int:
        value = self._int(name, True, False)
        assert value is not None
        return value

    def integer_or_none(self, name: str) -> int | None:
        return self._int(name, True, True)

    def opt_integer(self, name: str) -> int | None:
        return self._int(name, False, True)

    # Strings.

    def _str(self, name: str, required: bool, nullable: bool) -> str | None:
        value = self._get(name, required)
        if value is _MISSING:
            return None
        if value is None and nullable:
            return None
        if not isinstance(value, str):
            raise self._wrong(name, "a string" + (" or null" if nullable else ""), value)
        return value

    def string(self, name: str) -> str:
        value = self._str(name, True, False)
        assert value is not None
        return value

    def string_or_none(self, name: str) -> str | None:
        return self._str(name, True, True)

    def opt_string(self, name: str) -> str | None:
        return self._str(name, False, True)

    # Booleans.

    def boolean(self, name: str) -> bool:
        value = self._get(name, True)
        if not isinstance(value, bool):
            raise self._wrong(name, "a boolean", value)
        return value

    # Timestamps.

    def timestamp(self, name: str) -> datetime:
        return parse_time(self.string(name), self._at(name))

    def timestamp_or_none(self, name: str) -> datetime | None:
        text = self.string_or_none(name)
        return None if text is None else parse_time(text, self._at(name))

    def opt_timestamp(self, name: str) -> datetime | None:
        text = self.opt_string(name)
        return None if text is None else parse_time(text, self._at(name))

    # Free-form objects (metadata, event data).

    def _dict(self, name: str, required: bool, nullable: bool) -> dict[str, Any] | None:
        value = self._get(name, required)
        if value is _MISSING:
            return None
        if value is None and nullable:
            return None
        if not isinstance(value, dict):
            raise self._wrong(name, "an object" + (" or null" if nullable else ""), value)
        return value

    def mapping(self, name: str) -> dict[str, Any]:
        value = self._dict(name, True, False)
        assert value is not None
        return value

    def opt_mapping(self, name: str) -> dict[str, Any] | None:
        return self._dict(name, False, True)

    # Nested objects and arrays of them.

    def obj(self, name: str) -> Obj:
        return Obj(self._get(name, True), self._at(name))

    def obj_or_none(self, name: str) -> Obj | None:
        value = self._get(name, True)
        return None if value is None else Obj(value, self._at(name))

    def objs(self, name: str) -> list[Obj]:
        value = self._get(name, True)
        if not isinstance(value, list):
            raise self._wrong(name, "an array", value)
        return [Obj(item, f"{self._at(name)}[{index}]") for index, item in enumerate(value)]
