"""Action metamorphic relations: deterministic, template-based rewrites of a task's request.

A relation changes only the words the agent reads; the task's initial state, gold workflow and
end-state predicate are untouched, so the expected end state is the same by construction
(paper Def. 7 with the identity state relation). Each relation works on the request's parts
(`Request`): clauses in three wordings and typed slots.

Relations:

* ``synonym``: keywords of the templates → synonyms (`SYNONYMS`) of the same part of speech; a
  verb is swapped only where it is used as a verb (see `_synonyms`); slot values never change.
* ``date_format``: ISO dates → ``February 3, 2026``; ``14:00`` → ``2:00 pm``.
* ``relative_time``: a "Today is …" sentence, and dates as ``tomorrow`` / ``in 3 days``.
* ``reorder``: constraint reordering (the paper's "permute constraint order"): in every clause that
  marks a constraint (``[ on {date}]``), the constraint is stated first ("On February 3, book a
  meeting about …"). The clauses keep their order, which is the task's: no clause is read before a
  clause it refers to ("the booking"), and numbered steps follow the gold workflow (`order_problems`
  checks both on every rendered request).
* ``distractor``: an irrelevant sentence of the task's domain is inserted.
* ``correction``: the correction slot first appears with a decoy value, then a closing
  ``Correction: the {label} is {value}, not {decoy}.``
* ``paraphrase``: every clause in its paraphrase wording.
* ``voice``: the first clause in its passive wording.
* ``split_merge``: the request's sentences as numbered steps (split) or as one sentence joined by
  "; and" (merge), by seed; a "Today is…" sentence stays before them and a correction after them.
  A request whose clauses, as numbered steps, would contradict the gold workflow's order is always
  merged.

ε levels, cumulative (the paper's §5.1 light/medium list, with the heavy level adding the
remaining relations; the paper's two descriptions disagree and we follow §5.1):

* ``eps=0``: none (the baseline description).
* ``eps=0.1`` (light): synonym, date_format, reorder.
* ``eps=0.2`` (medium): + distractor, correction, paraphrase.
* ``eps=0.3`` (heavy): + voice, split_merge, relative_time.

Choices that need randomness (which distractor, where, split or merge, how far "today" is) come
from an RNG seeded by (task id, relation), so a task's ε-variant is the same in every run.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import random
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from mcp_resili.errors import UserError
from mcp_resili.suites.reliabilitybench.model import Clause, Request
from mcp_resili.tasks.model import Workflow

RELATIONS = (
    "synonym",
    "date_format",
    "relative_time",
    "reorder",
    "distractor",
    "correction",
    "paraphrase",
    "voice",
    "split_merge",
)

EPS_LEVELS: dict[str, tuple[str, ...]] = {
    "0": (),
    "0.1": ("synonym", "date_format", "reorder"),
    "0.2": ("synonym", "date_format", "reorder", "distractor", "correction", "paraphrase"),
    "0.3": RELATIONS,
}

PartOfSpeech = Literal["verb", "noun", "adjective"]

#: Template keyword → (synonym, part of speech); a capitalised keyword gets a capitalised synonym.
#: Every synonym can stand in for its keyword in that part of speech only ("return" the verb becomes
#: "send back", but "a return" stays, since "a send back" is not English).
SYNONYMS: dict[str, tuple[str, PartOfSpeech]] = {
    "book": ("reserve", "verb"),
    "booked": ("reserved", "verb"),
    "cancel": ("call off", "verb"),
    "cancelled": ("called off", "verb"),
    "open": ("file", "verb"),
    "close": ("resolve", "verb"),
    "order": ("purchase", "verb"),
    "return": ("send back", "verb"),
    "buy": ("purchase", "verb"),
    "escalate": ("hand over", "verb"),
    "pay": ("settle the bill", "verb"),
    "ship": ("deliver", "verb"),
    "meeting": ("session", "noun"),
    "customer": ("client", "noun"),
    "ticket": ("case", "noun"),
    "cheapest": ("lowest-priced", "adjective"),
}
#: Words after which a keyword is in verb position: the start of a clause (None) or a word that
#: introduces a verb ("and book", "to order", "should be booked"); anywhere else it is a noun.
VERB_CONTEXT = frozenset({None, "and", "to", "please", "be", "then", "or"})

DISTRACTORS = {
    "scheduling": (
        "By the way, the coffee machine on the third floor is broken again.",
        "My manager mentioned the quarterly report is due next month, but that is a separate matter.",
        "Ignore the calendar colours, they do not mean anything.",
    ),
    "travel": (
        "I usually prefer aisle seats, but it does not matter this time.",
        "My colleague flew with a different airline last year and liked it.",
        "The hotel is already sorted, no need to look at that.",
    ),
    "support": (
        "The customer also mentioned they like the new logo.",
        "Our team lunch is on Friday, unrelated to this.",
        "Last week's outage report is already published, nothing to do there.",
    ),
    "ecommerce": (
        "I saw a nice sofa on the homepage but I do not want it now.",
        "Our warehouse is closed on Sundays, which is fine.",
        "The newsletter this week had a typo, nothing to do with this.",
    ),
}


class UnknownPerturbationError(UserError):
    """A ``--perturb`` value or relation name that does not exist."""


def relations_for(variant: str) -> tuple[str, ...]:
    """The relations of a prompt variant: ``baseline``, ``eps=0|0.1|0.2|0.3`` or ``mr=NAME[+NAME]``."""
    if variant == "baseline":
        return ()
    key, _, value = variant.partition("=")
    if key == "eps":
        normalised = value if value in EPS_LEVELS else f"{float(value):g}" if _is_number(value) else value
        if normalised in EPS_LEVELS:
            return EPS_LEVELS[normalised]
        raise UnknownPerturbationError(
            f"unknown perturbation level {variant!r}; use eps={'|'.join(EPS_LEVELS)}"
        )
    if key == "mr":
        names = tuple(value.split("+"))
        unknown = [n for n in names if n not in RELATIONS]
        if not unknown and names:
            return names
        raise UnknownPerturbationError(
            f"unknown relation(s) {unknown} in {variant!r}; known: {list(RELATIONS)}"
        )
    raise UnknownPerturbationError(
        f"unknown prompt variant {variant!r}; use baseline, eps={'|'.join(EPS_LEVELS)} or mr=RELATION"
    )


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _rng(task_id: str, relation: str) -> random.Random:
    digest = hashlib.blake2b(f"{task_id}\x1f{relation}".encode(), digest_size=8).digest()
    return random.Random(int.from_bytes(digest, "big"))


def _synonyms(text: str) -> str:
    """Swap template keywords outside ``{slot}`` placeholders, each only in its part of speech.

    A verb keyword is swapped where it stands in verb position (`VERB_CONTEXT`); a noun or adjective
    keyword is never in verb position in the templates and is always swapped. An ``a``/``an`` right
    before a swapped word is made to fit the synonym.
    """
    out: list[str] = []
    previous: str | None = None  # the last word, lowercased; None at the start of a clause
    for token in re.findall(r"\{[a-z_]+\}|[A-Za-z]+|[^A-Za-z{]+", text):
        if token.startswith("{"):
            out.append(token)
            previous = "{slot}"
            continue
        if not token[0].isalpha():
            out.append(token)
            if re.search(r"[.,;:!?]", token):
                previous = None
            continue
        entry = SYNONYMS.get(token.lower())
        word = token
        if entry is not None and (entry[1] != "verb" or previous in VERB_CONTEXT):
            word = entry[0][0].upper() + entry[0][1:] if token[0].isupper() else entry[0]
            if len(out) >= 2 and out[-1] == " " and out[-2].lower() in ("a", "an"):
                article = "an" if word[0].lower() in "aeiou" else "a"
                out[-2] = article.capitalize() if out[-2][0].isupper() else article
        out.append(word)
        previous = token.lower()
    return "".join(out)


def long_date(iso: str) -> str:
    """``2026-02-03`` → ``February 3, 2026``."""
    day = dt.date.fromisoformat(iso)
    return f"{day:%B} {day.day}, {day.year}"


def twelve_hour(hhmm: str) -> str:
    """``14:00`` → ``2:00 pm``; ``09:30`` → ``9:30 am``."""
    hour, minute = (int(p) for p in hhmm.split(":"))
    suffix = "am" if hour < 12 else "pm"
    return f"{(hour - 1) % 12 + 1}:{minute:02d} {suffix}"


def relative_day(days: int) -> str:
    """How a person says a date ``days`` after today."""
    return {0: "today", 1: "tomorrow", 2: "the day after tomorrow"}.get(days, f"in {days} days")


def _lower_first(sentence: str) -> str:
    # "I" stays a capital; any other first word is joined into the running sentence.
    return sentence if sentence.startswith("I ") else sentence[0].lower() + sentence[1:]


def _upper_first(sentence: str) -> str:
    return sentence[0].upper() + sentence[1:] if sentence else sentence


_CONSTRAINT = re.compile(r"^(?P<head>[^\[]*)\[(?P<constraint>[^\]]*)\](?P<tail>.*)$", re.DOTALL)


def front_constraint(template: str) -> str:
    """A wording with its marked ``[constraint]`` stated first (unchanged when it marks none).

    ``Book a meeting about '{topic}'[ on {date}].`` → ``On {date}, book a meeting about '{topic}'.``
    """
    marked = _CONSTRAINT.match(template)
    if marked is None:
        return template
    rest = (marked["head"] + marked["tail"]).strip()
    return f"{_upper_first(marked['constraint'].strip())}, {_lower_first(rest)}"


def plain(template: str) -> str:
    """A wording as written, its constraint mark dropped."""
    return template.replace("[", "").replace("]", "")


def _ancestors(workflow: Workflow) -> dict[str, set[str]]:
    """Per step, every step the workflow runs before it (transitively)."""
    before: dict[str, set[str]] = {step.id: set() for step in workflow.steps}
    for step in workflow.steps:  # steps are in a topological order
        for a, b in workflow.edges:
            if b == step.id:
                before[b] |= {a} | before[a]
    return before


def order_contradictions(clauses: Sequence[Clause], workflow: Workflow) -> list[str]:
    """Where listing ``clauses`` in this order as numbered steps would contradict the workflow's order.

    A later clause contradicts an earlier one when a step it asks for must run before a step the
    earlier one asks for.
    """
    before = _ancestors(workflow)
    problems = []
    for i, earlier in enumerate(clauses):
        for later in clauses[i + 1 :]:
            for step in earlier.steps:
                clash = sorted(set(later.steps) & before[step])
                if clash:
                    problems.append(f"'{plain(later.active)}' asks for {clash[0]}, which runs before {step}")
    return problems


@dataclass(frozen=True)
class Sentence:
    """One sentence of a rendered request, with what it renders (a clause's index, or its role)."""

    role: Literal["today", "clause", "distractor", "correction"]
    text: str
    clause: int | None = None


@dataclass(frozen=True)
class Rendered:
    """A rendered request: its sentences in reading order, how they are laid out, and the text."""

    sentences: tuple[Sentence, ...]
    layout: Literal["prose", "numbered", "merged"]
    text: str


def render(
    request: Request,
    relations: Iterable[str],
    *,
    task_id: str,
    domain: str,
    workflow: Workflow | None = None,
) -> str:
    """The request as text, with ``relations`` applied (an empty set gives the baseline)."""
    return render_request(request, relations, task_id=task_id, domain=domain, workflow=workflow).text


def render_request(
    request: Request,
    relations: Iterable[str],
    *,
    task_id: str,
    domain: str,
    workflow: Workflow | None = None,
) -> Rendered:
    """`render`, keeping where every sentence came from (what `order_problems` checks).

    ``workflow`` (the task's gold workflow) lets ``split_merge`` number the clauses as steps, which
    it does only when that order is one the workflow allows (`order_contradictions`); otherwise,
    and without a workflow, it merges them.
    """
    active = set(relations)
    unknown = active - set(RELATIONS)
    if unknown:
        raise UnknownPerturbationError(f"unknown relation(s) {sorted(unknown)}; known: {list(RELATIONS)}")
    values = dict(request.slots)
    today: str | None = None
    relative = "relative_time" in active and bool(request.dates)
    if relative:
        days = sorted(dt.date.fromisoformat(values[s]) for s in request.dates)
        start = days[0] - dt.timedelta(days=_rng(task_id, "relative_time").choice((1, 2, 3, 5)))
        shown = long_date(start.isoformat()) if "date_format" in active else start.isoformat()
        today = f"Today is {start:%A}, {shown}."
        for slot in request.dates:
            values[slot] = relative_day((dt.date.fromisoformat(values[slot]) - start).days)
    elif "date_format" in active:
        for slot in request.dates:
            values[slot] = long_date(values[slot])
    if "date_format" in active:
        for slot in request.times:
            values[slot] = twelve_hour(values[slot])
    fix = request.correction
    corrected = values[fix.slot]
    if "correction" in active:
        values[fix.slot] = fix.decoy

    sentences: list[Sentence] = []
    for index, clause in enumerate(request.clauses):
        if "voice" in active and index == 0:
            text = clause.passive
        elif "paraphrase" in active:
            text = clause.paraphrase
        else:
            text = clause.active
        if relative:
            for slot in request.dates:
                # "on {date}" would read "on tomorrow": the relative phrase carries its own preposition.
                text = text.replace(f"on {{{slot}}}", f"{{{slot}}}")
        # Constraint reordering (paper Table 2: "permute constraint order"): within the clause. The
        # clauses keep their order, so nothing is named before the clause that introduces it.
        text = front_constraint(text) if "reorder" in active else plain(text)
        if "synonym" in active:
            text = _synonyms(text)
        sentences.append(Sentence("clause", _upper_first(text.format(**values)), index))
    if "distractor" in active:
        rng = _rng(task_id, "distractor")
        sentences.insert(
            rng.randrange(1, len(sentences) + 1), Sentence("distractor", rng.choice(DISTRACTORS[domain]))
        )
    head = [Sentence("today", today)] if today is not None else []
    closing = (
        [Sentence("correction", f"Correction: the {fix.label} is {corrected}, not {fix.decoy}.")]
        if "correction" in active
        else []
    )
    if "split_merge" in active:
        numbered = (
            _rng(task_id, "split_merge").random() < 0.5
            and workflow is not None
            and not order_contradictions(request.clauses, workflow)
        )
        if numbered:
            steps = "\n".join(f"{n}. {s.text}" for n, s in enumerate(sentences, 1))
            text = "\n".join([*(s.text for s in head), steps, *(s.text for s in closing)])
            return Rendered((*head, *sentences, *closing), "numbered", text)
        first, *rest = [s.text.rstrip(".") for s in sentences]
        merged = "; and ".join([first, *(_lower_first(s) for s in rest)]) + "."
        text = " ".join([*(s.text for s in head), merged, *(s.text for s in closing)])
        return Rendered((*head, *sentences, *closing), "merged", text)
    every = (*head, *sentences, *closing)
    return Rendered(every, "prose", " ".join(s.text for s in every))


def order_problems(rendered: Rendered, request: Request, workflow: Workflow) -> list[str]:
    """What in a rendered request states the task out of order (empty: nothing).

    * every clause is there once, and in the text in the order given (so the check is about what
      the agent reads);
    * no clause comes before a clause it names something of (`Clause.refers_to`): no definite
      reference before what it refers to;
    * a "Today is" sentence opens the request and a correction closes it;
    * numbered steps list the clauses in an order the gold workflow allows (`order_contradictions`).
    """
    problems: list[str] = []
    position = 0
    joined = False  # a merged request joins its sentences with "; and", the first letter lowered
    for sentence in rendered.sentences:
        needle = sentence.text.rstrip(".")
        if rendered.layout == "merged" and sentence.role in ("clause", "distractor"):
            needle = _lower_first(needle) if joined else needle
            joined = True
        found = rendered.text.find(needle, position)
        if found < 0:
            problems.append(f"not in the text where its order says: {sentence.text!r}")
        else:
            position = found + len(needle)
    order = [s.clause for s in rendered.sentences if s.role == "clause"]
    if sorted(o for o in order if o is not None) != list(range(len(request.clauses))):
        problems.append(f"clauses missing or repeated: {order}")
    seen: set[int] = set()
    for index in order:
        assert index is not None
        missing = [r for r in request.clauses[index].refers_to if r not in seen]
        if missing:
            said = plain(request.clauses[index].active)
            problems.append(f"'{said}' comes before clause {missing[0]}, which it refers to")
        seen.add(index)
    roles = [s.role for s in rendered.sentences]
    if "today" in roles and roles[0] != "today":
        problems.append("the 'Today is' sentence is not first")
    if "correction" in roles and roles[-1] != "correction":
        problems.append("the correction is not last")
    if rendered.layout == "numbered":
        listed = [request.clauses[i] for i in order if i is not None]
        problems += order_contradictions(listed, workflow)
    return problems
