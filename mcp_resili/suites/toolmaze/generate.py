"""The ToolMaze task generator: 100 tasks per level C1–C4, deterministic from a seed.

Where the paper uses LLMs (DAG architect, validator, query rewriter), this generator uses rules and
templates, so the output is reproducible and checkable:

* **lengths** follow fixed per-level quotas whose means are the paper's Table 1 (5.30, 5.75, 6.66,
  11.00 steps on s*) within its min/max lengths; domains follow the paper's weights;
* **groups**: C1 none; C2 one two-member one-to-one or one-to-many group; C3 one many-to-many group;
  C4 two or three groups, one per parallel branch (a three-member one-to-one group with a two-member
  one: 6 paths; two two-member groups: 4; three: 8; a quarter of the tasks each of 4 and 8, so the
  mean is the paper's 6). Every corpus group and every source is used by some task;
* **C4 is a DAG**: 8–12 chain steps in two or three parallel branches (a branch starts from a source
  of its own or forks from step 1), joined by steps that read one branch's record id and another
  branch's figure, then the final action;
* **exact paths**: for every run of steps linked by ``prev``, the number of tool sequences in the
  whole corpus computing its ops (`corpus.decompositions`) must equal the product of its slots'
  member counts, so ``valid_paths`` really is every valid path (a C1 task under a permanent fault is
  unsolvable, as the paper intends);
* **state**: a booking never runs in parallel with (or before) an availability source of the same
  resource, so every execution order of the DAG sees the same availability;
* **bindings** read only the fields every member of an alternative group returns (its last op's
  layout): the record id, the figure and the subject; ``value``-like inputs sometimes come from an
  earlier step (``step``); the action ``priority`` is a ``constant`` the request states;
* the **request** joins the ops' phrase templates in chain order (branches as separate sentences);
* the **perturbation profile** draws the C1 victim (a middle step), the P1/P2 responses and the P3/P4
  corruption types from the seeded RNG.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from mcp_resili.suites.toolmaze.corpus import PRIORITIES, CorpusGroup, Op, decompositions
from mcp_resili.suites.toolmaze.corrupt import CORRUPTIONS
from mcp_resili.suites.toolmaze.faults import PERMANENT_ERRORS, TRANSIENT_ERRORS, error_type
from mcp_resili.suites.toolmaze.library import Corpus
from mcp_resili.suites.toolmaze.model import (
    ALTERNATIVE,
    AlternativeGroup,
    ArgBinding,
    ChainElement,
    ErrorResponse,
    FaultSlot,
    Level,
    PathStep,
    PerturbationProfile,
    ToolMazeTask,
    ToolMazeTaskSet,
    path_workflow,
)
from mcp_resili.tasks.model import TaskConstraints

TASKS_PER_LEVEL = 100
MAX_STEPS = 25
#: Lengths of s* per level: {length: number of tasks}; means 5.30 / 5.75 / 6.66 / 11.00 (paper Table 1).
LENGTH_QUOTAS: dict[Level, dict[int, int]] = {
    "C1": {5: 75, 6: 20, 7: 5},
    "C2": {5: 49, 6: 36, 7: 8, 8: 5, 9: 2},
    "C3": {6: 57, 7: 28, 8: 9, 9: 4, 10: 2},
    "C4": {8: 11, 9: 12, 10: 18, 11: 20, 12: 17, 13: 12, 14: 6, 15: 4},
}
#: C4 shapes per s* length: (groups, many-to-many among them, tasks). Groups "3+2" pair a three-member
#: one-to-one group with a two-member one (6 paths); "2+2" and "2+2+2" are two-member groups (4 and
#: 8 paths; 25 tasks each, so the mean is 6). Chain steps = length − many-to-many groups, all in 8..12.
C4_SHAPES: dict[int, tuple[tuple[str, int, int], ...]] = {
    8: (("3+2", 0, 8), ("2+2", 0, 3)),
    9: (("3+2", 0, 6), ("3+2", 1, 2), ("2+2", 0, 2), ("2+2+2", 0, 2)),
    10: (("3+2", 0, 7), ("3+2", 1, 3), ("2+2", 1, 3), ("2+2+2", 0, 3), ("2+2+2", 1, 2)),
    11: (("3+2", 0, 6), ("3+2", 1, 4), ("2+2", 1, 3), ("2+2", 0, 2), ("2+2+2", 1, 3), ("2+2+2", 2, 2)),
    12: (("3+2", 0, 4), ("3+2", 1, 4), ("2+2", 1, 6), ("2+2+2", 2, 3)),
    13: (("3+2", 1, 6), ("2+2", 1, 2), ("2+2", 2, 1), ("2+2+2", 2, 2), ("2+2+2", 3, 1)),
    14: (("2+2", 2, 3), ("2+2+2", 2, 2), ("2+2+2", 3, 1)),
    15: (("2+2+2", 3, 4),),
}
#: The paper's domain mix (Office 61, Financial 58, Travel 45, Shopping 36, IoT 36, General 34).
DOMAIN_WEIGHTS = {"office": 61, "finance": 58, "travel": 45, "shopping": 36, "iot": 36, "general": 34}
#: Domains whose processors and actions may fill the shared steps of a task (after its own).
PARTNERS = {
    "office": ("general", "finance"),
    "finance": ("general", "office"),
    "travel": ("general", "office"),
    "shopping": ("general", "office"),
    "iot": ("general", "office"),
    "general": ("office", "finance"),
}
COMPLEXITY: dict[Level, str] = {"C1": "easy", "C2": "medium", "C3": "medium", "C4": "hard"}
ATTEMPTS = 400


class _Ctx:
    """Corpus lookups and usage counters the generator needs."""

    def __init__(self, corpus: Corpus) -> None:
        self.corpus = corpus
        self.ops = {op.name: op for op in corpus.ops}
        self.tools = {t.spec.name: t for t in corpus.tools}
        self.tool_ops = {t.spec.name: t.ops for t in corpus.tools}
        self.groups = list(corpus.groups)
        self.domains = {d.name: d for d in corpus.domains}
        #: The tool computing exactly one op, for ops computed by exactly one tool.
        counts = Counter(t.ops for t in corpus.tools)
        self.unique_tool = {
            t.ops[0]: t.spec.name for t in corpus.tools if len(t.ops) == 1 and counts[t.ops] == 1
        }
        #: Ops a shared step may use, per domain: one tool computes them and they are not sources.
        self.shared = {
            d.name: [
                op.name
                for op in corpus.ops
                if op.domain == d.name and op.role != "source" and op.name in self.unique_tool
            ]
            for d in corpus.domains
        }
        self.sources = {
            d.name: [op.name for op in corpus.ops if op.domain == d.name and op.role == "source"]
            for d in corpus.domains
        }
        #: Consecutive op pairs some tool computes in one call: two steps so linked could be fused.
        self.fused = {pair for t in corpus.tools for pair in zip(t.ops, t.ops[1:], strict=False)}
        self.used_groups: Counter[str] = Counter()
        self.used_sources: Counter[str] = Counter()


def _least_used(candidates: Sequence[str], used: Counter[str], rng: random.Random) -> str:
    low = min(used[c] for c in candidates)
    return rng.choice([c for c in candidates if used[c] == low])


def _pick_groups(
    ctx: _Ctx, level: Level, domain: str, shape: str, many: int, rng: random.Random
) -> list[CorpusGroup]:
    """The task's groups: ops disjoint, least-used first (so every group gets used)."""

    def pool(kinds: set[str], members: int, domains: Sequence[str]) -> list[CorpusGroup]:
        return [
            g for g in ctx.groups if g.kind in kinds and len(g.members) == members and g.domain in domains
        ]

    if level == "C1":
        return []
    single = {"one_to_one", "one_to_many"}
    wanted: list[tuple[set[str], int]]
    if level == "C2":
        wanted = [(single, 2)]
    elif level == "C3":
        wanted = [({"many_to_many"}, 2)]
    else:
        sizes = [int(s) for s in shape.split("+")]
        shapes = [{"many_to_many"}] * many + [single] * (len(sizes) - many)
        if sizes[0] == 3:  # the three-member group is one-to-one; its partner is the other shape
            shapes = [{"one_to_one"}, shapes[0]]
        wanted = list(zip(shapes, sizes, strict=True))
    chosen: list[CorpusGroup] = []
    for kinds, members in wanted:
        taken = {op for g in chosen for op in g.ops}
        for domains in ((domain,), (domain, *PARTNERS[domain])):
            options = [g for g in pool(kinds, members, domains) if not taken & set(g.ops)]
            if options:
                break
        gid = _least_used([g.id for g in options], ctx.used_groups, rng)
        chosen.append(next(g for g in options if g.id == gid))
    return chosen


