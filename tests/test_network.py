"""Ray is closed by default (coevolve/cluster/runtime.py, deploy/SECURITY.md).

The embedded Ray of the test session plus a Serve app: every listening socket of its processes (the
driver, every process started with the session's directory, and all their descendants) is on loopback,
except Ray's own gRPC servers, and each of those refuses a request without the cluster's token, also
when reached through the machine's own address. The dashboard agent's job API (loopback) refuses an
unauthenticated job submission, and nothing it was asked to run ran.
"""

from __future__ import annotations

import ipaddress
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

grpc = pytest.importorskip("grpc")
psutil = pytest.importorskip("psutil")

# Methods of Ray's gRPC services that take an empty request: without the token interceptor they would
# answer (an empty protobuf is a valid request), so UNAUTHENTICATED proves the token check.
PROBES = (
    "/ray.serve.ASGIService/HandleRequest",
    "/ray.rpc.NodeInfoGcsService/GetAllNodeInfo",
    "/ray.rpc.NodeManagerService/GetNodeStats",
    "/ray.rpc.CoreWorkerService/GetCoreWorkerStats",
)


@dataclass(frozen=True)
class Listener:
    ip: str
    port: int
    pid: int
    name: str

    @property
    def loopback(self) -> bool:
        addr = ipaddress.ip_address(self.ip.split("%")[0])
        mapped = getattr(addr, "ipv4_mapped", None)
        return addr.is_loopback or bool(mapped and mapped.is_loopback)


def _session_pids() -> set[int]:
    import ray

    session = ray._private.worker._global_node.get_session_dir_path()
    roots = {os.getpid()}
    for p in psutil.process_iter(["cmdline"]):
        try:
            if session in " ".join(p.info["cmdline"] or ()):
                roots.add(p.pid)
        except (psutil.Error, TypeError):
            continue
    pids = set(roots)
    for pid in roots:
        try:
            pids.update(c.pid for c in psutil.Process(pid).children(recursive=True))
        except psutil.Error:
            continue
    return pids


def _listeners(pids: set[int]) -> list[Listener]:
    out = []
    for pid in pids:
        try:
            proc = psutil.Process(pid)
            conns = proc.net_connections(kind="inet")
            name = proc.name()
        except psutil.Error:
            continue
        out += [Listener(c.laddr.ip, c.laddr.port, pid, name) for c in conns if c.status == psutil.CONN_LISTEN]
    return sorted(out, key=lambda x: (x.name, x.port))


def _machine_address() -> str | None:
    for addrs in psutil.net_if_addrs().values():
        for a in addrs:
            if a.family.name == "AF_INET" and not ipaddress.ip_address(a.address).is_loopback:
                return a.address
    return None


def _token() -> str:
    from coevolve.cluster.runtime import token_path

    return os.environ.get("RAY_AUTH_TOKEN") or token_path().read_text().strip()


def _grpc_codes(host: str, port: int, token: str | None) -> dict[str, grpc.StatusCode]:
    """Status of each probe method on host:port (OK when it answered)."""
    target = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    metadata = (("authorization", f"Bearer {token}"),) if token else None
    codes = {}
    with grpc.insecure_channel(target) as channel:
        for method in PROBES:
            call = channel.unary_unary(method, request_serializer=None, response_deserializer=None)
            try:
                call(b"", timeout=10, metadata=metadata)
                codes[method] = grpc.StatusCode.OK
            except grpc.RpcError as e:
                codes[method] = e.code()
    return codes


def _refuses_without_token(host: str, port: int) -> tuple[bool, dict[str, str]]:
    """A gRPC server that answers UNAUTHENTICATED to some Ray method without the token, answers no
    method without it, and lets the same method past the check with the token."""
    without = _grpc_codes(host, port, None)
    refused = [m for m, c in without.items() if c == grpc.StatusCode.UNAUTHENTICATED]
    answered = [m for m, c in without.items() if c == grpc.StatusCode.OK]
    with_token = _grpc_codes(host, port, _token())
    passed_check = [m for m in refused if with_token[m] != grpc.StatusCode.UNAUTHENTICATED]
    ok = bool(refused) and not answered and bool(passed_check)
    return ok, {m: c.name for m, c in without.items()}


@pytest.fixture()
def serve_app(ray_session):
    from ray import serve

    from coevolve.services.serving.app import _free_port

    port = _free_port("127.0.0.1")
    serve.start(http_options={"host": "127.0.0.1", "port": port})

    @serve.deployment(ray_actor_options={"num_cpus": 0})
    def hello(request) -> str:
        return "hello"

    name = f"net-{uuid.uuid4().hex[:6]}"
    serve.run(hello.bind(), name=name, route_prefix=f"/{name}")
    from ray.serve.context import _get_global_client

    http = _get_global_client().http_config
    url = f"http://127.0.0.1:{http.port}/{name}"
    assert urllib.request.urlopen(url, timeout=30).read() == b"hello"
    yield url
    serve.delete(name)
    if not serve.status().applications:
        serve.shutdown()


