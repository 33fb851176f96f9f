"""Faults as data, fault plans, the seeded RNG and the one injector that applies them."""

from mcp_resili.faults.injector import CallContext, CallOutcome, FaultInjector, ToolOutcome
from mcp_resili.faults.model import (
    ErrorFault,
    Fault,
    FaultDecision,
    FaultPlan,
    FaultRule,
    NoFaults,
    ResiliBenchFaults,
    RuleFaults,
)
from mcp_resili.faults.rng import derive_rng
from mcp_resili.faults.spec import FaultSpecError, load_fault_file, parse_fault_spec, plan_to_dict

__all__ = [
    "CallContext",
    "CallOutcome",
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
    "ToolOutcome",
    "derive_rng",
    "load_fault_file",
    "parse_fault_spec",
    "plan_to_dict",
]
