"""Findings and the check report."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

Severity = Literal["error", "warning", "info"]


@dataclass(frozen=True)
class Finding:
    """One contract problem (or note), attributed to a tool when it concerns one."""

    severity: Severity
    check: str
    message: str
    tool: str | None = None


@dataclass
class CheckReport:
    """Everything `check_server` found, plus what it exercised."""

    target: str
    findings: list[Finding] = field(default_factory=list)
    tools: int = 0
    calls: int = 0

    @property
    def errors(self) -> list[Finding]:
        """Findings that fail the check."""
        return [f for f in self.findings if f.severity == "error"]

    def ok(self, *, strict: bool = False) -> bool:
        """No errors (and, when ``strict``, no warnings either)."""
        bad = {"error", "warning"} if strict else {"error"}
        return not any(f.severity in bad for f in self.findings)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "target": self.target,
            "ok": self.ok(),
            "tools": self.tools,
            "calls": self.calls,
            "findings": [asdict(f) for f in self.findings],
        }

    def render(self, *, verbose: bool = False) -> str:
        """A plain-text report, errors first; notes only when ``verbose``."""
        order = {"error": 0, "warning": 1, "info": 2}
        lines = [f"mcp-resili check {self.target}: {self.tools} tools, {self.calls} calls"]
        shown = [f for f in self.findings if verbose or f.severity != "info"]
        for f in sorted(shown, key=lambda f: (order[f.severity], f.tool or "", f.check)):
            where = f" [{f.tool}]" if f.tool else ""
            lines.append(f"  {f.severity.upper():7} {f.check}{where}: {f.message}")
        counts = {s: sum(1 for f in self.findings if f.severity == s) for s in order}
        verdict = "PASS" if self.ok() else "FAIL"
        hint = "" if verbose or not counts["info"] else " (--verbose shows them)"
        lines.append(
            f"{verdict}: {counts['error']} errors, {counts['warning']} warnings, {counts['info']} notes{hint}"
        )
        return "\n".join(lines)

    def assert_ok(self, *, strict: bool = False) -> None:
        """Raise `AssertionError` with the rendered report unless `ok`."""
        if not self.ok(strict=strict):
            raise AssertionError(self.render())