@dataclass
class _Slot:
    """A planned chain element: its tool (shared) or group (slot), and where its inputs come from."""

    role: str  # "source", "mid", "final" or "slot"
    group: CorpusGroup | None = None
    op: str | None = None
    #: Where the id (and by default the figure) comes from: None (user input), 0 (prev) or a step number.
    link: int | None = 0
    #: A step number whose figure this step reads instead of its link's (a join, or a long edge).
    measure_from: int | None = None
    subject_from_first: bool = False
    branch: int = 1
    parents: set[int] = field(default_factory=set)


def _linear_plan(n: int, groups: Sequence[CorpusGroup], rng: random.Random) -> list[_Slot]:
    middle = [_Slot("mid") for _ in range(n - 2 - len(groups))] + [_Slot("slot", g) for g in groups]
    rng.shuffle(middle)
    return [_Slot("source", link=None), *middle, _Slot("final")]


def _parallel_plan(n: int, groups: Sequence[CorpusGroup], rng: random.Random) -> list[_Slot]:
    """Branches (one group each), then the joins and the final action."""
    branches = len(groups)
    tail = max(1, branches - 1)
    lengths = [2] * branches
    for _ in range(n - 2 * branches - tail):
        if rng.random() < 0.8:
            lengths[rng.randrange(branches)] += 1
        else:
            tail += 1
    plan: list[_Slot] = []
    ends: list[int] = []
    for b, (group, size) in enumerate(zip(groups, lengths, strict=True), start=1):
        start = len(plan) + 1
        fork = b > 1 and rng.random() < 0.5
        plan.append(_Slot("mid", link=1, branch=b) if fork else _Slot("source", link=None, branch=b))
        body = [_Slot("mid", branch=b) for _ in range(size - 2)] + [_Slot("slot", group, branch=b)]
        rng.shuffle(body)
        plan.extend(body)
        ends.append(start + size - 1)
    for j in range(tail):
        slot = _Slot("final" if j == tail - 1 else "mid", branch=0)
        if j < branches - 1:
            slot.measure_from = ends[j]  # join branch j+1 (its figure) with the previous step (its id)
        plan.append(slot)
    return plan


