"""Settings declared once, as dataclass fields: the flags and the configs derived from them.

A field made with `option()` is also a command-line flag: its metadata holds the help text, the
choices, where it is not `--field-name` the flag's spelling, and any other spellings (`aliases`).
`add_options` turns the fields of a dataclass into argparse arguments (a field whose type is
itself a dataclass adds that one's options: `EngineConfig.limits`), `from_args` builds the
dataclass back from the parsed namespace, and `fill` builds a stage's config from the fields of
the same name in another one. A field without `option()` is a setting that no flag reaches (a
queue bound, a thread count).
"""
from __future__ import annotations

import argparse
from dataclasses import MISSING, Field, dataclass, field, fields, is_dataclass
from types import NoneType, UnionType
from typing import Any, Mapping, TypeVar, Union, get_args, get_origin, get_type_hints

T = TypeVar("T")
OPTION = "ttft.option"  # the metadata key


@dataclass(frozen=True)
class Option:
    help: str | None = None
    choices: tuple[str, ...] | None = None
    flag: str | None = None  # the spelling when it is not --<name-with-dashes>: "--no-shadow"
    # A bool is a --x/--no-x pair unless it is a one-way switch: "store_true", "store_false".
    action: str | None = None
    aliases: tuple[str, ...] = ()  # other spellings of the same flag: ("-tp",)


def option(default: Any, help: str | None = None, *, choices: tuple[str, ...] | None = None,
           flag: str | None = None, action: str | None = None, aliases: tuple[str, ...] = ()) -> Any:
    """A dataclass field with this default that is also the flag `flag` (or --<name>), and `aliases`."""
    return field(default=default, metadata={OPTION: Option(help, choices, flag, action, aliases)})


def flag_type(hint: Any) -> Any:
    """The type a flag's value has: `int` for `int | None`."""
    if get_origin(hint) in (Union, UnionType):
        (hint,) = [t for t in get_args(hint) if t is not NoneType]
    return hint


def default_of(f: Field) -> Any:
    return f.default_factory() if f.default is MISSING else f.default  # type: ignore[misc]


def add_options(parser: argparse.ArgumentParser | argparse._ArgumentGroup, cls: type) -> None:
    """One argument per `option()` field of `cls` (and of its dataclass-typed fields), in field order."""
    hints = get_type_hints(cls)
    for f in fields(cls):
        kind = flag_type(hints[f.name])
        if is_dataclass(kind):
            add_options(parser, kind)
            continue
        opt = f.metadata.get(OPTION)
        if opt is None:
            continue
        default, help = default_of(f), opt.help
        if default is not None and opt.action is None and "default" not in (help or ""):
            help = f"{help} (default: %(default)s)" if help else "default: %(default)s"
        kwargs: dict[str, Any] = {"dest": f.name, "default": default, "help": help}
        if kind is bool:
            kwargs["action"] = opt.action or argparse.BooleanOptionalAction
        else:
            kwargs.update(type=None if kind is str else kind, choices=opt.choices)
        parser.add_argument(opt.flag or "--" + f.name.replace("_", "-"), *opt.aliases, **kwargs)


def from_args(cls: type[T], args: argparse.Namespace) -> T:
    """`cls` with each `option()` field read from the namespace `add_options(parser, cls)` parses."""
    hints = get_type_hints(cls)
    values: dict[str, Any] = {}
    for f in fields(cls):  # type: ignore[arg-type]
        kind = flag_type(hints[f.name])
        if is_dataclass(kind):
            values[f.name] = from_args(kind, args)
        elif OPTION in f.metadata:
            values[f.name] = getattr(args, f.name)
    return cls(**values)


def fill(cls: type[T], source: Any, renames: Mapping[str, str] | None = None, **given: Any) -> T:
    """`cls(...)` with each field that the dataclass `source` also has read from it (from the field
    `renames[name]` where the two spell it differently); `given` values win, the rest keep their
    defaults."""
    renames = renames or {}
    names = {f.name for f in fields(cls)}  # type: ignore[arg-type]
    have = {f.name for f in fields(source)}
    unknown = [n for n, s in renames.items() if n not in names or s not in have]
    if unknown:
        raise TypeError(f"fill({cls.__name__}): renames name no field: {unknown}")
    values = {n: getattr(source, renames.get(n, n)) for n in names if renames.get(n, n) in have}
    return cls(**{**values, **given})
