"""Deterministic simulations of the 30 ResiliBench tools, with real data flowing between them.

Every simulator is a pure function of its arguments and the episode's tool state: the same call in
the same episode state always gives the same output. Text data is ``{"content", "format"}``; parsed
data is ``{"records": [...]}``; record-processing tools pass the records through so any of them can
feed the next.
"""

from __future__ import annotations

import csv
import functools
import hashlib
import io
import json
import math
import statistics
import xml.etree.ElementTree as ET
from collections.abc import Callable, Mapping
from typing import Any

import pydantic_core

from mcp_resili.tools.library import Simulator, ToolFailure, ToolState

CATEGORIES = ("alpha", "beta", "gamma")
NAMES = ("ada", "bob", "cy", "dee", "eve", "fay", "gus", "hal", "ivy", "jo", "kai", "lu")


def _digest(*parts: object) -> int:
    text = "\x1f".join(str(p) for p in parts).encode()
    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "big")


def _ident(prefix: str, *parts: object) -> str:
    return f"{prefix}_{_digest(prefix, *parts) % 16**8:08x}"


def _ok(data: dict[str, Any], **metadata: Any) -> dict[str, Any]:
    return {"success": True, "data": data, "metadata": metadata}


# Results are fresh (the library declares it, and the tests check every result): a value taken from
# the arguments into a result is copied, never shared with the caller's objects.


def _copied(value: Any) -> Any:
    """A copy of JSON ``value`` that shares no list or dict with it."""
    return pydantic_core.from_json(pydantic_core.to_json(value))


