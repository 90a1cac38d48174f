"""Shared test helpers: an env whose episode lengths are known, a recording agent, a failing agent,
hand-written experiments, record comparison and videos read back from TensorBoard."""

from __future__ import annotations

import io
import json
import os
import pickle
from collections import Counter

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

from online_trainer.loop.seeding import run_seed
from online_trainer.records.episode_table import EpisodeTable
from online_trainer.records.pickling import ActionSlab
from online_trainer.records.record_view import RunRecords


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Files with the most slow tests first, each file's tests in their own order.

    With ``--dist loadfile --no-loadscope-reorder`` (the README's command) pytest-xdist hands out
    whole files in this order: the long files start first and the short ones fill in beside them.
    By its default order (most tests first) the docs' examples and the kill trials started last,
    and one worker ran them alone for minutes.
    """
    slow = Counter(item.path for item in items if item.get_closest_marker("slow"))
    first_seen = {path: i for i, path in enumerate(dict.fromkeys(item.path for item in items))}
    items.sort(key=lambda item: (-slow[item.path], first_seen[item.path]))


def scheduled_length(seed: int, episode: int) -> int:
    """Length of episode ``episode`` (0-based) of a CountingEnv reset with ``seed``."""
    return 2 + (seed + episode) % 4


class CountingEnv(gym.Env):
    """Episodes of known length: episode k after ``reset(seed=s)`` lasts ``2 + (s + k) % 4`` steps.

    The observation is the number of steps taken in the episode, the reward of step t (1-based)
    is t, so an episode of length L returns L(L+1)/2. With ``truncate_at`` the episode is
    truncated (instead of terminated) when it would be longer than that.
    """

    metadata = {"render_modes": ["rgb_array", "ansi", "rgb_array_list", "human"], "render_fps": 30}

    def __init__(self, truncate_at: int | None = None, render_mode: str | None = None) -> None:
        self.observation_space = spaces.Box(0, 100, shape=(1,), dtype=np.float32)
        self.action_space = spaces.Discrete(2)
        self.truncate_at = truncate_at
        self.render_mode = render_mode
        self._seed = 0
        self._episode = -1
        self._t = 0
        self._frames: list = []

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        if seed is not None:
            self._seed, self._episode = seed, -1
        self._episode += 1
        self._t = 0
        self._length = scheduled_length(self._seed, self._episode)
        if self.render_mode == "rgb_array_list":
            self._frames = [self._frame()]
        return np.array([0.0], dtype=np.float32), {}

    def step(self, action):
        assert self._t < self._length, "stepped a finished episode"
        self._t += 1
        ended = self._t >= self._length
        truncated = bool(self.truncate_at is not None and self._t >= self.truncate_at and not ended)
        if self.render_mode == "rgb_array_list":
            self._frames.append(self._frame())
        return np.array([self._t], dtype=np.float32), float(self._t), ended, truncated, {}

    def _frame(self):
        return np.full((2, 2, 3), self._t, dtype=np.uint8)

    def render(self):
        if self.render_mode == "rgb_array":
            return self._frame()
        if self.render_mode == "ansi":
            return f"t={self._t}"
        if self.render_mode == "rgb_array_list":
            frames, self._frames = self._frames, []
            return frames
        return None


def make_counting_vec(num_envs=2, mode="NextStep", vectorization="sync", truncate_at=None, render_mode=None):
    """A factory of a vector env of CountingEnvs."""

    def factory():
        fns = [lambda: CountingEnv(truncate_at, render_mode) for _ in range(num_envs)]
        cls = gym.vector.SyncVectorEnv if vectorization == "sync" else gym.vector.AsyncVectorEnv
        return cls(fns, autoreset_mode=gym.vector.AutoresetMode(mode))

    return factory


class RecordingAgent:
    """Acts 0 and records what the trainer calls, checking the reset-step convention."""

    def __init__(self, env=None, log_every_step=False):
        self.calls: list[tuple] = []
        self.real = 0
        self.updates = 0
        self.mode = "train"
        self.hp: dict = {}
        self.num_envs = None
        self.seed = None
        self.log_every_step = log_every_step
        self.final_obs_ok = True

    def reset(self, seed):
        self.calls.append(("reset", seed))
        self.seed = seed

    def set_num_env(self, n):
        self.calls.append(("set_num_env", n))
        self.num_envs = n

    def set_hp(self, hp):
        unknown = set(hp) - {"lr", "gamma"}
        if unknown:
            raise ValueError(f"unknown hyperparameters {sorted(unknown)}")
        self.calls.append(("set_hp", dict(hp)))
        self.hp.update(hp)

    def train(self):
        self.calls.append(("train",))
        self.mode = "train"

    def eval(self):
        self.calls.append(("eval",))
        self.mode = "eval"

    def act(self, obs):
        return np.zeros(len(obs), dtype=np.int64)

    def update(self, next_obs, reward, terminated, truncated, call_back=None, valid=None):
        self.updates += 1
        self.real += int(np.count_nonzero(valid))
        done = (terminated | truncated) & valid
        # the observation an episode ended on is its length: never the reset observation
        if np.any(next_obs[done, 0] == 0):
            self.final_obs_ok = False
        if call_back is not None:
            call_back({"loss": float(self.updates)})

    def log(self):
        if not self.log_every_step:
            return None
        return [{"t": np.array([self.updates])} for _ in range(self.num_envs)]

    def save(self, path=None):
        state = {"updates": self.updates, "seed": self.seed}
        if path is None:
            return state
        with open(path + ".txt", "w") as f:
            f.write(repr(state))
        return state

    def load(self, state):
        """What save() returned (a resume, the best agent), or the path it wrote."""
        if not isinstance(state, dict):
            import ast

            with open(os.fspath(state) + ".txt") as f:
                state = ast.literal_eval(f.read())
        self.updates, self.seed = state["updates"], state["seed"]


@pytest.fixture
def counting_vec():
    return make_counting_vec


class SamplingAgent:
    """Samples its action space, seeded by ``reset(seed)``: the plainest agent of the protocol."""

    def __init__(self, env):
        self.space = env.action_space

    def reset(self, seed):
        self.space.seed(seed)

    def act(self, obs):
        return self.space.sample()

    def update(self, *args, **kwargs):
        pass


class FailsOnThirdRun(RecordingAgent):
    """Raises in the 10th update of run 3 (seed_offset=0)."""

    def update(self, *args, **kwargs):
        super().update(*args, **kwargs)
        if self.seed == run_seed(0, 3) and self.updates == 10:
            raise ValueError("diverged on purpose")


class ReportPools:
    """A hook that writes, at each run's start, the thread count of every pool of the process running it
    (``{directory}/{pid}_{run}.json``: threadpoolctl's pools by file, their APIs, and torch's)."""

    def __init__(self, directory) -> None:
        self.directory = str(directory)

    def on_run_start(self, ctx) -> None:
        import os

        import threadpoolctl
        import torch

        info = threadpoolctl.threadpool_info()
        report = {
            "pools": {p["filepath"]: p["num_threads"] for p in info},
            "apis": [p["user_api"] for p in info],
            "torch": torch.get_num_threads(),
        }
        with open(os.path.join(self.directory, f"{os.getpid()}_{ctx.run}.json"), "w") as file:
            json.dump(report, file)


def pool_reports(directory) -> list[dict]:
    """What :class:`ReportPools` wrote into ``directory``."""
    from pathlib import Path

    return [json.loads(path.read_text()) for path in sorted(Path(directory).glob("*.json"))]


def pool_threads(reports: list[dict]) -> set[int]:
    """Every thread count in ``reports`` (each must have a BLAS pool: numpy's)."""
    assert reports and all("blas" in report["apis"] for report in reports), reports
    return {n for report in reports for n in [*report["pools"].values(), report["torch"]]}


def strip(runs):
    """The per-episode values that must agree between two executions of the same runs."""
    return [
        [(r["ep_return"], r["ep_length"], r["global_step"], r["agent_seed"], r["actions"].tolist()) for r in run]
        for run in runs
    ]


def feed(agent, obs, next_obs, reward, terminated=None, truncated=None, valid=None, call_back=None):
    """One act() then update() of ``agent`` on hand-made batches (lists), as the runner calls them."""
    n = len(obs)
    agent.act(np.asarray(obs))
    agent.update(
        np.asarray(next_obs),
        np.asarray(reward, dtype=float),
        np.zeros(n, bool) if terminated is None else np.asarray(terminated),
        np.zeros(n, bool) if truncated is None else np.asarray(truncated),
        call_back=call_back,
        valid=valid,
    )


def record(index, ret, length=10, step=None, **extra):
    """An episode record as the runner writes it."""
    return {
        "ep_return": float(ret),
        "ep_length": length,
        "episode_index": index,
        "global_step": step if step is not None else 10 * index,
        "wall_time": 0.1 * index,
        **extra,
    }


def write_experiment(exp_dir, runs, manifest_order=None):
    """A hand-written experiment: ``runs[run] = (status, seed, records)``; ``records`` None writes no stream."""
    exp_dir.mkdir(parents=True, exist_ok=True)
    order = manifest_order or sorted(runs)
    entries = [
        {
            "run": r,
            "seed": runs[r][1],
            "status": runs[r][0],
            "episodes": len(runs[r][2] or []),
            "error": "Traceback ...\nRuntimeError: boom" if runs[r][0] == "failed" else None,
        }
        for r in order
    ]
    (exp_dir / "manifest.json").write_text(json.dumps({"format": 2, "num_runs": len(runs), "runs": entries}))
    for r, (_, _, records) in runs.items():
        if records is not None:
            with open(exp_dir / f"metrics_run{r}.pkl", "wb") as f:
                pickle.dump(records, f)
    return exp_dir


def read_videos(log_dir):
    """``{tag: [(step, frames)]}`` of the image summaries in ``log_dir``, each GIF decoded to its frames (RGB arrays)."""
    from PIL import Image, ImageSequence
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(str(log_dir), size_guidance={"images": 0})
    accumulator.Reload()
    videos = {}
    for tag in accumulator.Tags()["images"]:
        for event in accumulator.Images(tag):
            gif = Image.open(io.BytesIO(event.encoded_image_string))
            assert gif.format == "GIF" and (gif.width, gif.height) == (event.width, event.height)
            frames = [np.asarray(frame.convert("RGB")) for frame in ImageSequence.Iterator(gif)]
            videos.setdefault(tag, []).append((event.step, frames))
    return videos


def same_values(a: object, b: object, writeable: bool = True) -> bool:
    """Whether ``a`` and ``b`` are equal in type and value, arrays included (dtype, shape, writeable).

    A :class:`RunRecords` (what ``multi_run`` returns for a run) counts as the list of dicts it
    reads as; its action arrays are read-only views, so writeable flags are not compared then.
    """
    if isinstance(a, RunRecords) or isinstance(b, RunRecords):
        writeable = False
        a, b = (list(x) if isinstance(x, RunRecords) else x for x in (a, b))
    if type(a) is not type(b):
        return False
    if isinstance(a, np.ndarray):
        return (
            a.dtype == b.dtype
            and a.shape == b.shape
            and (not writeable or a.flags.writeable == b.flags.writeable)
            and bool(np.array_equal(a, b))
        )
    if isinstance(a, dict):
        return list(a) == list(b) and all(same_values(a[k], b[k], writeable) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same_values(x, y, writeable) for x, y in zip(a, b))
    return a == b


def expected_record(position, ep_return, length, step, actions, seed=3, **extras):
    record = {
        "ep_return": ep_return,
        "ep_length": length,
        "frames": [],
        "transitions": [],
        "actions": actions,
        "agent_seed": seed,
        "episode_index": position + 1,
        "agent_logs": None,
        "global_step": step,
        "wall_time": 0.5 * step,
    }
    record.update(extras)
    return record


def filled_table(kind: str) -> tuple[EpisodeTable, list[dict]]:
    """A table of 40 episodes added one by one and in batches, with extras here and there.

    ``kind``: the actions: ``discrete``, ``box``, ``dict``, ``none``, or ``slabs`` (discrete,
    batches added as narrow slabs with rows between episodes, as the action buffer gives them).
    """
    rng = np.random.default_rng(0)
    table, expected = EpisodeTable(3), []

    def actions_of(length):
        if kind in ("discrete", "slabs"):
            return rng.integers(0, 4, size=length)
        if kind == "box":
            return rng.normal(size=(length, 2)).astype(np.float32)
        if kind == "dict":
            return {"move": rng.integers(0, 2, size=length), "aim": rng.normal(size=(length, 3))}
        return None

    while table.count < 40:
        lengths = rng.integers(1, 9, size=int(rng.integers(1, 4))).tolist()
        returns = rng.normal(size=len(lengths)).tolist()
        step = 10 * table.count
        episode_actions = [actions_of(n) for n in lengths]
        first = table.count
        if len(lengths) == 1 and rng.random() < 0.5:
            table.add_one(returns[0], lengths[0], step, 0.5 * step, episode_actions[0])
        elif kind == "slabs":  # as a vectorised env's episodes leave the action buffer: narrow, rows between them
            slabs, cut = [], (len(lengths) + 1) // 2
            for part in (episode_actions[:cut], episode_actions[cut:]):
                if part:
                    pieces = [piece for actions in part for piece in (np.full(int(rng.integers(0, 3)), 9), actions)]
                    ends = np.cumsum([len(piece) for piece in pieces])[1::2]
                    slabs.append(ActionSlab(np.concatenate(pieces).astype(np.uint8), ends, np.dtype(np.int64)))
            table.add_slabs(returns, lengths, [step] * len(lengths), [0.5 * step] * len(lengths), slabs)
        else:
            batch = (
                np.concatenate(episode_actions)
                if kind in ("discrete", "box")
                else None
                if kind == "none"
                else episode_actions
            )
            table.add(np.array(returns), np.array(lengths), [step] * len(lengths), [0.5 * step] * len(lengths), batch)
        for j, (ret, n, acts) in enumerate(zip(returns, lengths, episode_actions)):
            extras = {}
            if (first + j) % 7 == 3:
                extras["agent_logs"] = {"loss": np.arange(n, dtype=np.float32)}
                table.set_extra("agent_logs", first + j, extras["agent_logs"])
            if (first + j) % 11 == 5:
                extras["frames"] = [np.full((2, 2, 3), first + j, dtype=np.uint8)]
                table.set_extra("frames", first + j, extras["frames"])
            if (first + j) % 13 == 0:
                extras["transitions"] = [(np.zeros(2), 0, 1.0, False, False)] * n
                table.set_extra("transitions", first + j, extras["transitions"])
            expected.append(expected_record(first + j, ret, n, step, acts, **extras))
    return table, expected


@pytest.fixture
def terminal(monkeypatch):
    """The progress bars believe stderr is a terminal (pytest captures it into a file)."""
    from online_trainer.progress import display as progress

    monkeypatch.setattr(progress, "_terminal", lambda: True)
