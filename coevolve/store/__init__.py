"""The persistent, content-addressed harness store and the training datasets kept in it (docs/ARCHITECTURE.md §2-3).

`HarnessStore` (coevolve.store.store) is the one class callers use; its parts live in the modules
beside it. Imports only the standard library and the project's values and codec, never ray or a model
backend.
"""
