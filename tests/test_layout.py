"""The package layout holds: imports only run down the floors, no import circles, suites are removable."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import networkx as nx
import pytest

import mcp_resili

PACKAGE = Path(mcp_resili.__file__).parent

#: Framework packages by floor: a module may import its own floor and lower floors only. Benchmarks
#: (``suites``) sit on top; nothing in the framework imports them (they join through entry points).
FLOORS = {
    "__init__": 0,
    "errors": 0,
    "registry": 1,
    "tasks": 1,
    "faults": 2,
    "trace": 3,
    "scoring": 4,
    "workflow": 4,
    "store": 5,
    "report": 6,
    "server": 7,
    "proxy": 7,
    "check": 7,
    "modelapi": 7,
    "client": 8,
    "integrations": 9,
    "modelserver": 9,
    "cli": 10,
    "__main__": 10,
    "suites": 11,
}


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _runtime_imports(path: Path) -> tuple[set[str], set[str]]:
    """(module-level imports, all runtime imports) of ``mcp_resili`` modules; TYPE_CHECKING blocks skipped."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    top: set[str] = set()
    every: set[str] = set()

    def visit(node: ast.AST, at_top: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                for orelse in child.orelse:
                    visit(orelse, at_top)
                continue
            names: list[str] = []
            if isinstance(child, ast.Import):
                names = [alias.name for alias in child.names]
            elif isinstance(child, ast.ImportFrom) and child.module and child.level == 0:
                names = [child.module] + [f"{child.module}.{alias.name}" for alias in child.names]
            for name in names:
                if name.startswith("mcp_resili"):
                    every.add(name)
                    if at_top:
                        top.add(name)
            nested = isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
            visit(child, at_top and not nested)

    visit(tree, True)
    return top, every


def _existing_module(name: str) -> str:
    """``mcp_resili.faults.base.Fault`` → ``mcp_resili.faults.base`` (the longest module prefix)."""
    parts = name.split(".")
    while parts:
        candidate = PACKAGE.parent.joinpath(*parts)
        if candidate.with_suffix(".py").is_file() or (candidate / "__init__.py").is_file():
            return ".".join(parts)
        parts.pop()
    raise AssertionError(f"import of a module that does not exist: {name}")


def _floor(module: str) -> int:
    parts = module.split(".")
    return FLOORS["__init__"] if len(parts) == 1 else FLOORS[parts[1]]


MODULES = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def test_every_package_has_a_floor():
    packages = {name.split(".")[1] for name in MODULES if "." in name}
    assert packages <= set(FLOORS), sorted(packages - set(FLOORS))


def test_imports_never_run_up_the_floors_and_the_framework_never_imports_a_suite():
    upward = []
    for module, path in MODULES.items():
        _, every = _runtime_imports(path)
        for target in {_existing_module(name) for name in every}:
            if _floor(target) > _floor(module):
                upward.append(f"{module} -> {target}")
    assert upward == []


def test_no_import_circles_between_modules():
    graph: nx.DiGraph[str] = nx.DiGraph()
    for module, path in MODULES.items():
        top, _ = _runtime_imports(path)
        for target in {_existing_module(name) for name in top}:
            # A package importing its own submodules (re-exports) is not a circle.
            if target != module and not target.startswith(module + "."):
                graph.add_edge(module, target)
    assert list(nx.simple_cycles(graph)) == []


def test_the_cli_has_no_function_longer_than_sixty_lines():
    long = []
    for module, path in MODULES.items():
        if module != "mcp_resili.cli" and not module.startswith("mcp_resili.cli."):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef) and node.end_lineno - node.lineno + 1 > 60:
                long.append(f"{module}.{node.name}")
    assert long == []


@pytest.fixture(scope="module")
def without_toolmaze(tmp_path_factory):
    """A copy of the package with ``suites/toolmaze`` removed, first on the path of subprocesses."""
    root = tmp_path_factory.mktemp("no-toolmaze")
    shutil.copytree(PACKAGE, root / "mcp_resili", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.rmtree(root / "mcp_resili" / "suites" / "toolmaze")
    env = {**os.environ, "PYTHONPATH": str(root)}
    return root, env


def test_removing_a_suite_leaves_the_framework_and_the_other_suites_importable(without_toolmaze):
    root, env = without_toolmaze
    modules = [
        m for m in MODULES if not m.startswith("mcp_resili.suites.toolmaze") and m != "mcp_resili.__main__"
    ]
    script = (
        "import importlib, mcp_resili, sys\n"
        f"assert mcp_resili.__file__.startswith({str(root)!r}), mcp_resili.__file__\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        "print('imported', len(sys.modules))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], env=env, cwd=root, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr


def test_without_a_suite_the_listing_names_it_broken_in_one_line_and_the_others_still_run(
    without_toolmaze, tmp_path
):
    root, env = without_toolmaze
    cli = [sys.executable, "-m", "mcp_resili"]
    listing = subprocess.run([*cli, "suites"], env=env, cwd=root, capture_output=True, text=True, timeout=120)
    assert listing.returncode == 0, listing.stderr
    assert "Traceback" not in listing.stdout + listing.stderr
    assert "toolmaze" in listing.stdout and "broken" in listing.stdout
    assert "resilibench" in listing.stdout and "reliabilitybench" in listing.stdout
    for suite, task in (("resilibench", _first_default_task("resilibench")), ("reliabilitybench", None)):
        selection = ["--task", task] if task else ["--limit", "1"]
        proc = subprocess.run(
            [
                *cli,
                "run",
                "--suite",
                suite,
                *selection,
                "--trials",
                "1",
                "--json",
                "--db",
                str(tmp_path / "r.db"),
            ],
            env=env,
            cwd=root,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 0, proc.stderr
    gone = subprocess.run(
        [*cli, "run", "--suite", "toolmaze"], env=env, cwd=root, capture_output=True, text=True, timeout=120
    )
    assert gone.returncode == 2
    assert gone.stderr.count("\n") == 1 and "toolmaze" in gone.stderr and "failed to load" in gone.stderr


def _first_default_task(suite: str) -> str:
    from mcp_resili.registry.suites import get_suite

    return get_suite(suite).default_tasks[0].id
