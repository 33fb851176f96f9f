"""mcp-resili: chaos engineering and robustness benchmarking for tool-using LLM agents over MCP.

This module is the public face: everything a user or a suite author imports, by name, from
``mcp_resili`` alone (see ``docs/suites.md``). Module paths below it are not a promise. Names load on
first use, so ``import mcp_resili`` (and the command line) stays fast.

A run::

    from mcp_resili import RunConfig, execute, summarize
    result = await execute(RunConfig(models=("scripted:oracle",), limit=5))

A suite (the ``mcp_resili.suites`` entry point returns one)::

    from mcp_resili import Score, Suite, Task, ToolLibrary, Trace
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mcp_resili.constants import VERSION as __version__
from mcp_resili.lazy import lazy_exports

if TYPE_CHECKING:
    from mcp_resili.agents.model import (
        AssistantMessage,
        Model,
        ModelRequest,
        ModelResponse,
        ToolCall,
        ToolDefinition,
        ToolResult,
        ToolResultsMessage,
        UserMessage,
    )
    from mcp_resili.agents.scripted import (
        NaiveAgent,
        OracleAgent,
        call_results,
        finish_response,
        require_task,
    )
    from mcp_resili.client.plan import RunConfig, RunConfigError, RunPlan
    from mcp_resili.client.runner import RunResult, estimate_run, execute
    from mcp_resili.constants import (
        AUTH_TOKEN_ENV,
        DISCOVERY_TOOLS,
        EPISODE_HEADER,
        FINISH_TOOL,
        HANDLE_ARGUMENT,
        META_EPISODE,
        META_EVENT,
        START_TOOL,
        TRACE_METHOD,
    )
    from mcp_resili.errors import UserError
    from mcp_resili.faults.base import (
        BaseFault,
        BasePlan,
        CallContext,
        CallOutcome,
        FaultDecision,
        FaultSpecError,
        ToolOutcome,
    )
    from mcp_resili.faults.error import ErrorFault
    from mcp_resili.faults.rng import derive_rng
    from mcp_resili.faults.spec import FaultSpecParser, parse_overrides
    from mcp_resili.registry.loader import find_suite, get_suite, suite_names
    from mcp_resili.registry.suites import Suite, UnknownTaskError
    from mcp_resili.report.build import Report, load_report
    from mcp_resili.report.html import write_html
    from mcp_resili.report.section import ChartBlock, NoteBlock, ReportSection, TableBlock
    from mcp_resili.report.summary import ComponentColumn, GroupSummary, Rate, rate, rate_by_task, summarize
    from mcp_resili.report.svg import Bar, bar_chart, grouped_bar_chart, heatmap, line_chart, stacked_levels
    from mcp_resili.scoring.coping import score_episode
    from mcp_resili.scoring.model import Score
    from mcp_resili.scoring.termination import NO_STOP_RULES, StopDecision, StopRules
    from mcp_resili.store import EpisodeRow, Store
    from mcp_resili.tasks.lazy import LazyTaskList
    from mcp_resili.tasks.model import (
        ConstantBinding,
        InputBinding,
        StepBinding,
        Task,
        TaskConstraints,
        TaskSet,
        Workflow,
        WorkflowStep,
        resolve_arguments,
        resolve_binding,
    )
    from mcp_resili.tools.library import Simulator, ToolFailure, ToolLibrary, ToolState, load_specs
    from mcp_resili.tools.spec import ErrorCode, ToolSpec
    from mcp_resili.trace.model import (
        FinishEvent,
        ModelTurnEvent,
        ToolCallEvent,
        Trace,
        TraceEvent,
        TraceHeader,
    )

#: Public name -> the module that defines it (imported on first use).
_HOMES = {
    # The suite contract and its parts.
    "Suite": "mcp_resili.registry.suites",
    "UnknownTaskError": "mcp_resili.registry.suites",
    "ToolSpec": "mcp_resili.tools.spec",
    "ErrorCode": "mcp_resili.tools.spec",
    "ToolLibrary": "mcp_resili.tools.library",
    "ToolFailure": "mcp_resili.tools.library",
    "ToolState": "mcp_resili.tools.library",
    "Simulator": "mcp_resili.tools.library",
    "load_specs": "mcp_resili.tools.library",
    "Task": "mcp_resili.tasks.model",
    "TaskSet": "mcp_resili.tasks.model",
    "TaskConstraints": "mcp_resili.tasks.model",
    "Workflow": "mcp_resili.tasks.model",
    "WorkflowStep": "mcp_resili.tasks.model",
    "InputBinding": "mcp_resili.tasks.model",
    "StepBinding": "mcp_resili.tasks.model",
    "ConstantBinding": "mcp_resili.tasks.model",
    "resolve_arguments": "mcp_resili.tasks.model",
    "resolve_binding": "mcp_resili.tasks.model",
    "LazyTaskList": "mcp_resili.tasks.lazy",
    "Score": "mcp_resili.scoring.model",
    "score_episode": "mcp_resili.scoring.coping",
    "StopRules": "mcp_resili.scoring.termination",
    "StopDecision": "mcp_resili.scoring.termination",
    "NO_STOP_RULES": "mcp_resili.scoring.termination",
    "Trace": "mcp_resili.trace.model",
    "TraceHeader": "mcp_resili.trace.model",
    "TraceEvent": "mcp_resili.trace.model",
    "ToolCallEvent": "mcp_resili.trace.model",
    "FinishEvent": "mcp_resili.trace.model",
    "ModelTurnEvent": "mcp_resili.trace.model",
    "ReportSection": "mcp_resili.report.section",
    "TableBlock": "mcp_resili.report.section",
    "ChartBlock": "mcp_resili.report.section",
    "NoteBlock": "mcp_resili.report.section",
    "ComponentColumn": "mcp_resili.report.summary",
    "rate": "mcp_resili.report.summary",
    "rate_by_task": "mcp_resili.report.summary",
    "Bar": "mcp_resili.report.svg",
    "bar_chart": "mcp_resili.report.svg",
    "grouped_bar_chart": "mcp_resili.report.svg",
    "line_chart": "mcp_resili.report.svg",
    "heatmap": "mcp_resili.report.svg",
    "stacked_levels": "mcp_resili.report.svg",
    "EpisodeRow": "mcp_resili.store",
    # Fault-plan hooks: a suite's own faults and plans.
    "BaseFault": "mcp_resili.faults.base",
    "BasePlan": "mcp_resili.faults.base",
    "CallContext": "mcp_resili.faults.base",
    "CallOutcome": "mcp_resili.faults.base",
    "FaultDecision": "mcp_resili.faults.base",
    "FaultSpecError": "mcp_resili.faults.base",
    "ToolOutcome": "mcp_resili.faults.base",
    "ErrorFault": "mcp_resili.faults.error",
    "FaultSpecParser": "mcp_resili.faults.spec",
    "parse_overrides": "mcp_resili.faults.spec",
    "derive_rng": "mcp_resili.faults.rng",
    # Agents: the one model interface, and the helpers scripted agents are written with.
    "Model": "mcp_resili.agents.model",
    "ModelRequest": "mcp_resili.agents.model",
    "ModelResponse": "mcp_resili.agents.model",
    "ToolCall": "mcp_resili.agents.model",
    "ToolResult": "mcp_resili.agents.model",
    "ToolDefinition": "mcp_resili.agents.model",
    "UserMessage": "mcp_resili.agents.model",
    "AssistantMessage": "mcp_resili.agents.model",
    "ToolResultsMessage": "mcp_resili.agents.model",
    "OracleAgent": "mcp_resili.agents.scripted",
    "NaiveAgent": "mcp_resili.agents.scripted",
    "call_results": "mcp_resili.agents.scripted",
    "finish_response": "mcp_resili.agents.scripted",
    "require_task": "mcp_resili.agents.scripted",
    # The run API.
    "RunConfig": "mcp_resili.client.plan",
    "RunConfigError": "mcp_resili.client.plan",
    "RunPlan": "mcp_resili.client.plan",
    "RunResult": "mcp_resili.client.runner",
    "execute": "mcp_resili.client.runner",
    "estimate_run": "mcp_resili.client.runner",
    "get_suite": "mcp_resili.registry.loader",
    "find_suite": "mcp_resili.registry.loader",
    "suite_names": "mcp_resili.registry.loader",
    # Stored results and reports.
    "Store": "mcp_resili.store",
    "summarize": "mcp_resili.report.summary",
    "GroupSummary": "mcp_resili.report.summary",
    "Rate": "mcp_resili.report.summary",
    "Report": "mcp_resili.report.build",
    "load_report": "mcp_resili.report.build",
    "write_html": "mcp_resili.report.html",
    # Names on the wire, and errors.
    "UserError": "mcp_resili.errors",
    "FINISH_TOOL": "mcp_resili.constants",
    "DISCOVERY_TOOLS": "mcp_resili.constants",
    "META_EPISODE": "mcp_resili.constants",
    "EPISODE_HEADER": "mcp_resili.constants",
    "META_EVENT": "mcp_resili.constants",
    "TRACE_METHOD": "mcp_resili.constants",
    "AUTH_TOKEN_ENV": "mcp_resili.constants",
    "START_TOOL": "mcp_resili.constants",
    "HANDLE_ARGUMENT": "mcp_resili.constants",
}

#: Every public name (kept literal for type checkers and linters; `_HOMES` says where each lives).
__all__ = [
    "AUTH_TOKEN_ENV",
    "DISCOVERY_TOOLS",
    "EPISODE_HEADER",
    "FINISH_TOOL",
    "HANDLE_ARGUMENT",
    "META_EPISODE",
    "META_EVENT",
    "NO_STOP_RULES",
    "START_TOOL",
    "TRACE_METHOD",
    "AssistantMessage",
    "Bar",
    "BaseFault",
    "BasePlan",
    "CallContext",
    "CallOutcome",
    "ChartBlock",
    "ComponentColumn",
    "ConstantBinding",
    "EpisodeRow",
    "ErrorCode",
    "ErrorFault",
    "FaultDecision",
    "FaultSpecError",
    "FaultSpecParser",
    "FinishEvent",
    "GroupSummary",
    "InputBinding",
    "LazyTaskList",
    "Model",
    "ModelRequest",
    "ModelResponse",
    "ModelTurnEvent",
    "NaiveAgent",
    "NoteBlock",
    "OracleAgent",
    "Rate",
    "Report",
    "ReportSection",
    "RunConfig",
    "RunConfigError",
    "RunPlan",
    "RunResult",
    "Score",
    "Simulator",
    "StepBinding",
    "StopDecision",
    "StopRules",
    "Store",
    "Suite",
    "TableBlock",
    "Task",
    "TaskConstraints",
    "TaskSet",
    "ToolCall",
    "ToolCallEvent",
    "ToolDefinition",
    "ToolFailure",
    "ToolLibrary",
    "ToolOutcome",
    "ToolResult",
    "ToolResultsMessage",
    "ToolSpec",
    "ToolState",
    "Trace",
    "TraceEvent",
    "TraceHeader",
    "UnknownTaskError",
    "UserError",
    "UserMessage",
    "Workflow",
    "WorkflowStep",
    "__version__",
    "bar_chart",
    "call_results",
    "derive_rng",
    "estimate_run",
    "execute",
    "find_suite",
    "finish_response",
    "get_suite",
    "grouped_bar_chart",
    "heatmap",
    "line_chart",
    "load_report",
    "load_specs",
    "parse_overrides",
    "rate",
    "rate_by_task",
    "require_task",
    "resolve_arguments",
    "resolve_binding",
    "score_episode",
    "stacked_levels",
    "suite_names",
    "summarize",
    "write_html",
]


__getattr__, __dir__ = lazy_exports(__name__, _HOMES, globals())
