"""The custom-scalars layout, read by TensorBoard's own multiplexer and custom-scalars plugin."""

from __future__ import annotations

import json

import pytest
from tensorboard import context
from tensorboard.backend.event_processing import data_provider, plugin_event_multiplexer
from tensorboard.plugins import base_plugin
from tensorboard.plugins.custom_scalar.custom_scalars_plugin import CustomScalarsPlugin
from tensorboard.plugins.scalar.scalars_plugin import ScalarsPlugin

from online_trainer import OnlineTrainer
from online_trainer.callbacks import BasicCallBack, TBCallBack
from online_trainer.callbacks.tb_layout import LAYOUT_FILE
from tests.callbacks.test_callbacks import read_scalars
from tests.conftest import RecordingAgent, make_counting_vec


def plugin_for(log_dir):
    multiplexer = plugin_event_multiplexer.EventMultiplexer()
    multiplexer.AddRunsFromDirectory(str(log_dir))
    multiplexer.Reload()
    provider = data_provider.MultiplexerDataProvider(multiplexer, str(log_dir))
    tb_context = base_plugin.TBContext(
        logdir=str(log_dir), data_provider=provider, multiplexer=multiplexer, plugin_name_to_instance={}
    )
    tb_context.plugin_name_to_instance["scalars"] = ScalarsPlugin(tb_context)
    return CustomScalarsPlugin(tb_context)


def test_each_metric_gets_one_chart_with_every_run_overlaid(tmp_path):
    trainer = OnlineTrainer(make_counting_vec(2), RecordingAgent, exp_dir=tmp_path)
    trainer.call_back = TBCallBack(tmp_path, layout_metrics=["ep_return", "eval/ep_return", "agents/loss"])
    trainer.multi_run(2, num_episodes=4, seed_offset=0, eval_freq=2, eval_episodes=2, progress=False)

    plugin = plugin_for(tmp_path)
    layout = json.loads(plugin.layout_impl(context.RequestContext(), ""))
    (category,) = layout["category"]
    charts = {chart["title"]: chart["multiline"]["tag"] for chart in category["chart"]}
    assert list(charts) == ["ep_return", "eval/ep_return", "agents/loss"]
    scalars = read_scalars(tmp_path)  # the seed's own tags are kept
    for title, (regex,) in charts.items():
        found = plugin.scalars_impl(context.RequestContext(), ".", regex, "")["tag_to_events"]
        assert sorted(found) == [f"{title}/run_1", f"{title}/run_2"]
        for tag, events in found.items():
            assert [(step, value) for _, step, value in events] == scalars[tag]


def test_the_layout_is_written_once_per_log_dir_with_the_first_event_file(tmp_path):
    first_sink = TBCallBack(tmp_path, layout_metrics=["ep_return"])
    first_sink.setup(tmp_path, {1: 0})
    assert list(tmp_path.iterdir()) == []  # nothing before the first write: a run that fails to start leaves nothing
    first_sink({"ep_return": 1.0}, "ep_return/run_1", 1, force=True)
    first_sink.close()
    first = (tmp_path / LAYOUT_FILE).read_bytes()
    second_sink = BasicCallBack(tmp_path)
    second_sink({"ep_return": 2.0}, "ep_return/run_2", 1)
    second_sink.close()
    assert (tmp_path / LAYOUT_FILE).read_bytes() == first
    assert len(list(tmp_path.glob("events.out.tfevents.*"))) == 3


def test_a_sweep_overlays_every_configuration_and_seed(tmp_path):
    trainer = OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=tmp_path)
    trainer.sweep({"lr": [0.1, 0.2]}, num_runs=2, num_episodes=3, seed_offset=0, progress=False)
    layout = json.loads(plugin_for(tmp_path).layout_impl(context.RequestContext(), ""))
    (regex,) = next(c for c in layout["category"][0]["chart"] if c["title"] == "ep_return")["multiline"]["tag"]
    found = plugin_for(tmp_path).scalars_impl(context.RequestContext(), ".", regex, "")["tag_to_events"]
    assert len(found) == 4 and all(tag.startswith("ep_return/lr=") for tag in found)


@pytest.mark.parametrize("bad", ["ep_return", [""], [3]])
def test_layout_metrics_must_be_names(tmp_path, bad):
    with pytest.raises(ValueError, match=r"layout_metrics must be a list of metric names, but got layout_metrics="):
        TBCallBack(tmp_path, layout_metrics=bad)
