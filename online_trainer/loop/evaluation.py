"""Greedy evaluation episodes on a separate env, during training and of saved checkpoints.

An evaluation switches the agent to ``eval()``, plays complete episodes on its own env
(never the training env, so the training episode in progress is untouched), and switches
it back to ``train()``. Every evaluation of a run resets its env with the same seed, the
run's seed plus :data:`EVAL_SEED_SHIFT`, so evaluations differ only by the agent and no
eval env ever shares a seed with a training env (training seeds are below 2**31).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.wrappers.utils import RunningMeanStd

from online_trainer.loop import raw_scores
from online_trainer.loop.accounting import EpisodeTracker
from online_trainer.loop.factories import autoreset_mode, explain_step_error
from online_trainer.loop.normalization import evaluation_statistics, frozen_reward_statistics

logger = logging.getLogger(__name__)

EVAL_SEED_SHIFT = 2**31
"""Added to a run's seed to seed its eval env (sub-env ``j`` gets ``+ j``)."""
MAX_EPISODE_STEPS = 10_000
"""An evaluation episode still running after this many steps, in an env without a time limit of
its own, is cut (counted as it stands, with a warning): a greedy policy can loop forever there.
An env with a time limit (``max_episode_steps``) ends its episodes itself and is never cut."""


def episode_step_limit(env: VectorEnv) -> int:
    """When evaluation cuts an episode of ``env``: never before the env's own time limit, if it has one."""
    specs = [getattr(env, "spec", None)] + [getattr(sub, "spec", None) for sub in getattr(env, "envs", ())]
    limits = [spec.max_episode_steps for spec in specs if spec is not None and spec.max_episode_steps]
    return max(limits) + 1 if limits else MAX_EPISODE_STEPS


def eval_seed(run_seed: int) -> int:
    """The seed of the eval env of the run seeded with ``run_seed``."""
    return run_seed + EVAL_SEED_SHIFT


