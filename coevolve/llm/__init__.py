"""How the project talks to models, below every role: the call contract (`coevolve.llm.contract`),
constrained tool calls (`constrained`) and injected endpoint faults (`faults`)."""

from coevolve.llm.contract import (
    Completion,
    ContextWindowExceeded,
    DecodingUnsupported,
    ModelClient,
    ModelUnavailable,
    RetryPolicy,
)

__all__ = ["Completion", "ContextWindowExceeded", "DecodingUnsupported", "ModelClient", "ModelUnavailable",
           "RetryPolicy"]
