"""`EpisodeLock`: the calls of one episode one at a time, first come first served, never left locked."""

import anyio
import pytest

from mcp_resili.server.episode import EpisodeLock

pytestmark = pytest.mark.anyio


#: Seconds before a test that waits on the lock gives up: a guard, not a timing assertion. A lock that
#: never hands itself over makes that test fail here instead of hanging the suite.
HANG_GUARD = 30


@pytest.fixture
def anyio_backend():
    return "asyncio"


async def waiter(
    lock: EpisodeLock, name: str, entered: list[str], scopes: dict[str, anyio.CancelScope]
) -> None:
    """Enter ``lock`` and note ``name``, inside a cancel scope the test may cancel (kept in ``scopes``)."""
    with anyio.CancelScope() as scope:
        scopes[name] = scope
        async with lock:
            entered.append(name)


async def test_waiting_calls_enter_one_at_a_time_in_arrival_order():
    lock, order, inside, queued = EpisodeLock(), [], [], []
    release = anyio.Event()

    async def holder() -> None:
        async with lock:
            await release.wait()

    async def call(name: str) -> None:
        queued.append(name)
        async with lock:
            inside.append(name)
            assert len(inside) == 1  # nobody else holds it
            await anyio.sleep(0)  # let the others run while it is held
            order.append(name)
            inside.remove(name)

    with anyio.fail_after(HANG_GUARD):
        async with anyio.create_task_group() as group:
            group.start_soon(holder)
            await anyio.sleep(0)
            for name in "abcde":
                group.start_soon(call, name)
                await anyio.sleep(0)  # arrive in this order
            assert queued == list("abcde") and order == []  # all five wait behind the holder
            release.set()
    assert order == list("abcde")
    assert not lock.locked()


async def test_a_waiter_cancelled_before_its_turn_leaves_the_queue_and_the_next_one_enters():
    lock, entered = EpisodeLock(), []
    release = anyio.Event()

    async def holder() -> None:
        async with lock:
            await release.wait()

    scopes: dict[str, anyio.CancelScope] = {}
    with anyio.fail_after(HANG_GUARD):
        async with anyio.create_task_group() as group:
            group.start_soon(holder)
            await anyio.sleep(0)
            group.start_soon(waiter, lock, "cancelled", entered, scopes)
            await anyio.sleep(0)
            group.start_soon(waiter, lock, "next", entered, scopes)
            await anyio.sleep(0)
            scopes["cancelled"].cancel()
            await anyio.sleep(0)
            release.set()
    assert entered == ["next"]
    assert not lock.locked()


async def test_a_waiter_cancelled_just_as_it_is_handed_the_lock_never_leaves_it_held():
    lock, entered = EpisodeLock(), []
    scopes: dict[str, anyio.CancelScope] = {}
    handed_over = anyio.Event()

    async def holder() -> None:
        async with lock:
            await anyio.sleep(0)
            await anyio.sleep(0)
        # Released (handed to "cancelled"), and cancelled before that waiter ran again.
        scopes["cancelled"].cancel()
        handed_over.set()

    with anyio.fail_after(HANG_GUARD):
        async with anyio.create_task_group() as group:
            group.start_soon(holder)
            await anyio.sleep(0)
            group.start_soon(waiter, lock, "cancelled", entered, scopes)
            group.start_soon(waiter, lock, "next", entered, scopes)
    # Whether the cancellation reached it before or after it entered, the next call got the lock.
    assert handed_over.is_set()
    assert entered[-1] == "next" and entered.count("next") == 1
    assert not lock.locked()


async def test_an_uncontended_call_enters_without_yielding_to_the_event_loop():
    # Two scheduler passes a call were a visible share of its server cost (docs/benchmarks.md).
    lock, ran = EpisodeLock(), []

    async def other() -> None:
        ran.append("other")

    with anyio.fail_after(HANG_GUARD):
        async with anyio.create_task_group() as group:
            group.start_soon(other)
            async with lock:
                assert ran == []  # the other task has not had a turn: entering did not yield
            assert not lock.locked()
