"""WandbCallback, offline: read back from the W&B run files with W&B's own protobuf records."""

from __future__ import annotations

import json
import logging
import re
import struct

import pytest

from online_trainer import OnlineTrainer
from online_trainer.callbacks import WandbCallback
from tests.conftest import RecordingAgent, make_counting_vec

wandb = pytest.importorskip("wandb")

BLOCK = 32768  # the .wandb file is a LevelDB-style log of 32 KiB blocks after a 7-byte header


def wandb_records(path):
    """Every record of a ``run-<id>.wandb`` file, as ``wandb_internal_pb2.Record``."""
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:4] == b":W&B"
    chunks, pending, pos = [], b"", 7
    while pos + 7 <= len(data):
        if BLOCK - pos % BLOCK < 7:  # the rest of a block is padding
            pos += BLOCK - pos % BLOCK
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        chunk, pos = data[pos + 7 : pos + 7 + length], pos + 7 + length
        if kind == 0:
            break
        pending = chunk if kind in (1, 2) else pending + chunk
        if kind in (1, 4):  # full, or last piece
            chunks.append(pending)
    return [wandb_internal_pb2.Record.FromString(chunk) for chunk in chunks]


def read_run(exp_dir, run_id):
    """(config, {metric: [(x, value)]}, group, name) of the offline W&B run ``run_id``, over all its resumptions."""
    wandb.teardown()  # W&B's service writes the run files behind finish(): let it finish them
    config, series, group, name = {}, {}, None, None
    for path in sorted(exp_dir.glob(f"wandb/offline-run-*-{run_id}*/run-{run_id}.wandb")):
        for record in wandb_records(path):
            kind = record.WhichOneof("record_type")
            if kind == "run":
                group, name = record.run.run_group, record.run.display_name
                config.update({item.key: json.loads(item.value_json) for item in record.run.config.update})
            elif kind == "config":
                config.update({item.key: json.loads(item.value_json) for item in record.config.update})
            elif kind == "history":
                row = {
                    "/".join(item.nested_key) or item.key: json.loads(item.value_json) for item in record.history.item
                }
                axis = "episode" if "episode" in row else "step"
                for key, value in row.items():
                    if not key.startswith("_") and key not in ("episode", "step"):
                        series.setdefault(key, []).append((row[axis], value))
    return config, series, group, name


