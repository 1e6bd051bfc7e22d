"""The only place that starts or attaches to Ray (docs/ARCHITECTURE.md §2).

Ray is closed by default (deploy/SECURITY.md):

- token authentication stays on (Ray 2.60's default, `RAY_AUTH_MODE=token`): every gRPC server and the
  dashboard agent's HTTP API refuse a request without the cluster's token. An embedded Ray uses the
  user's `~/.ray/auth_token` (written on first start, owner-only); its workers, Serve replicas and a CLI
  attaching on this machine find it there (or in `RAY_AUTH_TOKEN` / `RAY_AUTH_TOKEN_PATH`). Attaching to
  a remote cluster needs that cluster's token the same way; Ray does not turn token mode on by itself
  for an explicit address, so we do, and say what is missing when no token is found.
- an embedded Ray is a single-node Ray bound to loopback: its node address is 127.0.0.1, so GCS, raylet,
  object manager, dashboard agent (job API, metrics) and runtime-env agent listen on 127.0.0.1 only.
  Ray rewrites `_node_ip_address="127.0.0.1"` to the machine's address unless clustering is off
  (`RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`, read when `ray` is imported), hence `_loopback_only()`. What
  still binds a wildcard address is Ray Serve's per-replica gRPC server, which carries the token check.
- no dashboard (`include_dashboard=False`).
- `RAY_AUTH_MODE=disabled` in the environment is respected (a test that needs it sets it itself), with
  a warning.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path

import structlog

from coevolve.errors import BadInput

log = structlog.get_logger(role="cluster")

LOOPBACK = "127.0.0.1"
AUTH_MODE_ENV = "RAY_AUTH_MODE"
SINGLE_NODE_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"  # "0": Ray resolves this node's address to loopback

_DEFAULT_ENV = {
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_DEDUP_LOGS": "0",
}


# Ray's message when a new node's raylet does not register within its fixed 30 s (a loaded machine):
# the start is tried once more.
STARTUP_TIMEOUT = "timed out during startup"


def start_ray(address: str | None = None, num_cpus: int | None = None, log_to_driver: bool = True) -> None:
    """Start an embedded local Ray (address None) or attach to a running cluster."""
    import ray

    if ray.is_initialized():
        return
    from coevolve.services.serving.app import apply_serve_env_defaults

    for k, v in _DEFAULT_ENV.items():
        os.environ.setdefault(k, v)
    apply_serve_env_defaults()  # Serve's timeouts are read from the environment its processes inherit
    _token_auth(address)
    check_reachable(address)  # Ray's own connect retries for minutes (GCS) or ~40 s (Ray Client)
    local = address is None or is_loopback(address)  # this machine's own Ray (e.g. coevolve run's head)
    if local:
        _loopback_only()
    project_root = str(Path(__file__).resolve().parents[2])
    # Never the token nor any key: runtime_env is recorded in the GCS and shown by Ray's tools.
    env_vars = {k: os.environ[k] for k in _DEFAULT_ENV if k in os.environ}
    runtime_env = {"env_vars": env_vars}
    if not local:
        # Workers on a remote cluster may not have the project installed: ship the code.
        runtime_env["working_dir"] = project_root
        runtime_env["excludes"] = [".venv", ".git", ".coevolve", "*.safetensors", ".env", "*.env"]  # no secrets files
    init = {
        # "local": a new embedded node, never a cluster found in /tmp/ray/ray_current_cluster (a
        # `coevolve run` head, or a dead one that would hang the connect)
        "address": address or "local",
        "num_cpus": num_cpus if address is None else None,
        "include_dashboard": False,
        "_node_ip_address": LOOPBACK if address is None else None,
        "log_to_driver": log_to_driver,  # False: worker output stays in Ray's log files
        "runtime_env": runtime_env,
        "logging_level": "WARNING",
    }
    try:
        ray.init(**init)
    except Exception as e:  # Ray raises a bare Exception for it
        if address is not None or STARTUP_TIMEOUT not in str(e):
            raise
        log.warning("ray start timed out; starting it again", error=str(e))
        ray.shutdown()
        ray.init(**init)
    if address is None:
        _check_loopback()
    log.info("ray started" if address is None else "ray attached", address=address or "local")


def is_loopback(address: str) -> bool:
    """An address of this machine's loopback (`127.0.0.1:PORT`, `localhost:PORT`)."""
    host = address.removeprefix("ray://").rsplit(":", 1)[0].strip("[]")
    return host in (LOOPBACK, "localhost", "::1")


REACH_TIMEOUT_S = 3.0  # how long an attach may take to open a TCP connection before it is refused
RAY_CLIENT_PORT, GCS_PORT = 10001, 6379  # Ray's defaults when an address names no port


class RayUnreachableError(BadInput):
    """The address names no listener that answers within `REACH_TIMEOUT_S` (one line for the CLI)."""


