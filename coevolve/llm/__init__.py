"""How the project talks to models, below every role: the call contract (`coevolve.llm.contract`),
constrained tool calls (`constrained`) and injected endpoint faults (`faults`)."""
