"""The import graph read from the source (every import, module-level, inside functions or
under TYPE_CHECKING): traceaug's packages import one way, down the declared layers, and no
circle of imports joins two files, across packages or within one."""

from __future__ import annotations

import ast
from pathlib import Path

from conftest import ROOT

PACKAGE = ROOT / "traceaug"
# Top to bottom: a module may import its own layer's and the layers below it.
LAYERS = (
    {"traceaug.__main__", "traceaug.cli", "traceaug.startup"},
    {"traceaug", "traceaug.api", "traceaug.analyses"},
    {"traceaug.commands", "traceaug.paths"},
    {"traceaug.rewrite", "traceaug.render", "traceaug.view"},
    {"traceaug.job"},
    {"traceaug.analysis"},
    {"traceaug.trace"},
    {"traceaug.engine"},
    {"traceaug.read"},
    {"traceaug.atomic", "traceaug.errors", "traceaug.guard", "traceaug.interrupt",
     "traceaug.output", "traceaug.processes", "traceaug.progress", "traceaug.runtime",
     "traceaug.sorted_ints", "traceaug.sql_modules", "traceaug.sql_text", "traceaug.version"},
)
UPWARD: set[tuple[str, str]] = set()  # documented exceptions (at most two): none


def modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def imports(name: str, path: Path, known: dict) -> set[str]:
    """The traceaug modules ``name`` imports (for ``from pkg import x`` the package, and x when it is a module
    of it)."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(up + ([node.module] if node.module else []))
            # ``from pkg import mod`` runs pkg/__init__.py too: both count, as file-level graphs count them
            targets = [base] + [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in known]
        else:
            continue
        for t in targets:
            while t not in known and "." in t:
                t = t.rsplit(".", 1)[0]
            if t in known and t != name:
                found.add(t)
    return found


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imports(name, path, known) for name, path in known.items()}


def group(module: str) -> str:
    """The layer entry a module belongs to: itself, or its package (``traceaug.<pkg>``)."""
    for layer in LAYERS:
        if module in layer:
            return module
    return ".".join(module.split(".")[:2])


def layer(module: str) -> int:
    g = group(module)
    return next(i for i, entries in enumerate(LAYERS) if g in entries)


def test_every_module_has_a_layer() -> None:
    for name in modules():
        assert any(group(name) in entries for entries in LAYERS), name


def test_imports_run_down_the_layers() -> None:
    upward = sorted((a, b) for a, targets in graph().items() for b in targets
                    if layer(b) < layer(a) and (a, b) not in UPWARD)
    assert upward == [], "imports that run up the layers: " + ", ".join(f"{a} -> {b}"
                                                                        for a, b in upward)
    assert len(UPWARD) <= 2


def circles(g: dict[str, set[str]]) -> list[list[str]]:
    """The import circles of ``g``: its strongly connected components of two modules or more (Tarjan's)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in g[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            c = set()
            while True:
                w = stack.pop()
                on.discard(w)
                c.add(w)
                if w == v:
                    break
            if len(c) > 1:
                found.append(sorted(c))

    for v in g:
        if v not in index:
            visit(v)
    return found


def test_no_circle_of_files() -> None:
    """No two files import each other, even through others and inside one package (such a circle
    spanned analysis/job_path -> job_timing -> job_replay -> job_path, job/executor <-> run)."""
    assert circles(graph()) == []


def test_the_circle_check_sees_a_circle_within_a_package() -> None:
    g = {"traceaug.a.x": {"traceaug.a.y"}, "traceaug.a.y": {"traceaug.a.z"},
         "traceaug.a.z": {"traceaug.a.x", "traceaug.b"}, "traceaug.b": set()}
    assert circles(g) == [["traceaug.a.x", "traceaug.a.y", "traceaug.a.z"]]


def test_the_checks_see_an_upward_import(tmp_path: Path) -> None:
    """The resolver catches what the tests forbid: a relative import, inside a function, of
    a package above (an analysis module asking the job runner)."""
    known = modules()
    fake = tmp_path / "fake.py"
    fake.write_text("def f():\n    from ..job.run import run\n    return run\n")
    found = imports("traceaug.analysis.fake", fake, known)
    assert found == {"traceaug.job.run"}
    assert layer("traceaug.job.run") < layer("traceaug.analysis.fake")



def test_importing_a_module_through_its_package_counts_the_package(tmp_path: Path) -> None:
    """``from .. import runtime`` in a subpackage runs ``traceaug/__init__.py``, which imports the commands:
    a file-level circle through the package top (42 files once), so the checks count the package as well."""
    known = modules()
    fake = tmp_path / "fake.py"
    fake.write_text("from .. import runtime\nimport traceaug.interrupt as interrupt\n")
    assert imports("traceaug.analysis.fake", fake, known) == {"traceaug", "traceaug.runtime",
                                                               "traceaug.interrupt"}
    assert layer("traceaug") < layer("traceaug.analysis.fake")
