"""Faults as data, fault plans, the seeded RNG and the one injector that applies them.

Layout: `base` (contexts, base classes, the registries of fault and plan types, the ledger entry),
one module per generic fault or plan type (`error`, `rules`, `chaos`, `protocol`), `spec` (SPEC strings and
files), `injector`. Suite-specific types (ResiliBench's failure rule, ToolMaze's P1–P4) live in their
suite's package and register themselves the same way.
"""

from mcp_resili.faults.base import (
    BaseFault,
    BasePlan,
    CallContext,
    CallOutcome,
    Fault,
    FaultDecision,
    FaultSpecError,
    ToolOutcome,
    fault_types,
    parse_fault,
    parse_plan,
    plan_kinds,
)
from mcp_resili.faults.chaos import LAMBDA_PROFILES, ChaosFaults
from mcp_resili.faults.error import ErrorFault
from mcp_resili.faults.injector import FaultInjector
from mcp_resili.faults.protocol import (
    ALL_PROTOCOL_TYPES,
    FAMILY_OF,
    MODERN_TYPES,
    PROTOCOL_TYPES,
    ProtocolFault,
    ProtocolFaults,
    ProtocolRule,
    ProtocolState,
    has_protocol_faults,
    protocol_profile,
)
from mcp_resili.faults.rng import derive_rng
from mcp_resili.faults.rules import FaultRule, NoFaults, RuleFaults
from mcp_resili.faults.spec import (
    GENERIC_SCOPE,
    GENERIC_SPECS,
    FaultSpecParser,
    FaultSpecScope,
    load_fault_file,
    parse_fault_spec,
    parse_overrides,
)

__all__ = [
    "ALL_PROTOCOL_TYPES",
    "FAMILY_OF",
    "GENERIC_SCOPE",
    "GENERIC_SPECS",
    "LAMBDA_PROFILES",
    "MODERN_TYPES",
    "PROTOCOL_TYPES",
    "BaseFault",
    "BasePlan",
    "CallContext",
    "CallOutcome",
    "ChaosFaults",
    "ErrorFault",
    "Fault",
    "FaultDecision",
    "FaultInjector",
    "FaultRule",
    "FaultSpecError",
    "FaultSpecParser",
    "FaultSpecScope",
    "NoFaults",
    "ProtocolFault",
    "ProtocolFaults",
    "ProtocolRule",
    "ProtocolState",
    "RuleFaults",
    "ToolOutcome",
    "derive_rng",
    "fault_types",
    "has_protocol_faults",
    "load_fault_file",
    "parse_fault",
    "parse_fault_spec",
    "parse_overrides",
    "parse_plan",
    "plan_kinds",
    "protocol_profile",
]
