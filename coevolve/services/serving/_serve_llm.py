"""Ray Serve LLM classes that load LoRA adapters from a local folder (imported only where Serve runs).

Ray Serve LLM loads adapters lazily by id from `lora_config.dynamic_lora_loading_path`, which must be a
cloud URI; its `pyarrow-` prefix accepts any pyarrow filesystem URI but the helper that maps a URI to a
filesystem knows no `file://`. Importing this module teaches that helper `file://` (pyarrow's
`LocalFileSystem`), so `pyarrow-file:///abs/store/adapters` works: a new adapter folder there is
servable as `<model_id>:<adapter_id>` at once, without a restart.

The patch touches one private Ray function, so it is pinned to the Ray version in pyproject and
tested (tests/test_serving.py). It is applied in exactly the processes that need it: the app uses
`LocalLoraLLMServer` / `LocalLoraIngress` below, and unpickling either class in a Serve replica imports
this module.
"""

from __future__ import annotations

import os

import structlog
from ray.llm._internal.common.utils.cloud_filesystem.pyarrow_filesystem import PyArrowFileSystem
from ray.serve.llm import LLMServer
from ray.serve.llm.ingress import OpenAiIngress

from coevolve.settings import environment

LOCAL_PREFIX = "pyarrow-file://"


def install_local_lora_filesystem() -> None:
    """Make Ray's pyarrow URI helper accept `file://` (idempotent)."""
    if getattr(PyArrowFileSystem, "_coevolve_file_scheme", False):
        return
    original = PyArrowFileSystem.get_fs_and_path

    def get_fs_and_path(object_uri: str):
        uri = object_uri.removeprefix("pyarrow-")
        if uri.startswith("file://"):
            import pyarrow.fs as pa_fs

            return pa_fs.LocalFileSystem(), uri[len("file://") :]
        return original(object_uri)

    PyArrowFileSystem.get_fs_and_path = staticmethod(get_fs_and_path)
    PyArrowFileSystem._coevolve_file_scheme = True


install_local_lora_filesystem()


class LocalLoraLLMServer(LLMServer):
    """`LLMServer` whose process can read adapters from `pyarrow-file://` folders, and whose engine
    runs at the niceness `$COEVOLVE_ENGINE_NICENESS` names (when set): Ray starts its workers at
    niceness 15, behind everything else on the machine; the engine's processes inherit the replica's."""

    async def start(self):
        set_niceness(environment().engine_niceness)
        await super().start()


def set_niceness(value: str | None) -> None:
    """Set this process's niceness (its children inherit it). Lowering it needs CAP_SYS_NICE: without
    it the replica says so in its log and keeps Ray's."""
    if value is None or value == "":
        return
    try:
        os.setpriority(os.PRIO_PROCESS, 0, int(value))
    except PermissionError:
        structlog.get_logger(role="serving").warning(
            "cannot set the engine's niceness (needs CAP_SYS_NICE); it keeps Ray's", wanted=int(value), now=os.getpriority(os.PRIO_PROCESS, 0)
        )


class LocalLoraIngress(OpenAiIngress):
    """`OpenAiIngress` whose process can list adapters in `pyarrow-file://` folders (/v1/models)."""
