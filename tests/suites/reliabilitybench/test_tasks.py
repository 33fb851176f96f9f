import collections
import copy
import datetime as dt
import importlib.util
import itertools
import json
import re
from pathlib import Path

import pytest

from mcp_resili.cli import main
from mcp_resili.registry.loader import get_suite
from mcp_resili.suites.reliabilitybench.generate import generate_task, solve
from mcp_resili.suites.reliabilitybench.library import DOMAINS, reliabilitybench_library
from mcp_resili.suites.reliabilitybench.model import details, expected
from mcp_resili.suites.reliabilitybench.perturb import (
    DISTRACTORS,
    EPS_LEVELS,
    RELATIONS,
    SYNONYMS,
    Rendered,
    UnknownPerturbationError,
    front_constraint,
    long_date,
    order_problems,
    relations_for,
    render,
    render_request,
    twelve_hour,
)
from mcp_resili.suites.reliabilitybench.scoring import check

ROOT = Path(__file__).resolve().parents[3]
SUITE = get_suite("reliabilitybench")
TASKS = SUITE.tasks


def test_committed_task_set_is_what_the_generator_produces():
    path = ROOT / "scripts" / "regenerate_reliabilitybench_tasks.py"
    spec = importlib.util.spec_from_file_location("regen_rb", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    stored = (ROOT / "mcp_resili" / "suites" / "reliabilitybench" / "default.json").read_text(
        encoding="utf-8"
    )
    assert module.render() == stored


def test_every_domain_has_at_least_25_tasks_over_two_levels():
    counts = collections.Counter((details(t).domain, details(t).level) for t in TASKS)
    for domain in DOMAINS:
        assert counts[(domain, 1)] + counts[(domain, 2)] >= 25
        assert counts[(domain, 1)] > 0 and counts[(domain, 2)] > 0
    patterns = {details(t).pattern for t in TASKS if details(t).level == 2}
    assert patterns == {"schedule_conflict", "travel_cheapest", "support_escalate", "shop_coupon"}


def test_tasks_list_json_carries_each_tasks_domain(capsys):
    assert main(["tasks", "list", "--suite", "reliabilitybench", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert len(listed) == len(TASKS)
    assert {t["metadata"]["domain"] for t in listed} == set(DOMAINS)
    assert all(t["domain"] == t["metadata"]["domain"] for t in listed)


def test_tools_carry_domain_and_read_write_access():
    library = reliabilitybench_library()
    by_domain = collections.defaultdict(set)
    for spec in library:
        by_domain[spec.category].add(spec.name)
    assert by_domain["travel"] == {"search_flights", "hold_flight", "confirm_booking", "get_itinerary"}
    assert len(by_domain["support"]) == len(by_domain["ecommerce"]) == 6
    assert library.spec("create_order").access == "write"
    assert library.spec("apply_coupon").access == "read"


@pytest.mark.parametrize("task", TASKS, ids=lambda t: t.id)
def test_gold_workflow_reaches_the_predicate_and_the_initial_state_does_not(task):
    info = details(task)
    final = solve(task.workflow, info.initial_state)
    checks = expected(task).checks
    assert all(check(final, rule) is None for rule in checks)
    assert any(check(copy.deepcopy(info.initial_state), rule) is not None for rule in checks)


def test_generation_is_deterministic_in_its_seed():
    assert generate_task(7, "travel", 2, 3) == generate_task(7, "travel", 2, 3)
    assert generate_task(7, "travel", 2, 3) != generate_task(8, "travel", 2, 3)


def _today(text):
    match = re.search(r"Today is \w+, (\d{4}-\d{2}-\d{2}|\w+ \d+, \d{4})\.", text)
    assert match, text
    raw = match.group(1)
    return dt.date.fromisoformat(raw) if raw[0].isdigit() else dt.datetime.strptime(raw, "%B %d, %Y").date()


def _mentions(text, value, today):
    """Whether ``text`` carries ``value`` in one of the forms the relations render it in."""
    forms = {value}
    if re.fullmatch(r"\d{4}-\d{2}-\d{2}", value):
        forms.add(long_date(value))
        if today is not None:
            days = (dt.date.fromisoformat(value) - today).days
            forms.add({1: "tomorrow", 2: "the day after tomorrow"}.get(days, f"in {days} days"))
    if re.fullmatch(r"\d{2}:\d{2}", value):
        forms.add(twelve_hour(value))
    return any(form in text for form in forms)


@pytest.mark.parametrize("relation", RELATIONS)
def test_every_relation_changes_the_words_but_keeps_every_value_the_end_state_needs(relation):
    changed = 0
    for task in TASKS:
        info = details(task)
        before = task.model_dump(mode="json")
        text = SUITE.prompt(task, f"mr={relation}")
        assert task.model_dump(mode="json") == before  # the task (state, workflow, predicate) is untouched
        baseline = render(info.request, (), task_id=task.id, domain=info.domain)
        changed += text.split("\n\n")[0] != baseline
        today = _today(text) if relation == "relative_time" and info.request.dates else None
        for slot, value in info.request.slots.items():
            assert _mentions(text, value, today), (task.id, relation, slot, text)
        if relation == "correction":
            fix = info.request.correction
            value = info.request.slots[fix.slot]
            assert f"Correction: the {fix.label} is {value}, not {fix.decoy}." in text
        # Rendering is deterministic: the same variant gives the same words every time.
        assert SUITE.prompt(task, f"mr={relation}") == text
    applicable = [
        t for t in TASKS if relation not in ("date_format", "relative_time") or details(t).request.dates
    ]
    assert changed == len(applicable)


def test_gold_end_state_is_the_same_under_every_eps_level():
    for task in TASKS:
        info = details(task)
        finals = set()
        for level in EPS_LEVELS:
            SUITE.prompt(task, f"eps={level}")
            finals.add(json.dumps(solve(task.workflow, details(task).initial_state), sort_keys=True))
        assert len(finals) == 1
        assert info == details(task)


def test_eps_levels_are_cumulative_and_documented_sets():
    assert relations_for("eps=0") == () == relations_for("baseline")
    assert set(relations_for("eps=0.1")) == {"synonym", "date_format", "reorder"}
    assert set(relations_for("eps=0.1")) < set(relations_for("eps=0.2")) < set(relations_for("eps=0.3"))
    assert set(relations_for("eps=0.3")) == set(RELATIONS)


@pytest.mark.parametrize("variant", ["eps=0.5", "mr=sarcasm", "loud"])
def test_unknown_perturbations_are_rejected_naming_the_value(variant):
    with pytest.raises(UnknownPerturbationError, match=re.escape(variant.split("=")[-1])):
        relations_for(variant)
    with pytest.raises(ValueError, match=re.escape(variant)):
        SUITE.prompt(TASKS[0], variant)


def test_distractors_never_mention_anything_a_task_could_ask_for():
    words = {v.lower() for t in TASKS for v in details(t).request.slots.values()}
    words |= {"headphones", "keyboard", "mouse", "monitor", "lamp", "meeting", "flight", "ticket", "order"}
    for sentences in DISTRACTORS.values():
        for sentence in sentences:
            assert not set(re.findall(r"[a-z0-9-]+", sentence.lower())) & words, sentence


# --- ε wording ---------------------------------------------------------------------------------------

#: Words that point at something said elsewhere: a clause must not open with one (its antecedent may
#: have moved), and a template clause must not use one at all (reordering may move the antecedent).
ANAPHORS = {"it", "its", "they", "them", "their", "this", "that", "these", "those", "he", "she", "his", "her"}
DETERMINERS = r"(?:a|an|the|my|your|our|from|in|of|on|for)"
VARIANTS = ["baseline", *(f"eps={level}" for level in EPS_LEVELS), *(f"mr={name}" for name in RELATIONS)]


def _sentences(request_text):
    parts = re.split(r"(?<=[.!?])\s+|;\s+and\s+|\n", request_text)
    return [re.sub(r"^\d+\.\s+", "", p).strip() for p in parts if p.strip()]


def _reading_problems(raw, slot_values):
    problems = []
    tokens = [t.strip(".,;:'()!?\"").lower() for t in raw.split()]
    for a, b in itertools.pairwise(tokens):
        if a and (a == b or b.startswith(f"{a}-")):
            problems.append(f"doubled token: {a} {b}")
    text = raw
    for value in sorted(slot_values, key=len, reverse=True):  # judge our words, not the customer's
        text = text.replace(value, "X")
    for sentence in _sentences(text):
        first = re.match(r"[A-Za-z']+", sentence)
        if first and first.group(0).lower() in ANAPHORS:
            problems.append(f"opens with a pronoun: {sentence!r}")
    verbs = [s for s, pos in SYNONYMS.values() if pos == "verb"]
    nouns = [s for s, pos in SYNONYMS.values() if pos == "noun"]
    for verb in verbs:
        if found := re.search(rf"\b{DETERMINERS} {verb}\b", text, re.IGNORECASE):
            problems.append(f"verb used as a noun: {found.group(0)!r}")
    for noun in nouns:
        if found := re.search(rf"(?:^|[.;:]\s+|\band )({noun}) (?:a|an|the)\b", text, re.IGNORECASE):
            problems.append(f"noun used as a verb: {found.group(0)!r}")
    if found := re.search(r"\b(?:a [aeiou]|an [b-df-hj-np-tv-z])\w*", text, re.IGNORECASE):
        problems.append(f"article does not fit: {found.group(0)!r}")
    return problems


def test_every_variant_of_every_task_reads_well():
    problems = []
    for task in TASKS:
        info = details(task)
        for variant in VARIANTS:
            text = SUITE.prompt(task, variant).split("\n\n")[0]
            values = [*info.request.slots.values(), info.request.correction.decoy]
            problems += [f"{task.id} {variant}: {p}" for p in _reading_problems(text, values)]
    assert problems == []


def test_no_template_clause_refers_to_another_clause():
    for task in TASKS:
        for clause in details(task).request.clauses:
            for wording in (clause.active, clause.paraphrase, clause.passive):
                words = set(re.findall(r"[a-z]+", re.sub(r"\{[a-z_]+\}", "", wording).lower()))
                assert not words & ANAPHORS, (task.id, wording)


@pytest.mark.parametrize(
    ("bad", "problem"),
    [
        ("It should start at 16:00. Book a meeting.", "opens with a pronoun"),
        ("The SKU in X came damaged; process a send back for the item.", "verb used as a noun"),
        ("Order 2 of the Basic Mouse (SKU SKU-206).", "doubled token"),
        ("Open an case for the customer.", "article does not fit"),
        ("Buy one. Session the calendar.", "noun used as a verb"),
        ("Reserve a session about X; and file a case for the client.", None),
        ("Close the ticket; and that case is done.", "opens with a pronoun"),
    ],
)
def test_the_reading_rules_catch_the_faults_they_name(bad, problem):
    found = _reading_problems(bad, [])
    if problem is None:
        assert found == []
    else:
        assert any(p.startswith(problem) for p in found), found


# --- ε keeps the task's order ------------------------------------------------------------------------


def test_every_perturbed_prompt_states_the_task_in_its_order():
    """The checker over every prompt of the suite: each task under every ε level and every relation."""
    checked, layouts, problems = 0, collections.Counter(), []
    for task in TASKS:
        info = details(task)
        for variant in VARIANTS:
            relations = relations_for(variant)
            rendered = render_request(
                info.request, relations, task_id=task.id, domain=info.domain, workflow=task.workflow
            )
            # The checker reads what the agent reads: the prompt's request is the rendered text.
            assert SUITE.prompt(task, variant).split("\n\n")[0] == rendered.text
            problems += [
                f"{task.id} {variant}: {p}" for p in order_problems(rendered, info.request, task.workflow)
            ]
            checked += 1
            layouts[rendered.layout] += 1
    assert problems == []
    assert checked == len(TASKS) * len(VARIANTS) == 1400
    # Both numbered and merged requests were checked (split_merge is in eps=0.3 and mr=split_merge).
    assert layouts["numbered"] >= 40 and layouts["merged"] >= 100


def test_the_order_checker_catches_the_old_rotation():
    """The reorder relation used to move the last sentence first: the checker flags what that did."""
    task = next(t for t in TASKS if details(t).pattern == "support_close")
    info = details(task)
    good = render_request(
        info.request, ("split_merge",), task_id=task.id, domain=info.domain, workflow=task.workflow
    )
    clauses = [s for s in good.sentences if s.role == "clause"]
    rotated = (clauses[-1], *clauses[:-1])
    text = "\n".join(f"{n}. {s.text}" for n, s in enumerate(rotated, 1))
    problems = order_problems(Rendered(rotated, "numbered", text), info.request, task.workflow)
    # "Close the ... ticket" first: before the ticket is opened (clause 1), and as step 1 before s1.
    assert any("comes before clause 1, which it refers to" in p for p in problems), problems
    assert any("asks for s1, which runs before s2" in p for p in problems), problems
    # A sentence that is not where the order says is caught too.
    shuffled = Rendered(good.sentences, "prose", " ".join(s.text for s in reversed(good.sentences)))
    assert any("not in the text" in p for p in order_problems(shuffled, info.request, task.workflow))


def test_numbered_steps_only_when_the_workflow_allows_their_order():
    """Clauses whose steps would be listed against the gold order are merged, never numbered."""
    numbered_patterns, merged_patterns = set(), set()
    for task in TASKS:
        info = details(task)
        rendered = render_request(
            info.request, ("split_merge",), task_id=task.id, domain=info.domain, workflow=task.workflow
        )
        (numbered_patterns if rendered.layout == "numbered" else merged_patterns).add(info.pattern)
    # Escalation looks the article up before the ticket is opened; the coupon is checked before the
    # order is placed: their request order is no step order, so they are always merged.
    assert not numbered_patterns & {"support_escalate", "shop_coupon"}
    assert {"support_close", "travel_direct", "schedule_book"} <= numbered_patterns
    # Without the workflow nothing is numbered.
    info = details(TASKS[0])
    assert (
        render_request(info.request, ("split_merge",), task_id=TASKS[0].id, domain=info.domain).layout
        == "merged"
    )


@pytest.mark.parametrize(
    ("template", "fronted"),
    [
        ("Book a meeting about '{topic}'[ on {date}].", "On {date}, book a meeting about '{topic}'."),
        (
            "Book the cheapest flight from {a} to {b}[ on {date}] for {p}.",
            "On {date}, book the cheapest flight from {a} to {b} for {p}.",
        ),
        ("I need a seat on flight {f}[ for {p}].", "For {p}, I need a seat on flight {f}."),
        (
            "{quantity} of the {name} should be ordered[ for customer {c}].",
            "For customer {c}, {quantity} of the {name} should be ordered.",
        ),
        ("Ship the order to {address}.", "Ship the order to {address}."),
    ],
)
def test_constraint_reordering_states_the_marked_constraint_first(template, fronted):
    assert front_constraint(template) == fronted


def test_relative_time_and_reordering_read_as_one_sentence():
    task = next(t for t in TASKS if details(t).pattern == "schedule_book")
    info = details(task)
    text = render(info.request, ("reorder", "relative_time"), task_id=task.id, domain=info.domain)
    assert re.search(r"\. (Tomorrow|The day after tomorrow|In \d+ days), book a meeting about '", text), text
