"""Settings are checked where they enter: a key written twice in a YAML profile or config is refused
(PyYAML would keep the last one silently), and a run profile's or experiment config's `train.config` is
held to the bounds `coevolve adapt` holds its overrides to, in the file and in a `key=value` override."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from coevolve.cli.app import app
from coevolve.config import load_profile, load_yaml

runner = CliRunner()
EXPERIMENT = Path(__file__).resolve().parent.parent / "deploy" / "experiments" / "synthetic.yaml"


@pytest.fixture()
def no_ray(monkeypatch):
    """A bad setting is refused before Ray: starting or attaching to it fails the test at once."""
    import ray

    import coevolve.cluster.head
    import coevolve.cluster.runtime

    def refuse(*args, **kwargs):
        raise AssertionError("bad input reached Ray")

    for target, name in ((coevolve.cluster.runtime, "start_ray"), (coevolve.cluster.head, "ensure_local_head"), (ray, "init")):
        monkeypatch.setattr(target, name, refuse)


@pytest.mark.parametrize(("text", "key", "line"), [
    ("name: x\nseed: 1\nfamilies: [iot]\nseed: 2\n", "seed", 4),
    ("budget:\n  cycles: 1\n  cycles: 2\n", "cycles", 3),
    ("params: {size: 0, size: 1}\n", "size", 1),
])
def test_a_key_written_twice_in_a_profile_is_refused_naming_it(tmp_path, text, key, line):
    path = tmp_path / "profile.yaml"
    path.write_text(text)
    with pytest.raises(ValueError, match=f"duplicate key '{key}' on line {line}") as e:
        load_profile(str(path))
    assert "\n" not in str(e.value)


def test_a_key_written_twice_in_an_experiment_config_is_refused(tmp_path):
    from coevolve.jobs.experiment import load_config

    path = tmp_path / "exp.yaml"
    path.write_text(EXPERIMENT.read_text() + "\nrepeats: 9\nrepeats: 1\n")
    with pytest.raises(ValueError, match="duplicate key 'repeats'"):
        load_config(path, ())


def test_keys_written_once_still_load():
    assert load_yaml("a: {b: 1, c: 2}\nd: [1, {b: 1}]\nb: 3\n") == {"a": {"b": 1, "c": 2}, "d": [1, {"b": 1}], "b": 3}


def test_the_cli_refuses_a_duplicate_key_in_one_error_line(tmp_path, no_ray):
    path, store = tmp_path / "p.yaml", tmp_path / "store"
    path.write_text("seed: 1\nseed: 2\n")
    r = runner.invoke(app, ["run", str(path), "--store", str(store)])
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert r.exit_code == 2 and len(lines) == 1 and "duplicate key 'seed'" in lines[0], r.output
    assert not store.exists()


BAD_TRAIN = [
    ("rank=999", "rank: Input should be less than or equal to 256"),
    ("lr=1e30", "lr: Input should be less than or equal to 1"),
    ("lr=.inf", "lr: Input should be less than or equal to 1"),
    ("epochs=1000000000", "epochs must be at most 1,000"),
    ("nosuch=1", "nosuch: no such field (fields: rank, alpha"),
    ("seed=99999999999999999999", "seed must be an integer in 64 bits"),
]


@pytest.mark.parametrize(("item", "message"), BAD_TRAIN)
def test_training_bounds_are_checked_in_a_profile_override(item, message):
    with pytest.raises(ValueError, match="profile: train.config: ") as e:
        load_profile("local", [f"train.config.{item}"])
    assert message in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize(("item", "message"), BAD_TRAIN[:3])
def test_training_bounds_are_checked_in_a_profile_file_and_an_experiment_config(tmp_path, item, message):
    from coevolve.jobs.experiment import load_config

    key, value = item.split("=")
    path = tmp_path / "p.yaml"
    path.write_text(f"train:\n  config:\n    {key}: {value}\n")
    with pytest.raises(ValueError, match=message):
        load_profile(str(path))
    with pytest.raises(ValueError, match=message):
        load_config(EXPERIMENT, [f"train.config.{item}"])


@pytest.mark.parametrize(("item", "message"), BAD_TRAIN[:2])
def test_adapt_refuses_the_same_training_config(tmp_path, no_ray, item, message):
    r = runner.invoke(app, ["adapt", item, "--store", str(tmp_path / "store")])
    assert r.exit_code == 2 and message in r.stderr, r.output


def test_the_shipped_profiles_train_configs_are_within_the_bounds():
    assert load_profile("cpu").train.config == {"epochs": 1, "rank": 8, "lr": 0.0002}
    assert load_profile("gpu-cluster").train.config["dtype"] == "bfloat16"
    assert load_profile("local", ["train.config.rank=8"]).train.train_config() == {"rank": 8}


def test_the_trainer_and_the_profile_share_one_train_config():
    from coevolve.config import TrainConfig
    from coevolve.services.training import TrainConfig as Trainers

    assert Trainers is TrainConfig