@pytest.fixture
def offline(monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")


@pytest.mark.slow
@pytest.mark.parametrize("num_workers", [1, 2])
def test_one_offline_wandb_run_per_seed_holds_what_the_runner_logged(tmp_path, monkeypatch, num_workers):
    monkeypatch.delenv("WANDB_MODE", raising=False)
    if num_workers > 1:  # workers kept warm from an earlier call never see WANDB_MODE set after they started
        OnlineTrainer(make_counting_vec(1), RecordingAgent).multi_run(2, num_episodes=1, num_workers=2, progress=False)
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    exp_dir = tmp_path / "cartpole_dqn"
    trainer = OnlineTrainer(make_counting_vec(2), RecordingAgent, exp_dir=exp_dir)
    trainer.call_back = WandbCallback(project="tests")
    records = trainer.multi_run(
        2,
        num_episodes=6,
        seed_offset=0,
        tuning_hp={"gamma": 0.9},
        eval_freq=3,
        eval_episodes=2,
        num_workers=num_workers,
        progress=False,
    )

    ids = {int(run): run_id for run, run_id in json.loads((exp_dir / "wandb_runs.json").read_text()).items()}
    assert sorted(ids) == [1, 2]
    manifest = json.loads((exp_dir / "manifest.json").read_text())
    for run, run_id in ids.items():
        config, series, group, name = read_run(exp_dir, run_id)
        assert (group, name) == ("cartpole_dqn", f"run_{run}")
        assert {k: config[k] for k in ("seed", "run", "gamma")} == {
            "seed": manifest["seeds"][run - 1],
            "run": run,
            "gamma": 0.9,
        }
        own = list(records[run - 1])
        assert series["ep_return"] == [(r["episode_index"], r["ep_return"]) for r in own]
        assert series["ep_length"] == [(r["episode_index"], r["ep_length"]) for r in own]
        assert series["eval/ep_return"] == [(e["global_step"], e["mean"]) for e in trainer.evaluations[run - 1]]
        losses = series["agents/loss"]
        assert [value for _, value in losses] == [float(k) for k in range(1, len(losses) + 1)]


def test_a_run_done_again_continues_its_wandb_run(tmp_path, offline):
    exp_dir = tmp_path / "exp"
    exp_dir.mkdir()
    callback = WandbCallback(project="tests")
    callback.setup(exp_dir, {1: 5})
    run_id = json.loads((exp_dir / "wandb_runs.json").read_text())["1"]
    callback.start_run(1, 5, {}, str(exp_dir), "run_1")
    callback.series("ep_return", "ep_return/run_1", [1.0, 2.0], range(1, 3))
    callback.end_run(1, "interrupted")
    callback = WandbCallback(project="tests")  # a later call: a new process reads the ids back
    callback.setup(exp_dir, {1: 5})
    assert json.loads((exp_dir / "wandb_runs.json").read_text())["1"] == run_id
    callback.start_run(1, 5, {}, str(exp_dir), "run_1")
    callback.series("ep_return", "ep_return/run_1", [3.0], range(3, 4))
    callback.end_run(1, "finished")
    _, series, _, _ = read_run(exp_dir, run_id)
    assert series["ep_return"] == [(1, 1.0), (2, 2.0), (3, 3.0)]
    assert len(list(exp_dir.glob(f"wandb/offline-run-*-{run_id}*"))) == 2  # both under the one id


def test_values_of_one_episode_share_a_row(tmp_path, offline):
    callback = WandbCallback(project="tests")
    callback.start_run(1, 0, {}, str(tmp_path), "run_1")
    callback.series("ep_return", "ep_return/run_1", [1.0, 2.0], range(1, 3))
    callback.series("ep_length", "ep_length/run_1", [3, 4], range(1, 3))
    callback({"loss": 0.5}, "agents/run_1", 10)
    callback({"loss": 0.25}, "agents/run_1", 10)  # the same name at the same x: a row of its own
    assert callback._rows == [
        {"episode": 1, "ep_return": 1.0, "ep_length": 3.0},
        {"episode": 2, "ep_return": 2.0, "ep_length": 4.0},
        {"step": 10, "agents/loss": 0.5},
        {"step": 10, "agents/loss": 0.25},
    ]
    callback.close()


def test_init_kwargs_cannot_set_what_the_callback_sets():
    with pytest.raises(ValueError, match=r"WandbCallback sets \['id', 'name'\] itself"):
        WandbCallback(id="x", name="y")


def test_a_keyword_wandb_init_does_not_take_is_refused_when_the_callback_is_made():
    """Tester H5: WandbCallback(mdoe="offline") was taken, and the first run failed with W&B's bare
    "init() got an unexpected keyword argument 'mdoe'"."""
    with pytest.raises(ValueError) as refused:
        WandbCallback(project="tests", mdoe="offline")
    assert str(refused.value).startswith(
        "WandbCallback got mdoe='offline' (did you mean 'mode'?), which wandb.init does not take: its keyword "
        "arguments are the callback's own (project, entity, group, mode, flush_rows, max_delay) and those of wandb.init"
    )
    assert WandbCallback(project="tests", tags=["a"], notes="n").init_kwargs == {"tags": ["a"], "notes": "n"}


def test_a_resumed_run_sends_what_its_files_lack_and_nothing_twice(tmp_path, offline, caplog):
    """Run files cut by a kill lack the last points before the checkpoint, and hold some after it."""
    from online_trainer.callbacks.store_points import StorePosition

    exp_dir = tmp_path / "exp"
    exp_dir.mkdir()
    callback = WandbCallback(project="tests")
    callback.setup(exp_dir, {1: 5})
    callback.start_run(1, 5, {}, str(exp_dir), "run_1")
    callback.series("ep_return", "ep_return/run_1", [1.0, 2.0, 3.0], range(1, 4))
    callback({"loss": 0.5}, "agents/run_1", 30)
    position = StorePosition.from_state(callback.checkpoint("run_1"))
    assert position.counts == {"ep_return": (3, 3), "agents/loss": (1, 30)}
    callback.series("ep_return", "ep_return/run_1", [4.0], range(4, 5))
    callback.end_run(1, "interrupted")
    read_run(exp_dir, json.loads((exp_dir / "wandb_runs.json").read_text())["1"])
    # what a kill leaves: episodes 2 and 3 never written, episode 4 (after the checkpoint) written; and a loss
    # logged before the tail the checkpoint kept, lost too
    lost = StorePosition(
        {"ep_return": (3, 3), "agents/loss": (2, 30)},
        position.axes,
        tail=(("ep_return", 2, 2.0), ("ep_return", 3, 3.0), ("agents/loss", 30, 0.5)),
    )
    callback = WandbCallback(project="tests")
    callback.rewind("run_1", lost.to_state())
    callback.setup(exp_dir, {1: 5})
    with caplog.at_level(logging.WARNING):
        callback.start_run(1, 5, {}, str(exp_dir), "run_1")
    callback.series("ep_return", "ep_return/run_1", [4.0, 5.0], range(4, 6))
    callback({"loss": 0.25}, "agents/run_1", 50)
    callback.end_run(1, "finished")
    _, series, _, _ = read_run(exp_dir, json.loads((exp_dir / "wandb_runs.json").read_text())["1"])
    assert sorted(series["ep_return"]) == [(k, float(k)) for k in range(1, 6)]
    assert sorted(series["agents/loss"]) == [(30, 0.5), (50, 0.25)]
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert re.search(
        r"WandbCallback, W&B run \w+, run_1: the store lacks 1 of the 2 points of 'agents/loss' logged "
        r"before step 30 \(the run resumes from its checkpoint at step 30\)",
        warning,
    )


def test_a_run_started_again_sends_nothing_its_files_hold(tmp_path, offline):
    """A run without a checkpoint starts again from its first step: what it logged before is not logged twice."""
    exp_dir = tmp_path / "exp"
    exp_dir.mkdir()
    for attempt, episodes in enumerate((3, 5)):
        callback = WandbCallback(project="tests")
        if attempt:
            callback.rewind("run_1", None)  # what resume=True does for a run that starts again
        callback.setup(exp_dir, {1: 5})
        callback.start_run(1, 5, {}, str(exp_dir), "run_1")
        callback.series(
            "ep_return", "ep_return/run_1", [float(k) for k in range(1, episodes + 1)], range(1, episodes + 1)
        )
        callback({"loss": 0.5}, "agents/run_1", 10)
        callback.end_run(1, "interrupted" if not attempt else "finished")
    _, series, _, _ = read_run(exp_dir, json.loads((exp_dir / "wandb_runs.json").read_text())["1"])
    assert series["ep_return"] == [(k, float(k)) for k in range(1, 6)]
    assert series["agents/loss"] == [(10, 0.5)]


def test_a_run_started_again_reads_its_last_attempt_once_the_service_has_written_it(
    tmp_path, offline, monkeypatch, caplog
):
    """Under load W&B's service wrote the end of a finished run's file after ``finish()`` returned: the run started
    again in the same process read the file without its last points, and logged them twice."""
    import threading

    from online_trainer.callbacks import wandb_sink

    exp_dir = tmp_path / "exp"
    exp_dir.mkdir()
    callback = WandbCallback(project="tests")
    callback.setup(exp_dir, {1: 5})
    callback.start_run(1, 5, {}, str(exp_dir), "run_1")
    callback.series("ep_return", "ep_return/run_1", [float(k) for k in range(1, 301)], range(1, 301))
    callback.end_run(1, "interrupted")
    wandb.teardown()
    run_id = json.loads((exp_dir / "wandb_runs.json").read_text())["1"]
    (path,) = exp_dir.glob(f"wandb/*run-*-{run_id}/run-{run_id}.wandb")
    whole = path.read_bytes()
    path.write_bytes(whole[: len(whole) // 2])  # the service has written half of it so far

    def service_writes_the_rest():
        path.write_bytes(whole)

    timer = threading.Timer(0.5, service_writes_the_rest)
    timer.start()
    try:
        held = wandb_sink._held(str(exp_dir), run_id)
    finally:
        timer.join()
    assert [(x, value) for name, x, value in held if name == "ep_return"] == [(k, float(k)) for k in range(1, 301)]
    monkeypatch.setattr(wandb_sink, "EXIT_RECORD_WAIT", 0.2)
    path.write_bytes(whole[: len(whole) // 2])  # a file whose end never comes: said, and read as it is
    with caplog.at_level(logging.WARNING):
        cut = wandb_sink._held(str(exp_dir), run_id)
    assert 0 < len(cut) < len(held)
    assert f"{path} has no exit record 0 s after its run finished: points it holds may be logged twice" in caplog.text


def test_load_wandb_history_reads_a_run_over_its_attempts(tmp_path, offline):
    """wandb 0.31 removed its reader of run files: an outside tester (H5) wrote its own to check the sink's points."""
    from online_trainer.callbacks import load_wandb_history

    exp_dir = tmp_path / "exp"
    exp_dir.mkdir()
    for attempt, (returns, episodes) in enumerate([([1.0, 2.0], range(1, 3)), ([3.0], range(3, 4))]):
        callback = WandbCallback(project="tests")
        callback.setup(exp_dir, {1: 5})
        callback.start_run(1, 5, {}, str(exp_dir), "run_1")
        callback.series("ep_return", "ep_return/run_1", returns, episodes)
        callback({"loss": 0.5 + attempt}, "agents/run_1", 10 * (attempt + 1))
        callback.end_run(1, "interrupted" if attempt == 0 else "finished")
    wandb.teardown()  # W&B's service writes the run files behind finish()
    history = load_wandb_history(exp_dir, 1)
    episodes = history.dropna(subset=["ep_return"])
    assert list(zip(episodes["episode"], episodes["ep_return"])) == [(1, 1.0), (2, 2.0), (3, 3.0)]
    losses = history.dropna(subset=["agents/loss"])
    assert list(zip(losses["step"], losses["agents/loss"])) == [(10, 0.5), (20, 1.5)]
    with pytest.raises(KeyError, match=r"run=2 is not a run of .*exp \(its W&B runs: \[1\]\)"):
        load_wandb_history(exp_dir, 2)
    with pytest.raises(FileNotFoundError, match=r"wandb_runs.json does not exist: exp_dir='.*other' was not run"):
        load_wandb_history(tmp_path / "other", 1)


def test_the_run_files_of_attempts_that_started_in_one_second_are_all_read(tmp_path):
    """W&B names the folder of an attempt that starts in the same second as an earlier one ``...-{id}-1``: it was
    not read, so a run done again at once logged its points twice and load_wandb_history lost that attempt's."""
    from online_trainer.callbacks.wandb_history import run_files

    folders = {
        "offline-run-20261128_232504-abc": "abc",
        "offline-run-20261128_232503-abc-1": "abc",
        "offline-run-20261128_232503-abc": "abc",
        "run-20261128_232503-abc-2": "abc",
        "offline-run-20261128_232503-abcd": "abcd",  # another run's
        "offline-run-20261128_232503-xabc": "xabc",  # another run's
    }
    for name, run_id in folders.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / f"run-{run_id}.wandb").write_bytes(b":W&B")
    assert [p.parent.name for p in run_files(tmp_path, "abc")] == [
        "offline-run-20261128_232503-abc",
        "offline-run-20261128_232503-abc-1",
        "run-20261128_232503-abc-2",
        "offline-run-20261128_232504-abc",
    ]


def test_a_mode_wandb_does_not_take_is_refused_when_the_callback_is_made():
    """Tester H10: mode="ofline" failed at the call with W&B's pydantic ValidationError, which named no callback."""
    with pytest.raises(ValueError) as refused:
        WandbCallback(project="tests", mode="ofline")
    assert str(refused.value) == (
        "WandbCallback got mode='ofline': it must be one of 'online', 'offline', 'disabled' (or None for WANDB_MODE, "
        "else online); did you mean 'offline'?"
    )
    assert WandbCallback(project="tests", mode="disabled").mode == "disabled"


@pytest.mark.parametrize(
    ("project", "why"),
    [("my/bad#proj?", "it holds '#', '/', '?'"), ("p" * 129, "it is 129 characters long")],
)
def test_a_project_name_wandb_refuses_is_refused_when_the_callback_is_made(project, why):
    """R19: W&B's own UsageError as the first run started, naming no argument of the callback."""
    with pytest.raises(ValueError) as refused:
        WandbCallback(project=project, mode="offline")
    assert str(refused.value).startswith(f"WandbCallback got project={project!r}: W&B takes no project name with any")
    assert why in str(refused.value)
