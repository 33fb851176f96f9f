"""The ToolMaze corpus as code: ops, the tools built from them, their schemas, and the alternative groups.

A tool is a composition of one or more primitive *operations* (ops). Two sub-chains of tools are
interchangeable exactly when they compose the same op sequence: ``[x+h, y]`` computes what
``[x, h+y]`` computes, value for value. Each op renders its result through its own output layout
(`Facets`: which field holds the record id, the subject, the figure, its breakdown, the time window,
...), so every tool has its own schema while the fields later steps read are common to a group.

The domains, ops and group structures are data (``blueprint.toml``); `build_corpus` turns them into
``corpus.json`` and checks, with an exact decomposition count (`decompositions`), that every declared
group has exactly its declared members in the whole corpus.
"""

from __future__ import annotations

import hashlib
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from mcp_resili.tools.spec import TOOL_NAME_PATTERN, ErrorCode, ToolSpec

Role = Literal["source", "processor", "action"]
GroupKind = Literal["one_to_one", "one_to_many", "many_to_many"]
Aggregate = Literal["sum", "mean"]
BLUEPRINT_FILE = "blueprint.toml"
#: The paper's corpus (Table 1 and §3.1): tools per domain and per role, groups per kind.
PAPER_DOMAINS = {"office": 61, "finance": 58, "travel": 45, "shopping": 36, "iot": 36, "general": 34}
PAPER_ROLES = {"source": 78, "processor": 69, "action": 123}
PAPER_GROUPS = {"one_to_one": 44, "one_to_many": 26, "many_to_many": 56}
#: Every action takes how urgently to perform it (bound as a constant by the tasks).
PRIORITIES = ("normal", "high")
#: Status of a clean record by role; an availability source with nothing left says ``sold_out``.
SOURCE_STATUS = "available"
PROCESSOR_STATUS = "completed"
SOLD_OUT = "sold_out"
#: Largest magnitude a numeric argument may have (input schemas declare it).
MEASURE_LIMIT = 1_000_000
ID_MAX_LENGTH = 200
SUBJECT_MAX_LENGTH = 120


def digest(*parts: object) -> int:
    """A stable 64-bit hash of ``parts`` (never Python's salted ``hash``)."""
    # surrogatepass: any JSON string an agent sends hashes (a lone surrogate is valid JSON, not UTF-8).
    text = "\x1f".join(str(p) for p in parts).encode("utf-8", "surrogatepass")
    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "big")


@dataclass(frozen=True)
class Unit:
    """A unit's plausible range for clean figures, its physical bounds, and how a breakdown adds up."""

    low: float
    high: float
    aggregate: Aggregate = "sum"
    physical_min: float = 0.0
    physical_max: float | None = None
    money: bool = False


UNITS: dict[str, Unit] = {
    "USD": Unit(5, 900, money=True),
    "EUR": Unit(5, 900, money=True),
    "%": Unit(1, 99, "mean", 0.0, 100.0),
    "°C": Unit(-5, 32, "mean", -273.15),
    "°F": Unit(23, 90, "mean", -459.67),
    "ppm": Unit(380, 1800, "mean"),
    "µg/m³": Unit(2, 80, "mean"),
    "bps": Unit(20, 600, "mean"),
    "FTE": Unit(1, 40),
    "words": Unit(120, 9000),
    "min": Unit(5, 600),
    "h": Unit(1, 200),
    "KB": Unit(4, 9000),
    "MB": Unit(1, 900),
    "days": Unit(1, 60),
    "shares": Unit(1, 900),
    "kWh": Unit(1, 400),
    "W": Unit(1, 900),
    "kg": Unit(0.5, 40),
    "chars": Unit(20, 1600),
    "pages": Unit(1, 40),
    "lines": Unit(3, 200),
    "million": Unit(0.5, 30),
    "km": Unit(1, 900),
}


class Facets(BaseModel):
    """Where an op's output keeps each kind of fact (dotted paths), so faults and checks find them."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    id: str
    subject: str
    status: str
    measure: str
    currency: str | None = None
    count: str
    items: str
    item_label: str
    item_value: str
    aggregate: Aggregate
    start: str
    end: str
    date: str
    weekday: str
    text: str
    options: str | None = None
    booked: str | None = None


class Detail(BaseModel):
    """A domain-specific descriptive output field (never read by later steps)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str
    choices: tuple[str, ...] = ()
    low: int = 0
    high: int = 0


