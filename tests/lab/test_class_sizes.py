"""class_sizes: defs counted in a class's own body only, the threshold strict, largest first."""
from __future__ import annotations

from pathlib import Path

from lab.class_sizes import class_sizes, large_classes, main

SOURCE = '''
class Small:
    def a(self): ...
    def b(self): ...

class Big:
    x = 1
    def a(self):
        def inner(): ...
    async def b(self): ...
    @property
    def c(self): ...
    class Nested:
        def d(self): ...
'''


def test_counts_own_defs_only() -> None:
    sizes = {c.name: c.num_methods for c in class_sizes(SOURCE, "m.py")}
    assert sizes == {"Small": 2, "Big": 3, "Nested": 1}


def _write(folder: Path, name: str, num_methods: int) -> None:
    body = "".join(f"    def m{i}(self): ...\n" for i in range(num_methods))
    (folder / f"{name.lower()}.py").write_text(f"class {name}:\n{body}")


def test_large_classes_strictly_over_the_limit_largest_first(tmp_path: Path, capsys) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    _write(pkg, "Fifteen", 15)
    _write(pkg, "Sixteen", 16)
    _write(pkg / "sub", "Twenty", 20)
    found = large_classes([pkg], 15, root=tmp_path)
    assert [(c.path, c.line, c.name, c.num_methods) for c in found] == [
        ("pkg/sub/twenty.py", 1, "Twenty", 20), ("pkg/sixteen.py", 1, "Sixteen", 16)]
    assert [c.name for c in large_classes([pkg / "sixteen.py", pkg / "fifteen.py"], 15, root=tmp_path)] == ["Sixteen"]
    assert main([str(pkg), "--max", "16"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 2 and out[0].endswith("twenty.py:1 Twenty 20") and out[1] == "1 classes with more than 16 methods"
