"""Every environment variable the project reads, declared once: its name, what it does, its default.

The environment only overrides: each variable has a default here that holds when it is unset (or set to
the empty string), and nothing else in the project reads `os.environ` for a `COEVOLVE_*` name; it
calls `environment()` and reads the field, or `setting(field)` for one (what a model call reads).
Values stay text here; the module that uses one parses it and owns the error message that names the
variable when it is malformed (a bad `COEVOLVE_RETRY` must not stop a command that never retries).
Variables the project *sets* for the processes it starts (the store path for Ray actors, the log
settings) are set through `export()`, by their field names.

`tests/test_settings.py` checks that every `COEVOLVE_*` name in the code is a field here and that
`docs/ARCHITECTURE.md` lists each one.
"""

from __future__ import annotations

import os

from pydantic import BaseModel, ConfigDict, Field

PREFIX = "COEVOLVE_"


class Environment(BaseModel):
    """The `COEVOLVE_*` variables: field `store` is `COEVOLVE_STORE`, and so on."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    store: str = Field(".coevolve", description="the store directory of the run, as the Ray actors, the Serve "
                       "app and the synthetic provider see it (set for them by the jobs)")
    serve_url: str = Field("", description="the OpenAI-compatible URL of the served weak model (`vllm/*` "
                           "routes); unset: the one `coevolve serve` recorded in the store")
    secrets_file: str = Field("", description="KEY=VALUE file of provider keys, loaded without overriding "
                              "the environment (unset: ~/.config/coevolve/secrets.env)")
    worker_secrets: str = Field("", description="the key under which a job put the settings that may hold a "
                                "secret in the Ray cluster's key-value store; its actors load them at start instead "
                                "of getting them in their runtime_env (set for the actors by the jobs)")
    retry: str = Field("", description='the gateway\'s retry policy, e.g. "attempts=8,backoff_s=0.05" '
                       "(unset: 4 attempts)")
    constrained_models: str = Field("", description="comma-separated litellm models that take a json_schema "
                                    "response_format, beside the synthetic, vllm and hosted_vllm providers")
    context_windows: str = Field("", description='role models\' context windows, "model=tokens" items, '
                                 "comma-separated; `*` matches every model not named")
    tokenizers: str = Field("", description='"model=/path/to/hf-folder" items: count that model\'s prompts '
                            "with the folder's tokenizer and chat template")
    tool_threads: str = Field("", description="threads that run blocking tool calls in one executor "
                              "(unset: 32)")
    actor_ready_timeout_s: str = Field("", description="seconds a pool waits for its Ray actors to start "
                                       "(unset: 180)")
    faults: str = Field("", description='injected endpoint faults of the synthetic provider, e.g. '
                        '"all=0.2,seed=7" or "latency=0.05,timeout=0.02,429=0.03" (unset: none)')
    fault_log: str = Field("", description="folder where injected faults are logged, one file per process")
    synthetic_latency_ms: str = Field("", description="simulated latency of each synthetic model reply, in "
                                      "milliseconds (unset: 0)")
    log_level: str = Field("", description="log level of every process (unset: warning; set for the actors "
                           "by the CLI)")
    log_json: str = Field("", description='"1": logs as JSON lines (set for the actors by --log-json)')
    sandbox_weak: str = Field("", description='"1": allow the weaker sandbox without user namespaces '
                              "(containers that forbid them); never for graders")
    sandbox_per_run: str = Field("", description='"1": a fresh bubblewrap sandbox per run instead of the '
                                 "shared fork server")
    browser_backend: str = Field("", description='the browser family\'s backend: "text" (default) or '
                                 '"chromium" (Playwright)')
    chromium: str = Field("", description="path of the Chromium binary for the Playwright backend (unset: "
                          "/usr/bin/chromium, then PATH)")
    tau2_user_model: str = Field("", description="litellm model of tau2's LLM customer (unset: the scripted "
                                 "customer, which is not comparable with tau2)")
    engine_niceness: str = Field("", description="niceness of a Serve replica's engine process (set for the "
                                 "replica from its model's `niceness` by `coevolve serve`; unset: Ray's worker "
                                 "niceness)")
    tau2_user_args: str = Field("", description="JSON object of litellm arguments for that customer, e.g. "
                                '{"api_base": "..."}')


# Settings whose value may carry a key (litellm arguments, a URL with credentials): never in a Ray
# runtime_env, which Ray writes to its logs; a job hands them to its actors through `worker_secrets`.
SECRET_BEARING = ("serve_url", "tau2_user_args")


def variable(field: str) -> str:
    """The environment variable of a field: `store` -> `COEVOLVE_STORE`."""
    if field not in Environment.model_fields:
        raise KeyError(f"{field!r} is not a setting (settings: {', '.join(Environment.model_fields)})")
    return PREFIX + field.upper()


def environment() -> Environment:
    """The settings as the environment has them now (read on every call: tests and jobs change it)."""
    values = {}
    for name in Environment.model_fields:
        raw = os.environ.get(PREFIX + name.upper(), "")
        if raw:
            values[name] = raw
    return Environment(**values)


def setting(field: str) -> str:
    """One setting as the environment has it now: `environment().<field>` without reading the others."""
    return os.environ.get(variable(field), "") or Environment.model_fields[field].default


def export(**fields: str) -> None:
    """Set settings (by field name) in this process's environment, which the processes it starts inherit."""
    os.environ.update({variable(k): str(v) for k, v in fields.items()})