def check_reachable(address: str | None, timeout_s: float = REACH_TIMEOUT_S) -> None:
    """Before anything runs: an explicit address (`HOST:PORT`, `ray://HOST:PORT`) must accept a TCP
    connection within `timeout_s`, else RayUnreachableError names the address. None, `local` and `auto`
    (Ray finds the cluster itself) are not probed. Only a connection is opened and closed: nothing is
    sent, so no token or data leaves this process."""
    import socket

    if address is None or address in ("local", "auto"):
        return
    rest = address.removeprefix("ray://")
    if "://" in rest:  # another scheme (a cluster launcher's): Ray resolves it, nothing to probe here
        return
    default_port = RAY_CLIENT_PORT if rest != address else GCS_PORT
    host, sep, port_text = rest.rpartition(":")
    if not sep or "]" in port_text:  # no port (an IPv6 literal's colons are inside brackets)
        host, port_text = rest, str(default_port)
    host = host.strip("[]")
    if not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise RayUnreachableError(f"--address {address!r} is not HOST:PORT, ray://HOST:PORT or auto")
    try:
        with socket.create_connection((host, int(port_text)), timeout=timeout_s):
            pass
    except TimeoutError:
        raise RayUnreachableError(
            f"cannot reach Ray at {address}: no answer within {timeout_s:g} s (is the cluster up, and the address right?)"
        ) from None
    except OSError as e:
        why = e.strerror or type(e).__name__
        raise RayUnreachableError(f"cannot reach Ray at {address}: {why} (is the cluster up, and the address right?)") from None


class RayAuthError(BadInput):
    """Token authentication is on but this process has no token for the cluster (one line for the CLI)."""


def token_path() -> Path:
    """Where Ray looks for the token after `$RAY_AUTH_TOKEN`: `$RAY_AUTH_TOKEN_PATH`, else ~/.ray/auth_token."""
    return Path(os.environ.get("RAY_AUTH_TOKEN_PATH") or Path.home() / ".ray" / "auth_token").expanduser()


def _token_available() -> bool:
    if os.environ.get("RAY_AUTH_TOKEN", "").strip():
        return True
    try:
        return bool(token_path().read_text().strip())
    except OSError:
        return False


def _ensure_local_token() -> None:
    """An embedded Ray's token: ~/.ray/auth_token, created owner-only (Ray's own would be 0644), and
    tightened to 0600 if this user's existing one is readable by others."""
    path = token_path()
    if os.environ.get("RAY_AUTH_TOKEN", "").strip():
        return
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        st = path.stat()
        if st.st_uid == os.getuid() and st.st_mode & 0o077:
            path.chmod(0o600)
            log.info("ray token file made owner-only", path=str(path))
        return
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_hex(32))
    log.info("ray token written", path=str(path))
    # Ray caches the token it found (or did not): make it read the new file
    with contextlib.suppress(ImportError, AttributeError):
        from ray._raylet import AuthenticationTokenLoader

        AuthenticationTokenLoader.instance().reset_cache()


def check_token(address: str | None) -> None:
    """Before anything runs: attaching needs the cluster's token (unless auth is explicitly disabled)."""
    mode = os.environ.get(AUTH_MODE_ENV)
    if address is not None and (mode is None or mode.lower() == "token") and not _token_available():
        raise RayAuthError(
            f"attaching to Ray at {address} needs the cluster's token: put it in {token_path()} or set "
            "RAY_AUTH_TOKEN_PATH (or RAY_AUTH_TOKEN); see deploy/SECURITY.md"
        )


def _token_auth(address: str | None) -> None:
    """Token mode on for this process and the Ray processes it starts, unless explicitly disabled."""
    mode = os.environ.get(AUTH_MODE_ENV)
    if mode is not None and mode.lower() != "token":
        log.warning(
            "Ray token authentication is disabled by the environment: any process that reaches Ray's ports "
            "can run code as this user",
            **{AUTH_MODE_ENV: mode},
        )
        return
    if address is None:
        _ensure_local_token()
    check_token(address)
    os.environ[AUTH_MODE_ENV] = "token"  # inherited by the raylet, hence by every worker and Serve replica
    # Ray reads the mode into its config once; re-read it (what Ray itself does when it turns auth on)
    with contextlib.suppress(ImportError, AttributeError):
        from ray._raylet import Config

        Config.initialize("")


def _loopback_only() -> None:
    """Make the embedded node's address 127.0.0.1 (see the module docstring)."""
    os.environ[SINGLE_NODE_ENV] = "0"  # Ray's Python processes read it at import
    from ray._private import ray_constants

    ray_constants.ENABLE_RAY_CLUSTER = False  # this process imported ray already


def _check_loopback() -> None:
    import ray

    ip = ray.util.get_node_ip_address()
    if ip not in (LOOPBACK, "::1", "localhost"):
        log.warning("embedded Ray is not bound to loopback: its ports are reachable from the network", node_ip=ip)


def stop_ray() -> None:
    import ray

    if ray.is_initialized():
        ray.shutdown()