def test_embedded_ray_and_serve_listen_on_loopback_or_refuse_without_the_token(serve_app):
    import ray

    assert ray.util.get_node_ip_address() == "127.0.0.1"
    from ray._private.authentication.authentication_utils import is_token_auth_enabled

    assert is_token_auth_enabled() and _token()
    listeners = _listeners(_session_pids())
    names = {x.name for x in listeners}
    assert any("ServeReplica" in n for n in names) and any("raylet" in n for n in names), names
    outside = [x for x in listeners if not x.loopback]
    report = {"listeners": len(listeners), "non_loopback": []}
    machine = _machine_address()
    for x in outside:
        # Only Ray's own gRPC servers may listen beyond loopback, and each must refuse a stranger.
        assert x.name.startswith(("ray::", "raylet", "gcs_server")), f"{x} listens beyond loopback"
        ok, codes = _refuses_without_token("127.0.0.1" if x.ip in ("0.0.0.0", "::") else x.ip, x.port)
        assert ok, f"{x} answered without the token: {codes}"
        if machine and x.ip in ("0.0.0.0", "::"):  # as a host on the network would reach it
            ok, codes = _refuses_without_token(machine, x.port)
            assert ok, f"{x} answered without the token at {machine}: {codes}"
        report["non_loopback"].append({"process": x.name, "address": f"{x.ip}:{x.port}", "refused": codes})
    # Positive control for the prober: the GCS (loopback) refuses a stranger too.
    gcs = ray._private.worker._global_node.gcs_address
    host, port = gcs.rsplit(":", 1)
    ok, codes = _refuses_without_token(host, int(port))
    assert ok, f"the GCS at {gcs} answered without the token: {codes}"
    print(json.dumps(report))


def test_dashboard_agent_job_api_refuses_a_job_without_the_token(ray_session):
    import ray

    node = ray._private.worker._global_node
    node_id = ray.get_runtime_context().get_node_id()
    port_file = os.path.join(node.get_session_dir_path(), f"dashboard_agent_listen_port_{node_id}")
    port = int(Path(port_file).read_text().strip())
    if port == -1:  # its fixed port (52365) is held by another Ray on this machine: no job API to attack
        pytest.skip("the dashboard agent's HTTP server did not start here (port 52365 taken by another Ray)")
    agent = [x for x in _listeners(_session_pids()) if x.port == port]
    assert agent, f"no dashboard agent listening on {port}"
    assert all(x.loopback for x in agent), agent  # the job API is on loopback only
    marker = f"/tmp/coevolve-net-{uuid.uuid4().hex}"
    body = json.dumps({"entrypoint": f"touch {marker}", "submission_id": f"net-{uuid.uuid4().hex[:8]}"}).encode()
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/api/job_agent/jobs/", data=body, headers={"Content-Type": "application/json"}
    )
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=30)
    assert e.value.code == 401, e.value.read()[:300]
    bad = urllib.request.Request(req.full_url, data=body, headers={**req.headers, "Authorization": "Bearer not-the-token"})
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(bad, timeout=30)
    assert e.value.code == 403
    time.sleep(1.0)
    assert not os.path.exists(marker), "the unauthenticated job ran"


def _py(code: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False,
                          cwd=Path(__file__).resolve().parent.parent, env=env)


def test_a_fresh_token_is_owner_only_and_attaching_without_one_is_one_error(tmp_path):
    # In subprocesses: this process's Ray must keep the token it started with.
    env = {**os.environ, "HOME": str(tmp_path), "RAY_AUTH_TOKEN_PATH": str(tmp_path / "ray" / "token")}
    env.pop("RAY_AUTH_TOKEN", None)
    env.pop("RAY_AUTH_MODE", None)
    r = _py("from coevolve.cluster.runtime import _ensure_local_token, token_path; import os; _ensure_local_token(); "
            "print(oct(os.stat(token_path()).st_mode & 0o777), len(token_path().read_text()))", env)
    assert r.returncode == 0 and r.stdout.splitlines()[-1].split() == ["0o600", "64"], r.stderr[-2000:]
    env["RAY_AUTH_TOKEN_PATH"] = str(tmp_path / "missing")
    store = tmp_path / "store"
    cli = "import sys; from coevolve.cli.app import app; sys.exit(app(prog_name='coevolve'))"
    r = subprocess.run([sys.executable, "-c", cli, "eval", "--n", "1", "--address", "10.255.255.1:6379",
                        "--store", str(store)], capture_output=True, text=True, timeout=300, check=False, env=env,
                       cwd=Path(__file__).resolve().parent.parent)
    assert r.returncode == 2 and r.stderr.strip().startswith("error: attaching to Ray at 10.255.255.1:6379 needs"), r.stderr
    assert not store.exists()
    env["RAY_AUTH_MODE"] = "disabled"  # an explicit opt-out skips the check (and warns when Ray starts)
    r = _py("from coevolve.cluster.runtime import check_token; check_token('10.255.255.1:6379'); print('ok')", env)
    assert r.stdout.strip() == "ok", r.stderr
