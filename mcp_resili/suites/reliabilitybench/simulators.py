"""Stateful simulators of the 20 ReliabilityBench tools (paper App. A), one state dict per episode.

Every simulator is a pure function of its arguments and the episode's `ToolState`: the scorer replays
the calls that ran on a fresh copy of the task's initial state and reaches the same end state. A
simulator checks everything before it changes anything, so a call that raises `ToolFailure` leaves
the state untouched. Generated ids come from counters in the state (``T-1001``, ``O-5001``), never
from a clock or a random source.

State layout (keys absent from a task's initial state start empty):

* scheduling: ``calendar``: ``{date: {time: topic}}``
* travel: ``flights_db``: ``[{id, origin, dest, date, price, seats_left}]``, ``reservations``:
  ``{flight_id: {status, passenger, payment_info}}``
* support: ``tickets``: ``{id: {...}}``, ``knowledge_base``: ``[{id, title, category, keywords,
  summary, escalate_to}]``, ``next_ticket``
* ecommerce: ``products``: ``[{sku, name, category, price}]``, ``inventory``: ``{sku: units}``,
  ``coupons``: ``{code: {percent, min_subtotal}}``, ``orders``: ``{id: {...}}``, ``next_order``
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from mcp_resili.tools.library import Simulator, ToolFailure, ToolState

#: The top-level state keys each domain's tools may change (what end-state checks look at).
MUTABLE_KEYS: dict[str, tuple[str, ...]] = {
    "scheduling": ("calendar",),
    "travel": ("reservations", "flights_db"),
    "support": ("tickets",),
    "ecommerce": ("orders", "inventory"),
}


def _words(text: str) -> set[str]:
    return set(re.findall(r"[a-z0-9]+", text.lower()))


def _money(value: float) -> float:
    return round(value + 0.0, 2)


# --- scheduling ------------------------------------------------------------------------------------


def _calendar(state: ToolState) -> dict[str, dict[str, str]]:
    calendar: dict[str, dict[str, str]] = state.setdefault("calendar", {})
    return calendar


def book_meeting(args: Mapping[str, Any], state: ToolState) -> dict[str, Any]:
    """Book ``topic`` at (date, time); a taken slot is the tool's own failure."""
    date, time, topic = str(args["date"]), str(args["time"]), str(args["topic"])
    day = _calendar(state).get(date, {})
    if time in day:
        raise ToolFailure("SLOT_TAKEN", f"{date} {time} is already taken by {day[time]!r}")
    _calendar(state).setdefault(date, {})[time] = topic
    return {"status": "booked", "date": date, "time": time, "topic": topic}


def check_calendar(args: Mapping[str, Any], state: ToolState) -> dict[str, Any]:
    """The meetings of one day, by time."""
    date = str(args["date"])
    day = _calendar(state).get(date, {})
    return {"date": date, "meetings": [{"time": t, "topic": day[t]} for t in sorted(day)]}


def cancel_meeting(args: Mapping[str, Any], state: ToolState) -> dict[str, Any]:
    """Remove the meeting at (date, time)."""
    date, time = str(args["date"]), str(args["time"])
    day = _calendar(state).get(date, {})
    if time not in day:
        raise ToolFailure("NOT_FOUND", f"no meeting at {date} {time}")
    topic = day.pop(time)
    if not day:
        del _calendar(state)[date]
    return {"status": "cancelled", "date": date, "time": time, "topic": topic}


def list_meetings(args: Mapping[str, Any], state: ToolState) -> dict[str, Any]:
    """Meetings in an inclusive ISO date range."""
    start, end = str(args["start_date"]), str(args["end_date"])
    calendar = _calendar(state)
    meetings = [
        {"date": d, "time": t, "topic": calendar[d][t]}
        for d in sorted(calendar)
        if start <= d <= end
        for t in sorted(calendar[d])
    ]
    return {"meetings": meetings}


# --- travel ----------------------------------------------------------------------------------------


def _flight(state: ToolState, flight_id: str) -> dict[str, Any]:
    for flight in state.setdefault("flights_db", []):
        if flight["id"] == flight_id:
            found: dict[str, Any] = flight
            return found
    raise ToolFailure("NOT_FOUND", f"no flight {flight_id!r}")


