"""The package layout holds: imports only run down the floors, no import circles, suites are removable."""

from __future__ import annotations

import ast
import functools
import os
import shutil
import subprocess
import sys
from pathlib import Path

import networkx as nx
import pytest

import mcp_resili

PACKAGE = Path(mcp_resili.__file__).parent

#: Framework packages by floor: a module may import its own floor and lower floors only. The public
#: face (``mcp_resili/__init__.py``) sits above the framework and re-exports it; benchmarks
#: (``suites``) sit on top and import the face or the framework, never the other way round (they join
#: through entry points).
FLOORS = {
    "errors": 0,
    "constants": 0,
    "lazy": 0,
    "fastjson": 0,
    "tools": 1,
    "tasks": 1,
    "agents": 2,
    "faults": 2,
    "trace": 3,
    "scoring": 4,
    "workflow": 4,
    "store": 5,
    "report": 6,
    "registry": 7,
    "server": 8,
    "proxy": 8,
    "check": 8,
    "taskfiles": 8,
    "modelapi": 8,
    "client": 9,
    "integrations": 10,
    "modelserver": 10,
    "harness": 10,
    "cli": 11,
    "__main__": 11,
    "__init__": 12,
    "suites": 13,
}
#: The suite registry's lookups: only the tops (the CLI, the runner's `execute`, the integrations and
#: the face) look a suite up; every layer below is handed the suite or its parts.
LOADER = "mcp_resili.registry.loader"
TOPS = ("mcp_resili", "mcp_resili.cli", "mcp_resili.client.runner", "mcp_resili.integrations")


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@functools.cache
def _imports(path: Path) -> tuple[set[str], set[str]]:
    """(module-level imports, every import) of ``mcp_resili`` modules: at module level, inside
    functions and classes, and under ``TYPE_CHECKING`` alike (a typing-only arrow is an arrow)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    top: set[str] = set()
    every: set[str] = set()

    def visit(node: ast.AST, at_top: bool) -> None:
        for child in ast.iter_child_nodes(node):
            names: list[str] = []
            if isinstance(child, ast.Import):
                names = [alias.name for alias in child.names]
            elif isinstance(child, ast.ImportFrom) and child.module and child.level == 0:
                names = [child.module] + [f"{child.module}.{alias.name}" for alias in child.names]
            for name in names:
                if name == "mcp_resili" or name.startswith("mcp_resili."):
                    every.add(name)
                    if at_top:
                        top.add(name)
            typing_only = isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test)
            nested = isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
            visit(child, at_top and not nested and not typing_only)

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


def _room(module: str) -> str:
    """The subpackage a module lives in (``__init__`` for the face itself)."""
    parts = module.split(".")
    return "__init__" if len(parts) == 1 else parts[1]


def _floor(module: str) -> int:
    return FLOORS[_room(module)]


MODULES = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


@functools.cache
def _arrows() -> dict[str, set[str]]:
    """module -> the modules it imports anywhere (read when a test asks, not at collection)."""
    return {
        module: {_existing_module(name) for name in _imports(path)[1]} - {module}
        for module, path in MODULES.items()
    }


def test_every_package_has_a_floor():
    packages = {_room(name) for name in MODULES}
    assert packages <= set(FLOORS), sorted(packages - set(FLOORS))


def test_imports_never_run_up_the_floors_counting_every_import():
    upward = [
        f"{MODULES[module].relative_to(PACKAGE.parent)} imports {target}"
        for module, targets in _arrows().items()
        for target in sorted(targets)
        if _floor(target) > _floor(module)
    ]
    assert upward == []


def test_subpackages_form_no_circle_counting_every_import():
    graph: nx.DiGraph[str] = nx.DiGraph()
    files: dict[tuple[str, str], str] = {}
    for module, targets in _arrows().items():
        for target in targets:
            if _room(module) != _room(target):
                graph.add_edge(_room(module), _room(target))
                files.setdefault(
                    (_room(module), _room(target)), str(MODULES[module].relative_to(PACKAGE.parent))
                )
    circles = [
        " -> ".join(f"{a} ({files[a, b]})" for a, b in zip(cycle, [*cycle[1:], cycle[0]], strict=True))
        for cycle in nx.simple_cycles(graph)
    ]
    assert circles == []


def test_no_import_circles_between_modules():
    graph: nx.DiGraph[str] = nx.DiGraph()
    for module, path in MODULES.items():
        top, _ = _imports(path)
        for target in {_existing_module(name) for name in top}:
            # A package importing its own submodules (re-exports) is not a circle.
            if target != module and not target.startswith(module + "."):
                graph.add_edge(module, target)
    assert list(nx.simple_cycles(graph)) == []


def test_only_the_tops_look_a_suite_up():
    lookups = [
        str(MODULES[module].relative_to(PACKAGE.parent))
        for module, targets in _arrows().items()
        if LOADER in targets
        and module != LOADER
        and not any(module == top or module.startswith(top + ".") for top in TOPS[1:])
        and module != TOPS[0]
    ]
    assert lookups == []


def test_the_framework_never_imports_a_suite_or_the_face():
    wrong = [
        f"{MODULES[module].relative_to(PACKAGE.parent)} imports {target}"
        for module, targets in _arrows().items()
        if _room(module) not in ("suites", "__init__")
        for target in targets
        if _room(target) in ("suites", "__init__")
    ]
    assert wrong == []


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
                "--time-scale",
                "0",
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
    from mcp_resili import get_suite

    return get_suite(suite).default_tasks[0].id
