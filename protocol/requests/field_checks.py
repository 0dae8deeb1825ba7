"""Strict, typed getters for one field of a JSON object; each failure is a 400 naming the field.

JSON has one number type, Python two, and bool is a subclass of int: `type(v) is int` (never
isinstance) keeps `true` out of integer fields, and a float such as 3.0 is refused where an integer is
wanted (a client that sends 3.0 for max_tokens has a bug worth hearing about). Integers are accepted
where floats are wanted. `null` counts as absent everywhere.
"""
from __future__ import annotations

import math
from typing import Any

from protocol.errors import ApiError, bad_request

INT64_MIN = -(2**63)
UINT64_MAX = 2**64 - 1

_TYPE_NAMES = {bool: "a boolean", int: "an integer", float: "a number", str: "a string",
               list: "an array", dict: "an object", type(None): "null"}


def describe(value: Any) -> str:
    """A short, safe description of a client's value for an error message (never a huge echo)."""
    kind = _TYPE_NAMES.get(type(value), type(value).__name__)
    if type(value) in (bool, int, float):
        text = repr(value).lower() if type(value) is bool else repr(value)
        return f"{kind} ({text[:40]})"
    if type(value) is str:
        return f"a string ({value[:40]!r}{'...' if len(value) > 40 else ''})"
    return kind


def type_error(param: str, wanted: str, value: Any) -> ApiError:
    return bad_request(f"'{param}' must be {wanted}, got {describe(value)}.", param)


def opt_bool(obj: dict, key: str, default: bool | None) -> bool | None:
    value = obj.get(key)
    if value is None:
        return default
    if value is True or value is False:
        return value
    raise type_error(key, "a boolean", value)


def check_int(param: str, value: Any, lo: int | None = None, hi: int | None = None) -> int:
    """value as an int in [lo, hi], or a 400 that says which bound it broke."""
    if type(value) is not int:
        if type(value) is float and value.is_integer() and abs(value) >= 2**63:
            # orjson turns integers beyond 64 bits into floats: say what really went wrong.
            raise bad_request(f"'{param}' is out of range: {value!r} does not fit in 64 bits.", param)
        raise type_error(param, "an integer", value)
    if lo is not None and value < lo:
        raise _range_error(param, value, lo, hi)
    if hi is not None and value > hi:
        raise _range_error(param, value, lo, hi)
    return value


def opt_int(obj: dict, key: str, default: int | None, lo: int | None = None,
            hi: int | None = None) -> int | None:
    value = obj.get(key)
    if value is None:
        return default
    return check_int(key, value, lo, hi)


def opt_float(obj: dict, key: str, default: float, lo: float, hi: float,
              lo_open: bool = False) -> float:
    """A finite number in [lo, hi] (or (lo, hi] with lo_open) as a float."""
    value = obj.get(key)
    if value is None:
        return default
    kind = type(value)
    if kind is not float and kind is not int:
        raise type_error(key, "a number", value)
    try:
        number = float(value)
    except OverflowError:  # an int too large for a double (possible only for in-process callers)
        raise bad_request(f"'{key}' is out of range.", key) from None
    if not math.isfinite(number) or number < lo or number > hi or (lo_open and number == lo):
        bound = f"greater than {lo:g}" if lo_open else f"at least {lo:g}"
        raise bad_request(f"'{key}' must be {bound} and at most {hi:g}, got {describe(value)}.", key)
    return number


def opt_str(obj: dict, key: str, non_empty: bool = False, max_chars: int | None = None) -> str | None:
    value = obj.get(key)
    if value is None:
        return None
    if type(value) is not str:
        raise type_error(key, "a string", value)
    if non_empty and not value:
        raise bad_request(f"'{key}' must not be empty.", key)
    if max_chars is not None and len(value) > max_chars:
        raise bad_request(f"'{key}' is too long: {len(value)} characters, the limit is {max_chars}.", key)
    return value


def opt_dict(obj: dict, key: str) -> dict | None:
    value = obj.get(key)
    if value is None:
        return None
    if type(value) is not dict:
        raise type_error(key, "an object", value)
    return value


def check_token_ids(param: str, value: Any, vocab_size: int, allow_empty: bool) -> list[int]:
    """A list of ints in [0, vocab_size). Checked with C-speed builtins: prompts can be 100k ids."""
    if type(value) is not list:
        raise type_error(param, "an array of token ids", value)
    if not value:
        if allow_empty:
            return value
        raise bad_request(f"'{param}' must not be empty.", param)
    if set(map(type, value)) != {int}:
        index = next(i for i, t in enumerate(value) if type(t) is not int)
        raise type_error(f"{param}[{index}]", "an integer token id", value[index])
    low, high = min(value), max(value)
    if low < 0 or high >= vocab_size:
        bad = low if low < 0 else high
        index = value.index(bad)
        raise bad_request(
            f"'{param}[{index}]' is {bad}, not a token id: ids must be in [0, {vocab_size}).",
            f"{param}[{index}]",
        )
    return value


def _range_error(param: str, value: int, lo: int | None, hi: int | None) -> ApiError:
    if lo is not None and hi is not None:
        return bad_request(f"'{param}' must be between {lo} and {hi}, got {value}.", param)
    if lo is not None:
        return bad_request(f"'{param}' must be at least {lo}, got {value}.", param)
    return bad_request(f"'{param}' must be at most {hi}, got {value}.", param)