def _finish_plan(plan: list[_Slot], rng: random.Random) -> None:
    """Long edges and subject bindings for the linear parts; the DAG parents of every step."""
    for k, slot in enumerate(plan, start=1):
        if slot.link == 0 and slot.measure_from is None and slot.role != "slot" and k > 2:
            earlier = [j for j in range(1, k - 1) if slot.branch in (0, plan[j - 1].branch)]
            if earlier and rng.random() < 0.25:
                slot.measure_from = rng.choice(earlier)
        if slot.link is not None and slot.role != "slot" and rng.random() < 0.2:
            slot.subject_from_first = True
        if slot.link == 0:
            slot.parents.add(k - 1)
        elif slot.link is not None:
            slot.parents.add(slot.link)
        if slot.measure_from is not None:
            slot.parents.add(slot.measure_from)
        if slot.subject_from_first:
            slot.parents.add(1)


def _ancestors(plan: Sequence[_Slot], k: int) -> set[int]:
    seen: set[int] = set()
    todo = list(plan[k - 1].parents)
    while todo:
        j = todo.pop()
        if j not in seen:
            seen.add(j)
            todo.extend(plan[j - 1].parents)
    return seen


def _slot_ops(ctx: _Ctx, slot: _Slot) -> tuple[str, ...]:
    return slot.group.ops if slot.group is not None else (str(slot.op),)