def _copied_record(record: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``record``: a new dict, and new nested values if it has any (records are flat)."""
    copy = dict(record)
    if any(isinstance(value, dict | list | tuple) for value in copy.values()):
        return dict(_copied(copy))
    return copy


def _records_for(source: str) -> list[dict[str, Any]]:
    """A small deterministic table derived from a source name."""
    seed = _digest("records", source)
    count = 5 + seed % 8
    records = []
    for i in range(count):
        h = _digest(seed, i)
        records.append(
            {
                "id": i + 1,
                "name": NAMES[h % len(NAMES)],
                "category": CATEGORIES[(h >> 8) % len(CATEGORIES)],
                "value": round(((h >> 16) % 100000) / 100, 2),
            }
        )
    return records


def _format_of(name: str) -> str:
    for fmt in ("csv", "json", "xml"):
        if name.lower().endswith("." + fmt):
            return fmt
    return "csv"


def _render(records: list[dict[str, Any]], fmt: str) -> str:
    if fmt == "json":
        return json.dumps(records, sort_keys=True)
    if fmt == "xml":
        rows = "".join(
            "<record " + " ".join(f'{k}="{v}"' for k, v in sorted(r.items())) + "/>" for r in records
        )
        return f"<records>{rows}</records>"
    out = io.StringIO()
    writer = csv.DictWriter(
        out, fieldnames=["id", "name", "category", "value"], lineterminator="\n", extrasaction="ignore"
    )
    writer.writeheader()
    writer.writerows(records)
    return out.getvalue()


def _source_content(source: str, fmt: str) -> str:
    """What ``source`` holds until something is written there (the same text whoever reads it)."""
    if len(source) > MAX_CACHED_SOURCE:  # an agent's path may be any length: keep the cache small
        return _render(_records_for(source), fmt)
    return _cached_source_content(source, fmt)


#: Sources up to this many characters have their content rendered once per process.
MAX_CACHED_SOURCE = 256


@functools.lru_cache(maxsize=4096)
def _cached_source_content(source: str, fmt: str) -> str:
    # A str: episodes that share it share nothing they could change.
    return _render(_records_for(source), fmt)


#: Largest magnitude of a parsed id or value (the JSON-safe range the server allows in arguments).
MAX_NUMBER = 2**53 - 1


def _parse(content: str, fmt: str) -> list[dict[str, Any]]:
    """Records from ``content`` in ``fmt``; anything unreadable is the tool's INVALID_INPUT."""
    try:
        if fmt == "json":
            loaded = json.loads(content)
            if not isinstance(loaded, list):
                raise ValueError("expected a JSON list of records")
            records = [dict(r) for r in loaded]
        else:
            rows = (
                [dict(el.attrib) for el in ET.fromstring(content)]
                if fmt == "xml"
                else list(csv.DictReader(io.StringIO(content)))
            )
            records = [
                {"id": int(r["id"]), "name": r["name"], "category": r["category"], "value": float(r["value"])}
                for r in rows
            ]
    # ET.ParseError: content in another format (e.g. CSV given as XML), the format-mismatch flaw.
    except (ValueError, KeyError, TypeError, ET.ParseError, csv.Error, RecursionError) as exc:
        raise ToolFailure("INVALID_INPUT", f"cannot parse {fmt} content: {exc}") from None
    for record in records:
        problem = _record_problem(record)
        if problem is not None:
            raise ToolFailure("INVALID_INPUT", f"cannot parse {fmt} content: {problem}")
    return records


def _record_problem(record: dict[str, Any]) -> str | None:
    """What makes a parsed record unusable downstream (the parser's output schema), or None."""
    missing = [key for key in ("id", "name", "category", "value") if key not in record]
    if missing:
        return f"a record lacks {', '.join(missing)}"
    ident, value = record["id"], record["value"]
    integral = isinstance(ident, int) or (isinstance(ident, float) and ident.is_integer())
    if isinstance(ident, bool) or not integral:
        return f"id {ident!r:.40} is not an integer"
    if not isinstance(record["name"], str) or not isinstance(record["category"], str):
        return "name and category must be text"
    if isinstance(value, bool) or not isinstance(value, int | float):
        return f"value {value!r:.40} is not a number"
    if not math.isfinite(value) or abs(value) > MAX_NUMBER or abs(ident) > MAX_NUMBER:
        return "id or value out of range"
    return None


def _text_data(args: Mapping[str, Any]) -> tuple[str, str]:
    data = args["data"]
    return str(data["content"]), str(data.get("format", "csv"))


def _records(args: Mapping[str, Any]) -> list[dict[str, Any]]:
    records = args["data"].get("records")
    if not isinstance(records, list) or not all(type(r) is dict or isinstance(r, Mapping) for r in records):
        raise ToolFailure("INVALID_INPUT", "data.records must be a list of record objects")
    return [_copied_record(r) for r in records]


def _options(args: Mapping[str, Any]) -> Mapping[str, Any]:
    options = args.get("options") or {}
    return options if isinstance(options, Mapping) else {}


def _option_number(args: Mapping[str, Any], key: str, default: float) -> float:
    """A numeric option (the input schema types the known ones; this guards the rest)."""
    value = _options(args).get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ToolFailure("INVALID_INPUT", f"options.{key} must be a number, got {value!r:.60}")
    return float(value)


# --- file_operations -------------------------------------------------------------------------------


def _file_reader(args: Mapping[str, Any], state: ToolState) -> dict[str, Any]:
    source = str(args["source"])
    files: dict[str, dict[str, Any]] = state.setdefault("files", {})
    if source in files:
        stored = files[source]
        return _ok(
            {"content": stored["content"], "format": stored["format"], "source": source},
            bytes=len(stored["content"]),
        )
    if "missing" in source or "/private/" in source:
        code = "PERMISSION_DENIED" if "/private/" in source else "FILE_NOT_FOUND"
        raise ToolFailure(code, f"cannot read {source!r}")
    fmt = _format_of(source)
    content = _source_content(source, fmt)
    return _ok({"content": content, "format": fmt, "source": source}, bytes=len(content))


def _file_writer(args: Mapping[str, Any], state: ToolState) -> dict[str, Any]:
    destination = str(args["destination"])
    data = args["data"]
    if "content" in data:
        content, fmt = str(data["content"]), str(data.get("format", "csv"))
    elif "records" in data:
        fmt = _format_of(destination)
        content = _render(_records(args), fmt)
    else:
        content, fmt = json.dumps(data, sort_keys=True), "json"
    state.setdefault("files", {})[destination] = {"content": content, "format": fmt}
    return _ok({"destination": destination, "bytes_written": len(content), "format": fmt})


def _file_converter(args: Mapping[str, Any], state: ToolState) -> dict[str, Any]:
    content, fmt = _text_data(args)
    target = str(args["output_format"])
    converted = content if target == fmt else _render(_parse(content, fmt), target)
    return _ok({"content": converted, "format": target}, input_format=fmt)


def _file_scanner(args: Mapping[str, Any], state: ToolState) -> dict[str, Any]:
    source = str(args["source"]).rstrip("/")
    pattern = str(_options(args).get("pattern", "*"))
    count = 2 + _digest("scan", source) % 4
    files = [f"{source}/part_{i + 1}.{('csv', 'json')[(_digest(source, i)) % 2]}" for i in range(count)]
    if pattern.startswith("*."):
        files = [f for f in files if f.endswith(pattern[1:])]
    return _ok({"files": files, "directory": source}, file_count=len(files))


def _file_compressor(args: Mapping[str, Any], state: ToolState) -> dict[str, Any]:
    payload = json.dumps(args["data"], sort_keys=True)
    original = len(payload)
    compressed = max(1, original // 3)
    return _ok(
        {
            "content": hashlib.sha256(payload.encode()).hexdigest(),
            "algorithm": "gzip",
            "original_bytes": original,
            "compressed_bytes": compressed,
        },
        ratio=round(compressed / original, 3),
    )


# --- data_processing -------------------------------------------------------------------------------


def _data_parser(args: Mapping[str, Any], state: ToolState) -> dict[str, Any]:
    content, fmt = _text_data(args)
    records = _parse(content, fmt)
    return _ok({"records": records, "record_count": len(records)}, input_format=fmt)


def _data_transformer(args: Mapping[str, Any], state: ToolState) -> dict[str, Any]:
    operation = str(_options(args).get("operation", "normalize"))
    records = _records(args)
    if operation == "uppercase":
        out = [{**r, "name": str(r["name"]).upper()} for r in records]
    elif operation == "scale":
        factor = _option_number(args, "factor", 2)
        out = [{**r, "value": round(float(r["value"]) * factor, 2)} for r in records]
    else:
        top = max((abs(float(r["value"])) for r in records), default=0.0) or 1.0
        out = [{**r, "value": round(float(r["value"]) / top, 4)} for r in records]
    return _ok({"records": out, "record_count": len(out), "transformation": operation})


def _data_validator(args: Mapping[str, Any], state: ToolState) -> dict[str, Any]:
    records = _records(args)
    problems = [
        f"record {r.get('id')}: value must be a non-negative number"
        for r in records
        if not isinstance(r.get("value"), int | float) or float(r["value"]) < 0
    ]
    return _ok({"records": records, "valid": not problems, "errors": problems, "record_count": len(records)})


def _data_aggregator(args: Mapping[str, Any], state: ToolState) -> dict[str, Any]:
    key = str(_options(args).get("group_by", "category"))
    records = _records(args)
    groups: dict[str, dict[str, Any]] = {}
    for r in records:
        group = groups.setdefault(str(r.get(key, "")), {"count": 0, "total": 0.0})
        group["count"] += 1
        group["total"] = round(group["total"] + float(r["value"]), 4)
    total = round(sum(float(r["value"]) for r in records), 4)
    return _ok(
        {"records": records, "groups": groups, "total": total, "record_count": len(records)}, group_by=key
    )


def _data_filter(args: Mapping[str, Any], state: ToolState) -> dict[str, Any]:
    options = _options(args)
    records = _records(args)
    threshold = _option_number(args, "min_value", 0)
    category = options.get("category")
    kept = [
        r
        for r in records
        if float(r["value"]) >= threshold and (category is None or r["category"] == category)
    ]
    return _ok({"records": kept, "record_count": len(kept), "removed": len(records) - len(kept)})


# --- network ---------------------------------------------------------------------------------------


def _net_fetcher(args: Mapping[str, Any], state: ToolState) -> dict[str, Any]:
    source = str(args["source"])
    if not source.startswith(("http://", "https://")):
        raise ToolFailure("INVALID_INPUT", f"source must be an http(s) URL, got {source!r}")
    fmt = "json" if "json" in source or source.endswith("/api") else _format_of(source)
    content = _source_content(source, fmt)
    return _ok({"content": content, "format": fmt, "status_code": 200}, url=source)


def _net_poster(args: Mapping[str, Any], state: ToolState) -> dict[str, Any]:
    destination = str(args["destination"])
    posted: list[str] = state.setdefault("posted", [])
    posted.append(destination)
    resource = _ident("res", destination, len(posted), json.dumps(args["data"], sort_keys=True))
    return _ok({"status_code": 201, "resource_id": resource, "destination": destination})


def _net_monitor(args: Mapping[str, Any], state: ToolState) -> dict[str, Any]:
    source = str(args["source"])
    h = _digest("monitor", source)
    return _ok({"status": "up" if h % 5 else "degraded", "latency_ms": 20 + h % 180, "endpoint": source})


def _net_router(args: Mapping[str, Any], state: ToolState) -> dict[str, Any]:
    destination = str(args["destination"])
    hops = 1 + _digest("route", destination) % 3
    return _ok(
        {
            "route": [f"gw-{i + 1}" for i in range(hops)] + [destination],
            "destination": destination,
            "payload": _copied(args["data"]),
        }
    )


def _net_validator(args: Mapping[str, Any], state: ToolState) -> dict[str, Any]:
    data = args["data"]
    checks = {"has_records": "records" in data, "non_empty": bool(data.get("records") or data.get("content"))}
    return _ok({**_copied(data), "valid": all(checks.values()), "checks": checks})


# --- computation -----------------------------------------------------------------------------------


def _values(args: Mapping[str, Any]) -> list[float]:
    return [float(r["value"]) for r in _records(args)]


def _comp_calculator(args: Mapping[str, Any], state: ToolState) -> dict[str, Any]:
    operation = str(_options(args).get("operation", "sum"))
    precision = int(args.get("precision", 2))
    values = _values(args)
    if not values:
        raise ToolFailure("CALCULATION_ERROR", "no values to compute over")
    functions: dict[str, Callable[[list[float]], float]] = {
        "sum": sum,
        "mean": statistics.fmean,
        "max": max,
        "min": min,
    }
    if operation not in functions:
        raise ToolFailure("INVALID_INPUT", f"operation must be one of {sorted(functions)}, got {operation!r}")
    result = round(float(functions[operation](values)), precision)
    if abs(result) > 1e15:
        raise ToolFailure("OVERFLOW", "result out of range")
    return _ok({"result": result, "operation": operation, "count": len(values)})


def _comp_analyzer(args: Mapping[str, Any], state: ToolState) -> dict[str, Any]:
    values = _values(args)
    if not values:
        raise ToolFailure("CALCULATION_ERROR", "no values to analyse")
    stats = {
        "count": len(values),
        "mean": round(statistics.fmean(values), 4),
        "min": min(values),
        "max": max(values),
        "stdev": round(statistics.pstdev(values), 4),
    }
    return _ok({"statistics": stats, "records": _records(args)})


def _comp_predictor(args: Mapping[str, Any], state: ToolState) -> dict[str, Any]:
    values = _values(args)
    if len(values) < 2:
        raise ToolFailure("CALCULATION_ERROR", "need at least two values to extrapolate")
    slope = (values[-1] - values[0]) / (len(values) - 1)
    return _ok(
        {
            "prediction": round(values[-1] + slope, 4),
            "confidence": round(1 / (1 + abs(slope)), 4),
            "records": _records(args),
        }
    )


def _comp_optimizer(args: Mapping[str, Any], state: ToolState) -> dict[str, Any]:
    budget = int(_option_number(args, "limit", 3))
    ranked = sorted(_records(args), key=lambda r: (-float(r["value"]), int(r["id"])))[: max(1, budget)]
    return _ok(
        {
            "selection": [int(r["id"]) for r in ranked],
            "objective_value": round(sum(float(r["value"]) for r in ranked), 4),
            "records": ranked,
        }
    )


#: Most simulation runs one call may ask for (the input schema's maximum too).
MAX_ITERATIONS = 10_000


def _comp_simulator(args: Mapping[str, Any], state: ToolState) -> dict[str, Any]:
    iterations = int(_option_number(args, "iterations", 10))
    if not 1 <= iterations <= MAX_ITERATIONS:
        raise ToolFailure("INVALID_INPUT", f"options.iterations must be from 1 to {MAX_ITERATIONS}")
    base = _digest("sim", json.dumps(args["data"], sort_keys=True))
    outcomes = [((base >> (i % 48)) % 1000) / 10 for i in range(max(1, iterations))]
    return _ok({"runs": len(outcomes), "mean_outcome": round(statistics.fmean(outcomes), 4)})


# --- integration -----------------------------------------------------------------------------------


def _int_authenticator(args: Mapping[str, Any], state: ToolState) -> dict[str, Any]:
    service = str(args["source"])
    token = _ident("tok", service)
    state.setdefault("tokens", {})[service] = token
    return _ok({"token": token, "service": service, "expires_in": 3600})


def _int_connector(args: Mapping[str, Any], state: ToolState) -> dict[str, Any]:
    service = str(args["source"])
    return _ok({"connection_id": _ident("conn", service), "service": service, "status": "connected"})


def _int_mapper(args: Mapping[str, Any], state: ToolState) -> dict[str, Any]:
    mapping = _options(args).get("mapping") or {"name": "label"}
    if not isinstance(mapping, Mapping):
        raise ToolFailure("INVALID_INPUT", "options.mapping must map field names to new names")
    out = [{**r, **{str(new): r[old] for old, new in mapping.items() if old in r}} for r in _records(args)]
    return _ok({"records": out, "record_count": len(out)}, mapping=dict(mapping))


def _int_queue(args: Mapping[str, Any], state: ToolState) -> dict[str, Any]:
    queue = str(args["destination"])
    queued: list[str] = state.setdefault("queue", [])
    queued.append(queue)
    return _ok({"message_id": _ident("msg", queue, len(queued)), "queue": queue, "position": len(queued)})


def _int_scheduler(args: Mapping[str, Any], state: ToolState) -> dict[str, Any]:
    when = str(_options(args).get("when", "2026-01-01T00:00:00Z"))
    jobs: list[str] = state.setdefault("jobs", [])
    job = _ident("job", when, len(jobs), json.dumps(args["data"], sort_keys=True))
    jobs.append(job)
    return _ok({"job_id": job, "scheduled_for": when})


# --- utility ---------------------------------------------------------------------------------------


def _util_notifier(args: Mapping[str, Any], state: ToolState) -> dict[str, Any]:
    destination = str(args["destination"])
    sent: list[str] = state.setdefault("notifications", [])
    sent.append(destination)
    return _ok(
        {
            "notification_id": _ident("ntf", destination, len(sent)),
            "delivered": True,
            "destination": destination,
        }
    )


def _util_tracker(args: Mapping[str, Any], state: ToolState) -> dict[str, Any]:
    events: list[str] = state.setdefault("tracked", [])
    events.append(json.dumps(args["data"], sort_keys=True))
    return _ok({"tracking_id": _ident("trk", len(events), events[-1]), "event_count": len(events)})


def _util_cache(args: Mapping[str, Any], state: ToolState) -> dict[str, Any]:
    key = str(args.get("source") or _ident("key", json.dumps(args["data"], sort_keys=True)))
    state.setdefault("cache", {})[key] = args["data"]
    return _ok({"key": key, "stored": True})


def _util_logger(args: Mapping[str, Any], state: ToolState) -> dict[str, Any]:
    level = str(_options(args).get("level", "info"))
    lines: list[str] = state.setdefault("log", [])
    lines.append(level)
    return _ok({"log_id": _ident("log", len(lines), level), "level": level, "line": len(lines)})


def _util_helper(args: Mapping[str, Any], state: ToolState) -> dict[str, Any]:
    target = str(args["output_format"])
    data = args["data"]
    if "records" in data:
        text = _render(_records(args), target if target in ("csv", "json", "xml") else "csv")
    else:
        text = json.dumps(data, sort_keys=True, indent=2 if target == "text" else None)
    return _ok({"content": text, "format": target})


SIMULATORS: dict[str, Simulator] = {
    "file_operations_reader": _file_reader,
    "file_operations_writer": _file_writer,
    "file_operations_converter": _file_converter,
    "file_operations_scanner": _file_scanner,
    "file_operations_compressor": _file_compressor,
    "data_processing_parser": _data_parser,
    "data_processing_transformer": _data_transformer,
    "data_processing_validator": _data_validator,
    "data_processing_aggregator": _data_aggregator,
    "data_processing_filter": _data_filter,
    "network_fetcher": _net_fetcher,
    "network_poster": _net_poster,
    "network_monitor": _net_monitor,
    "network_router": _net_router,
    "network_validator": _net_validator,
    "computation_calculator": _comp_calculator,
    "computation_analyzer": _comp_analyzer,
    "computation_predictor": _comp_predictor,
    "computation_optimizer": _comp_optimizer,
    "computation_simulator": _comp_simulator,
    "integration_authenticator": _int_authenticator,
    "integration_connector": _int_connector,
    "integration_mapper": _int_mapper,
    "integration_queue": _int_queue,
    "integration_scheduler": _int_scheduler,
    "utility_notifier": _util_notifier,
    "utility_tracker": _util_tracker,
    "utility_cache": _util_cache,
    "utility_logger": _util_logger,
    "utility_helper": _util_helper,
}
