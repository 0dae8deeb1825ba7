"""Classes with too many methods: `python -m lab.class_sizes [--max 15] [folder or file ...]`.

Reads every .py file under the packaged folders (or the folders and files given) with `ast` and prints each
class whose body holds more than `--max` function definitions (`def` and `async def` directly in the
class body: properties, static and class methods count, nested functions and nested classes' methods
do not), largest first, one line each: `path:line Class N`. Exits 0 whatever it finds.
"""
from __future__ import annotations

import argparse
import ast
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[1]
PACKAGED = ("pipeline", "stages", "ingress", "scheduler", "gpu_stage", "emitter")
MAX_METHODS = 15


class ClassSize(NamedTuple):
    path: str
    line: int
    name: str
    num_methods: int


def class_sizes(source: str, path: str) -> list[ClassSize]:
    """Every class of one file (nested ones too) with the number of defs in its own body."""
    sizes = []
    for node in ast.walk(ast.parse(source, path)):
        if isinstance(node, ast.ClassDef):
            n = sum(isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) for child in node.body)
            sizes.append(ClassSize(path, node.lineno, node.name, n))
    return sizes


def large_classes(paths: list[Path], max_methods: int = MAX_METHODS, root: Path = ROOT) -> list[ClassSize]:
    """The classes in `paths` (folders, searched for .py files, or files) with more than
    `max_methods` defs, largest first."""
    found = []
    for path in paths:
        for file in [path] if path.is_file() else sorted(path.rglob("*.py")):
            rel = file.relative_to(root).as_posix() if file.is_relative_to(root) else str(file)
            found += [c for c in class_sizes(file.read_text(), rel) if c.num_methods > max_methods]
    return sorted(found, key=lambda c: (-c.num_methods, c.path, c.line))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*", type=Path, help=f"default: {' '.join(PACKAGED)}")
    parser.add_argument("--max", type=int, default=MAX_METHODS, help="methods a class may have")
    args = parser.parse_args(argv)
    paths = args.paths or [ROOT / name for name in PACKAGED]
    found = large_classes([p.resolve() for p in paths], args.max)
    for c in found:
        print(f"{c.path}:{c.line} {c.name} {c.num_methods}")
    print(f"{len(found)} classes with more than {args.max} methods")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
