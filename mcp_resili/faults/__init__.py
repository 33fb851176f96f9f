"""Faults as data, fault plans, the seeded RNG and the one injector that applies them.

Layout: `base` (contexts and base classes), one module per fault or plan type (`error`,
`resilibench`, `rules`, `chaos`), the unions in `model` (faults) and `plans` (plans), `spec` (SPEC strings
and files), `injector`.
"""

from mcp_resili.faults.base import BaseFault, BasePlan, CallContext, CallOutcome, ToolOutcome
from mcp_resili.faults.chaos import LAMBDA_PROFILES, ChaosFaults
from mcp_resili.faults.corrupt import CorruptFault
from mcp_resili.faults.error import ErrorFault
from mcp_resili.faults.injector import FaultInjector
from mcp_resili.faults.model import Fault, FaultDecision
from mcp_resili.faults.plans import FaultPlan
from mcp_resili.faults.resilibench import ResiliBenchFaults
from mcp_resili.faults.rng import derive_rng
from mcp_resili.faults.rules import FaultRule, NoFaults, RuleFaults
from mcp_resili.faults.spec import FaultSpecError, load_fault_file, parse_fault_spec, plan_to_dict
from mcp_resili.faults.toolmaze import ToolMazeFaults

__all__ = [
    "LAMBDA_PROFILES",
    "BaseFault",
    "BasePlan",
    "CallContext",
    "CallOutcome",
    "ChaosFaults",
    "CorruptFault",
    "ErrorFault",
    "Fault",
    "FaultDecision",
    "FaultInjector",
    "FaultPlan",
    "FaultRule",
    "FaultSpecError",
    "NoFaults",
    "ResiliBenchFaults",
    "RuleFaults",
    "ToolMazeFaults",
    "ToolOutcome",
    "derive_rng",
    "load_fault_file",
    "parse_fault_spec",
    "plan_to_dict",
]
