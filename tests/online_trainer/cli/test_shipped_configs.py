"""Every config in ``configs/`` runs end to end from the command, on a budget cut to seconds.

Configs whose env comes from another package (Atari, MiniGrid, MuJoCo) are skipped when that
package is not installed (``pip install -e ".[atari,minigrid,mujoco]"``; the dev extra has them).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from online_trainer.analysis.dataframes import load_episodes
from online_trainer.cli import main as cli

CONFIGS = sorted((Path(__file__).resolve().parents[3] / "configs").glob("*.yaml"))
# what each env needs beyond the core dependencies
NEEDS = {"breakout_ppo": ("ale_py", "cv2"), "minigrid_ppo": ("minigrid",), "halfcheetah_sac": ("mujoco",)}
# a few agent updates, in seconds: rollouts and warm-ups cut to the budget (Breakout's random episodes take
# about 200 steps: 1,200 steps of 4 sub-envs end some, for their raw scores)
CUTS = {
    "breakout_ppo": ["agent.hyperparameters.n_steps=32", "agent.hyperparameters.n_epochs=1", "total_steps=1200"],
    "cartpole_dqn": ["agent.hyperparameters.learning_starts=200"],
    "halfcheetah_sac": ["agent.hyperparameters.learning_starts=200"],
    "pendulum_sac": ["agent.hyperparameters.learning_starts=200"],
}


def test_the_configs_folder_is_found():
    assert {"quickstart", "cartpole_ppo", "breakout_ppo", "minigrid_ppo"} <= {path.stem for path in CONFIGS}


@pytest.mark.slow
@pytest.mark.parametrize("path", CONFIGS, ids=lambda path: path.stem)
def test_a_shipped_config_runs_from_the_command(path, tmp_path):
    for module in NEEDS.get(path.stem, ()):
        pytest.importorskip(module)
    config = yaml.safe_load(path.read_text())
    budget = ["num_episodes=3"] if "num_episodes" in config else ["total_steps=400"]
    exp_dir = tmp_path / "exp"
    code = cli.main(
        [
            "run",
            "--no-progress",
            str(path),
            "num_runs=1",
            "num_workers=1",
            f"exp_dir={exp_dir}",
            *budget,
            *CUTS.get(path.stem, []),
        ]
    )
    assert code == 0
    episodes = load_episodes(exp_dir)
    assert (episodes["run"] == 1).all()
    if "num_episodes" in config:
        assert len(episodes) == 3
    if config.get("score") == "raw":
        assert episodes["raw_return"].notna().any()
