"""coevolve: co-evolve an LLM agent's harness and its weights on a Ray cluster.

The subpackages stand on floors (docs/ARCHITECTURE.md §2), lowest first: `values`, `codec`, `text`,
`settings`; `llm`, `edits`; `store`; `sandbox`; `tasks`; `analysis`; `agents`; `config`; `testbed`;
`services`; `cluster`; `jobs`; `cli`. Importing this package imports none of them.
"""

__version__ = "0.1.0"