def search_flights(args: Mapping[str, Any], state: ToolState) -> dict[str, Any]:
    """Flights on the route and date, ordered by id (not by price)."""
    wanted = (args["origin"], args["dest"], args["date"])
    flights = [
        dict(f) for f in state.setdefault("flights_db", []) if (f["origin"], f["dest"], f["date"]) == wanted
    ]
    return {"flights": sorted(flights, key=lambda f: f["id"])}


def hold_flight(args: Mapping[str, Any], state: ToolState) -> dict[str, Any]:
    """Hold one seat; a flight is held (or booked) at most once."""
    flight_id = str(args["flight_id"])
    flight = _flight(state, flight_id)
    reservations: dict[str, Any] = state.setdefault("reservations", {})
    if flight_id in reservations:
        raise ToolFailure("ALREADY_HELD", f"{flight_id} is already {reservations[flight_id]['status']}")
    if flight["seats_left"] < 1:
        raise ToolFailure("SOLD_OUT", f"{flight_id} has no seats left")
    flight["seats_left"] -= 1
    reservations[flight_id] = {"status": "held", "passenger": None, "payment_info": None}
    return {"flight_id": flight_id, "status": "held"}


def confirm_booking(args: Mapping[str, Any], state: ToolState) -> dict[str, Any]:
    """Turn a hold into a confirmed booking for a passenger."""
    flight_id = str(args["flight_id"])
    reservation = state.setdefault("reservations", {}).get(flight_id)
    if reservation is None:
        raise ToolFailure("NOT_HELD", f"{flight_id} has no hold; call hold_flight first")
    if reservation["status"] == "confirmed":
        raise ToolFailure("ALREADY_CONFIRMED", f"{flight_id} is already confirmed")
    reservation.update(
        status="confirmed", passenger=str(args["passenger"]), payment_info=str(args["payment_info"])
    )
    return {
        "flight_id": flight_id,
        "passenger": reservation["passenger"],
        "status": "confirmed",
        "confirmation": f"CNF-{flight_id}",
    }


def get_itinerary(args: Mapping[str, Any], state: ToolState) -> dict[str, Any]:
    """Every reservation with its status."""
    reservations = state.setdefault("reservations", {})
    return {"reservations": [{"flight_id": k, **reservations[k]} for k in sorted(reservations)]}


# --- support ---------------------------------------------------------------------------------------


def _ticket(state: ToolState, ticket_id: str) -> dict[str, Any]:
    ticket: dict[str, Any] | None = state.setdefault("tickets", {}).get(ticket_id)
    if ticket is None:
        raise ToolFailure("NOT_FOUND", f"no ticket {ticket_id!r}")
    return ticket


def create_ticket(args: Mapping[str, Any], state: ToolState) -> dict[str, Any]:
    """Open a ticket with the next id."""
    number = int(state.get("next_ticket", 1001))
    ticket_id = f"T-{number}"
    state["next_ticket"] = number + 1
    state.setdefault("tickets", {})[ticket_id] = {
        "customer_id": str(args["customer_id"]),
        "subject": str(args["subject"]),
        "description": str(args["description"]),
        "priority": str(args["priority"]),
        "status": "open",
        "notes": [],
        "escalated_to": None,
        "resolution": None,
    }
    return {"ticket_id": ticket_id, "status": "open"}


def update_ticket(args: Mapping[str, Any], state: ToolState) -> dict[str, Any]:
    """Change status/priority or append a note (appending twice appends twice)."""
    ticket = _ticket(state, str(args["ticket_id"]))
    if ticket["status"] == "closed":
        raise ToolFailure("TICKET_CLOSED", f"{args['ticket_id']} is closed")
    for key in ("status", "priority"):
        if key in args:
            ticket[key] = str(args[key])
    if args.get("note"):
        ticket["notes"].append(str(args["note"]))
    return {"ticket_id": str(args["ticket_id"]), "status": ticket["status"], "priority": ticket["priority"]}