class Op(BaseModel):
    """A primitive operation: what one step of a task does, whichever tool performs it."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str
    domain: str
    role: Role
    entity: str
    prefix: str
    unit: str
    phrase: str
    status: str
    facets: Facets
    details: tuple[Detail, ...]
    #: Input names: the record id and the figure a processor or action works on.
    id_arg: str | None = None
    measure_arg: str | None = None
    #: Availability sources list what is left of ``resource``; bookings take one (episode state).
    resource: str | None = None
    #: An op that exists only inside combined tools (the middle of a many-to-many group).
    hidden: bool = False


class CorpusTool(BaseModel):
    """A tool: its MCP spec plus the ops it composes, its role and provider."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    spec: ToolSpec
    domain: str
    role: Role
    ops: tuple[str, ...]
    provider: str | None = None


class CorpusGroup(BaseModel):
    """An alternative group: members are tool sub-chains computing the same op sequence."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    id: str
    kind: GroupKind
    domain: str
    ops: tuple[str, ...]
    members: tuple[tuple[str, ...], ...]


class DomainInfo(BaseModel):
    """A domain's subject vocabulary."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str
    subject_field: str
    subjects: tuple[str, ...]
    decoys: tuple[str, ...]
    item_labels: tuple[str, ...]
    providers: tuple[str, ...]


