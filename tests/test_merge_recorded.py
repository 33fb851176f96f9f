"""Against ``--server``, the runner puts the server's recorded events in place of what it observed."""

from mcp_resili.client.recorded import merge_recorded
from mcp_resili.faults import ErrorFault
from mcp_resili.trace import FinishEvent, ToolCallEvent


def call(
    tool: str, seq: int, *, error: str | None = None, source: str = "server", fault: ErrorFault | None = None
) -> ToolCallEvent:
    return ToolCallEvent(
        episode="e",
        seq=seq,
        tool=tool,
        arguments={"from": source},
        is_error=error is not None,
        error_code=error,
        fault=fault,
    )


def test_a_call_the_runner_saw_time_out_takes_its_record_and_the_later_calls_stay_aligned():
    """Review follow-up: the server now records a call whose client gave up (here: the first A timed
    out at the client and was retried). Its record used to take the retry's place, and every later
    record then missed its call, so the rest of the trace kept the runner's observed forms."""
    observed = [
        call("A", 1, error="JSONRPC_-32001", source="runner"),  # timed out: no answer
        call("A", 2, source="runner"),
        call("B", 3, source="runner"),
        FinishEvent(episode="e", seq=4, status="completed"),
    ]
    recorded = [call("A", 1), call("A", 2), call("B", 3), FinishEvent(episode="e", seq=4, status="completed")]
    merge_recorded(observed, [1, 2, 3], recorded)
    assert [(e.seq, getattr(e, "arguments", {}).get("from")) for e in observed] == [
        (1, "server"),
        (2, "server"),
        (3, "server"),
        (4, None),
    ]


def test_a_call_that_never_reached_the_server_keeps_its_observed_form():
    observed = [
        call("A", 1, error="JSONRPC_-32602", source="runner"),  # refused by the SDK: never recorded
        call("B", 2, source="runner"),
        call("A", 3, source="runner"),
    ]
    recorded = [call("B", 1), call("A", 2)]
    merge_recorded(observed, [1, 2], recorded)
    assert [e.arguments["from"] for e in observed] == ["runner", "server", "server"]


def test_more_failed_calls_than_records_left_is_no_error():
    observed = [
        call("A", 1, error="JSONRPC_-32001", source="runner"),
        call("A", 2, error="x", source="runner"),
    ]
    observed.append(call("A", 3, source="runner"))
    merge_recorded(observed, [2], [call("A", 1)])
    assert [e.arguments["from"] for e in observed] == ["runner", "runner", "server"]


REQUEST_TIMEOUT = ErrorFault(code="TIMEOUT", side="request")
RESPONSE_TIMEOUT = ErrorFault(code="TIMEOUT", side="response")


def test_behind_a_proxy_a_call_its_request_side_fault_stopped_keeps_its_form_and_takes_no_record():
    """The upstream never saw the call the proxy stopped: its retry's record is the retry's."""
    observed = [
        call("A", 1, error="TIMEOUT", source="runner", fault=REQUEST_TIMEOUT),  # the proxy's, exposed
        call("A", 2, source="runner"),
        call("B", 3, source="runner"),
    ]
    merge_recorded(observed, [0, 1, 2], [call("A", 1), call("B", 2)])
    assert [(e.arguments["from"], e.fault) for e in observed] == [
        ("runner", REQUEST_TIMEOUT),
        ("server", None),
        ("server", None),
    ]


def test_behind_a_proxy_a_call_its_response_side_fault_hit_keeps_the_fault_and_its_record_is_spent():
    """The upstream ran the call and recorded it clean; the agent met the proxy's fault. Review finding:
    the clean record replaced the observed call, so the stored trace said no fault fired."""
    observed = [
        call("A", 1, error="TIMEOUT", source="runner", fault=RESPONSE_TIMEOUT),
        call("A", 2, source="runner"),
    ]
    merge_recorded(observed, [0, 1], [call("A", 1), call("A", 2)])
    assert [(e.seq, e.arguments["from"], e.fault) for e in observed] == [
        (1, "runner", RESPONSE_TIMEOUT),
        (2, "server", None),
    ]


def test_our_own_server_records_its_request_side_faults_and_its_records_are_taken():
    observed = [
        call("A", 1, error="TIMEOUT", source="runner", fault=REQUEST_TIMEOUT),
        call("A", 2, source="runner"),
    ]
    recorded = [call("A", 1, error="TIMEOUT", fault=REQUEST_TIMEOUT), call("A", 2)]
    merge_recorded(observed, [0, 1], recorded)
    assert [e.arguments["from"] for e in observed] == ["server", "server"]