def _fill(ctx: _Ctx, plan: list[_Slot], domain: str, rng: random.Random) -> bool:
    """Choose the shared ops; False when this draw breaks exactness or the state rule.

    Left to right, own-domain ops first, never an op that a combined tool fuses with its ``prev``
    neighbour (`_exact` then checks the whole chain).
    """
    taken = {op for s in plan if s.group for op in s.group.ops}
    own = [op for op in ctx.shared[domain] if op not in taken]
    others = [op for d in PARTNERS[domain] for op in ctx.shared[d] if op not in taken]
    rng.shuffle(own)
    rng.shuffle(others)
    order = own + others
    for slot in plan:
        if slot.role == "source":
            slot.op = _least_used([s for s in ctx.sources[domain] if s not in taken], ctx.used_sources, rng)
            taken.add(slot.op)
    for k, slot in enumerate(plan, start=1):
        if slot.role not in ("mid", "final"):
            continue
        before = _slot_ops(ctx, plan[k - 2])[-1] if slot.link == 0 else None
        after = plan[k] if k < len(plan) and plan[k].link == 0 and plan[k].group else None
        for op in order:
            if op in taken or (slot.role == "final" and ctx.ops[op].role != "action"):
                continue
            if (before, op) in ctx.fused or (after is not None and (op, after.group.ops[0]) in ctx.fused):  # type: ignore[union-attr]
                continue
            slot.op = op
            taken.add(op)
            break
        else:
            return False
    return _exact(ctx, plan) and _state_safe(ctx, plan)


def _exact(ctx: _Ctx, plan: Sequence[_Slot]) -> bool:
    """Every run of ``prev``-linked steps has exactly the decompositions its slots declare."""
    runs: list[list[_Slot]] = []
    for slot in plan:
        if slot.link == 0 and runs:
            runs[-1].append(slot)
        else:
            runs.append([slot])
    for run in runs:
        ops = [op for slot in run for op in _slot_ops(ctx, slot)]
        expected = 1
        for slot in run:
            expected *= len(slot.group.members) if slot.group else 1
        if len(decompositions(ops, ctx.tool_ops)) != expected:
            return False
    return True


def _state_safe(ctx: _Ctx, plan: Sequence[_Slot]) -> bool:
    """A booking of a resource has every availability source of that resource among its ancestors."""
    sources: dict[str, list[int]] = {}
    for k, slot in enumerate(plan, start=1):
        for op in _slot_ops(ctx, slot):
            if ctx.ops[op].resource and ctx.ops[op].role == "source":
                sources.setdefault(str(ctx.ops[op].resource), []).append(k)
    for k, slot in enumerate(plan, start=1):
        for op in _slot_ops(ctx, slot):
            resource = ctx.ops[op].resource
            if (
                resource
                and ctx.ops[op].role == "action"
                and not set(sources.get(resource, ())) <= _ancestors(plan, k)
            ):
                return False
    return True


def _bindings(
    ctx: _Ctx, plan: Sequence[_Slot], k: int, first: Op, priority: str | None, link: int | None
) -> dict[str, ArgBinding]:
    """Bindings of a tool whose first op is ``first``, at chain step ``k``, reading ``link``."""
    slot = plan[k - 1]
    subject_field = ctx.domains[first.domain].subject_field
    if first.role == "source":
        return {subject_field: ArgBinding(source="user_input", field="subject")}

    def producer(step: int | None) -> Op:
        return ctx.ops[_slot_ops(ctx, plan[(k - 1 if step in (None, 0) else int(step)) - 1])[-1]]

    def from_(step: int | None, path: str) -> ArgBinding:
        if step in (None, 0):
            return ArgBinding(source="prev", field=path)
        return ArgBinding(source="step", field=path, step_number=step)

    bindings = {str(first.id_arg): from_(link, producer(link).facets.id)}
    measure = slot.measure_from if slot.role != "slot" and slot.measure_from is not None else link
    bindings[str(first.measure_arg)] = from_(measure, producer(measure).facets.measure)
    if slot.subject_from_first and slot.role != "slot":
        bindings[subject_field] = from_(1, ctx.ops[_slot_ops(ctx, plan[0])[-1]].facets.subject)
    else:
        bindings[subject_field] = ArgBinding(source="user_input", field="subject")
    if priority is not None:
        bindings["priority"] = ArgBinding(source="constant", value=priority)
    return bindings


