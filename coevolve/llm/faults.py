"""Injected endpoint faults: which, how often, and — deterministically — when.

Both fault injectors use this: the synthetic provider (`coevolve.testbed.provider`, in process) and
the fault proxy (`coevolve.services.fault_proxy`, in front of any OpenAI-compatible server). Configuration is one
environment variable (or the proxy's `--faults`):

    COEVOLVE_FAULTS="latency=0.05,timeout=0.02,429=0.03,5xx=0.03,malformed=0.02,truncated=0.02,reset=0.02,seed=7"

Rates are per model call; `all=0.2` spreads 20% evenly over the seven kinds. Other keys: `seed` (0),
`latency_ms` (the spike, 1000), `timeout_ms` (how long a timeout fault holds the call before the
caller's own timeout or the injector gives up, 2000).

Whether a call is faulted is a pure function of (seed, the request's content, the attempt number):
two runs with the same seed see the same faults, and a retry (the next attempt) draws afresh. The
model gateway numbers its attempts in the `X-Coevolve-Attempt` header; a client that does not is
numbered by the injector, per process, by how often it has seen the same request.

Kinds, and what the caller sees (all of them transport faults, which the gateway retries as infra):
`latency` a slow but correct answer; `timeout` no answer in time; `429` rate limited; `5xx` a server
error; `malformed` a 200 whose body is not JSON; `truncated` a 200 whose body is cut inside the tool
calls; `reset` the connection reset before any answer.

`COEVOLVE_FAULT_LOG=<dir>` makes every injector append one line per injected fault (kind, attempt,
request digest; never content) to `<dir>/faults-<pid>.jsonl`; `count_faults(dir)` sums them.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from coevolve.errors import BadInput
from coevolve.settings import environment, setting

KINDS = ("latency", "timeout", "429", "5xx", "malformed", "truncated", "reset")
ATTEMPT_HEADER = "X-Coevolve-Attempt"


class FaultSpecError(BadInput):
    """A fault specification that does not parse: one line naming the bad item."""


@dataclass(frozen=True)
class FaultSpec:
    rates: Mapping[str, float] = field(default_factory=dict)
    seed: int = 0
    latency_s: float = 1.0
    timeout_s: float = 2.0

    @property
    def total(self) -> float:
        return sum(self.rates.values())

    @classmethod
    def parse(cls, text: str) -> FaultSpec:
        rates: dict[str, float] = {}
        opts: dict[str, Any] = {}
        for item in (x.strip() for x in text.split(",")):
            if not item:
                continue
            key, sep, raw = item.partition("=")
            key = key.strip().lower()
            if not sep:
                raise FaultSpecError(f"fault spec item {item!r} is not key=value")
            try:
                value = float(raw)
            except ValueError:
                raise FaultSpecError(f"fault spec item {item!r}: {raw!r} is not a number") from None
            if key == "seed":
                if not value.is_integer():
                    raise FaultSpecError(f"fault seed must be an integer, got {raw!r}")
                opts["seed"] = int(value)
            elif key in ("latency_ms", "timeout_ms"):
                if not 0 <= value <= 600_000:
                    raise FaultSpecError(f"{key} must be in 0..600000, got {raw!r}")
                opts[key.replace("_ms", "_s")] = value / 1000
            elif key == "all" or key in KINDS:
                if not 0 <= value <= 1:
                    raise FaultSpecError(f"fault rate {key}={raw} is outside 0..1")
                for k in KINDS if key == "all" else (key,):
                    rates[k] = rates.get(k, 0.0) + (value / len(KINDS) if key == "all" else value)
            else:
                raise FaultSpecError(f"unknown fault kind {key!r} (kinds: {', '.join(KINDS)}, all; options: seed, latency_ms, timeout_ms)")
        spec = cls({k: rates[k] for k in KINDS if rates.get(k)}, **opts)
        if spec.total > 1 + 1e-9:
            raise FaultSpecError(f"fault rates add up to {spec.total:.3f}, over 1")
        return spec

    def pick(self, key: str, attempt: int) -> str | None:
        """The fault for this request at this attempt, or None: a pure function of (seed, key, attempt)."""
        if not self.rates:
            return None
        digest = hashlib.sha256(f"{self.seed}|{attempt}|{key}".encode()).digest()
        u = int.from_bytes(digest[:8], "big") / 2**64
        acc = 0.0
        for kind in KINDS:
            acc += self.rates.get(kind, 0.0)
            if u < acc:
                return kind
        return None

    def describe(self) -> str:
        rates = ",".join(f"{k}={v:g}" for k, v in self.rates.items())
        return f"{rates},seed={self.seed},latency_ms={self.latency_s * 1000:g},timeout_ms={self.timeout_s * 1000:g}"


_cached: tuple[str, FaultSpec | None] | None = None


def spec_from_env() -> FaultSpec | None:
    """The spec in $COEVOLVE_FAULTS (None when unset or empty); parsed once per value."""
    global _cached
    text = setting("faults").strip()
    if _cached is None or _cached[0] != text:
        _cached = (text, FaultSpec.parse(text) if text else None)
    return _cached[1]


def request_key(payload: Any) -> str:
    """Digest of a request's content (canonical JSON)."""
    body = json.dumps(payload, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(body.encode()).hexdigest()


def attempt_from(headers: Mapping[str, Any] | None) -> int | None:
    for k, v in (headers or {}).items():
        if str(k).lower() == ATTEMPT_HEADER.lower():
            try:
                return max(0, int(v))
            except (TypeError, ValueError):
                return None
    return None


class AttemptCounter:
    """For callers that do not number their attempts: the n-th sighting of a request is attempt n."""

    def __init__(self, capacity: int = 100_000) -> None:
        self.capacity = capacity
        self._seen: OrderedDict[str, int] = OrderedDict()
        self._lock = threading.Lock()

    def next(self, key: str) -> int:
        with self._lock:
            n = self._seen.pop(key, -1) + 1
            self._seen[key] = n
            if len(self._seen) > self.capacity:
                self._seen.popitem(last=False)
            return n


def truncate_body(body: bytes) -> bytes:
    """A response body cut inside its tool calls (or in the middle when it has none)."""
    at = body.find(b'"tool_calls"')
    if at < 0:
        return body[: max(1, len(body) // 2)]
    return body[: at + max(14, (len(body) - at) // 2)]


def record(kind: str, key: str, attempt: int, where: str) -> None:
    """Append one injected fault to the fault log, if one is configured (no content, only a digest)."""
    folder = environment().fault_log
    if not folder:
        return
    line = json.dumps({"kind": kind, "attempt": attempt, "request": key[:16], "where": where, "t": round(time.time(), 3)})
    with contextlib.suppress(OSError):  # the log is for counting; it must never break a call
        Path(folder).mkdir(parents=True, exist_ok=True)
        with open(Path(folder) / f"faults-{os.getpid()}.jsonl", "a") as f:
            f.write(line + "\n")


def count_faults(folder: str | Path) -> Counter[str]:
    """Injected faults by kind, summed over every process's log in `folder`."""
    out: Counter[str] = Counter()
    for p in Path(folder).glob("faults-*.jsonl"):
        for line in p.read_text().splitlines():
            try:
                out[json.loads(line)["kind"]] += 1
            except (ValueError, KeyError, TypeError):
                continue
    return out
