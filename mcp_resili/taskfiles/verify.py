"""Verifiers: the end state observed when an episode ends (`observe`), then judged from the trace alone.

`observe` reads what each end-state verifier needs (a file, a query's rows, a repository's branches,
log and files, a memory graph) from the episode's directories; the environment records it in the
trace as an ``end_state`` event. `score` is pure: ``score(task, trace)`` judges every verifier (the
answer and call verifiers read the trace's events) and names each one as a component. A verifier
whose observation is missing fails: an episode whose end state nobody saw proves nothing.
"""

from __future__ import annotations

import fnmatch
import json
import re
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

from mcp_resili.scoring.model import Score
from mcp_resili.taskfiles.fixtures import git_env, resolve
from mcp_resili.taskfiles.model import (
    STATE_KINDS,
    AnswerVerifier,
    CallsVerifier,
    FileTask,
    FileVerifier,
    GitVerifier,
    GraphVerifier,
    SqlVerifier,
    Verifier,
)
from mcp_resili.tasks.model import Task
from mcp_resili.trace import FinishEvent, ModelTurnEvent, ToolCallEvent, Trace

#: Longest file content an observation keeps (a verifier reading a bigger file sees its start).
MAX_OBSERVED_CHARS = 200_000


def verifier_name(verifier: Verifier, index: int) -> str:
    """The component name of a verifier: its own, else ``KIND:WHAT``."""
    if verifier.name:
        return verifier.name
    what = {
        "file": getattr(verifier, "path", ""),
        "sql": getattr(verifier, "query", "")[:40],
        "git": getattr(verifier, "repo", ""),
        "graph": "memory",
        "answer": "final",
        "calls": getattr(verifier, "tool", ""),
    }[verifier.kind]
    return f"{verifier.kind}:{what}#{index}"


# --- observing ------------------------------------------------------------------------------------


def observe(task: FileTask, workspace: Path, state: Path) -> dict[str, Any]:
    """What the task's end-state verifiers need, by verifier index (JSON values only)."""
    observed: dict[str, Any] = {}
    for index, verifier in enumerate(task.verifiers):
        if verifier.kind not in STATE_KINDS:
            continue
        try:
            observed[str(index)] = _observe(verifier, workspace, state)
        except Exception as exc:  # an unreadable state is an observation too (the verifier fails)
            observed[str(index)] = {"error": f"{type(exc).__name__}: {exc}"[:500]}
    return observed


def _observe(verifier: Verifier, workspace: Path, state: Path) -> dict[str, Any]:
    if isinstance(verifier, FileVerifier):
        path = resolve(verifier.path, workspace, state)
        if not path.is_file():
            return {"exists": path.exists(), "content": None}
        text = path.read_bytes()[:MAX_OBSERVED_CHARS].decode("utf-8", errors="replace")
        return {"exists": True, "content": text}
    if isinstance(verifier, SqlVerifier):
        path = resolve(verifier.db, workspace, state)
        if not path.is_file():
            return {"error": f"no database {verifier.db}"}
        connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            rows = connection.execute(verifier.query).fetchmany(1000)
        finally:
            connection.close()
        return {"rows": [list(row) for row in rows]}
    if isinstance(verifier, GitVerifier):
        return _observe_git(verifier, resolve(verifier.repo, workspace, state))
    if isinstance(verifier, GraphVerifier):
        path = resolve(verifier.path, workspace, state)
        entities, relations = [], []
        if path.is_file():
            for line in path.read_text(encoding="utf-8").splitlines():
                if not line.strip():
                    continue
                item = json.loads(line)
                if item.get("type") == "entity":
                    entities.append(
                        {
                            "name": item.get("name"),
                            "type": item.get("entityType"),
                            "observations": item.get("observations", []),
                        }
                    )
                elif item.get("type") == "relation":
                    relations.append([item.get("from"), item.get("relationType"), item.get("to")])
        return {"entities": entities, "relations": relations}
    raise ValueError(f"{verifier.kind} verifiers read the trace, not the end state")


def _git(repo: Path, *args: str) -> tuple[int, str]:
    proc = subprocess.run(
        ["git", *args], cwd=repo, env=git_env(), capture_output=True, text=True, check=False, timeout=30
    )
    return proc.returncode, proc.stdout


def _observe_git(verifier: GitVerifier, repo: Path) -> dict[str, Any]:
    if not (repo / ".git").exists():
        return {"error": f"no git repository at {verifier.repo}"}
    seen: dict[str, Any] = {}
    code, out = _git(repo, "for-each-ref", "--format=%(refname:short)", "refs/heads")
    seen["branches"] = out.split() if code == 0 else []
    code, out = _git(repo, "rev-parse", "--abbrev-ref", "HEAD")
    seen["current_branch"] = out.strip() if code == 0 else None
    code, out = _git(repo, "log", "--format=%B%x00", verifier.ref)
    seen["log"] = [m.strip() for m in out.split("\x00") if m.strip()] if code == 0 else None
    if verifier.file is not None:
        code, out = _git(repo, "show", f"{verifier.ref}:{verifier.file}")
        seen["file"] = out if code == 0 else None
    if verifier.clean is not None:
        code, out = _git(repo, "status", "--porcelain")
        seen["clean"] = code == 0 and not out.strip()
    if verifier.changed_files is not None and verifier.base is not None:
        code, out = _git(repo, "diff", "--name-only", verifier.base, verifier.ref)
        seen["changed_files"] = sorted(out.split()) if code == 0 else None
    return seen