def close_ticket(args: Mapping[str, Any], state: ToolState) -> dict[str, Any]:
    """Close with a resolution."""
    ticket = _ticket(state, str(args["ticket_id"]))
    if ticket["status"] == "closed":
        raise ToolFailure("ALREADY_CLOSED", f"{args['ticket_id']} is already closed")
    ticket.update(status="closed", resolution=str(args["resolution"]))
    return {"ticket_id": str(args["ticket_id"]), "status": "closed"}


def escalate_ticket(args: Mapping[str, Any], state: ToolState) -> dict[str, Any]:
    """Hand a ticket to a higher-tier team."""
    ticket = _ticket(state, str(args["ticket_id"]))
    team = str(args["escalate_to"])
    if ticket["status"] == "closed":
        raise ToolFailure("TICKET_CLOSED", f"{args['ticket_id']} is closed")
    if ticket["escalated_to"] == team:
        raise ToolFailure("ALREADY_ESCALATED", f"{args['ticket_id']} is already escalated to {team}")
    ticket.update(status="escalated", escalated_to=team, escalation_reason=str(args["reason"]))
    return {"ticket_id": str(args["ticket_id"]), "status": "escalated", "escalated_to": team}


def search_knowledge_base(args: Mapping[str, Any], state: ToolState) -> dict[str, Any]:
    """Articles sharing a word with the query, best overlap first."""
    query = _words(str(args["query"]))
    category = args.get("category")
    scored = []
    for article in state.setdefault("knowledge_base", []):
        if category and article["category"] != category:
            continue
        overlap = len(query & (_words(article["title"]) | set(article["keywords"])))
        if overlap:
            scored.append((-overlap, article["id"], article))
    return {"articles": [dict(a) for _, _, a in sorted(scored, key=lambda s: (s[0], s[1]))]}


def list_open_tickets(args: Mapping[str, Any], state: ToolState) -> dict[str, Any]:
    """Tickets that are not closed, with optional filters."""
    tickets = state.setdefault("tickets", {})
    rows = [
        {"ticket_id": k, **tickets[k]}
        for k in sorted(tickets)
        if tickets[k]["status"] != "closed"
        and args.get("priority") in (None, tickets[k]["priority"])
        and args.get("customer_id") in (None, tickets[k]["customer_id"])
    ]
    return {"tickets": rows}


# --- ecommerce -------------------------------------------------------------------------------------


def _product(state: ToolState, sku: str) -> dict[str, Any]:
    for product in state.setdefault("products", []):
        if product["sku"] == sku:
            found: dict[str, Any] = product
            return found
    raise ToolFailure("NOT_FOUND", f"no product {sku!r}")


def _coupon_discount(state: ToolState, code: str, subtotal: float) -> float | None:
    coupon = state.setdefault("coupons", {}).get(code)
    if coupon is None or subtotal < coupon["min_subtotal"]:
        return None
    return _money(subtotal * coupon["percent"] / 100)


def search_products(args: Mapping[str, Any], state: ToolState) -> dict[str, Any]:
    """Products matching every query word (name or category), within the filters, by SKU."""
    query = _words(str(args["query"]))
    found = []
    for product in state.setdefault("products", []):
        if not query <= (_words(product["name"]) | _words(product["category"])):
            continue
        if args.get("category") and product["category"] != args["category"]:
            continue
        if product["price"] < args.get("min_price", 0) or product["price"] > args.get("max_price", 1e12):
            continue
        found.append(dict(product))
    return {"products": sorted(found, key=lambda p: p["sku"])}


def check_inventory(args: Mapping[str, Any], state: ToolState) -> dict[str, Any]:
    """Units in stock."""
    sku = str(args["sku"])
    _product(state, sku)
    return {"sku": sku, "in_stock": int(state.setdefault("inventory", {}).get(sku, 0))}


