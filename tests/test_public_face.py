"""The public face, ``mcp_resili``: every name in ``__all__`` resolves to its home's object, importing the
package loads nothing of the framework but its constants, and docs/suites.md lists exactly ``__all__``."""

from __future__ import annotations

import importlib
import json
import re
import subprocess
import sys

import pytest
from servers import REPO_ROOT, child_env

import mcp_resili
from mcp_resili.constants import VERSION


def test_every_public_name_resolves_to_the_object_its_home_module_defines():
    homes = mcp_resili._HOMES
    assert len(mcp_resili.__all__) == len(set(mcp_resili.__all__))
    assert set(mcp_resili.__all__) == set(homes) | {"__version__"}  # nothing public without a home
    for name in mcp_resili.__all__:
        value = getattr(mcp_resili, name)
        if name == "__version__":
            assert value == VERSION
        else:
            assert value is getattr(importlib.import_module(homes[name]), name), name
    assert set(mcp_resili.__all__) <= set(dir(mcp_resili))
    with pytest.raises(AttributeError, match="no attribute 'get_suite_by_name'"):
        _ = mcp_resili.get_suite_by_name


#: Run in a fresh interpreter: which ``mcp_resili`` modules an import, then every public name, loads.
PROBE = """
import json, sys
import mcp_resili
on_import = sorted(m for m in sys.modules if m.split(".")[0] == "mcp_resili")
for name in mcp_resili.__all__:
    getattr(mcp_resili, name)
loaded = sorted(m for m in sys.modules if m.split(".")[0] == "mcp_resili")
print(json.dumps({"on_import": on_import, "loaded": loaded}))
"""


def test_importing_the_package_loads_only_its_constants_and_loader_and_no_name_loads_a_benchmark():
    proc = subprocess.run(
        [sys.executable, "-c", PROBE],
        env=child_env(),
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout)
    assert seen["on_import"] == ["mcp_resili", "mcp_resili.constants", "mcp_resili.lazy"]
    # Loading every public name loads the framework, never a benchmark: suites join from outside.
    assert len(seen["loaded"]) > 20
    assert not [m for m in seen["loaded"] if m.startswith("mcp_resili.suites.")]


def documented_names() -> set[str]:
    """The names in the first column of the table of docs/suites.md's section on the public face."""
    doc = (REPO_ROOT / "docs" / "suites.md").read_text(encoding="utf-8")
    section = doc.split("## 3. The public face", 1)[1].split("\n## ", 1)[0]
    rows = [line.split("|")[1] for line in section.splitlines() if line.startswith("| `")]
    return {name for cells in rows for name in re.findall(r"`([^`]+)`", cells)}


def test_docs_suites_md_lists_exactly_the_public_names():
    documented = documented_names()
    assert len(documented) > 90  # the table was found and read
    assert sorted(documented - set(mcp_resili.__all__)) == []  # documented but not public
    assert sorted(set(mcp_resili.__all__) - documented) == []  # public but not documented