# --- judging (pure) -------------------------------------------------------------------------------


def final_answer(trace: Trace) -> str:
    """The agent's final answer: its ``finish`` summary, else the text of its last turn."""
    finish = trace.finish
    if finish is not None:
        return finish.summary
    turns = [e for e in trace.events if isinstance(e, ModelTurnEvent) and e.text.strip()]
    return turns[-1].text if turns else ""


def judge(task: FileTask, trace: Trace) -> list[tuple[str, bool, str]]:
    """Every verifier's (name, passed, why it failed)."""
    end_state = trace.end_state
    observations = end_state.observations if end_state is not None else None
    verdicts = []
    for index, verifier in enumerate(task.verifiers):
        name = verifier_name(verifier, index)
        if verifier.kind in STATE_KINDS:
            seen = None if observations is None else observations.get(str(index))
            if seen is None:
                verdicts.append((name, False, "the end state was not observed"))
                continue
            if isinstance(seen, dict) and "error" in seen:
                verdicts.append((name, False, str(seen["error"])))
                continue
            problem = _state_problem(task, verifier, seen)
        elif isinstance(verifier, AnswerVerifier):
            problem = _answer_problem(verifier, final_answer(trace))
        else:
            assert isinstance(verifier, CallsVerifier)
            problem = _calls_problem(verifier, trace.tool_calls)
        verdicts.append((name, problem is None, problem or ""))
    return verdicts


def score(task: Task, trace: Trace) -> Score:
    """The verifiers' verdict: full when all pass, partial when some do, else failure."""
    if not isinstance(task, FileTask):
        raise TypeError(f"task {task.id!r} is not a task-file task")
    verdicts = judge(task, trace)
    passed = sum(1 for _, ok, _ in verdicts if ok)
    label = "full" if passed == len(verdicts) else "partial" if passed else "failure"
    components: dict[str, float | int | bool | str | None] = {name: ok for name, ok, _ in verdicts}
    components["verifiers_passed"] = passed
    components["verifiers"] = len(verdicts)
    components["tool_calls"] = len(trace.tool_calls)
    components["faults_injected"] = sum(1 for c in trace.tool_calls if c.fault is not None)
    return Score(
        suite=trace.header.suite,
        task=task.id,
        label=label,
        value=round(passed / len(verdicts), 4) if verdicts else 0.0,
        components=components,
        reasons=tuple(f"{name}: {why}" for name, ok, why in verdicts if not ok),
    )


def _contains_all(text: str, needles: tuple[str, ...], case_sensitive: bool = True) -> str | None:
    haystack = text if case_sensitive else text.lower()
    for needle in needles:
        if (needle if case_sensitive else needle.lower()) not in haystack:
            return f"does not contain {needle!r}"
    return None


def _state_problem(task: FileTask, verifier: Verifier, seen: dict[str, Any]) -> str | None:
    if isinstance(verifier, FileVerifier):
        content = seen.get("content")
        if verifier.absent:
            return None if not seen.get("exists") else f"{verifier.path} still exists"
        if content is None:
            return f"{verifier.path} does not exist"
        if verifier.unchanged:
            original = next((f.content for f in task.fixture.files if f.path == verifier.path), None)
            if content != original:
                return f"{verifier.path} was changed"
        if verifier.equals is not None and content.strip() != verifier.equals.strip():
            return f"{verifier.path} does not hold the expected content"
        problem = _contains_all(content, verifier.contains)
        if problem is not None:
            return f"{verifier.path} {problem}"
        for needle in verifier.not_contains:
            if needle in content:
                return f"{verifier.path} contains {needle!r}"
        if verifier.matches is not None and not re.search(verifier.matches, content, re.MULTILINE):
            return f"{verifier.path} does not match {verifier.matches!r}"
        if verifier.json_equals is not None:
            try:
                parsed = json.loads(content)
            except ValueError:
                return f"{verifier.path} is not JSON"
            if parsed != verifier.json_equals:
                return f"{verifier.path} holds other JSON than expected"
        return None
    if isinstance(verifier, SqlVerifier):
        rows = [tuple(r) for r in seen.get("rows", [])]
        expected = [tuple(r) for r in verifier.rows]
        if verifier.unordered:
            rows, expected = sorted(rows, key=repr), sorted(expected, key=repr)
        return None if rows == expected else f"the query gave {rows[:5]!r}, expected {expected[:5]!r}"
    if isinstance(verifier, GitVerifier):
        return _git_problem(verifier, seen)
    assert isinstance(verifier, GraphVerifier)
    return _graph_problem(verifier, seen)


