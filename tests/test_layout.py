"""The repository's layout: no import cycles among the project's modules, the packages never import
lab/, bench/results/ holds data only, and the wheel ships the packages but not lab/ nor the results.

Imports are read with `ast` from every .py file (module-level and function-level, absolute and
relative), so a cycle hidden in a function body counts too: it is still two modules that cannot be
understood, tested or moved one without the other.
"""
from __future__ import annotations

import ast
import subprocess
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("pipeline", "stages", "ingress", "protocol", "scheduler", "gpu_stage", "emitter", "bench", "observe",
            "structured", "router")
TOP_LEVEL = PACKAGES + ("lab",)
SCRIPT_SUFFIXES = (".py", ".sh", ".patch")


def module_files(root: Path = ROOT) -> dict[str, Path]:
    """Dotted module name -> file, for every .py file of the project's top-level folders."""
    modules = {}
    for top in TOP_LEVEL:
        for path in sorted((root / top).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            modules[".".join(parts)] = path
    return modules


def imported_names(module: str, path: Path) -> set[str]:
    """Every dotted name `module` imports, anywhere in the file: `import a.b` gives a.b; `from a
    import b` gives a and a.b (b may be a submodule); relative imports resolved against `module`."""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            source = ".".join(base + ([node.module] if node.module else []))
            names.add(source)
            names.update(f"{source}.{alias.name}" for alias in node.names)
    return names


def import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the project modules it imports."""
    return {m: {n for n in imported_names(m, path) if n in modules and n != m} for m, path in modules.items()}


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Groups of more than one module that import each other, directly or around a loop (Tarjan's
    algorithm, iterative so that deep import chains cannot hit the recursion limit)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    groups.append(sorted(group))
    return sorted(groups)


def test_the_cycle_finder_finds_loops_and_only_loops() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"f"}, "f": set()}
    assert strongly_connected(graph) == [["a", "b", "c"]]
    assert strongly_connected({"x": {"y"}, "y": {"x"}, "z": set()}) == [["x", "y"]]


def test_relative_and_function_level_imports_are_read(tmp_path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "a.py").write_text("from . import b\n")
    (tmp_path / "pkg" / "b.py").write_text("def f():\n    from pkg.a import g\n")
    assert imported_names("pkg.a", tmp_path / "pkg" / "a.py") == {"pkg", "pkg.b"}
    assert imported_names("pkg.b", tmp_path / "pkg" / "b.py") == {"pkg.a", "pkg.a.g"}


def test_no_import_cycles() -> None:
    assert strongly_connected(import_graph(module_files())) == []


def test_no_package_imports_lab() -> None:
    offenders = sorted(
        f"{m} imports {n}" for m, path in module_files().items() if m.split(".")[0] in PACKAGES
        for n in imported_names(m, path) if n == "lab" or n.startswith("lab."))
    assert offenders == []


def test_results_hold_no_scripts() -> None:
    results = ROOT / "bench" / "results"
    try:  # the repository's files; an ignored scratch folder is not part of it
        listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", str(results)],
                                cwd=ROOT, capture_output=True, text=True, check=True).stdout.split("\n")
        files = [ROOT / f for f in listed if f]
    except (OSError, subprocess.CalledProcessError):  # not a git checkout
        files = [p for p in results.rglob("*") if p.is_file()]
    scripts = sorted(str(f.relative_to(ROOT)) for f in files if f.name.endswith(SCRIPT_SUFFIXES + (".py.txt",)))
    assert scripts == [], "scripts belong in lab/runs/<the same path>/"


def test_the_wheel_ships_the_packages_but_not_lab_nor_results() -> None:
    from setuptools import find_namespace_packages

    find = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    shipped = find_namespace_packages(str(ROOT), include=find.get("include", ["*"]), exclude=find.get("exclude", ()))
    assert set(PACKAGES) <= set(shipped)
    assert [p for p in shipped if p.split(".")[0] not in PACKAGES or p.startswith("bench.results")] == []