class Corpus(BaseModel):
    """The whole corpus as stored in ``corpus.json``."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    format_version: Literal[2] = 2
    domains: tuple[DomainInfo, ...]
    ops: tuple[Op, ...]
    tools: tuple[CorpusTool, ...]
    groups: tuple[CorpusGroup, ...]

    def domain(self, name: str) -> DomainInfo:
        """The domain ``name``."""
        return next(d for d in self.domains if d.name == name)


def decompositions(ops: Sequence[str], tool_ops: Mapping[str, tuple[str, ...]]) -> list[tuple[str, ...]]:
    """Every sequence of tools whose ops, concatenated, are exactly ``ops`` (in a stable order)."""
    by_first: dict[str, list[tuple[str, tuple[str, ...]]]] = {}
    for name, seq in tool_ops.items():
        by_first.setdefault(seq[0], []).append((name, seq))
    found: list[tuple[str, ...]] = []

    def walk(start: int, prefix: tuple[str, ...]) -> None:
        if start == len(ops):
            found.append(prefix)
            return
        for name, seq in by_first.get(ops[start], ()):
            if tuple(ops[start : start + len(seq)]) == seq:
                walk(start + len(seq), (*prefix, name))

    walk(0, ())
    return found


# --- output layouts ---------------------------------------------------------------------------------

_COUNT_NAMES: dict[str, tuple[str, ...]] = {
    "source": ("results", "matches", "records_found", "entries"),
    "processor": ("inputs_used", "rules_applied", "items_processed"),
    "action": ("items_confirmed", "recipients", "units"),
}
_SUM_ITEMS = (
    ("breakdown", "label", "amount"),
    ("components", "name", "value"),
    ("line_items", "item", "share"),
)
_MEAN_ITEMS = (("readings", "time", "value"), ("samples", "at", "reading"), ("observations", "hour", "level"))
_INTERVALS: dict[str, tuple[tuple[str | None, str, str], ...]] = {
    "source": ((None, "valid_from", "valid_until"), ("coverage", "from", "to"), ("window", "start", "end")),
    "processor": ((None, "started_at", "finished_at"), ("run", "start", "end")),
    "action": (
        (None, "starts_at", "ends_at"),
        ("schedule", "begin", "finish"),
        (None, "effective_from", "effective_until"),
    ),
}
_DATES = (("as_of", "weekday"), ("date", "day_of_week"), ("business_date", "weekday_name"))
_TEXTS: dict[str, tuple[str, ...]] = {
    "source": ("headline", "summary", "description"),
    "processor": ("summary", "note"),
    "action": ("message", "confirmation_text", "note"),
}
_STATUS_KEYS = ("status", "state")
_ID_ARGS: dict[str, tuple[str, ...]] = {
    "processor": ("source_id", "input_id", "record_id", "based_on"),
    "action": ("reference_id", "record_id", "source_id"),
}
_MEASURE_ARGS: dict[str, tuple[str, ...]] = {
    "processor": ("amount", "value", "basis", "input_value"),
    "action": ("amount", "value", "quantity"),
}
_DETAILS: dict[str, tuple[Detail, ...]] = {
    "office": (
        Detail(name="owner", choices=("ana.ruiz", "li.wei", "sam.okafor", "jo.berg")),
        Detail(name="folder", choices=("Finance", "Legal", "People", "Product")),
        Detail(name="language", choices=("en", "de", "fr")),
        Detail(name="revision", low=1, high=40),
    ),
    "finance": (
        Detail(name="exchange", choices=("NASDAQ", "NYSE")),
        Detail(name="settlement", choices=("T+1", "T+2")),
        Detail(name="account", choices=("ACC-1001", "ACC-2002", "ACC-3003")),
        Detail(name="lot_size", low=1, high=500),
    ),
    "travel": (
        Detail(name="carrier", choices=("Air Lumen", "Skyline", "Nordjet")),
        Detail(name="cabin", choices=("economy", "premium", "business")),
        Detail(name="stops", low=0, high=2),
        Detail(name="terminal", choices=("T1", "T2", "T3")),
    ),
    "shopping": (
        Detail(name="seller", choices=("Acme Retail", "Brightmart", "Kettle & Co")),
        Detail(name="condition", choices=("new", "refurbished")),
        Detail(name="warranty_months", low=6, high=36),
        Detail(name="sku", choices=("SKU-4411", "SKU-7820", "SKU-1093")),
    ),
    "iot": (
        Detail(name="room", choices=("hall", "kitchen", "garage", "greenhouse")),
        Detail(name="protocol", choices=("zigbee", "z-wave", "wifi")),
        Detail(name="firmware", choices=("4.2.1", "4.3.0", "5.0.2")),
        Detail(name="signal_dbm", low=-90, high=-30),
    ),
    "general": (
        Detail(name="locale", choices=("en-GB", "es-ES", "de-DE")),
        Detail(name="source_name", choices=("CityData", "OpenFeeds", "Metro API")),
        Detail(name="confidence", choices=("high", "medium")),
        Detail(name="cache_age_s", low=0, high=3600),
    ),
}


def _pick(pool: Sequence[Any], *key: object) -> Any:
    return pool[digest(*key) % len(pool)]


def _prefix(entity: str) -> str:
    words = entity.replace("-", " ").split()
    return ("".join(w[0] for w in words) if len(words) > 1 else words[0][:2]).upper()


def _make_op(row: Sequence[str], domain: DomainInfo, role: Role, resource: str | None, hidden: bool) -> Op:
    name, entity, measure, unit, phrase = row[:5]
    if unit not in UNITS:
        raise ValueError(f"op {name}: unknown unit {unit!r}")
    status = row[5] if role == "action" else SOURCE_STATUS if role == "source" else PROCESSOR_STATUS
    aggregate = UNITS[unit].aggregate
    items, label, value = _pick(_SUM_ITEMS if aggregate == "sum" else _MEAN_ITEMS, name, "items")
    container, start, end = _pick(_INTERVALS[role], name, "interval")
    date, weekday = _pick(_DATES, name, "date")
    count = _pick(_COUNT_NAMES[role], name, "count")
    if resource is not None:
        count = f"{resource}s_available" if role == "source" else f"{resource}s_booked"
    facets = Facets(
        id=f"{entity.replace(' ', '_').replace('-', '_')}_id",
        subject=domain.subject_field,
        status=_pick(_STATUS_KEYS, name, "status"),
        measure=f"{measure}.amount" if UNITS[unit].money else measure,
        currency=f"{measure}.currency" if UNITS[unit].money else None,
        count=count,
        items=items,
        item_label=label,
        item_value=value,
        aggregate=aggregate,
        start=f"{container}.{start}" if container else start,
        end=f"{container}.{end}" if container else end,
        date=date,
        weekday=weekday,
        text=_pick(_TEXTS[role], name, "text"),
        options=f"available_{resource}s" if resource and role == "source" else None,
        booked=f"booked_{resource}" if resource and role == "action" else None,
    )
    pool = _DETAILS[domain.name]
    first = digest(name, "detail") % len(pool)
    second = (first + 1 + digest(name, "detail2") % (len(pool) - 1)) % len(pool)
    taken = {p.split(".")[0] for p in _paths(facets)}
    details = tuple(d for d in (pool[first], pool[second]) if d.name not in taken)
    return Op(
        name=name,
        domain=domain.name,
        role=role,
        entity=entity,
        prefix=_prefix(entity),
        unit=unit,
        phrase=phrase,
        status=status,
        facets=facets,
        details=details,
        id_arg=None if role == "source" else _pick(_ID_ARGS[role], name, "id_arg"),
        measure_arg=None if role == "source" else _pick(_MEASURE_ARGS[role], name, "measure_arg"),
        resource=resource,
        hidden=hidden,
    )


def core_paths(op: Op) -> list[str]:
    """The fields of ``op``'s record every tool ending in ``op`` returns with the same values."""
    return [*_paths(op.facets), *(d.name for d in op.details)]


