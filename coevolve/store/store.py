"""The persistent, content-addressed harness store (docs/ARCHITECTURE.md §2-4).

One directory holds everything the system records:

```
<root>/store.db            sqlite (WAL): harness records, aliases, runs, trajectory batches and the
                           rollout index, events, adapters, the counterfactual cache, schema version
<root>/objects/ab/<sha256> immutable blobs named by the sha256 of their bytes (encoded values,
                           trajectory batches), written atomically (tmp file + fsync + os.replace)
<root>/quarantine/         corrupt objects moved aside by `check(repair=True)`
```

Several processes may write at once: every write is one short `BEGIN IMMEDIATE` transaction, sqlite
waits up to 30 s for the lock (`busy_timeout`) and a write that still meets `database is locked` is
retried with backoff. Blobs are content-addressed, so two processes writing the same blob write the
same bytes and either rename wins. A blob is verified on every read (`get_blob` names a corrupt one)
and before `put_blob` skips an existing file, so re-putting the same content repairs a corrupt object.

`HarnessStore` is a façade: mixins over one connection, one per seam, each in its own module and
standing only on the parts it uses (no module imports this one):

- `db.Database`: opening, the schema and its migrations, retried transactions, consistent reads;
- `blobs.Blobs`: the objects and the values encoded in them;
- `harnesses.Harnesses`: harness records, lineage and aliases;
- `runs.Runs`: runs, the `Lease` one process holds on a run, owner liveness;
- `trajectories.Trajectories`: trajectory batches and the rollout index (spend journal, rollout cache);
- `events.Events`: the event journal;
- `adapters.Adapters`: adapter records and the counterfactual cache;
- `fsck.Checks`: `check()`, which verifies every record and object and finds runs whose owner died.

Mixins rather than components the façade delegates to: every part shares the one connection, its lock
and its read-only state, callers (and the tests' subclasses) see the one class they always did, and no
forwarding methods have to be kept in step. The names callers import from here are re-exported.

A directory without store.db opens as a new store when it is empty or holds only the project's own
subfolders (`STORE_SUBFOLDERS`: models/, adapters/, datasets/, train_runs/), so that
`coevolve models make-tiny .coevolve/models/tiny` before the first store command works; anything else
in it is refused (it is somebody else's folder).

A store whose directory (or store.db, or objects/) is not writable opens read-only: reads work and the
first write raises `StoreError`.

Nothing here imports ray.
"""

from __future__ import annotations

from coevolve.store.adapters import Adapters
from coevolve.store.db import SCHEMA_VERSION, StoreError, _sqlite_errors, is_fresh_store_dir
from coevolve.store.events import Event, Events
from coevolve.store.fsck import PROBLEM_KINDS, CheckReport, Checks
from coevolve.store.harnesses import Harnesses, HarnessRecord
from coevolve.store.runs import Lease, RunRecord
from coevolve.store.trajectories import Trajectories, rollout_key, trajectory_key

__all__ = [
    "PROBLEM_KINDS",
    "SCHEMA_VERSION",
    "CheckReport",
    "Event",
    "HarnessRecord",
    "HarnessStore",
    "Lease",
    "RunRecord",
    "StoreError",
    "_sqlite_errors",  # tests raise sqlite errors through it as the store does
    "is_fresh_store_dir",
    "rollout_key",
    "trajectory_key",
]


class HarnessStore(Harnesses, Trajectories, Events, Adapters, Checks):
    """A directory of harness versions, runs, trajectories, events and adapters (module docstring)."""

    def __repr__(self) -> str:
        return f"HarnessStore({str(self.root)!r})"
