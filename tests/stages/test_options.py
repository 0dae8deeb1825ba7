"""stages/options.py: flags derived from dataclass fields, configs back from them, `fill` by name."""
from __future__ import annotations

import argparse
from dataclasses import dataclass, field

import pytest

from stages.options import add_options, fill, flag_type, from_args, option


@dataclass(frozen=True)
class Inner:
    max_items: int = option(8, "items at most")
    not_a_flag: int = 3


@dataclass
class Outer:
    name: str | None = option(None, "a name")
    ratio: float = option(0.5, "a share")
    mode: str = option("a", choices=("a", "b"))
    fast: bool = option(True, "go fast")
    maybe: bool | None = option(None, "default: it depends")
    eager: bool = option(False, "no graphs", action="store_true")
    checked: bool = option(True, "skip the check", flag="--no-check", action="store_false")
    num_ranks: int = option(1, "ranks", aliases=("-n",))
    queue_size: int = 4  # a setting, not a flag
    inner: Inner = field(default_factory=Inner)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser()
    add_options(p, Outer)
    return p


def test_flag_type_drops_none() -> None:
    assert flag_type(int | None) is int and flag_type(str) is str and flag_type(bool | None) is bool


def test_the_fields_become_flags_with_their_defaults_and_types() -> None:
    actions = {a.dest: a for a in parser()._actions if a.dest != "help"}
    assert sorted(actions) == ["checked", "eager", "fast", "max_items", "maybe", "mode", "name", "num_ranks", "ratio"]
    assert actions["num_ranks"].option_strings == ["--num-ranks", "-n"]
    assert actions["fast"].option_strings == ["--fast", "--no-fast"]
    assert isinstance(actions["maybe"], argparse.BooleanOptionalAction) and actions["maybe"].default is None
    assert actions["checked"].option_strings == ["--no-check"] and actions["checked"].default is True
    assert actions["eager"].option_strings == ["--eager"] and actions["eager"].default is False
    assert actions["ratio"].type is float and actions["max_items"].type is int and actions["name"].type is None
    assert actions["mode"].choices == ("a", "b") and actions["max_items"].default == 8
    help_text = " ".join(parser().format_help().split())
    assert "a share (default: 0.5)" in help_text and "default: it depends" in help_text
    assert "(default: None)" not in help_text and "no graphs (default" not in help_text


def test_from_args_round_trips_defaults_and_values() -> None:
    assert from_args(Outer, parser().parse_args([])) == Outer()
    argv = ["--name", "n", "--ratio", "0.25", "--mode", "b", "--no-fast", "--maybe", "--eager",
            "--no-check", "--max-items", "2", "-n", "3"]
    assert from_args(Outer, parser().parse_args(argv)) == Outer(
        name="n", ratio=0.25, mode="b", fast=False, maybe=True, eager=True, checked=False, num_ranks=3,
        inner=Inner(max_items=2))
    assert from_args(Outer, parser().parse_args(["--num-ranks", "2"])).num_ranks == 2  # either spelling
    with pytest.raises(SystemExit):
        parser().parse_args(["--mode", "c"])


@dataclass(frozen=True)
class Stage:
    size: int
    ratio: float = 1.0
    fast_path: bool = False
    own: int = 9


def test_fill_copies_same_names_renames_and_keeps_the_rest() -> None:
    src = Outer(ratio=0.75, fast=True)
    assert fill(Stage, src, {"fast_path": "fast"}, size=3) == Stage(size=3, ratio=0.75, fast_path=True, own=9)
    assert fill(Stage, src, size=3, ratio=2.0).ratio == 2.0  # given values win
    with pytest.raises(TypeError, match="renames"):
        fill(Stage, src, {"fast_pth": "fast"}, size=3)
    with pytest.raises(TypeError, match="renames"):
        fill(Stage, src, {"fast_path": "quick"}, size=3)
    with pytest.raises(TypeError):
        fill(Stage, src, size=3, sise=4)  # a misspelt given field is no silent no-op
