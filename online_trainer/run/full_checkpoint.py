"""Full checkpoints: everything a run needs to continue exactly where it stood.

A full checkpoint (``Run{i}_Resume.pkl``, replaced atomically each time) is written at a step
boundary: after the env step whose handlers ran (episodes closed, evaluations and checkpoints
due done), before the agent acts on the next observation. It is a :class:`FullCheckpoint` of
layout version :data:`FORMAT`, written as plain data (each stateful part's ``to_state()``: dicts,
lists, numbers and numpy arrays; no object of this package is pickled), and checked when it is
read: a checkpoint of another version, or one that lacks a part, is refused before any run starts.
The file is two pickles: a small :class:`CheckpointHeader` (what planning reads), then the checkpoint, then a
20-byte trailer (a mark, the length of the pickles and their CRC32C), by which planning refuses a file cut short or
changed since it was written, before any run starts. It holds:

- ``loop``: the loop's position (:class:`~online_trainer.loop.steps.LoopState`: global step,
  episodes, the observation to act on);
- ``tracker``: the episodes in progress of every sub-env (return, length, actions, logs:
  :meth:`EpisodeTracker.to_state <online_trainer.loop.accounting.EpisodeTracker.to_state>`);
- ``events``: the schedules and state of the run's event handlers and hooks;
- ``agent``: the agent's ``save()`` (with its replay buffer when ``checkpoint_buffers``);
- ``env``: the env pickled, when it pickles (a ``SyncVectorEnv`` of classic-control, toy-text
  or MuJoCo envs); None otherwise;
- ``normalization``: when the env is not kept, the running statistics of its ``NormalizeObservation`` and
  ``NormalizeReward`` wrappers (:func:`~online_trainer.loop.normalization.running_state`), given to the env built
  again on resume; None when it is kept or has none;
- ``rng``: the global generators of ``random``, ``numpy`` and ``torch``, for agents that use them;
- ``outputs``: where the metrics and evaluation streams stood (byte offsets) and what the callback's
  ``checkpoint()`` returned (the built-in sinks: where their files or stores stood, as plain data).

Resuming with the env in the checkpoint gives the records an uninterrupted run would have
given (but ``wall_time``), when the agent's ``save``/``load`` hold its full state (the
reference agents' do). Without it, the env restarts from a reset seeded from the run's seed
and the resume point (:func:`restart_seed`); episodes in progress are dropped.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import pickle
import random
import struct
import sys
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, overload

import cloudpickle
import crc32c
import numpy as np

from online_trainer.loop import normalization, seeding
from online_trainer.loop.accounting import EpisodeTracker
from online_trainer.loop.factories import accepts_keyword
from online_trainer.loop.steps import LoopState
from online_trainer.records import storage
from online_trainer.run import simulator_state
from online_trainer.run.builtin.checkpoint_writer import warn_if_nothing_saved
from online_trainer.run.hook_runner import check_saved_hooks, saved_hooks, stateful_hooks

logger = logging.getLogger(__name__)

FORMAT = 4
"""The layout version of :class:`FullCheckpoint` and :class:`CheckpointHeader`: raise it whenever a part's
``to_state`` changes. (3: the built-in sinks' positions are plain data, the header has every field. 4: the
``normalization`` part.)"""

_EARLIER = {3: {"normalization": None}}
"""Earlier layout versions still read, with the value of each part they lack: a run checkpointed by the version
before continues (a restarted env's statistics then start again, as they did)."""


@dataclass(frozen=True)
class CheckpointHeader:
    """The small first part of a full checkpoint file, which planning reads without loading the rest.

    Attributes:
        run, seed, num_envs: the run's number, seed, and number of sub-envs.
        outputs: where the metrics and evaluation streams and the callback's outputs stood
            (:attr:`FullCheckpoint.outputs`).
        global_step, episodes: the loop's counts at the checkpoint.
        env_kept: whether the env is in the checkpoint (the resumed run continues its episodes).
        elapsed: the run's wall time so far, in seconds.
        hooks: the user hooks whose state the checkpoint holds (:func:`~online_trainer.run.hook_runner.saved_hooks`).
        version: the layout version (:data:`FORMAT` when written by this version of the package).
    """

    run: int
    seed: int
    num_envs: int
    outputs: dict[str, Any]
    global_step: int
    episodes: int
    env_kept: bool
    elapsed: float
    hooks: dict[str, Any]
    version: int = FORMAT

    @property
    def callback_position(self) -> Any:
        """What the callback's ``checkpoint()`` returned (None when it has none): what its ``rewind`` takes."""
        return self.outputs.get("callback")

    @property
    def resume_point(self) -> dict[str, Any]:
        """Where a run continued from this checkpoint, as the manifest's ``resumed_from`` records it."""
        return {"global_step": self.global_step, "episodes": self.episodes, "env_restored": self.env_kept}

    def to_state(self) -> dict[str, Any]:
        """The header as plain data (a dict; its version under ``format``)."""
        state = {field.name: getattr(self, field.name) for field in dataclasses.fields(self) if field.name != "version"}
        return {"format": self.version, **state}

    @classmethod
    def from_state(cls, state: Any, source: Any = "the checkpoint") -> CheckpointHeader:
        """The header :meth:`to_state` described.

        Raises:
            ValueError: it is of another layout version, or lacks a field (``source`` names it in the message).
        """
        check_version(state.get("format") if isinstance(state, dict) else None, source)
        names = [field.name for field in dataclasses.fields(cls) if field.name != "version"]
        missing = [name for name in names if name not in state]
        if missing:
            raise ValueError(
                f"{source} lacks {missing} in its header: it is damaged; remove it to start the run again."
            )
        return cls(**{name: state[name] for name in names}, version=state["format"])


@dataclass(frozen=True)
class FullCheckpoint:
    """What a run needs to continue exactly where it stood (see the module docstring), as plain data.

    Attributes:
        run, seed, num_envs: the run's number, seed, and number of sub-envs.
        loop: the loop's position.
        tracker: :meth:`EpisodeTracker.to_state <online_trainer.loop.accounting.EpisodeTracker.to_state>`.
        events: :meth:`HookRunner.state_dict <online_trainer.run.hook_runner.HookRunner.state_dict>`.
        agent: :func:`agent_state`.
        env: the env pickled (:func:`env_bytes`), or None.
        normalization: when ``env`` is None, :func:`~online_trainer.loop.normalization.running_state` of the env
            (None when it has no normalization wrapper).
        rng: :func:`global_rng_state`.
        outputs: where the metrics and evaluation streams and the callback's files stood.
        elapsed: the run's wall time so far, in seconds.
        version: the layout version (:data:`FORMAT` when written by this version of the package).
    """

    run: int
    seed: int
    num_envs: int
    loop: LoopState
    tracker: dict[str, Any]
    events: dict[str, Any]
    agent: dict[str, Any]
    env: bytes | None
    normalization: dict[str, Any] | None
    rng: dict[str, Any]
    outputs: dict[str, Any]
    elapsed: float
    version: int = FORMAT

    def header(self) -> CheckpointHeader:
        """The small first part of the file, which planning reads."""
        return CheckpointHeader(
            run=self.run,
            seed=self.seed,
            num_envs=self.num_envs,
            outputs=self.outputs,
            global_step=self.loop.global_step,
            episodes=self.loop.episodes,
            env_kept=self.env is not None,
            elapsed=self.elapsed,
            hooks=saved_hooks(self.events),
            version=self.version,
        )

    def to_state(self) -> dict[str, Any]:
        """The checkpoint as plain data (what the file holds after the header)."""
        state = {field.name: getattr(self, field.name) for field in dataclasses.fields(self)}
        state["loop"] = self.loop.to_state()
        return state

    @classmethod
    def from_state(cls, state: dict[str, Any], source: Any = "the checkpoint") -> FullCheckpoint:
        """The checkpoint :meth:`to_state` described.

        Raises:
            ValueError: it is of another layout version, or lacks a part (``source`` names it in the message).
        """
        check_version(state.get("version"), source)
        state = {**_EARLIER.get(state["version"], {}), **state}
        names = [field.name for field in dataclasses.fields(cls)]
        missing = [name for name in names if name not in state]
        if missing:
            raise ValueError(f"{source} lacks {missing}: it is damaged; remove it to start the run again.")
        return cls(**{**{name: state[name] for name in names}, "loop": LoopState.from_state(state["loop"])})


def check_version(version: Any, source: Any) -> None:
    """Refuse a full checkpoint of another layout version than :data:`FORMAT` (or one of :data:`_EARLIER`).

    Raises:
        ValueError: naming ``source`` and both versions.
    """
    if version != FORMAT and version not in _EARLIER:
        raise ValueError(
            f"{source} was written by another version of online_trainer (format {version!r}, this one "
            f"reads {FORMAT}): the run cannot continue from it; remove it to start the run again."
        )


def global_rng_state() -> dict[str, Any]:
    """The state of the process-wide generators (``random``, ``numpy.random``, ``torch`` when imported)."""
    torch = sys.modules.get("torch")
    return {
        "random": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": None if torch is None else torch.get_rng_state(),
    }


def set_global_rng_state(state: dict[str, Any]) -> None:
    """Restore what :func:`global_rng_state` returned."""
    random.setstate(state["random"])
    np.random.set_state(state["numpy"])
    if state.get("torch") is not None:
        import torch

        torch.set_rng_state(state["torch"])


def env_bytes(env: Any) -> bytes | None:
    """``env`` pickled with what its pickle leaves out (:mod:`~online_trainer.run.simulator_state`), or None when
    it cannot be put back exactly (an ``AsyncVectorEnv``, an env holding a window or a lock, an Atari env with
    sticky actions)."""
    if hasattr(env, "processes") or hasattr(env, "parent_pipes"):  # an AsyncVectorEnv: its sub-envs live elsewhere
        return None
    try:
        return cloudpickle.dumps({"env": env, "simulators": simulator_state.capture(env)})
    except simulator_state.NotRestorable as exc:
        logger.debug("the env cannot be kept exactly (%s): a resumed run restarts it from a reset", exc)
        return None
    except Exception as exc:  # anything can fail in a user's env's pickling
        logger.debug(
            "the env does not pickle (%s: %s): a resumed run restarts it from a reset", type(exc).__name__, exc
        )
        return None


def restart_seed(run_seed: int, global_step: int) -> int:
    """The seed of the reset that restarts a resumed run's env when the env was not in the checkpoint."""
    sequence = np.random.SeedSequence([run_seed, global_step, 0x726573756D65])  # apart from every other stream
    return int(sequence.generate_state(1, dtype=np.uint32)[0] % (2**31 - seeding.SEED_STRIDE))


_TRAILER_MARK = b"OTFCEND1"
_TRAILER = struct.Struct("<8sQI")  # the mark, the length of the pickles before it, their CRC32C
_SEALED = "sealed"
"""The header's key that says the file ends in the trailer (files written before it have none)."""


class _Checksummed:
    """A binary file's ``write`` that also counts the bytes and their CRC32C."""

    def __init__(self, file: Any) -> None:
        self.file, self.length, self.crc = file, 0, 0

    def write(self, data: Any) -> int:
        self.crc = crc32c.crc32c(data, self.crc)
        self.length += memoryview(data).nbytes
        return self.file.write(data)


def write(exp_dir: str, run_idx: int, checkpoint: FullCheckpoint, callback: Any = None) -> None:
    """Write run ``run_idx``'s full checkpoint atomically (a kill while writing leaves the previous one).

    ``callback``: the run's, named when what its ``checkpoint()`` returned does not pickle.

    The file is two pickles of plain data: a small header (:meth:`CheckpointHeader.to_state`), which
    the parent reads to check the version and cut outputs back, then :meth:`FullCheckpoint.to_state`.
    (The agent's own ``save()`` may hold what only cloudpickle pickles: the second part is written with it.)
    A trailer closes it: the pickles' length and CRC32C, which :func:`read` checks (``verify``).
    """
    header, state = {**checkpoint.header().to_state(), _SEALED: True}, checkpoint.to_state()

    def dump(file: Any) -> None:
        counted = _Checksummed(file)
        try:  # the header holds the callback's position too (W19: a lock in it failed the run naming no part)
            pickle.dump(header, counted, protocol=pickle.HIGHEST_PROTOCOL)
            cloudpickle.dump(state, counted, protocol=pickle.HIGHEST_PROTOCOL)
        except (TypeError, AttributeError, pickle.PicklingError) as exc:
            raise TypeError(
                f"the full checkpoint of run {run_idx} cannot be written: {_unpicklable_part(state, callback)}"
            ) from exc
        file.write(_TRAILER.pack(_TRAILER_MARK, counted.length, counted.crc))

    storage.write_atomic(storage.resume_path(exp_dir, run_idx), dump)


def _unpicklable_part(state: dict[str, Any], callback: Any = None) -> str:
    """Which part of a checkpoint does not pickle (a hook's ``state_dict()``, the agent's ``save()``, ...), and the fix;
    the callback by its class (V19: "the callback's checkpoint()" named no sink)."""
    sink = "" if callback is None else f" ({type(callback).__qualname__})"
    parts: list[tuple[str, Any, str]] = [
        (
            f"hook {key}'s state_dict()",
            entry.get("state"),
            "return plain data (numbers, strings, lists, dicts, numpy arrays) from it",
        )
        for key, entry in state["events"].get("hooks", {}).items()
    ]
    parts += [
        ("the agent's save()", state["agent"], "return what pickles (tensors, arrays, dicts of them) from it"),
        (f"the callback's checkpoint(){sink}", state["outputs"], "return plain data from it"),
    ]
    for name, value, fix in parts:
        try:
            cloudpickle.dumps(value)
        except Exception as exc:
            return f"what {name} returned does not pickle ({type(exc).__name__}: {exc}): {fix}."
    return "a part of it does not pickle (see the error above)."


def _damaged(path: Path, why: str) -> ValueError:
    return ValueError(
        f"{path} is damaged ({why}): the run cannot continue from it. Remove it to start the run again from "
        "step 0 (its records and what the callback logged of it are then replaced), or put back a copy of it."
    )


def _check_trailer(path: Path, file: Any, crc: bool) -> None:
    """Refuse a sealed checkpoint whose trailer is missing or does not match its bytes (``crc``: read them all)."""
    size = os.fstat(file.fileno()).st_size
    if size < _TRAILER.size:
        raise _damaged(path, f"{size} bytes, shorter than its trailer")
    file.seek(size - _TRAILER.size)
    mark, length, expected = _TRAILER.unpack(file.read(_TRAILER.size))
    if mark != _TRAILER_MARK or length != size - _TRAILER.size:
        raise _damaged(path, f"it was cut short or added to: {size} bytes, and no trailer at its end")
    if crc:
        file.seek(0)
        value, left = 0, length
        while left:
            block = file.read(min(left, 1 << 22))
            if not block:
                raise _damaged(path, "it was cut short while being read")
            value, left = crc32c.crc32c(block, value), left - len(block)
        if value != expected:
            raise _damaged(path, "its bytes do not match the checksum written with them")


def check_hooks(exp_dir: str | Path, header: CheckpointHeader, hooks: Sequence[Any], name: str = "") -> None:
    """Raise unless the user hooks with state of the call that resumes a run are those its full checkpoint holds.

    Args:
        exp_dir: the experiment directory.
        header: the checkpoint's header (:func:`read` with ``header_only``).
        hooks: the user hooks of the call.
        name: the run's name in the error (a sweep's ``lr=0.1 run 1``); empty: ``run {i}``.

    Raises:
        ValueError: naming the run, its checkpoint and the hooks that differ.
    """
    check_saved_hooks(header.hooks, stateful_hooks(hooks), _saved_state(exp_dir, header, name))


def check_callback_position(exp_dir: str | Path, header: CheckpointHeader, callback: Any, name: str = "") -> None:
    """Raise unless ``callback`` takes the position the run's full checkpoint holds for it (see
    :meth:`online_trainer.callbacks.CallBack.check_position`).

    Args:
        exp_dir: the experiment directory.
        header: the checkpoint's header (:func:`read` with ``header_only``).
        callback: the callback of the call.
        name: the run's name in the error (a sweep's ``lr=0.1 run 1``); empty: ``run {i}``.

    Raises:
        ValueError: naming the run, its checkpoint and what its callback cannot rewind to.
    """
    check = getattr(callback, "check_position", None)
    if callable(check):
        try:
            check(header.callback_position)
        except ValueError as exc:
            raise ValueError(
                f"{_saved_state(exp_dir, header, name)} does not fit the callback {callback!r}: {exc}"
            ) from None


def _saved_state(exp_dir: str | Path, header: CheckpointHeader, name: str) -> str:
    """``"The saved state (run 1, Run1_Resume.pkl)"``, with ``name`` for ``run 1`` when given."""
    return f"The saved state ({name or f'run {header.run}'}, {storage.resume_path(exp_dir, header.run).name})"


@overload
def read(
    exp_dir: str | os.PathLike, run_idx: int, header_only: Literal[False] = False, verify: bool = False
) -> FullCheckpoint | None: ...


@overload
def read(
    exp_dir: str | os.PathLike, run_idx: int, header_only: Literal[True], verify: bool = False
) -> CheckpointHeader | None: ...


def read(
    exp_dir: str | os.PathLike, run_idx: int, header_only: bool = False, verify: bool = False
) -> FullCheckpoint | CheckpointHeader | None:
    """Run ``run_idx``'s full checkpoint (a :class:`FullCheckpoint`; with ``header_only`` its
    :class:`CheckpointHeader` alone), or None when it has none.

    ``verify``: also check the whole file against the checksum written with it (it is read once more); a
    file cut short is refused in any case.

    Raises:
        ValueError: the file was written with another layout version (:data:`FORMAT`), or is damaged
            (the message names the file and says to remove it).
    """
    path = storage.resume_path(exp_dir, run_idx)
    if not path.is_file():
        return None
    with open(path, "rb") as file:
        try:
            state = pickle.load(file)
        except Exception as exc:  # garbage, a cut: pickle raises one of many
            raise _damaged(path, f"its header does not load: {type(exc).__name__}: {exc}") from exc
        header = CheckpointHeader.from_state(state, path)
        if isinstance(state, dict) and state.get(_SEALED):
            offset = file.tell()
            _check_trailer(path, file, crc=verify)
            file.seek(offset)
        if header_only:
            return header
        try:
            body = pickle.load(file)
        except Exception as exc:
            raise _damaged(path, f"it does not load: {type(exc).__name__}: {exc}") from exc
        return FullCheckpoint.from_state(body, path)


def run_progress(exp_dir: str | Path, run_idx: int) -> dict[str, Any]:
    """How far run ``run_idx`` got, as its records on disk and its full checkpoint say.

    For a run that ended without finishing (failed, interrupted, preempted): ``global_step`` and
    ``wall_time`` (seconds since the run started) of its last record or of its checkpoint, whichever
    is further on, and ``episodes``, the records on disk (or the checkpoint's count when higher);
    None where neither says (no metrics stream, no checkpoint).
    """
    progress: dict[str, Any] = {"episodes": None, "global_step": None, "wall_time": None}
    path = storage.metrics_path(exp_dir, run_idx)
    if path.is_file():
        count, last = 0, None
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", storage.TruncatedMetricsWarning)  # a killed run: its complete chunks
            for chunk in storage.iter_metrics_chunks(path):
                count, last = count + len(chunk), chunk[-1] if chunk else last
        if last is not None:
            progress = {"episodes": count, "global_step": last.get("global_step"), "wall_time": last.get("wall_time")}
    try:
        header = read(exp_dir, run_idx, header_only=True)
    except (ValueError, OSError, pickle.UnpicklingError, EOFError):  # another format, or unreadable: the records say
        header = None
    if header is not None and header.global_step >= (progress["global_step"] or 0):
        progress = {
            "episodes": max(progress["episodes"] or 0, header.episodes),
            "global_step": header.global_step,
            "wall_time": header.elapsed,
        }
    return progress


def can_continue(agent: Any) -> bool:
    """Whether a full checkpoint can hold ``agent`` and give it back: it has both ``save`` and ``load``."""
    return callable(getattr(agent, "save", None)) and callable(getattr(agent, "load", None))


def agent_state(agent: Any, exp_dir: str | os.PathLike, run_idx: int, buffers: bool) -> dict[str, Any]:
    """The agent's ``save()``; an agent whose ``save()`` returns nothing saves to ``Run{i}_Resume_agent``."""
    save = agent.save
    state = save(buffers=True) if buffers and accepts_keyword(save, "buffers") else save()
    if state is not None:
        return {"state": state}
    path = str(storage.checkpoint_path(exp_dir, run_idx, "Resume_agent"))
    save(path)
    warn_if_nothing_saved(agent, Path(path))
    return {"path": path}


def load_agent(agent: Any, entry: dict[str, Any]) -> None:
    """Restore what :func:`agent_state` saved.

    Raises:
        TypeError: the agent has no ``load`` (the checkpoint was written by a version of it that had).
    """
    if not callable(getattr(agent, "load", None)):
        raise TypeError(
            f"The run's full checkpoint holds what its agent's save() returned, but the agent {type(agent).__name__} "
            "has no load() to take it back: add load(state_or_path) to continue the run from it, or start the "
            "experiment again (overwrite=True)."
        )
    if "path" in entry and not storage.saved_by(Path(entry["path"])):  # save(path) wrote nothing (warned then)
        logger.warning(
            "the full checkpoint's agent state %s holds no file (the agent's save(path) wrote none): %s goes on as "
            "built, not as it was when the checkpoint was written.",
            entry["path"],
            type(agent).__name__,
        )
        return
    agent.load(entry["state"] if "state" in entry else entry["path"])


def restored_env(saved: FullCheckpoint | None) -> Any:
    """The env of a full checkpoint, as it was (None when there is no checkpoint or the env did not pickle)."""
    if saved is None or saved.env is None:
        return None
    kept = cloudpickle.loads(saved.env)
    if not isinstance(kept, dict):  # written before the simulators' states were kept
        return kept
    simulator_state.restore(kept["env"], kept["simulators"])
    return kept["env"]


def continue_run(saved: FullCheckpoint, env: Any, agent: Any, seed: int) -> LoopState:
    """Load the agent's state and return the :class:`~online_trainer.loop.steps.LoopState` the run goes on from.

    With the env in the checkpoint the loop goes on with the observation it was about to act
    on; without, the env is reset with :func:`restart_seed` and episodes in progress are dropped.

    Raises:
        ValueError: the env has another number of sub-envs than the checkpoint's run.
    """
    if env.num_envs != saved.num_envs:
        raise ValueError(
            f"num_envs={env.num_envs}, but run {saved.run} was checkpointed with "
            f"num_envs={saved.num_envs}: resume with the env the experiment ran with."
        )
    load_agent(agent, saved.agent)
    loop = saved.loop
    if saved.env is not None:
        return loop
    if saved.normalization is not None:  # before the reset: its observations are standardised as the run's were
        normalization.restore_running_state(env, saved.normalization)
    restart = restart_seed(seed, loop.global_step)
    # a warning: the resume is not exact from here, which only the manifest's env_restored said (tester F16)
    logger.warning(
        "run %d: its env was not in the checkpoint (it does not pickle, or could not be put back exactly): "
        "reset with seed %d at step %d; "
        "the episodes in progress were dropped, so its records from here differ from an uninterrupted run's",
        saved.run,
        restart,
        loop.global_step,
    )
    obs, _ = env.reset(seed=restart)
    return LoopState(loop.global_step, loop.episodes, obs)


def restored_tracker(saved: FullCheckpoint, fresh: EpisodeTracker) -> EpisodeTracker:
    """``fresh`` (a new tracker of the run) set to the checkpoint's when its env was kept; else numbering on from
    it, with the records it kept."""
    if saved.env is not None:
        fresh.from_state(saved.tracker)
    else:
        fresh.number_from(saved.loop.episodes, saved.tracker["table"])
    fresh.start_time = time.perf_counter() - saved.elapsed
    return fresh


def restart_point(exp_dir: str | os.PathLike, run: int, continue_run: bool = True) -> CheckpointHeader | None:
    """The header of the full checkpoint run ``run`` continues from; None when it starts again, its partial
    streams and its checkpoint removed.

    Args:
        exp_dir: the experiment directory.
        run: the run's number.
        continue_run: continue from the full checkpoint (False: start again whatever there is).
    """
    header = read(exp_dir, run, header_only=True) if continue_run else None
    if header is None:
        for path in (
            storage.metrics_path(exp_dir, run),
            storage.evaluations_path(exp_dir, run),
            storage.resume_path(exp_dir, run),
        ):
            path.unlink(missing_ok=True)  # a run that starts again from its first step
        for video in storage.video_dir(exp_dir, run).glob("eval*_step*.mp4"):
            video.unlink(missing_ok=True)  # of evaluations its stream no longer holds
    return header
