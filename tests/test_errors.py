"""Expected errors print one `error:` line; a bug prints its traceback and never exits 2. Testbed models are
named by their provider, and their results carry the testbed notice."""

from __future__ import annotations

import subprocess
import sys

import pytest

from coevolve.errors import BadInput, CoevolveError

# `coevolve eval` whose job (validate_eval) raises `exc`; the CLI runs in its own process, as a user runs it
SCRIPT = """
import sys
import coevolve.jobs as jobs
from coevolve.errors import BadInput

def broken(*a, **k):
    raise {exc}

jobs.validate_eval = broken
from coevolve.cli.app import app
app(prog_name="coevolve", args=["eval", "--family", "iot", "--n", "1", "--store", sys.argv[1]])
"""


def run_cli_with(exc: str, tmp_path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", SCRIPT.format(exc=exc), str(tmp_path / "store")],
                          check=False, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("exc", ["KeyError('instance')", "ValueError('a bug, not bad input')"])
def test_a_bug_inside_a_job_prints_its_traceback(exc, tmp_path):
    r = run_cli_with(exc, tmp_path)
    assert r.returncode not in (0, 2), r.stderr
    assert "Traceback" in r.stderr, r.stderr
    assert exc.split("(")[0] in r.stderr
    assert not r.stderr.startswith("error:")


def test_bad_input_inside_a_job_is_one_error_line(tmp_path):
    r = run_cli_with("BadInput('--n must be positive')", tmp_path)
    assert r.returncode == 2
    assert r.stderr.strip() == "error: --n must be positive"


def test_the_expected_errors_share_one_root():
    from coevolve.cli.options import UsageError
    from coevolve.edits import EditError
    from coevolve.llm.contract import DecodingUnsupported, ProposerUnreachable
    from coevolve.store.db import StoreError

    for cls in (UsageError, EditError, StoreError, DecodingUnsupported):
        assert issubclass(cls, BadInput) and issubclass(cls, ValueError)
    assert issubclass(ProposerUnreachable, CoevolveError) and ProposerUnreachable.exit_code == 1


@pytest.mark.parametrize(("model", "synthetic"), [
    ("synthetic/weak", True), ("synthetic/weak@fact-adapter", True), ("vllm/smollm2", False),
    ("hosted_vllm/synthetic", False), ("openai/gpt-4o-mini", False), ("", False),
])
def test_a_testbed_model_is_named_by_its_provider_and_its_results_carry_the_notice(model, synthetic):
    from coevolve.analysis.summary import TESTBED_NOTICE, testbed_notice
    from coevolve.values import ModelRef, is_synthetic

    assert is_synthetic(model) is synthetic
    if model:
        assert ModelRef.parse(model).is_synthetic is synthetic
    assert testbed_notice(model) == ({"notice": TESTBED_NOTICE} if synthetic else {})
    assert testbed_notice("vllm/smollm2", model) == testbed_notice(model)