def play_episodes(
    env: VectorEnv,
    agent: Any,
    num_episodes: int,
    seed: int,
    max_episode_steps: int | None = None,
    frames: list[np.ndarray] | None = None,
    raw: bool = False,
    where: str = "In an evaluation",
) -> tuple[np.ndarray, np.ndarray]:
    """Play ``num_episodes`` complete episodes of ``agent`` on ``env``; return their returns and lengths.

    The episodes are spread evenly over the sub-envs, each playing its share to the end
    (as Stable-Baselines3's ``evaluate_policy``), so short episodes are not favoured by
    finishing first. Only real transitions count, in every autoreset mode, by the training loop's
    accounting (:class:`~online_trainer.loop.accounting.EpisodeTracker`). The agent is
    used as it is (call ``agent.eval()`` first for greedy acting); ``update`` is never called.
    An episode longer than ``max_episode_steps`` (default: :func:`episode_step_limit`) is cut
    there (its sub-env is reset), with a logged warning, so that a policy that never ends an
    episode cannot hang the run.
    With ``frames`` (a list), the frames of sub-env 0's first episode (``env.render()``, the
    env made with ``render_mode="rgb_array"``) are appended to it: the reset frame, then one
    per step.
    With ``raw``, the returns and lengths are the raw scores a ``RecordEpisodeStatistics``
    inside each sub-env's wrappers reports (see :mod:`online_trainer.loop.raw_scores`); an
    episode cut by ``max_episode_steps`` has none (NaN).

    Returns:
        ``(returns, lengths)``: float64 arrays (int64 lengths unless ``raw``) of ``num_episodes``
        entries, in the order the episodes ended.
    """
    num_envs = env.num_envs
    if max_episode_steps is None:
        max_episode_steps = episode_step_limit(env)
    targets = [(num_episodes + i) // num_envs for i in range(num_envs)]
    counts = [0] * num_envs
    mode = autoreset_mode(env)
    same_step, disabled = mode is AutoresetMode.SAME_STEP, mode is AutoresetMode.DISABLED
    tracker = EpisodeTracker(num_envs, mode, keep_actions=False)  # the training loop's accounting
    done_returns: list[float] = []
    done_lengths: list[Any] = []
    obs, _ = env.reset(seed=seed)
    filming = frames is not None
    if frames is not None:
        frames.append(_first_frame(env))
    while any(count < target for count, target in zip(counts, targets)):
        actions = agent.act(obs)
        try:
            obs, reward, terminated, truncated, info = env.step(actions)
        except Exception as error:
            explain_step_error(error, actions, env, agent, where)
            raise
        if filming and frames is not None:  # filming implies a list of frames
            frames.append(_first_frame(env))
        tracker.observe(None, actions, reward, terminated, truncated)
        ended = tracker.done.nonzero()[0].tolist() if tracker.ended else []
        cut = [
            i for i, length in enumerate(tracker.running_lengths()) if length >= max_episode_steps and i not in ended
        ]
        if cut:
            logger.warning(
                "evaluation episodes cut after %d steps (sub-envs %s, eval seed %d): the greedy policy did "
                "not end them and the env has no time limit (give the eval env one: "
                "evaluation=EvaluationOptions(env=lambda: gym.make(..., max_episode_steps=...)))",
                max_episode_steps,
                cut,
                seed,
            )
        closed = sorted(ended + cut)
        if closed:
            if filming and closed[0] == 0:
                filming = False
            returns, lengths = tracker.close(closed, 0)
            if raw:
                returns, lengths = raw_scores.episode_statistics(info, closed, same_step)
            for k, i in enumerate(closed):
                if counts[i] < targets[i]:
                    done_returns.append(returns[k])
                    done_lengths.append(lengths[k])
                    counts[i] += 1
        tracker.end_step(bool(ended), ended)
        reset = cut + ended if disabled else cut  # the env resets the others itself
        if reset:
            mask = np.zeros(num_envs, dtype=bool)
            mask[reset] = True
            obs, _ = env.reset(options={"reset_mask": mask})
            tracker.restarted(cut)
    return np.asarray(done_returns, dtype=np.float64), np.asarray(done_lengths, dtype=np.float64 if raw else np.int64)


def evaluation_record(
    returns: np.ndarray, lengths: np.ndarray, index: int, global_step: int, episodes_trained: int, start: float
) -> dict[str, Any]:
    """The record of one evaluation: what ``eval_run{i}.pkl`` holds, one per evaluation."""
    return {
        "eval_index": index,
        "global_step": global_step,
        "episodes_trained": episodes_trained,
        "returns": returns,
        "lengths": lengths,
        "mean": float(returns.mean()) if len(returns) else float("nan"),
        "std": float(returns.std()) if len(returns) else float("nan"),
        "wall_time": time.perf_counter() - start,
    }


def _check_renders(env: VectorEnv, seed: int, video_every: int) -> None:
    """Draw one frame of the eval env, so that a renderer it lacks (pygame for gymnasium's classic-control envs)
    fails the run before its first step, not at its first filmed evaluation, after the training. Every
    evaluation resets the eval env with its seed, so this reset changes nothing of what it plays.

    Raises:
        RuntimeError: ``env.render()`` failed, from its error.
    """
    try:
        env.reset(seed=seed)
        env.render()
    except Exception as error:
        opengl = "OpenGL" in str(error) or "GLFW" in str(error)
        fix = (
            "MuJoCo draws with OpenGL: without a display, set MUJOCO_GL=egl (or osmesa) in the environment before "
            "Python starts, so the runs' worker processes have it too"
            if opengl
            else "Install what it names (gymnasium's classic-control envs draw with pygame: pip install "
            "'online_trainer[video]' has it)"
        )
        raise RuntimeError(
            f"record_video={video_every} films the eval env, whose render() failed: {type(error).__name__}: "
            f"{error}. {fix}, or drop record_video."
        ) from error


class Evaluator:
    """Evaluates one run's agent on its eval env every ``freq`` units of the budget and at the end.

    Args:
        env: the run's eval env (not the training env).
        agent: the run's agent.
        seed: the eval env's seed (:func:`eval_seed` of the run's seed).
        num_episodes: episodes per evaluation.
        training: switch the agent back to ``train()`` after each evaluation.
        score: ``"raw"`` reports the raw scores of a ``RecordEpisodeStatistics`` inside the eval
            env's wrappers (ValueError when it has none); ``"return"`` the sums of the rewards.
        observation_statistics: gives, at each evaluation, the observation statistics its ``NormalizeObservation``
            wrappers standardise with (the training env's now, or a checkpoint's); None, or a None it gives: the
            eval env's own (see :mod:`online_trainer.loop.normalization`).
    """

    def __init__(
        self,
        env: VectorEnv,
        agent: Any,
        seed: int,
        num_episodes: int,
        training: bool = True,
        video_dir: str | os.PathLike | None = None,
        video_every: int | None = None,
        score: str = "return",
        train_envs: int | None = None,
        observation_statistics: Callable[[], RunningMeanStd | None] | None = None,
    ) -> None:
        self.raw = raw_scores.check_score(score) == "raw"
        self.observation_statistics = observation_statistics
        self.where = "In an evaluation"
        if train_envs is not None and train_envs != env.num_envs:  # an agent sized by set_num_env fails here
            self.where += (
                f" (the eval env has {env.num_envs} sub-env(s), the training env {train_envs}, the number "
                "set_num_env gave the agent: size act's actions by its obs, len(obs), or give an eval env of "
                f"num_envs={train_envs})"
            )
        if self.raw:
            raw_scores.require_episode_statistics(env, "eval env")
        self.env, self.agent, self.seed, self.num_episodes, self.training = env, agent, seed, num_episodes, training
        self.video_dir, self.video_every = video_dir, video_every
        if video_every is not None and getattr(env, "render_mode", None) != "rgb_array":
            raise ValueError(
                f"record_video={video_every} needs an eval env made with render_mode='rgb_array', but "
                f"its render_mode is {getattr(env, 'render_mode', None)!r}: give the eval env one, "
                "evaluation=EvaluationOptions(env=lambda: gym.make_vec(..., render_mode='rgb_array'), ...)."
            )
        if video_every is not None:
            _check_renders(env, seed, video_every)
        self.count = 0
        self.last_step = -1
        self.start = time.perf_counter()

    def evaluate(
        self,
        global_step: int,
        episodes_trained: int,
        on_video: Callable[[list[np.ndarray], float, int], None] | None = None,
    ) -> dict[str, Any]:
        """Play one evaluation and return its record.

        When it is filmed, ``on_video(frames, fps, global_step)`` is called after the mp4 is written.
        """
        self.count += 1
        self.last_step = global_step
        switch = getattr(self.agent, "eval", None)
        if callable(switch):
            switch()
        film = self.video_every is not None and self.count % self.video_every == 0
        frames: list[np.ndarray] | None = [] if film else None
        try:
            statistics = None if self.observation_statistics is None else self.observation_statistics()
            with frozen_reward_statistics(self.env), evaluation_statistics(self.env, statistics):
                returns, lengths = play_episodes(
                    self.env, self.agent, self.num_episodes, self.seed, frames=frames, raw=self.raw, where=self.where
                )
        finally:
            back = getattr(self.agent, "train", None)
            if self.training and callable(back):
                back()
        record = evaluation_record(returns, lengths, self.count, global_step, episodes_trained, self.start)
        if self.raw:
            record["score"] = "raw"
        if frames:
            fps = self.env.metadata.get("render_fps") or 30
            assert self.video_dir is not None  # the run gives a video_dir with video_every
            path = Path(self.video_dir) / f"eval{self.count}_step{global_step}.mp4"
            write_video(path, frames, fps)
            record["video"] = os.fspath(path)
            if on_video is not None:
                on_video(frames, fps, global_step)
        return record


def _first_frame(env: VectorEnv) -> np.ndarray:
    """Sub-env 0's frame: ``env.render()`` of an env made with ``render_mode="rgb_array"``."""
    rendered = env.render()
    assert rendered is not None  # rgb_array rendering returns the sub-envs' frames
    return np.asarray(rendered[0])


def write_video(path: str | os.PathLike, frames: list[np.ndarray], fps: float) -> None:
    """Write ``frames`` (H x W x 3 uint8 arrays) to the mp4 file ``path`` with imageio-ffmpeg.

    Raises:
        ImportError: imageio-ffmpeg is missing (``pip install -e ".[video]"``).
    """
    try:
        import imageio_ffmpeg
    except ImportError as exc:
        raise ImportError(
            "record_video needs imageio-ffmpeg: pip install -e '.[video]' (or pip install imageio-ffmpeg)."
        ) from exc
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp.mp4")
    height, width = frames[0].shape[:2]
    writer = imageio_ffmpeg.write_frames(os.fspath(tmp), (width, height), fps=fps, macro_block_size=1)
    try:
        writer.send(None)  # start the ffmpeg process
        for frame in frames:
            writer.send(np.ascontiguousarray(frame[..., :3], dtype=np.uint8))
        writer.close()
        os.replace(tmp, path)
    finally:
        writer.close()
        tmp.unlink(missing_ok=True)
