"""Per-sub-env episode book-keeping that knows gymnasium's autoreset modes.

Only real transitions count: under ``AutoresetMode.NEXT_STEP`` the step after an episode
ends is the sub-env's reset step, which is neither counted in the next episode's length,
summed into its return, recorded as an action or transition, nor reported as an env step.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np
from gymnasium.spaces import Space
from gymnasium.vector import AutoresetMode

from online_trainer.loop.action_history import ActionHistory
from online_trainer.loop.spaces import BatchSplitter
from online_trainer.records.episode_table import EpisodeTable

try:  # numpy's own count, without the keyword handling of np.count_nonzero around it (a third of a microsecond a step)
    from numpy._core.multiarray import count_nonzero as _count_nonzero
except ImportError:  # numpy 1.x
    from numpy.core.multiarray import count_nonzero as _count_nonzero  # type: ignore[no-redef]


class EpisodeTracker:
    """Accumulates returns, lengths, actions and optional extras per sub-env.

    Observations and actions may belong to any gymnasium space; each transition holds sub-env
    ``i``'s own observation and action in the single-env space's structure (a dict for a
    ``Dict`` space, a tuple for a ``Tuple`` space, an array row for array spaces).

    A step costs a few operations, whatever the episode lengths and with no per-sub-env work
    in Python: actions go to a preallocated buffer, an episode's length is the number of steps
    since it started (its action rows, or a step count when actions are not kept), less its
    reset step, and returns are summed in float64 in step order. Episodes that end on the
    same step are closed together (:meth:`close`: a few array operations for all of them);
    their records reach :attr:`table` (an :class:`~online_trainer.records.episode_table.EpisodeTable`)
    when :meth:`seal` is called, which copies the actions of every episode closed since the
    last call out of the buffer in one go.

    Args:
        num_envs: the number of sub-envs.
        autoreset_mode: the vector env's autoreset mode.
        keep_transitions: keep ``(obs, action, reward, terminated, truncated)`` of every real
            transition in the episode records.
        keep_frames: keep the frames given to :meth:`add_frames` in the episode records.
        keep_actions: keep each episode's actions (see :class:`ActionHistory`).
        observation_space: the single-env observation space; ``None`` to infer it from the
            first batch (see :func:`online_trainer.loop.spaces.infer_space`).
        action_space: the single-env action space; ``None`` to infer it likewise.
        frames_trigger: which episodes keep their frames: ``k`` (episodes ``k, 2k, ...``), a
            callable ``episode_index -> bool`` (asked once per episode), or None (every one).
            The others' records hold no frames. With one sub-env the frames an episode will
            not keep are not rendered (see :meth:`wants_frame`), unless ``render_each_step`` (the run draws the first
            frame once whatever the trigger, as its check that the env draws).
        render_each_step: call ``env.render()`` at every step whatever the trigger: the env's
            ``render()`` hands over the frames drawn since its last call (``rgb_array_list``).
        agent_seed: the run's seed, in every record.

    Attributes:
        valid: ``valid[i]`` is True when sub-env ``i``'s entry of the current step is a real
            transition. It is the array handed to agents as ``update(..., valid=...)``; kept up
            to date while ``keep_valid`` is True (the loop sets it False when neither the agent
            nor kept transitions read it: one array operation a step saved).
        done: ``terminated | truncated`` of the current step.
        ended: whether any sub-env's episode ended at the current step (``done.any()``).
        resetting: the sub-envs whose entry of the current step is not a transition (their
            reset step under NEXT_STEP); while it is not empty :meth:`end_step` must run even
            when no episode ended.
    """

    def __init__(
        self,
        num_envs: int,
        autoreset_mode: AutoresetMode,
        keep_transitions: bool = False,
        keep_frames: bool = False,
        keep_actions: bool = True,
        observation_space: Space[Any] | None = None,
        action_space: Space[Any] | None = None,
        frames_trigger: int | Callable[[int], bool] | None = None,
        render_each_step: bool = False,
        agent_seed: int = 0,
    ) -> None:
        self.num_envs = num_envs
        self._single = num_envs == 1
        self.mode = autoreset_mode
        self._reset_skip = 1 if autoreset_mode is AutoresetMode.NEXT_STEP else 0
        self.returns = np.zeros(num_envs, dtype=np.float64)
        self.valid = np.ones(num_envs, dtype=bool)
        self.done = np.zeros(num_envs, dtype=bool)
        self._return = 0.0  # with one sub-env, its return so far (returns[0] is set from it when read)
        self.ended = False
        self.resetting: list[int] = []
        self.keep_valid = True  # the loop turns it off when nothing reads valid (see end_step)
        # Without kept actions, lengths come from these (with them, from the action rows).
        self._steps = 0  # env steps observed
        self._starts = [0] * num_envs  # the step at which each sub-env's episode began
        self.actions = ActionHistory(num_envs, space=action_space) if keep_actions else None
        self.transitions: list[list[Any]] | None = [[] for _ in range(num_envs)] if keep_transitions else None
        self._split_obs = BatchSplitter(num_envs, observation_space)
        self._split_actions = BatchSplitter(num_envs, action_space)
        self.frames: list[list[Any]] | None = [[] for _ in range(num_envs)] if keep_frames else None
        self._next_frames: list[list[Any]] = [[] for _ in range(num_envs)]
        self._trigger = frames_trigger
        self._triggered: dict[int, bool] = {}  # a callable trigger's answers, until the episode ends
        self._finished = 0  # the index of the last episode closed
        # With one sub-env, the episode a frame belongs to is known when it is rendered. With
        # several, episodes are numbered in the order they end, so an episode's index is known
        # only then: every step is rendered, and frames an episode does not keep are dropped.
        self.film_always = frames_trigger is None or num_envs > 1 or render_each_step
        self.logs: list[list[dict[str, Any]]] = [[] for _ in range(num_envs)]
        self._has_logs = False  # some entry of agent.log() was kept
        self._extras = keep_transitions or keep_frames
        self.start_time = time.perf_counter()
        self.table = EpisodeTable(agent_seed)
        # Reads the raw scores of the episodes the loop closes (RecordEpisodeStatistics); set by the run
        self.raw: Any = None
        self.closed = 0  # episodes closed (sealed or not)
        self.last_return: float | None = None  # of the last episode closed (what the progress bar shows)
        self.new_frames = False  # an episode that keeps frames was closed (the run clears this)
        # Closed episodes not yet sealed into the table: their returns, lengths, steps and times.
        self._returns: list[float] = []
        self._lengths: list[int] = []
        self._at_step: list[int] = []
        self._at_time: list[float] = []
        self._objects: list[Any] = []  # the actions of those episodes when they are not arrays

    def observe(self, obs: Any, actions: Any, reward: np.ndarray, terminated: np.ndarray, truncated: np.ndarray) -> int:
        """Book-keep one env step and return how many of its entries are real transitions."""
        if self.actions is not None:
            self.actions.append(actions)
        else:
            self._steps += 1
        returns, resetting = self.returns, self.resetting
        if self._single:  # Python scalars: a third of the cost of the array operations below for one element
            ended = bool(terminated[0]) or bool(truncated[0])
            if ended is not self.ended:  # done mirrors ended: written when it changes, not at every step
                self.done[0] = ended
            self.ended = ended
            # the return in a Python float (float64, as below); returns[0] is set from it when it is read
            self._return = 0.0 if resetting else self._return + float(reward[0])
            if self.transitions is not None:
                self._keep_transitions(obs, actions, reward, terminated, truncated)
            return 0 if resetting else 1
        done = self.done
        np.logical_or(terminated, truncated, out=done)
        self.ended = bool(_count_nonzero(done))
        returns += reward
        real = self.num_envs
        if resetting:  # their entries are reset steps (NEXT_STEP): no reward of theirs counts
            for i in resetting:
                returns[i] = 0.0
            real -= len(resetting)
        if self.transitions is not None:
            self._keep_transitions(obs, actions, reward, terminated, truncated)
        return real

    def _keep_transitions(
        self, obs: Any, actions: Any, reward: np.ndarray, terminated: np.ndarray, truncated: np.ndarray
    ) -> None:
        obs, actions = self._split_obs(obs), self._split_actions(actions)
        transitions = self.transitions
        assert transitions is not None  # called only when transitions are kept
        for i in np.flatnonzero(self.valid):
            transitions[i].append((obs[i], actions[i], float(reward[i]), bool(terminated[i]), bool(truncated[i])))

    def end_step(self, ended: bool, envs: list[int] | None = None) -> None:
        """Prepare ``valid`` for the next step (after the agent's update of this one).

        ``envs``: the sub-envs whose episodes ended at this step, when the caller has them
        (else they are read from :attr:`done`).
        """
        if self._reset_skip and (ended or self.resetting):
            if self.keep_valid:
                np.logical_not(self.done, out=self.valid)
            if not ended:
                self.resetting = []
            else:
                self.resetting = self.done.nonzero()[0].tolist() if envs is None else envs

    def add_logs(self, entries: list[dict[str, Any] | None] | None) -> None:
        """Keep the per-sub-env entries ``agent.log()`` returned after this step's update.

        Only real transitions' entries belong to an episode: the entries of sub-envs whose
        step is not one (:attr:`resetting`: a reset step under NEXT_STEP) are dropped.

        Raises:
            TypeError: ``entries`` is not a list (or tuple) of one entry per sub-env.
        """
        if entries is None:
            return
        if not isinstance(entries, (list, tuple)) or len(entries) != self.num_envs:
            name = type(entries).__name__
            what = f"{len(entries)} entries" if isinstance(entries, (list, tuple)) else f"a value of type {name}"
            raise TypeError(
                f"agent.log() returned {what}, but it must return None or a list of one entry per sub-env "
                f"(num_envs={self.num_envs}): [entry_0, ..., entry_{self.num_envs - 1}], each a dict or None."
            )
        resetting = self.resetting
        for i, entry in enumerate(entries):
            if entry is not None and i not in resetting:
                self.logs[i].append(entry)
                self._has_logs = True

    def add_frames(self, frames: Any, after_reset: np.ndarray | None = None) -> None:
        """Attach the frames of ``env.render()`` to each sub-env's episode.

        Args:
            frames: one frame (``rgb_array``, ``ansi``) or list of frames
                (``rgb_array_list``) per sub-env.
            after_reset: when given, only these sub-envs' frames are kept (the trainer's own
                reset of finished sub-envs under ``AutoresetMode.DISABLED``).
        """
        if self.frames is None or frames is None:
            return
        same_step = self.mode is AutoresetMode.SAME_STEP
        for i, frame in enumerate(frames):
            if after_reset is not None and not after_reset[i]:
                continue
            # Under SAME_STEP the frame of a finishing step already shows the reset state.
            target = self._next_frames[i] if same_step and self.done[i] and after_reset is None else self.frames[i]
            if isinstance(frame, list):
                target.extend(frame)
            elif frame is not None:
                target.append(frame)

    def keeps_frames(self, episode_index: int) -> bool:
        """Whether the ``episode_index``-th episode keeps its frames (asks the trigger once)."""
        trigger = self._trigger
        if trigger is None:
            return True
        if isinstance(trigger, int):
            return episode_index % trigger == 0
        kept = self._triggered.get(episode_index)
        if kept is None:
            kept = self._triggered[episode_index] = bool(trigger(episode_index))
        return kept

    def wants_frame(self, after_reset: bool = False) -> bool:
        """Whether to call ``env.render()`` now: after :meth:`observe` (or before the first step).

        True when some episode the frame belongs to may keep it: always with several sub-envs
        (their episodes are numbered when they end) and without a trigger; with one sub-env,
        when the trigger keeps the current episode, or under SAME_STEP at an episode's last step
        the next one (that frame shows its reset state). ``after_reset``: the frame after the
        runner's own reset of finished sub-envs (AutoresetMode.DISABLED), after :meth:`finish`.
        """
        if self.film_always:
            return True
        index = self._finished + 1
        if self.ended and not after_reset and self.mode is AutoresetMode.SAME_STEP:
            index += 1
        return self.keeps_frames(index)

    def close(self, envs: list[int], global_step: int, mask: np.ndarray | None = None) -> tuple[list[float], list[int]]:
        """Close the episodes of sub-envs ``envs`` (ascending), ended at this step.

        ``mask``: a boolean array true for exactly ``envs`` (:attr:`done`, when every episode
        that ended is closed), which spares a conversion.

        They become the run's next episodes, in the order of ``envs``; their records reach
        :attr:`table` at the next :meth:`seal`. The work is a few Python operations per
        episode: a step ends a handful of episodes even with many sub-envs, too few for
        array operations to pay.

        Returns:
            The episodes' returns and lengths.
        """
        returns, history, skip = self.returns, self.actions, self._reset_skip
        if self._single:
            returns[0] = self._return
        ep_returns = list(map(returns.item, envs))
        self.last_return = ep_returns[-1]
        if not skip:  # under NEXT_STEP observe() zeroes them at their reset step
            for i in envs:
                returns[i] = 0.0
            self._return = 0.0
        if history is not None and history.is_array:
            lengths = history.close(envs, skip, mask)
        elif history is not None:
            lengths = []
            for i in envs:
                lengths.append(history.t - history.start[i])
                self._objects.append(history.episode(i))
                history.restart(i, skip)
        else:
            starts, steps = self._starts, self._steps
            lengths = [steps - starts[i] for i in envs]
            for i in envs:
                starts[i] = steps + skip
        if self._extras or self._has_logs:
            self._close_extras(envs)
        # Flat lists of numbers: per-step lists or tuples kept until the next seal would be objects the
        # garbage collector tracks, and promotes, and then scans in full collections.
        count = len(envs)
        self._returns += ep_returns
        self._lengths += lengths
        self._at_step += [global_step] * count
        self._at_time += [time.perf_counter() - self.start_time] * count
        self.closed += count
        return ep_returns, lengths

    def running_lengths(self) -> list[int]:
        """The length so far of every sub-env's episode in progress (a tracker that keeps no actions)."""
        steps = self._steps
        return [max(0, steps - start) for start in self._starts]

    def restarted(self, envs: list[int]) -> None:
        """Sub-envs ``envs``, whose episodes were just closed, were reset by the caller (not by the env's
        autoreset): their next step is a real transition, whatever the autoreset mode."""
        history = self.actions
        self._return = 0.0
        for i in envs:
            self.returns[i] = 0.0
            if history is not None:
                history.restart(i, 0)
            else:
                self._starts[i] = self._steps
        if self.resetting:
            self.resetting = [i for i in self.resetting if i not in envs]
        self.valid[envs] = True

    def finish(self, i: int, global_step: int = 0) -> dict[str, Any]:
        """Close sub-env ``i``'s episode alone and return its record (the loop closes episodes in batches)."""
        self.close([i], global_step)
        self.seal()
        return self.table.records(self.closed - 1, self.closed)[0]

    def unsealed(self) -> tuple[list[float], list[int]]:
        """The returns and lengths of the episodes closed since the last :meth:`seal` (read them, do not change them)."""
        return self._returns, self._lengths

    def seal(self) -> None:
        """Hand the episodes closed since the last call to :attr:`table`."""
        if not self._returns:
            return
        history = self.actions
        if history is not None and history.is_array:
            self.table.add_slabs(self._returns, self._lengths, self._at_step, self._at_time, history.take())
        else:
            actions = None
            if history is not None:
                actions, self._objects = self._objects, []
            self.table.add(self._returns, self._lengths, self._at_step, self._at_time, actions)
        self._returns, self._lengths, self._at_step, self._at_time = [], [], [], []

    def to_state(self, keep_table: bool = True) -> dict[str, Any]:
        """Every sub-env's episode in progress (return, actions, logs, transitions, frames), the closed episodes not
        yet sealed, and the table's records (with ``keep_table``; else none, numbered on from its count), as plain
        data: what a full checkpoint keeps. The configuration (spaces, trigger, modes) is the run's, not saved."""
        table = self.table
        if not keep_table:  # the records are in the metrics stream
            table = EpisodeTable(table.agent_seed)
            table.first = self.table.count
        return {
            "num_envs": self.num_envs,
            "returns": np.array([self._return]) if self._single else self.returns.copy(),
            "valid": self.valid.copy(),
            "resetting": list(self.resetting),
            "steps": self._steps,
            "starts": list(self._starts),
            "actions": None if self.actions is None else self.actions.to_state(),
            "transitions": self.transitions,
            "frames": self.frames,
            "next_frames": self._next_frames,
            "triggered": dict(self._triggered),
            "finished": self._finished,
            "logs": self.logs,
            "has_logs": self._has_logs,
            "closed": self.closed,
            "new_frames": self.new_frames,
            "unsealed": {
                "returns": self._returns,
                "lengths": self._lengths,
                "at_step": self._at_step,
                "at_time": self._at_time,
                "objects": self._objects,
            },
            "table": table.to_state(),
        }

    def from_state(self, state: dict[str, Any]) -> EpisodeTracker:
        """Set this tracker (new, built with the run's configuration) to the one :meth:`to_state` described, and
        return it.

        Raises:
            ValueError: the state is of a tracker of another number of sub-envs, or keeping actions differs.
        """
        if state["num_envs"] != self.num_envs or (state["actions"] is None) != (self.actions is None):
            raise ValueError(
                f"the saved episode tracker has num_envs={state['num_envs']} and keeps actions: "
                f"{state['actions'] is not None}; this run's: {self.num_envs}, {self.actions is not None}"
            )
        self.returns[:], self.valid[:] = state["returns"], state["valid"]
        self._return = self.returns.item(0)
        self.resetting, self._steps, self._starts = list(state["resetting"]), state["steps"], list(state["starts"])
        if self.actions is not None:
            self.actions.from_state(state["actions"])
        self.transitions, self.frames, self._next_frames = state["transitions"], state["frames"], state["next_frames"]
        self._triggered, self._finished, self.logs = dict(state["triggered"]), state["finished"], state["logs"]
        self._has_logs, self.closed, self.new_frames = state["has_logs"], state["closed"], state["new_frames"]
        unsealed = state["unsealed"]
        self._returns, self._lengths, self._at_step = unsealed["returns"], unsealed["lengths"], unsealed["at_step"]
        self._at_time, self._objects = unsealed["at_time"], unsealed["objects"]
        self.table = EpisodeTable.from_state(state["table"])
        return self

    def number_from(self, episodes: int, table: dict[str, Any]) -> None:
        """Go on from ``episodes`` closed episodes, with the table :meth:`to_state` kept (a run whose env restarts
        from a reset: the episodes in progress are dropped)."""
        self.table = EpisodeTable.from_state(table)
        self.closed = self._finished = episodes

    def _close_extras(self, envs: Any) -> None:
        """Hand the table the agent logs, transitions and frames of the episodes being closed."""
        table = self.table
        for position, i in enumerate(envs, start=self.closed):
            logs = self.logs[i]
            if logs:
                table.set_extra("agent_logs", position, _concat_logs(logs))
                self.logs[i] = []
            if self.transitions is not None:
                if self.transitions[i]:
                    table.set_extra("transitions", position, self.transitions[i])
                self.transitions[i] = []
            if self.frames is not None:
                index = position + 1
                if self.frames[i] and self.keeps_frames(index):
                    table.set_extra("frames", position, self.frames[i])
                    self.new_frames = True
                self._triggered.pop(index, None)
                self._finished = index
                self.frames[i] = self._next_frames[i]
                self._next_frames[i] = []


def _concat_logs(entries: list[dict[str, Any]]) -> dict[str, np.ndarray] | None:
    if not entries:
        return None
    keys = dict.fromkeys(key for entry in entries for key in entry)
    return {key: np.concatenate([np.atleast_1d(e[key]) for e in entries if key in e]) for key in keys}
