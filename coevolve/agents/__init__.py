"""The roles as pure logic, without Ray (docs/ARCHITECTURE.md §4): the rollout loop (`executor`) with
context policies (`context`) and hooks (`hooks`); the judge (`judge`), the expert rewriter (`expert`)
and their prompts fitted to the model's window (`fit`); the correction and imitation datasets
(`correction`) over a `Backend` (`backend`; in-process: `local`); harness evolution and co-evolution
(`meta`). Import the modules: this face imports nothing, so `import coevolve.agents.fit` stays light."""