def _paths(facets: Facets) -> list[str]:
    return [
        p
        for p in (
            facets.id,
            facets.subject,
            facets.status,
            facets.measure,
            facets.currency,
            facets.count,
            facets.items,
            facets.start,
            facets.end,
            facets.date,
            facets.weekday,
            facets.text,
            facets.options,
            facets.booked,
        )
        if p is not None
    ]


# --- schemas ----------------------------------------------------------------------------------------

_WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
#: Extra fields a tool adds around its op's record: provider metadata, never read by later steps.
EXTRA_STYLES = ("canonical", "provider", "source", "vendor", "pipeline")


def _set(tree: dict[str, Any], path: str, schema: dict[str, Any]) -> None:
    """Put ``schema`` at dotted ``path`` in an object-schema ``tree`` (creating nested objects)."""
    *parents, leaf = path.split(".")
    node = tree
    for part in parents:
        child = node["properties"].setdefault(
            part, {"type": "object", "properties": {}, "required": [], "additionalProperties": False}
        )
        if part not in node["required"]:
            node["required"].append(part)
        node = child
    if leaf in node["properties"]:
        raise ValueError(f"output field {path!r} is defined twice")
    node["properties"][leaf] = schema
    node["required"].append(leaf)


def extra_style(tool: CorpusTool, domain: DomainInfo) -> str:
    """Which extras layout a tool uses: by its provider, or ``pipeline`` for a combined tool."""
    if len(tool.ops) > 1:
        return "pipeline"
    if tool.provider is None:
        return "canonical"
    return EXTRA_STYLES[1 + domain.providers.index(tool.provider) % 3]


def output_schema(op: Op, style: str) -> dict[str, Any]:
    """The output schema of a tool whose last op is ``op``, with extras layout ``style``."""
    f = op.facets
    tree: dict[str, Any] = {"type": "object", "properties": {}, "required": [], "additionalProperties": False}
    number: dict[str, Any] = {"type": "number"}
    _set(tree, f.id, {"type": ["string", "null"], "description": f"Id of this {op.entity}; pass it on."})
    _set(tree, f.subject, {"type": "string"})
    _set(tree, f.status, {"type": "string"})
    _set(tree, f.measure, {**number, "description": f"In {op.unit}."})
    if f.currency:
        _set(tree, f.currency, {"type": "string"})
    _set(tree, f.count, {"type": "integer"})
    item = {
        "type": "object",
        "properties": {f.item_label: {"type": "string"}, f.item_value: number},
        "required": [f.item_label, f.item_value],
        "additionalProperties": False,
    }
    how = "add up to" if f.aggregate == "sum" else "average to"
    _set(tree, f.items, {"type": "array", "items": item, "description": f"Values that {how} the figure."})
    _set(tree, f.start, {"type": "string", "description": "ISO 8601 timestamp"})
    _set(tree, f.end, {"type": "string", "description": "ISO 8601 timestamp"})
    _set(tree, f.date, {"type": "string", "description": "ISO date"})
    _set(tree, f.weekday, {"type": "string", "enum": list(_WEEKDAYS)})
    _set(tree, f.text, {"type": "string"})
    if f.options:
        _set(tree, f.options, {"type": "array", "items": {"type": "string"}})
    if f.booked:
        _set(tree, f.booked, {"type": "string"})
    for detail in op.details:
        _set(
            tree,
            detail.name,
            {"type": "string", "enum": list(detail.choices)} if detail.choices else {"type": "integer"},
        )
    if style == "canonical":
        _set(
            tree,
            {"source": "retrieved_at", "processor": "computed_at"}.get(op.role, "recorded_at"),
            {"type": "string"},
        )
    elif style == "provider":
        _set(tree, "provider.name", {"type": "string"})
        _set(tree, "provider.api_version", {"type": "string"})
        _set(tree, "request_id", {"type": "string"})
    elif style == "source":
        _set(tree, "data_source", {"type": "string"})
        _set(tree, "latency_ms", {"type": "integer"})
    elif style == "vendor":
        _set(tree, "vendor", {"type": "string"})
        _set(tree, "quota.used", {"type": "integer"})
        _set(tree, "quota.limit", {"type": "integer"})
    else:
        _set(tree, "pipeline", {"type": "array", "items": {"type": "string"}})
        _set(tree, "computed_at", {"type": "string"})
    return tree


