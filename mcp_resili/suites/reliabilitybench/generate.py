"""Generate ReliabilityBench tasks as data: a seeded world, a request, a gold workflow, a predicate.

Two levels per domain (paper §4.3; level-2 patterns as in the paper):

=============  =================================  =========================================
domain         level 1                            level 2
=============  =================================  =========================================
scheduling     book a free slot; cancel one       book, moving past conflicts
travel         book a named flight                book the cheapest flight on a route
support        open and close a ticket            search the knowledge base, then escalate
ecommerce      order an item; return an item      cheapest item plus a coupon
=============  =================================  =========================================

Every task is solved once by running its gold workflow on the simulators from its initial state;
the end-state predicate is read off that final state (every mutable collection of the domain, free
text ignored), so any path that reaches the same end state passes and stray writes fail.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mcp_resili.suites.reliabilitybench.library import MUTABLE_KEYS, reliabilitybench_library
from mcp_resili.suites.reliabilitybench.model import (
    Clause,
    Correction,
    Details,
    Expected,
    Request,
    StateCheck,
)
from mcp_resili.suites.reliabilitybench.perturb import render
from mcp_resili.tasks.model import (
    Binding,
    ConstantBinding,
    StepBinding,
    Task,
    TaskConstraints,
    TaskSet,
    Workflow,
    WorkflowStep,
    resolve_arguments,
)

SUITE = "reliabilitybench"
#: Free-text fields the agent words itself: never compared.
IGNORED_FIELDS = {"tickets": ("description", "notes", "escalation_reason")}

TOPICS = ("Review", "Budget sync", "Roadmap", "Hiring panel", "Design critique", "Retro", "1:1 with Sam")
PEOPLE = ("Bob", "Alice", "Priya", "Chen Wei", "Maria Lopez", "Tom Becker", "Aisha Khan", "Jonas Berg")
AIRPORTS = ("LON", "PAR", "BER", "MAD", "ROM", "AMS", "NYC", "TYO")
AIRLINES = ("AA", "BA", "LH", "AF", "IB", "KL")
CARDS = ("VISA-4242", "MC-5454", "AMEX-3782", "VISA-1881")
ISSUES = (
    (
        "Billing",
        "double charge",
        "I was charged twice for my subscription",
        ("charged", "twice", "billing"),
        "billing",
    ),
    (
        "Login",
        "login loop",
        "I cannot log in, the page keeps reloading",
        ("login", "password", "reloading"),
        "tier2",
    ),
    (
        "Crash",
        "app crash",
        "The app crashes when I export a report",
        ("crash", "export", "report"),
        "engineering",
    ),
    (
        "Refund",
        "refund delay",
        "My refund has not arrived after two weeks",
        ("refund", "arrived", "weeks"),
        "billing",
    ),
    (
        "Sync",
        "sync failure",
        "My files stopped syncing between devices",
        ("sync", "files", "devices"),
        "engineering",
    ),
    (
        "Account",
        "account locked",
        "My account was locked after a password reset",
        ("locked", "account", "reset"),
        "tier2",
    ),
)
RESOLUTIONS = (
    "Reset the session cache",
    "Explained the billing cycle",
    "Sent a setup guide",
    "Reinstalled the app",
)
CATEGORIES = ("headphones", "keyboard", "mouse", "monitor", "lamp")
ADJECTIVES = ("Basic", "Pro", "Studio", "Travel", "Classic", "Ultra")
ADDRESSES = (
    "12 Elm Street, Springfield",
    "4 Harbour Road, Bristol",
    "77 Rue Lafayette, Paris",
    "9 Main St, Austin",
)
COUPONS = {
    "SAVE10": {"percent": 10, "min_subtotal": 50},
    "WELCOME5": {"percent": 5, "min_subtotal": 0},
    "BIG20": {"percent": 20, "min_subtotal": 200},
}


def _clause(
    active: str,
    paraphrase: str,
    passive: str,
    *,
    refers_to: tuple[int, ...] = (),
    steps: tuple[str, ...] = (),
) -> Clause:
    return Clause(active=active, paraphrase=paraphrase, passive=passive, refers_to=refers_to, steps=steps)


def _step(step_id: str, tool: str, **arguments: Any) -> WorkflowStep:
    bound: dict[str, Binding] = {
        k: v if isinstance(v, StepBinding) else ConstantBinding(value=v) for k, v in arguments.items()
    }
    return WorkflowStep(id=step_id, tool=tool, arguments=bound)


def _chain(*steps: WorkflowStep) -> Workflow:
    """Steps in order, each after the previous one (plus the edges its bindings need)."""
    edges = {(a.id, b.id) for a, b in itertools.pairwise(steps)}
    edges |= {(b.step, s.id) for s in steps for b in s.arguments.values() if isinstance(b, StepBinding)}
    return Workflow(steps=steps, edges=tuple(sorted(edges)))


@dataclass(frozen=True)
class Draft:
    """One generated task before it is solved and checked."""

    pattern: str
    state: dict[str, Any]
    request: Request
    workflow: Workflow


def _date(rng: random.Random) -> str:
    return f"2026-02-{rng.randrange(2, 27):02d}"


# --- scheduling ------------------------------------------------------------------------------------

HOURS = tuple(f"{h:02d}:00" for h in range(9, 17))


def _calendar_world(rng: random.Random) -> dict[str, Any]:
    calendar: dict[str, dict[str, str]] = {}
    for _ in range(rng.randrange(4, 8)):
        calendar.setdefault(_date(rng), {})[rng.choice(HOURS)] = rng.choice(TOPICS)
    return {"calendar": calendar}


def _schedule_book(rng: random.Random) -> Draft:
    state = _calendar_world(rng)
    date = _date(rng)
    free = [h for h in HOURS if h not in state["calendar"].get(date, {})]
    time, topic = rng.choice(free), rng.choice(TOPICS)
    decoy = rng.choice([t for t in TOPICS if t != topic])
    request = Request(
        clauses=(
            _clause(
                "Book a meeting about '{topic}'[ on {date}].",
                "Please put a '{topic}' meeting in my calendar[ for {date}].",
                "A meeting about '{topic}' should be booked[ on {date}].",
                steps=("s1",),
            ),
            _clause(
                "Start the meeting[ at {time}].",
                "The meeting should begin[ at {time}].",
                "The start of the meeting is to be set[ at {time}].",
                refers_to=(0,),
                steps=("s1",),
            ),
        ),
        slots={"topic": topic, "date": date, "time": time},
        dates=("date",),
        times=("time",),
        correction=Correction(slot="topic", label="meeting topic", decoy=decoy),
    )
    workflow = _chain(_step("s1", "book_meeting", date=date, time=time, topic=topic))
    return Draft("schedule_book", state, request, workflow)


def _schedule_cancel(rng: random.Random) -> Draft:
    state = _calendar_world(rng)
    date = rng.choice(sorted(state["calendar"]))
    time = rng.choice(sorted(state["calendar"][date]))
    topic = state["calendar"][date][time]
    decoy = rng.choice([t for t in TOPICS if t != topic])
    request = Request(
        clauses=(
            _clause(
                "Cancel my '{topic}' meeting[ on {date}].",
                "Please remove the '{topic}' meeting[ on {date}] from my calendar.",
                "My '{topic}' meeting[ on {date}] should be cancelled.",
                steps=("s2",),
            ),
            _clause(
                "The meeting to cancel starts at {time}.",
                "The meeting I mean is the one at {time}.",
                "The meeting to be cancelled is scheduled at {time}.",
                refers_to=(0,),
                steps=("s2",),
            ),
        ),
        slots={"topic": topic, "date": date, "time": time},
        dates=("date",),
        times=("time",),
        correction=Correction(slot="topic", label="meeting topic", decoy=decoy),
    )
    workflow = _chain(
        _step("s1", "check_calendar", date=date), _step("s2", "cancel_meeting", date=date, time=time)
    )
    return Draft("schedule_cancel", state, request, workflow)


def _schedule_conflict(rng: random.Random) -> Draft:
    state = _calendar_world(rng)
    date = _date(rng)
    day = state["calendar"].setdefault(date, {})
    start = rng.randrange(0, len(HOURS) - 3)
    for hour in HOURS[start : start + rng.randrange(1, 3)]:
        day[hour] = rng.choice(TOPICS)
    time = HOURS[start]
    slot = next(h for h in HOURS[start:] if h not in day)
    topic = rng.choice(TOPICS)
    decoy = rng.choice([t for t in TOPICS if t != topic])
    request = Request(
        clauses=(
            _clause(
                "Book a meeting about '{topic}'[ on {date} at {time}].",
                "Please set up a '{topic}' meeting[ for {date} at {time}].",
                "A meeting about '{topic}' should be booked[ on {date} at {time}].",
                steps=("s2",),
            ),
            _clause(
                "If {time} is already taken, book the first free full hour after {time} on the same day.",
                "Should {time} be busy, take the earliest free full hour later on the same day.",
                "If {time} is taken, the first free full hour after {time} on the same day is to be used.",
                refers_to=(0,),
                steps=("s2",),
            ),
        ),
        slots={"topic": topic, "date": date, "time": time},
        dates=("date",),
        times=("time",),
        correction=Correction(slot="topic", label="meeting topic", decoy=decoy),
    )
    workflow = _chain(
        _step("s1", "check_calendar", date=date),
        _step("s2", "book_meeting", date=date, time=slot, topic=topic),
    )
    return Draft("schedule_conflict", state, request, workflow)


# --- travel ----------------------------------------------------------------------------------------


def _flights_world(rng: random.Random) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    origin, dest = rng.sample(AIRPORTS, 2)
    date = _date(rng)
    prices = rng.sample(range(120, 900, 10), rng.randrange(2, 5))
    route = [
        {
            "id": f"{airline}-{rng.randrange(100, 999)}",
            "origin": origin,
            "dest": dest,
            "date": date,
            "price": price,
            "seats_left": rng.randrange(1, 9),
        }
        for airline, price in zip(rng.sample(AIRLINES, len(prices)), prices, strict=True)
    ]
    other = {
        # Four digits: never the id of a route flight (three digits).
        "id": f"{rng.choice(AIRLINES)}-{rng.randrange(1000, 9999)}",
        "origin": dest,
        "dest": origin,
        "date": date,
        "price": min(prices) - 10,
        "seats_left": 5,
    }
    return {"flights_db": [*route, other], "reservations": {}}, route


def _travel_direct(rng: random.Random) -> Draft:
    state, route = _flights_world(rng)
    flight = rng.choice(route)
    passenger, decoy = rng.sample(PEOPLE, 2)
    card = rng.choice(CARDS)
    request = Request(
        clauses=(
            _clause(
                "Book flight {flight_id}[ for {passenger}].",
                "I need a seat on flight {flight_id}[ for {passenger}].",
                "Flight {flight_id} should be booked[ for {passenger}].",
                steps=("s1", "s2"),
            ),
            _clause(
                "Pay for the booking[ with the card {card}].",
                "Charge the booking to the card {card}.",
                "The booking is to be paid[ with the card {card}].",
                refers_to=(0,),
                steps=("s2",),
            ),
        ),
        slots={"flight_id": flight["id"], "passenger": passenger, "card": card},
        correction=Correction(slot="passenger", label="passenger", decoy=decoy),
    )
    workflow = _chain(
        _step("s1", "hold_flight", flight_id=flight["id"]),
        _step("s2", "confirm_booking", flight_id=flight["id"], passenger=passenger, payment_info=card),
    )
    return Draft("travel_direct", state, request, workflow)


def _travel_cheapest(rng: random.Random) -> Draft:
    state, route = _flights_world(rng)
    cheapest = min(route, key=lambda f: f["price"])
    passenger, decoy = rng.sample(PEOPLE, 2)
    card = rng.choice(CARDS)
    request = Request(
        clauses=(
            _clause(
                "Book the cheapest flight from {origin} to {dest}[ on {date}] for {passenger}.",
                "Find the least expensive seat from {origin} to {dest}[ on {date}] and book the seat for "
                "{passenger}.",
                "The cheapest flight from {origin} to {dest}[ on {date}] should be booked for {passenger}.",
                steps=("s1", "s2", "s3"),
            ),
            _clause(
                "Pay for the booking[ with the card {card}].",
                "Charge the booking to the card {card}.",
                "The booking is to be paid[ with the card {card}].",
                refers_to=(0,),
                steps=("s3",),
            ),
        ),
        slots={
            "origin": cheapest["origin"],
            "dest": cheapest["dest"],
            "date": cheapest["date"],
            "passenger": passenger,
            "card": card,
        },
        dates=("date",),
        correction=Correction(slot="passenger", label="passenger", decoy=decoy),
    )
    workflow = _chain(
        _step(
            "s1", "search_flights", origin=cheapest["origin"], dest=cheapest["dest"], date=cheapest["date"]
        ),
        _step("s2", "hold_flight", flight_id=cheapest["id"]),
        _step("s3", "confirm_booking", flight_id=cheapest["id"], passenger=passenger, payment_info=card),
    )
    return Draft("travel_cheapest", state, request, workflow)


# --- support ---------------------------------------------------------------------------------------


def _support_world(rng: random.Random) -> dict[str, Any]:
    articles = [
        {
            "id": f"KB-{100 + i}",
            "title": f"{subject}: {short}",
            "category": "account" if team == "tier2" else team,
            "keywords": list(words),
            "summary": f"Known issue ({short}). Escalate the ticket to {team}; do not close it.",
            "escalate_to": team,
        }
        for i, (subject, short, _, words, team) in enumerate(ISSUES)
    ]
    tickets: dict[str, dict[str, Any]] = {
        f"T-0{900 + i}": {
            "customer_id": f"C-{rng.randrange(100, 999)}",
            "subject": rng.choice(ISSUES)[0],
            "description": "older report",
            "priority": rng.choice(("low", "medium")),
            "status": "open",
            "notes": [],
            "escalated_to": None,
            "resolution": None,
        }
        for i in range(rng.randrange(1, 4))
    }
    return {"tickets": tickets, "knowledge_base": articles, "next_ticket": 1001}


def _customer_pair(rng: random.Random) -> tuple[str, str]:
    a, b = rng.sample(range(100, 999), 2)
    return f"C-{a}", f"C-{b}"


def _support_close(rng: random.Random) -> Draft:
    state = _support_world(rng)
    subject, _, issue, _, _ = rng.choice(ISSUES)
    customer, decoy = _customer_pair(rng)
    priority = rng.choice(("low", "medium", "high"))
    resolution = rng.choice(RESOLUTIONS)
    request = Request(
        clauses=(
            _clause(
                "Customer {customer} reports: '{issue}'.",
                "We heard from customer {customer}, who says: '{issue}'.",
                "A problem was reported by customer {customer}: '{issue}'.",
            ),
            _clause(
                "Open a {priority}-priority ticket with the subject '{subject}'[ for the customer's report].",
                "Log the customer's report as a {priority}-priority ticket titled '{subject}'.",
                "A {priority}-priority ticket with the subject '{subject}' should be opened[ for the "
                "customer's report].",
                refers_to=(0,),
                steps=("s1",),
            ),
            _clause(
                "Close the '{subject}' ticket[ with the resolution '{resolution}'].",
                "Mark the '{subject}' ticket closed, resolution '{resolution}'.",
                "The '{subject}' ticket is to be closed[ with the resolution '{resolution}'].",
                refers_to=(1,),
                steps=("s2",),
            ),
        ),
        slots={
            "customer": customer,
            "issue": issue,
            "priority": priority,
            "subject": subject,
            "resolution": resolution,
        },
        correction=Correction(slot="customer", label="customer id", decoy=decoy),
    )
    workflow = _chain(
        _step(
            "s1", "create_ticket", customer_id=customer, subject=subject, description=issue, priority=priority
        ),
        _step(
            "s2", "close_ticket", ticket_id=StepBinding(step="s1", path="ticket_id"), resolution=resolution
        ),
    )
    return Draft("support_close", state, request, workflow)


def _support_escalate(rng: random.Random) -> Draft:
    state = _support_world(rng)
    subject, _, issue, words, team = rng.choice(ISSUES)
    customer, decoy = _customer_pair(rng)
    request = Request(
        clauses=(
            _clause(
                "Customer {customer} reports: '{issue}'.",
                "We heard from customer {customer}, who says: '{issue}'.",
                "A problem was reported by customer {customer}: '{issue}'.",
            ),
            _clause(
                "Open a high-priority ticket with the subject '{subject}'[ for the customer's report].",
                "Log the customer's report as a high-priority ticket titled '{subject}'.",
                "A high-priority ticket with the subject '{subject}' should be opened[ for the customer's "
                "report].",
                refers_to=(0,),
                steps=("s2",),
            ),
            _clause(
                "Look the customer's problem up in the knowledge base and escalate the '{subject}' "
                "ticket to the team the article names.",
                "Check the knowledge base for the customer's problem and pass the '{subject}' ticket to "
                "whichever team the article says.",
                "The customer's problem is to be looked up in the knowledge base and the '{subject}' "
                "ticket escalated to the team named there.",
                refers_to=(0, 1),
                steps=("s1", "s3"),
            ),
        ),
        slots={"customer": customer, "issue": issue, "subject": subject},
        correction=Correction(slot="customer", label="customer id", decoy=decoy),
    )
    workflow = _chain(
        _step("s1", "search_knowledge_base", query=" ".join(words[:2])),
        _step(
            "s2", "create_ticket", customer_id=customer, subject=subject, description=issue, priority="high"
        ),
        _step(
            "s3",
            "escalate_ticket",
            ticket_id=StepBinding(step="s2", path="ticket_id"),
            reason=f"Knowledge base: escalate to {team}",
            escalate_to=team,
        ),
    )
    return Draft("support_escalate", state, request, workflow)


# --- ecommerce -------------------------------------------------------------------------------------


def _shop_world(rng: random.Random) -> dict[str, Any]:
    products: list[dict[str, Any]] = []
    inventory: dict[str, int] = {}
    for n, category in enumerate(CATEGORIES):
        for adjective in rng.sample(ADJECTIVES, 3):
            sku = f"SKU-{n}{len(products):02d}"
            products.append(
                {
                    "sku": sku,
                    "name": f"{adjective} {category.title()}",
                    "category": category,
                    "price": rng.randrange(15, 260),
                }
            )
            inventory[sku] = rng.randrange(1, 12)
    prices = [p["price"] for p in products]
    if len(set(prices)) != len(prices):  # ties would make "cheapest" ambiguous; spread them
        for i, p in enumerate(products):
            p["price"] = p["price"] * 100 + i
    orders: dict[str, dict[str, Any]] = {}
    for i in range(2):
        item = rng.choice(products)
        orders[f"O-{4001 + i}"] = {
            "customer_id": f"C-{rng.randrange(100, 999)}",
            "items": [{"sku": item["sku"], "quantity": 1}],
            "shipping_address": rng.choice(ADDRESSES),
            "coupon_code": None,
            "subtotal": float(item["price"]),
            "discount": 0.0,
            "total": float(item["price"]),
            "status": "placed",
            "returned": [],
        }
    return {
        "products": products,
        "inventory": inventory,
        "coupons": copy.deepcopy(COUPONS),
        "orders": orders,
        "next_order": 5001,
    }


def _shop_order(rng: random.Random) -> Draft:
    state = _shop_world(rng)
    product = rng.choice([p for p in state["products"] if state["inventory"][p["sku"]] >= 2])
    quantity = rng.randrange(1, min(3, state["inventory"][product["sku"]]) + 1)
    customer, decoy = _customer_pair(rng)
    address = rng.choice(ADDRESSES)
    request = Request(
        clauses=(
            _clause(
                "Order {quantity} of the {name} ({sku})[ for customer {customer}].",
                "Customer {customer} wants {quantity} of the {name} ({sku}); place the order.",
                "{quantity} of the {name} ({sku}) should be ordered[ for customer {customer}].",
                steps=("s2",),
            ),
            _clause(
                "Ship the order to {address}.",
                "The delivery address for the order is {address}.",
                "The order is to be shipped to {address}.",
                refers_to=(0,),
                steps=("s2",),
            ),
        ),
        slots={
            "quantity": str(quantity),
            "name": product["name"],
            "sku": product["sku"],
            "customer": customer,
            "address": address,
        },
        correction=Correction(slot="customer", label="customer id", decoy=decoy),
    )
    workflow = _chain(
        _step("s1", "check_inventory", sku=product["sku"]),
        _step(
            "s2",
            "create_order",
            customer_id=customer,
            items=[{"sku": product["sku"], "quantity": quantity}],
            shipping_address=address,
        ),
    )
    return Draft("shop_order", state, request, workflow)


def _shop_return(rng: random.Random) -> Draft:
    state = _shop_world(rng)
    order_id = rng.choice(sorted(state["orders"]))
    sku = state["orders"][order_id]["items"][0]["sku"]
    method, phrase = rng.choice(
        (("original_payment", "the original payment method"), ("store_credit", "store credit"))
    )
    decoy = rng.choice([o for o in ("O-4101", "O-4202", "O-4303") if o != order_id])
    request = Request(
        clauses=(
            _clause(
                "Return the item {sku} from order {order_id}[ with the reason 'arrived damaged'].",
                "The item {sku} in order {order_id} arrived damaged; process a return with the reason "
                "'arrived damaged'.",
                "The item {sku} from order {order_id} should be returned[ with the reason "
                "'arrived damaged'].",
                steps=("s2",),
            ),
            _clause(
                "Send the refund for the returned item to {refund}.",
                "The refund for the returned item should go to {refund}.",
                "The refund for the returned item is to be issued to {refund}.",
                refers_to=(0,),
                steps=("s2",),
            ),
        ),
        slots={"sku": sku, "order_id": order_id, "refund": phrase},
        correction=Correction(slot="order_id", label="order number", decoy=decoy),
    )
    workflow = _chain(
        _step("s1", "check_order_status", order_id=order_id),
        _step(
            "s2",
            "process_return",
            order_id=order_id,
            items=[sku],
            reason="arrived damaged",
            refund_method=method,
        ),
    )
    return Draft("shop_return", state, request, workflow)


def _shop_coupon(rng: random.Random) -> Draft:
    state = _shop_world(rng)
    category = rng.choice(CATEGORIES)
    cheapest = min((p for p in state["products"] if p["category"] == category), key=lambda p: p["price"])
    subtotal = float(cheapest["price"])
    codes = [c for c, rule in COUPONS.items() if subtotal >= rule["min_subtotal"]]
    code = rng.choice(codes)
    customer, decoy = _customer_pair(rng)
    address = rng.choice(ADDRESSES)
    request = Request(
        clauses=(
            _clause(
                "Buy the cheapest {category} in the catalog[ for customer {customer}].",
                "Customer {customer} wants whichever {category} costs the least; order one.",
                "The cheapest {category} in the catalog should be bought[ for customer {customer}].",
                steps=("s1", "s3"),
            ),
            _clause(
                "Apply the coupon {code} to the order.",
                "Use the coupon code {code} on the order.",
                "The coupon {code} is to be applied to the order.",
                refers_to=(0,),
                steps=("s2",),
            ),
            _clause(
                "Ship the order to {address}.",
                "The delivery address for the order is {address}.",
                "The order is to be shipped to {address}.",
                refers_to=(0,),
                steps=("s3",),
            ),
        ),
        slots={"category": category, "customer": customer, "code": code, "address": address},
        correction=Correction(slot="customer", label="customer id", decoy=decoy),
    )
    workflow = _chain(
        _step("s1", "search_products", query=category),
        _step("s2", "apply_coupon", code=code, order_subtotal=subtotal),
        _step(
            "s3",
            "create_order",
            customer_id=customer,
            items=[{"sku": cheapest["sku"], "quantity": 1}],
            shipping_address=address,
            coupon_code=code,
        ),
    )
    return Draft("shop_coupon", state, request, workflow)


#: domain → level → patterns (cycled through in order).
PATTERNS: dict[str, dict[int, tuple[Callable[[random.Random], Draft], ...]]] = {
    "scheduling": {1: (_schedule_book, _schedule_cancel), 2: (_schedule_conflict,)},
    "travel": {1: (_travel_direct,), 2: (_travel_cheapest,)},
    "support": {1: (_support_close,), 2: (_support_escalate,)},
    "ecommerce": {1: (_shop_order, _shop_return), 2: (_shop_coupon,)},
}


def solve(workflow: Workflow, initial_state: dict[str, Any]) -> dict[str, Any]:
    """The final state after running ``workflow`` without faults (raises if any step fails)."""
    library = reliabilitybench_library()
    state = copy.deepcopy(initial_state)
    results: dict[str, Any] = {}
    for step in workflow.steps:
        results[step.id] = library.simulate(step.tool, resolve_arguments(step, {}, results), state)
    return state


def end_state_checks(domain: str, final: dict[str, Any]) -> tuple[StateCheck, ...]:
    """The predicate: every mutable collection of ``domain`` as it must end (free text ignored)."""
    checks: list[StateCheck] = []
    for key in MUTABLE_KEYS[domain]:
        value = final.get(key, {})
        if isinstance(value, dict):
            checks.append(StateCheck(path=(key,), op="keys", value=sorted(value)))
            ignore = IGNORED_FIELDS.get(key, ())
            checks.extend(
                StateCheck(path=(key, item), value=value[item], ignore=ignore) for item in sorted(value)
            )
        else:
            checks.append(StateCheck(path=(key,), value=value))
    return tuple(checks)


def generate_task(seed: int, domain: str, level: int, index: int) -> Task:
    """Task ``index`` of (domain, level); deterministic in its arguments."""
    patterns = PATTERNS[domain][level]
    key = f"{seed}:{domain}:{level}:{index}"
    rng = random.Random(hashlib.blake2b(key.encode(), digest_size=8).digest())
    draft = patterns[index % len(patterns)](rng)
    initial = copy.deepcopy(draft.state)
    final = solve(draft.workflow, draft.state)
    task_id = f"rb_{domain}_l{level}_{index:02d}"
    details = Details(
        domain=domain,  # type: ignore[arg-type]
        level=level,  # type: ignore[arg-type]
        pattern=draft.pattern,
        initial_state=initial,
        request=draft.request,
        generator_seed=seed,
    )
    tools = tuple(dict.fromkeys(s.tool for s in draft.workflow.steps))
    return Task(
        id=task_id,
        suite=SUITE,
        task_type=draft.pattern,
        complexity="easy" if level == 1 else "medium",
        description=render(draft.request, (), task_id=task_id, domain=domain),
        expected_outputs=Expected(checks=end_state_checks(domain, final)).model_dump(mode="json"),
        required_tools=tools,
        workflow=draft.workflow,
        constraints=TaskConstraints(timeout=300, max_retries=3, max_turns=20),
        metadata=details.model_dump(mode="json"),
    )


def generate_tasks(seed: int, per_level: dict[int, int]) -> TaskSet:
    """``per_level[level]`` tasks of every domain and level."""
    tasks = [
        generate_task(seed, domain, level, index)
        for domain in PATTERNS
        for level, count in sorted(per_level.items())
        for index in range(count)
    ]
    return TaskSet(suite=SUITE, seed=seed, generator=__name__, tasks=tuple(tasks))