def _describe(ctx: _Ctx, plan: Sequence[_Slot], subject: str, priorities: dict[int, str]) -> str:
    """The request: the ops' phrases in chain order, one sentence per parallel branch."""

    def phrases(steps: Sequence[int]) -> list[str]:
        out = []
        for k in steps:
            for op in _slot_ops(ctx, plan[k - 1]):
                text = ctx.ops[op].phrase.replace("{subject}", subject)
                out.append(text + (f" ({priorities[k]} priority)" if ctx.ops[op].role == "action" else ""))
        return out

    def clause(parts: list[str], last: bool) -> str:
        if len(parts) == 1:
            return parts[0]
        return ", then ".join(parts[:-1]) + (", and finally " if last else ", then ") + parts[-1]

    branches = sorted({s.branch for s in plan} - {0})
    if branches == [1] and all(s.branch == 1 for s in plan):
        text = clause(phrases(range(1, len(plan) + 1)), last=True)
        return text[:1].upper() + text[1:] + "."
    sentences = []
    for b in [*branches, 0]:
        steps = [k for k, s in enumerate(plan, start=1) if s.branch == b]
        text = clause(phrases(steps), last=b == 0)
        if b == 0:
            text = "Then, combining those results, " + text
        elif b > 1:
            text = (
                "Also, starting from that first result, " if plan[steps[0] - 1].link == 1 else "In parallel, "
            ) + text
        sentences.append(text[:1].upper() + text[1:] + ".")
    return " ".join(sentences)


def _make_task(
    ctx: _Ctx, level: Level, index: int, length: int, domain: str, shape: tuple[str, int], rng: random.Random
) -> ToolMazeTask:
    groups = _pick_groups(ctx, level, domain, shape[0], shape[1], rng)
    rng.shuffle(groups)
    n = length - sum(min(len(m) for m in g.members) - 1 for g in groups)
    for _ in range(ATTEMPTS):
        plan = _parallel_plan(n, groups, rng) if level == "C4" else _linear_plan(n, groups, rng)
        _finish_plan(plan, rng)
        if _fill(ctx, plan, domain, rng):
            break
    else:
        raise RuntimeError(
            f"{level} task {index}: no exact shared steps for {[g.id for g in groups]} in {n} steps"
        )
    for g in groups:
        ctx.used_groups[g.id] += 1
    for slot in plan:
        if slot.role == "source":
            ctx.used_sources[str(slot.op)] += 1
    subject = rng.choice(ctx.domains[domain].subjects)
    priorities = {k: rng.choice(PRIORITIES) for k in range(1, len(plan) + 1)}

    chain: list[ChainElement] = []
    alt_groups: list[AlternativeGroup] = []
    for k, slot in enumerate(plan, start=1):
        has_action = any(ctx.ops[op].role == "action" for op in _slot_ops(ctx, slot))
        priority = priorities[k] if has_action else None
        if slot.group is None:
            tool = ctx.unique_tool[str(slot.op)]
            bindings = _bindings(ctx, plan, k, ctx.ops[str(slot.op)], priority, slot.link)
            chain.append(ChainElement(step=k, tool_name=tool, arg_bindings=bindings))
            continue
        members = []
        for member in slot.group.members:
            steps = []
            for j, tool in enumerate(member):
                first = ctx.ops[ctx.tool_ops[tool][0]]
                acts = any(ctx.ops[op].role == "action" for op in ctx.tool_ops[tool])
                if j == 0:
                    bindings = _bindings(ctx, plan, k, first, priority if acts else None, slot.link)
                else:
                    prev_op = ctx.ops[ctx.tool_ops[member[j - 1]][-1]]
                    bindings = {
                        str(first.id_arg): ArgBinding(source="prev", field=prev_op.facets.id),
                        str(first.measure_arg): ArgBinding(source="prev", field=prev_op.facets.measure),
                        ctx.domains[first.domain].subject_field: ArgBinding(
                            source="user_input", field="subject"
                        ),
                    }
                    if acts:
                        bindings["priority"] = ArgBinding(source="constant", value=priority)
                steps.append(PathStep(tool=tool, arg_bindings=bindings))
            members.append(tuple(steps))
        alt_id = f"alt{len(alt_groups) + 1}"
        alt_groups.append(
            AlternativeGroup(
                id=alt_id, kind=slot.group.kind, corpus_group=slot.group.id, step=k, members=tuple(members)
            )
        )
        chain.append(ChainElement(step=k, tool_name=ALTERNATIVE, is_alternative=True, alternative_id=alt_id))

    if level == "C1":
        victim = chain[rng.randrange(1, len(chain) - 1)]
        slots: tuple[FaultSlot, ...] = (FaultSlot(id=f"step{victim.step}", tools=(victim.tool_name,)),)
    else:
        slots = tuple(FaultSlot(id=g.id, tools=g.tools, group=g.id) for g in alt_groups)
    p1 = rng.choice(TRANSIENT_ERRORS)
    p2 = rng.choice(PERMANENT_ERRORS)
    profile = PerturbationProfile(
        slots=slots,
        p1=ErrorResponse(status=p1[0], message=p1[1], error_type=error_type(p1[1])),
        p2=ErrorResponse(status=p2[0], message=p2[1], error_type=error_type(p2[1])),
        p3=rng.choice(CORRUPTIONS),
        p4=rng.choice(CORRUPTIONS),
    )
    skeleton = dict(chain=tuple(chain), alternative_groups=tuple(alt_groups))
    paths = ToolMazeTask.model_construct(**skeleton).path_steps()  # type: ignore[arg-type]
    valid = tuple(tuple(s.tool for _, s in p) for p in paths)
    best = min(range(len(paths)), key=lambda i: len(paths[i]))
    workflow = path_workflow(paths[best])
    ops_in_order = [op for slot in plan for op in _slot_ops(ctx, slot)]
    return ToolMazeTask(
        id=f"{level}_task_{index:03d}",
        suite="toolmaze",
        task_type=f"toolmaze_{level}",
        complexity=COMPLEXITY[level],  # type: ignore[arg-type]
        description=_describe(ctx, plan, subject, priorities),
        inputs={"subject": subject},
        required_tools=tuple(s.tool for s in workflow.steps),
        workflow=workflow,
        constraints=TaskConstraints(max_turns=MAX_STEPS, max_retries=3, timeout=300),
        metadata={"ops": ops_in_order},
        level=level,
        domain=domain,
        user_input_schema={
            "type": "object",
            "properties": {"subject": {"type": "string", "enum": list(ctx.domains[domain].subjects)}},
            "required": ["subject"],
        },
        chain=tuple(chain),
        alternative_groups=tuple(alt_groups),
        valid_paths=valid,
        shortest_path=valid[best],
        perturbations=profile,
    )