def create_order(args: Mapping[str, Any], state: ToolState) -> dict[str, Any]:
    """Place an order: check every item and the coupon first, then take stock and record it."""
    inventory: dict[str, int] = state.setdefault("inventory", {})
    items: list[dict[str, Any]] = [
        {"sku": str(i["sku"]), "quantity": int(i["quantity"])} for i in args["items"]
    ]
    subtotal = 0.0
    for item in items:
        product = _product(state, item["sku"])
        if inventory.get(item["sku"], 0) < item["quantity"]:
            raise ToolFailure("OUT_OF_STOCK", f"only {inventory.get(item['sku'], 0)} of {item['sku']} left")
        subtotal += product["price"] * item["quantity"]
    code = args.get("coupon_code") or None
    discount = 0.0
    if code is not None:
        found = _coupon_discount(state, str(code), subtotal)
        if found is None:
            raise ToolFailure("INVALID_COUPON", f"coupon {code!r} does not apply to a {subtotal:.2f} order")
        discount = found
    for item in items:
        inventory[item["sku"]] -= item["quantity"]
    number = int(state.get("next_order", 5001))
    state["next_order"] = number + 1
    order_id = f"O-{number}"
    total = _money(subtotal - discount)
    state.setdefault("orders", {})[order_id] = {
        "customer_id": str(args["customer_id"]),
        "items": items,
        "shipping_address": str(args["shipping_address"]),
        "coupon_code": code,
        "subtotal": _money(subtotal),
        "discount": discount,
        "total": total,
        "status": "placed",
        "returned": [],
    }
    return {"order_id": order_id, "status": "placed", "total": total}


def check_order_status(args: Mapping[str, Any], state: ToolState) -> dict[str, Any]:
    """An order's details."""
    order_id = str(args["order_id"])
    order = state.setdefault("orders", {}).get(order_id)
    if order is None:
        raise ToolFailure("NOT_FOUND", f"no order {order_id!r}")
    return {"order_id": order_id, **order}


def process_return(args: Mapping[str, Any], state: ToolState) -> dict[str, Any]:
    """Return whole lines of an order; stock goes back and the refund is recorded."""
    order_id = str(args["order_id"])
    order = state.setdefault("orders", {}).get(order_id)
    if order is None:
        raise ToolFailure("NOT_FOUND", f"no order {order_id!r}")
    lines = {i["sku"]: i for i in order["items"]}
    skus = [str(s) for s in args["items"]]
    for sku in skus:
        if sku not in lines:
            raise ToolFailure("NOT_IN_ORDER", f"{sku} is not part of {order_id}")
        if sku in order["returned"]:
            raise ToolFailure("ALREADY_RETURNED", f"{sku} of {order_id} was already returned")
    refund = 0.0
    inventory: dict[str, int] = state.setdefault("inventory", {})
    for sku in skus:
        line = lines[sku]
        refund += _product(state, sku)["price"] * line["quantity"]
        inventory[sku] = inventory.get(sku, 0) + line["quantity"]
        order["returned"].append(sku)
    order["status"] = "returned" if len(order["returned"]) == len(lines) else "partially_returned"
    order.setdefault("refunds", []).append(
        {
            "items": skus,
            "amount": _money(refund),
            "method": str(args["refund_method"]),
            "reason": args["reason"],
        }
    )
    return {"order_id": order_id, "status": order["status"], "refund": _money(refund)}


def apply_coupon(args: Mapping[str, Any], state: ToolState) -> dict[str, Any]:
    """Whether a coupon applies to a subtotal, and the discounted total (no state change)."""
    subtotal = float(args["order_subtotal"])
    discount = _coupon_discount(state, str(args["code"]), subtotal)
    if discount is None:
        return {"code": str(args["code"]), "valid": False, "discount": 0.0, "new_total": _money(subtotal)}
    return {
        "code": str(args["code"]),
        "valid": True,
        "discount": discount,
        "new_total": _money(subtotal - discount),
    }


SIMULATORS: dict[str, Simulator] = {
    f.__name__: f
    for f in (
        book_meeting,
        check_calendar,
        cancel_meeting,
        list_meetings,
        search_flights,
        hold_flight,
        confirm_booking,
        get_itinerary,
        create_ticket,
        update_ticket,
        close_ticket,
        escalate_ticket,
        search_knowledge_base,
        list_open_tickets,
        search_products,
        check_inventory,
        create_order,
        check_order_status,
        process_return,
        apply_coupon,
    )
}