def input_schema(ops: Sequence[Op], domain: DomainInfo) -> dict[str, Any]:
    """The input schema of a tool composing ``ops``: the first op's inputs plus each action's priority."""
    first = ops[0]
    properties: dict[str, Any] = {}
    subject = {
        "type": "string",
        "minLength": 1,
        "maxLength": SUBJECT_MAX_LENGTH,
        "description": f"The {domain.subject_field} the request is about.",
    }
    if first.role != "source":
        assert first.id_arg is not None and first.measure_arg is not None  # set for every non-source op
        properties[first.id_arg] = {
            "type": "string",
            "minLength": 1,
            "maxLength": ID_MAX_LENGTH,
            "description": "The id of the record this step works on (an earlier step's `..._id`).",
        }
        properties[first.measure_arg] = {
            "type": "number",
            "minimum": -MEASURE_LIMIT,
            "maximum": MEASURE_LIMIT,
            "description": "The figure to work on, from an earlier step.",
        }
    properties[domain.subject_field] = subject
    if any(op.role == "action" for op in ops):
        properties["priority"] = {"enum": list(PRIORITIES), "description": "How urgently to act."}
    return {
        "type": "object",
        "properties": properties,
        "required": list(properties),
        "additionalProperties": False,
    }


_ERRORS = (
    ErrorCode(code="INVALID_INPUT", description="the arguments do not match the input schema"),
    ErrorCode(code="SOLD_OUT", description="nothing is left to book for this subject in this episode"),
)


def _role(ops: Sequence[Op]) -> Role:
    if any(op.role == "action" for op in ops):
        return "action"
    return "source" if ops[0].role == "source" else "processor"


def _describe(ops: Sequence[Op], role: Role, domain: DomainInfo, provider: str | None) -> str:
    steps = ", then ".join(op.phrase.replace("{subject}", f"the {domain.subject_field}") for op in ops)
    last = ops[-1]
    via = f" (via {provider})" if provider else ""
    return (
        f"{domain.name.capitalize()} {role}{via}: {steps}. Returns a {last.entity} record: "
        f"`{last.facets.id}` identifies it for the next step, `{last.facets.measure}` is the figure "
        f"({last.unit})."
    )


def make_tool(name: str, ops: Sequence[Op], domain: DomainInfo, provider: str | None = None) -> CorpusTool:
    """The tool ``name`` composing ``ops`` (from ``provider``, or the canonical one)."""
    if not TOOL_NAME_PATTERN.match(name):
        raise ValueError(f"tool name {name!r} is not a valid MCP tool name")
    role = _role(ops)
    draft = CorpusTool.model_construct(
        spec=None, domain=domain.name, role=role, ops=tuple(op.name for op in ops), provider=provider
    )
    # Built without `ToolSpec` validation: checking a schema against the JSON Schema metaschema costs
    # ~15 ms, and these are generated by the code above (a test checks one of every layout).
    spec = ToolSpec.model_construct(
        name=name,
        description=_describe(ops, role, domain, provider),
        input_schema=input_schema(ops, domain),
        output_schema=output_schema(ops[-1], extra_style(draft, domain)),
        errors=_ERRORS,
        category=domain.name,
        operation="+".join(op.name for op in ops),
        access="write" if role == "action" else "read",
        dependencies=(),
    )
    return draft.model_copy(update={"spec": spec})