def _git_problem(verifier: GitVerifier, seen: dict[str, Any]) -> str | None:
    if verifier.branch_exists is not None and verifier.branch_exists not in seen.get("branches", []):
        return f"no branch {verifier.branch_exists!r}"
    if verifier.current_branch is not None and seen.get("current_branch") != verifier.current_branch:
        return f"the current branch is {seen.get('current_branch')!r}, not {verifier.current_branch!r}"
    log = seen.get("log")
    if verifier.log_contains is not None and not any(verifier.log_contains in m for m in log or []):
        return f"no commit on {verifier.ref} says {verifier.log_contains!r}"
    if verifier.commit_count is not None and len(log or []) != verifier.commit_count:
        return f"{verifier.ref} has {len(log or [])} commits, expected {verifier.commit_count}"
    if verifier.file is not None:
        content = seen.get("file")
        if content is None:
            return f"{verifier.file} is not in {verifier.ref}"
        if verifier.file_contains is not None and verifier.file_contains not in content:
            return f"{verifier.file} at {verifier.ref} does not contain {verifier.file_contains!r}"
        if verifier.file_equals is not None and content.strip() != verifier.file_equals.strip():
            return f"{verifier.file} at {verifier.ref} does not hold the expected content"
    if verifier.clean is not None and seen.get("clean") != verifier.clean:
        return "the working tree is not clean" if verifier.clean else "the working tree is clean"
    if verifier.changed_files is not None and seen.get("changed_files") != sorted(verifier.changed_files):
        return f"changed files {seen.get('changed_files')}, expected {sorted(verifier.changed_files)}"
    return None


def _graph_problem(verifier: GraphVerifier, seen: dict[str, Any]) -> str | None:
    entities = {e["name"]: e for e in seen.get("entities", [])}
    if verifier.entity is not None:
        entity = entities.get(verifier.entity)
        if entity is None:
            return f"no entity {verifier.entity!r}"
        if verifier.entity_type is not None and entity.get("type") != verifier.entity_type:
            return f"{verifier.entity!r} is a {entity.get('type')!r}, not a {verifier.entity_type!r}"
        wanted = verifier.observation_contains
        if wanted is not None and not any(
            wanted.lower() in str(o).lower() for o in entity.get("observations", [])
        ):
            return f"no observation of {verifier.entity!r} mentions {wanted!r}"
    if verifier.relation is not None and list(verifier.relation) not in seen.get("relations", []):
        return f"no relation {list(verifier.relation)}"
    if verifier.absent_entity is not None and verifier.absent_entity in entities:
        return f"entity {verifier.absent_entity!r} is still there"
    if verifier.entity_count is not None and len(entities) != verifier.entity_count:
        return f"{len(entities)} entities, expected {verifier.entity_count}"
    return None


def _answer_problem(verifier: AnswerVerifier, answer: str) -> str | None:
    if not answer.strip():
        return "no final answer"
    problem = _contains_all(answer, verifier.contains, verifier.case_sensitive)
    if problem is not None:
        return f"the answer {problem}"
    flags = 0 if verifier.case_sensitive else re.IGNORECASE
    if verifier.matches is not None and not re.search(verifier.matches, answer, flags):
        return f"the answer does not match {verifier.matches!r}"
    for needle in verifier.not_contains:
        if (needle if verifier.case_sensitive else needle.lower()) in (
            answer if verifier.case_sensitive else answer.lower()
        ):
            return f"the answer contains {needle!r}"
    return None


def _matches_args(verifier: CallsVerifier, arguments: dict[str, Any]) -> bool:
    for key, wanted in verifier.args.items():
        value = arguments.get(key)
        if isinstance(wanted, str):
            # A pattern searches a string argument, or the JSON text of any other (a list of files...).
            text = value if isinstance(value, str) else json.dumps(value)
            if key not in arguments or re.search(wanted, text) is None:
                return False
        elif value != wanted:
            return False
    return True


def _calls_problem(verifier: CallsVerifier, calls: list[ToolCallEvent]) -> str | None:
    successful_only = (
        verifier.successful_only if verifier.successful_only is not None else verifier.at_least is not None
    )
    matching = [
        (position, call)
        for position, call in enumerate(calls)
        if fnmatch.fnmatchcase(call.tool, verifier.tool)
        and _matches_args(verifier, call.arguments)
        and (not successful_only or not call.is_error)
    ]
    what = f"{verifier.tool}{' with ' + json.dumps(verifier.args) if verifier.args else ''}"
    if verifier.never:
        return None if not matching else f"{what} was called {len(matching)} time(s)"
    if verifier.at_most is not None:
        return (
            None
            if len(matching) <= verifier.at_most
            else f"{what} was called {len(matching)} times (at most {verifier.at_most})"
        )
    assert verifier.at_least is not None
    if len(matching) < verifier.at_least:
        return f"{what} was called successfully {len(matching)} time(s), at least {verifier.at_least} needed"
    if verifier.before is not None:
        first_other = next(
            (p for p, c in enumerate(calls) if fnmatch.fnmatchcase(c.tool, verifier.before)), None
        )
        if first_other is not None and matching[0][0] > first_other:
            return f"{what} came only after {verifier.before}"
    return None


__all__ = ["FinishEvent", "final_answer", "judge", "observe", "score", "verifier_name"]
