"""One dataclass <-> JSON codec driven by the field types.

`to_json(obj)` writes a dataclass as the mapping of its fields, in their order (nested dataclasses, lists,
tuples, dicts; a str enum as its value; non-finite floats as "inf", "-inf", "nan", as `jsonio.jsonable`).
`from_json(cls, data, path)` reads it back by `typing.get_type_hints`: dataclasses, `list[X]`, `tuple[X, ...]`,
`dict[str, X]`, `X | None`, str enums, bool, int, float (an int stays an int; "inf", "-inf", "nan" become
floats), str, `Any`. A missing key takes the field's default, else it is an error; keys that are not fields are
ignored (computed keys, a newer writer's). Every error is a `BadValue` whose message names the key path
(`bad key 'pricing.answer.casts': expected an integer, got 'x'`, `missing key 'status'`); a `UserError`
raised by a constructor (a validating `__post_init__`) becomes one for the object's path.

Where a file's JSON is not the plain mapping (renamed, computed or left-out keys, a checked value, a lenient
reader's fallback), a `Codec` is given a `Hook` per class saying exactly that.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from precision_doctor.errors import UserError
from precision_doctor.jsonio import jsonable


class BadValue(Exception):
    """A malformed value; the message names its key path."""


@dataclass(frozen=True)
class Hook:
    """One class's exceptions to the plain field mapping. `out(obj, fields)`: what is written, given the
    object and its fields as JSON (in field order); `into(data, path)`: the keys its fields are read from,
    given the JSON object (already checked to be one); `encode`/`decode(data, path)`: the whole JSON of a
    type the codec does not walk (one with its own format) or of a type hint (a union of a class and str);
    `otherwise()`: for a lenient reader, what JSON that is not this class at all (not an object, or one
    without a key that has no default) reads as instead of an error (a bad value of a key stays one)."""

    out: Callable[[Any, dict], Any] | None = None
    into: Callable[[dict, str], dict] | None = None
    encode: Callable[[Any], Any] | None = None
    decode: Callable[[Any, str], Any] | None = None
    otherwise: Callable[[], Any] | None = None


def key_path(path: str, key: object) -> str:
    return f"{path}.{key}" if path else str(key)


def bad(path: str, expected: str, value: Any) -> BadValue:
    return BadValue(f"bad key '{path}': expected {expected}, got {value!r:.60}")


def mapping(v: Any, path: str) -> dict:
    if not isinstance(v, dict):
        raise BadValue(f"bad key '{path}': expected an object, got {type(v).__name__}")
    return v


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


@dataclass(frozen=True)
class Codec:
    """The codec with `hooks` (class -> Hook) for the classes whose JSON is not their plain field mapping."""

    hooks: Mapping[type, Hook] = field(default_factory=dict)

    # -- writing ---------------------------------------------------------------------------------------
    def to_json(self, obj: Any) -> Any:
        """`obj` as JSON values (dicts, lists, str, numbers, bool, None)."""
        hook = self.hooks.get(type(obj))
        if hook is not None and hook.encode is not None:
            return hook.encode(obj)
        if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
            plain = {f.name: self.to_json(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
            return hook.out(obj, plain) if hook is not None and hook.out is not None else plain
        if isinstance(obj, Enum):
            return obj.value
        if isinstance(obj, dict):
            return {str(k): self.to_json(v) for k, v in obj.items()}
        if isinstance(obj, (list, tuple)):
            return [self.to_json(v) for v in obj]
        return jsonable(obj)

    # -- reading ---------------------------------------------------------------------------------------
    def from_json(self, cls: Any, data: Any, path: str = "") -> Any:
        """`data` read as `cls` (a dataclass or a type as above); BadValue names the key path of a bad value."""
        hook = self.hooks.get(cls)
        if hook is not None and hook.decode is not None:
            return hook.decode(data, path)
        if dataclasses.is_dataclass(cls):
            return self._dataclass(cls, data, path, hook)
        origin, args = typing.get_origin(cls), typing.get_args(cls)
        if origin in (typing.Union, types.UnionType):
            rest = [a for a in args if a is not type(None)]
            if len(rest) != 1:
                raise TypeError(f"codec: no reader for {cls}")
            return None if data is None else self.from_json(rest[0], data, path)
        if origin in (list, tuple):
            if not isinstance(data, list):
                raise BadValue(f"bad key '{path}': expected a list, got {type(data).__name__}")
            if origin is list or (len(args) == 2 and args[1] is Ellipsis):
                items = [self.from_json(args[0], x, f"{path}[{i}]") for i, x in enumerate(data)]
            else:
                if len(data) != len(args):
                    raise bad(path, f"a list of {len(args)}", data)
                items = [self.from_json(a, x, f"{path}[{i}]") for i, (a, x) in enumerate(zip(args, data))]
            return items if origin is list else tuple(items)
        if origin is dict:
            return {str(k): self.from_json(args[1], x, key_path(path, k)) for k, x in mapping(data, path).items()}
        return _leaf(cls, data, path)

    def _dataclass(self, cls: type, data: Any, path: str, hook: Hook | None) -> Any:
        otherwise = hook.otherwise if hook is not None else None
        if otherwise is not None and not isinstance(data, dict):
            return otherwise()
        data = mapping(data, path)
        if hook is not None and hook.into is not None:
            data = hook.into(data, path)
        hints = _hints(cls)
        values = {}
        for f in dataclasses.fields(cls):
            if not f.init:
                continue
            if f.name not in data:
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                    if otherwise is not None:
                        return otherwise()
                    raise BadValue(f"missing key '{key_path(path, f.name)}'")
                continue
            values[f.name] = self.from_json(hints[f.name], data[f.name], key_path(path, f.name))
        try:
            return cls(**values)
        except UserError as exc:
            raise BadValue(f"bad key '{path}': {exc}") from None


def _leaf(cls: Any, v: Any, path: str) -> Any:
    if cls is Any or cls is object:
        return v
    if isinstance(cls, type) and issubclass(cls, Enum):
        try:
            return cls(_leaf(str, v, path))
        except ValueError:
            raise bad(path, f"one of {', '.join(str(s.value) for s in cls)}", v) from None
    if cls is bool:
        if not isinstance(v, bool):
            raise bad(path, "true or false", v)
        return v
    if cls is int:
        if isinstance(v, bool) or not isinstance(v, int):
            raise bad(path, "an integer", v)
        return v
    if cls is float:  # as written (an int stays an int); the strings of non-finite numbers become floats
        if isinstance(v, str) and v in ("inf", "-inf", "nan"):
            return float(v)
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise bad(path, "a number", v)
        return v
    if cls is str:
        if not isinstance(v, str):
            raise bad(path, "a string", v)
        return v
    raise TypeError(f"codec: no reader for {cls!r} (at '{path}')")


PLAIN = Codec()


def to_json(obj: Any) -> Any:
    """`obj` as JSON values, every class as its plain field mapping."""
    return PLAIN.to_json(obj)


def from_json(cls: Any, data: Any, path: str = "") -> Any:
    """`data` read as `cls`, every class from its plain field mapping; BadValue names the key path."""
    return PLAIN.from_json(cls, data, path)
