"""The offline testbed (docs/ARCHITECTURE.md §5): synthetic models that react to the harness
mechanically. `respond` answers any prompt of a `synthetic/<model>`: the agent policies (`policy`), the
judge and expert (`roles`), the proposer (`meta`); `provider` serves them to litellm; `counterfactual`
computes the answer key that only analysis reads. Their numbers test the machinery, never a real model."""