# --- the build --------------------------------------------------------------------------------------


@cache
def blueprint() -> dict[str, Any]:
    """The parsed ``blueprint.toml``."""
    text = resources.files(__package__ or __name__).joinpath(BLUEPRINT_FILE).read_text(encoding="utf-8")
    return tomllib.loads(text)


def _combo_name(a: str, b: str) -> str:
    return f"{a}_and_{b}"


def build_corpus(data: Mapping[str, Any] | None = None) -> Corpus:
    """The corpus described by the blueprint; raises when a declared group is not exact."""
    data = blueprint() if data is None else data
    domains: list[DomainInfo] = []
    ops: list[Op] = []
    tools: list[CorpusTool] = []
    groups: list[CorpusGroup] = []
    for raw in data["domain"]:
        domain = DomainInfo(
            name=raw["name"],
            subject_field=raw["subject_field"],
            subjects=tuple(raw["subjects"]),
            decoys=tuple(raw["decoys"]),
            item_labels=tuple(raw["item_labels"]),
            providers=tuple(raw["providers"]),
        )
        domains.append(domain)
        stateful: dict[str, str] = raw.get("stateful", {})
        by_name: dict[str, Op] = {}

        def op_of(row: Sequence[str], role: Role, hidden: bool = False) -> Op:
            op = _make_op(row, domain, role, stateful.get(row[0]), hidden)  # noqa: B023
            if op.name in by_name:  # noqa: B023
                raise ValueError(f"op {op.name} is defined twice")
            by_name[op.name] = op  # noqa: B023
            ops.append(op)
            return op

        def add(name: str, members: Sequence[Op], provider: str | None = None) -> str:
            if any(t.spec.name == name for t in tools):
                raise ValueError(f"tool {name} is defined twice")
            tools.append(make_tool(name, members, domain, provider))  # noqa: B023
            return name

        for row in raw["sources"]:
            add(row[0], [op_of(row, "source")])
        o2o: list[tuple[Op, list[str]]] = []
        for role, table in (("processor", raw["processors"]), ("action", raw["actions"])):
            for row, providers in table["o2o"]:
                op = op_of(row, role)  # type: ignore[arg-type]
                add(op.name, [op])
                o2o.append((op, providers))
            for row in table["x" if role == "processor" else "y"]:
                add(row[0], [op_of(row, role)])  # type: ignore[arg-type]
        hidden = op_of(raw["hidden"], "processor", hidden=True)
        for op, providers in o2o:
            variants = [add(f"{op.name}_{p}", [op], p) for p in providers]
            groups.append(_group(domain, "one_to_one", (op.name,), [(op.name,), *((v,) for v in variants)]))
        for a, b in raw["o2m"]:
            combo = add(_combo_name(a, b), [by_name[a], by_name[b]])
            groups.append(_group(domain, "one_to_many", (a, b), [(combo,), (a, b)]))
        xs = [row[0] for row in raw["processors"]["x"]]
        ys = [row[0] for row in raw["actions"]["y"]]
        left = {x: add(_combo_name(x, hidden.name), [by_name[x], hidden]) for x in xs}
        right = {y: add(_combo_name(hidden.name, y), [hidden, by_name[y]]) for y in ys}
        for x in xs:
            for y in ys:
                members = [(left[x], y), (x, right[y])]
                groups.append(_group(domain, "many_to_many", (x, hidden.name, y), members))
    corpus = Corpus(domains=tuple(domains), ops=tuple(ops), tools=tuple(tools), groups=tuple(groups))
    check_groups(corpus)
    return corpus


def _group(
    domain: DomainInfo, kind: GroupKind, ops: tuple[str, ...], members: Iterable[tuple[str, ...]]
) -> CorpusGroup:
    return CorpusGroup(
        id=f"{domain.name}:{'+'.join(ops)}", kind=kind, domain=domain.name, ops=ops, members=tuple(members)
    )


def check_groups(corpus: Corpus) -> None:
    """Every group's members are exactly the tool sequences of the whole corpus computing its ops."""
    tool_ops = {t.spec.name: t.ops for t in corpus.tools}
    for group in corpus.groups:
        found = decompositions(group.ops, tool_ops)
        if sorted(found) != sorted(group.members):
            raise ValueError(f"group {group.id}: declared {group.members}, the corpus computes it as {found}")