def _quota(weights: dict[str, int], total: int) -> list[str]:
    """``total`` domains in the proportions of ``weights`` (largest remainders)."""
    whole = sum(weights.values())
    exact = {d: total * w / whole for d, w in weights.items()}
    counts = {d: int(x) for d, x in exact.items()}
    for d in sorted(exact, key=lambda d: counts[d] - exact[d])[: total - sum(counts.values())]:
        counts[d] += 1
    return [d for d, c in counts.items() for _ in range(c)]


def generate_tasks(corpus: Corpus, seed: int, per_level: int = TASKS_PER_LEVEL) -> ToolMazeTaskSet:
    """``per_level`` tasks for each level, deterministic from ``seed``."""
    ctx = _Ctx(corpus)
    tasks: list[ToolMazeTask] = []
    for level in ("C1", "C2", "C3", "C4"):
        rng = random.Random(f"{seed}/{level}")
        lengths = [n for n, k in LENGTH_QUOTAS[level].items() for _ in range(k)]
        if level == "C4":
            shapes = [
                (n, (shape, many))
                for n, rows in C4_SHAPES.items()
                for shape, many, k in rows
                for _ in range(k)
            ]
        else:
            shapes = [(n, ("", 0)) for n in lengths]
        rng.shuffle(shapes)
        shapes = (shapes * (per_level // len(shapes) + 1))[:per_level]
        domains = _quota(DOMAIN_WEIGHTS, per_level)
        rng.shuffle(domains)
        for index, ((length, shape), domain) in enumerate(zip(shapes, domains, strict=True), start=1):
            tasks.append(_make_task(ctx, level, index, length, domain, shape, rng))
    return ToolMazeTaskSet(seed=seed, generator="mcp_resili.suites.toolmaze.generate", tasks=tuple(tasks))
