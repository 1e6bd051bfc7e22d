"""How the project talks to models, below every role: the call contract (`coevolve.llm.contract`),
constrained tool calls (`constrained`) and injected endpoint faults (`faults`)."""

from coevolve.llm.contract import (
    Complete,
    Completion,
    ContextWindowExceeded,
    DecodingUnsupported,
    ModelClient,
    ModelUnavailable,
    RetryPolicy,
)

__all__ = ["Complete", "Completion", "ContextWindowExceeded", "DecodingUnsupported", "ModelClient", "ModelUnavailable",
           "RetryPolicy"]
