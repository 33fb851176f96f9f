"""The codebase stays ruff-clean and mypy-strict clean (the same checks CI relies on)."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: Folders that exist on this branch (examples/ arrives with another branch).
PATHS = [p for p in ("mcp_resili", "tests", "scripts", "bench", "examples") if (ROOT / p).exists()]


#: Checked folders that exist (bench/ and examples/ appear later).
PATHS = [p for p in ("mcp_resili", "tests", "scripts", "bench", "examples") if (ROOT / p).is_dir()]


def run(*argv):
    return subprocess.run(
        [sys.executable, "-m", *argv], cwd=ROOT, capture_output=True, text=True, timeout=300
    )


def test_ruff_lint_and_format_are_clean():
    lint = run("ruff", "check", *PATHS)
    assert lint.returncode == 0, lint.stdout + lint.stderr
    fmt = run("ruff", "format", "--check", *PATHS)
    assert fmt.returncode == 0, fmt.stdout + fmt.stderr


def test_mypy_strict_is_clean_on_the_package():
    result = run("mypy")
    assert result.returncode == 0, result.stdout + result.stderr
