"""Deep Q-Network (optionally Double DQN) for Discrete action spaces."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from online_trainer.agents._base import AgentBase, require
from online_trainer.agents._encoders import ObsEncoder, feature_layers
from online_trainer.agents._networks import ACTIVATIONS, adam, flush_denormals, mlp, resolve_device
from online_trainer.agents._replay import ReplayBuffer


@dataclasses.dataclass(frozen=True, kw_only=True)
class DQNConfig:
    """Hyperparameters of :class:`DQNAgent`. Step counts are real env transitions, summed over sub-envs."""

    KNOWN_AS: ClassVar[dict[str, str]] = {
        "learning_rate": "lr",
        "exploration_final_eps": "epsilon_end",
        "exploration_initial_eps": "epsilon_start",
        "end_e": "epsilon_end",
        "start_e": "epsilon_start",
        "net_arch": "hidden_sizes",
        "target_network_frequency": "target_update_interval",
        "exploration_fraction": "exploration_steps",
    }
    """Other libraries' names of these fields (Stable-Baselines3's, CleanRL's), named in the error of an unknown key."""

    lr: float = 2.5e-4
    """Adam learning rate (the initial one when ``lr_decay_steps`` > 0)."""
    lr_end: float = 0.0
    """Learning rate reached after ``lr_decay_steps`` (used only when ``lr_decay_steps`` > 0)."""
    lr_decay_steps: int = 0
    """Transitions over which the learning rate falls linearly from ``lr`` to ``lr_end``,
    then stays there (0: constant ``lr``)."""
    gamma: float = 0.99
    """Discount factor."""
    buffer_size: int = 100_000
    """Replay buffer capacity."""
    batch_size: int = 64
    """Transitions per gradient step."""
    learning_starts: int = 1000
    """Transitions collected with uniformly random actions, and no gradient step, before learning
    starts (as SB3's ``learning_starts``). Epsilon still falls from step 0."""
    train_freq: int = 4
    """Transitions between two training rounds."""
    gradient_steps: int = 1
    """Gradient steps per training round."""
    target_update_interval: int = 1000
    """Transitions between two target-network updates."""
    tau: float = 1.0
    """Target update ``target = tau * online + (1 - tau) * target`` (1.0: hard copy)."""
    epsilon_start: float = 1.0
    """Exploration rate at step 0."""
    epsilon_end: float = 0.05
    """Exploration rate after ``exploration_steps``."""
    exploration_steps: int = 10_000
    """Transitions over which epsilon falls linearly from start to end."""
    double_dqn: bool = True
    """Pick the next action with the online network and evaluate it with the target one."""
    max_grad_norm: float | None = 10.0
    """Clip the global gradient norm to this value (None: no clipping)."""
    loss: str = "huber"
    """TD loss: ``"huber"`` (smooth L1) or ``"mse"``."""
    hidden_sizes: tuple[int, ...] = (64, 64)
    """Widths of the hidden layers of the Q-network."""
    activation: str = "relu"
    """Hidden activation: ``"relu"`` or ``"tanh"``."""
    log_interval: int = 100
    """Gradient steps between two ``call_back`` reports of loss and Q-values."""
    save_buffer: bool = False
    """Include the replay buffer's transitions in :meth:`DQNAgent.save` (counters always are). Off by
    default: checkpoints stay small, and a run resumed from one refills its buffer from empty."""
    cnn_features: int = 512
    """Width of the CNN encoder's output for image observations (unused for vectors)."""
    log_step_values: bool = False
    """When True, :meth:`DQNAgent.log` returns per-sub-env ``q`` and ``epsilon`` each step."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "hidden_sizes", tuple(int(h) for h in self.hidden_sizes))
        require(self.lr > 0, "lr", self.lr, "> 0")
        require(self.lr_end >= 0, "lr_end", self.lr_end, ">= 0")
        require(self.lr_decay_steps >= 0, "lr_decay_steps", self.lr_decay_steps, ">= 0")
        require(0 <= self.gamma <= 1, "gamma", self.gamma, "in [0, 1]")
        for name in (
            "buffer_size",
            "batch_size",
            "train_freq",
            "gradient_steps",
            "target_update_interval",
            "log_interval",
            "cnn_features",
        ):
            require(getattr(self, name) >= 1, name, getattr(self, name), ">= 1")
        for name in ("learning_starts", "exploration_steps"):
            require(getattr(self, name) >= 0, name, getattr(self, name), ">= 0")
        require(0 < self.tau <= 1, "tau", self.tau, "in (0, 1]")
        require(0 <= self.epsilon_start <= 1, "epsilon_start", self.epsilon_start, "in [0, 1]")
        require(0 <= self.epsilon_end <= 1, "epsilon_end", self.epsilon_end, "in [0, 1]")
        require(
            self.max_grad_norm is None or self.max_grad_norm > 0, "max_grad_norm", self.max_grad_norm, "> 0 or None"
        )
        require(self.loss in ("huber", "mse"), "loss", self.loss, "'huber' or 'mse'")
        require(all(h >= 1 for h in self.hidden_sizes), "hidden_sizes", self.hidden_sizes, "positive widths")
        require(self.activation in ACTIVATIONS, "activation", self.activation, f"one of {sorted(ACTIVATIONS)}")


class DQNAgent(AgentBase):
    """DQN with a replay buffer, a target network and a linear epsilon schedule.

    Every ``train_freq`` real transitions (once ``learning_starts`` are collected) it takes
    ``gradient_steps`` gradient steps on batches drawn from the replay buffer. The target
    is ``r + gamma * Q_target(s', a*)`` with ``a*`` from the online network (Double DQN)
    or the target network; it bootstraps on truncation (``next_obs`` is the true final
    observation) but not on termination. Entries with ``valid`` False never reach the
    buffer or the step counters. Every ``log_interval`` gradient steps ``call_back``
    receives the mean ``loss``, ``q_mean``, the current ``epsilon`` and ``gradient_steps``.

    ``save(path)`` writes ``path + ".pt"``, loadable with ``torch.load(..., weights_only=True)``:
    networks, optimiser, counters, generators and (``save_buffer``) the buffer.

    Args:
        env: gymnasium ``VectorEnv`` (or ``Env``) with a ``Discrete`` action space and a
            ``Box``, ``Discrete`` (one-hot encoded) or ``MultiBinary`` observation space.
        device: torch device of the networks (``"cpu"`` or ``"cuda"``).
        seed: seed used until :meth:`reset` is called.
        **hyperparameters: fields of :class:`DQNConfig`.
    """

    Config = DQNConfig
    STRUCTURAL = frozenset({"hidden_sizes", "activation", "buffer_size", "cnn_features"})

    def __init__(
        self, env: Any, *, device: str | torch.device = "cpu", seed: int | None = None, **hyperparameters: Any
    ) -> None:
        self.device = resolve_device(device)
        super().__init__(env, seed=seed, **hyperparameters)

    def _check_spaces(self) -> None:
        if not isinstance(self.action_space, gym.spaces.Discrete):
            raise ValueError(f"DQNAgent needs a Discrete action space but got action_space={self.action_space}.")
        self.encoder = ObsEncoder(self.observation_space)
        self._n_actions = int(self.action_space.n)
        self._act_start = int(self.action_space.start)

    def _build(self) -> None:
        cfg = self.config
        features, width = feature_layers(self.observation_space, cfg.cnn_features, self.torch_gen)
        head = mlp((width, *cfg.hidden_sizes, self._n_actions), cfg.activation, self.torch_gen)
        self.q_net = nn.Sequential(*features, *head).to(self.device)
        self.target_net = copy.deepcopy(self.q_net).requires_grad_(False)
        self.optimizer = adam(self.q_net.parameters(), cfg.lr)
        self.buffer = ReplayBuffer(cfg.buffer_size, self.encoder.storage_shape, self.encoder.storage_dtype)
        self.gradient_steps_done = 0
        # sums of detached tensors between two reports (a float after a report)
        self._loss_sum: torch.Tensor | float = 0.0
        self._q_sum: torch.Tensor | float = 0.0
        self._n_logged = 0
        self._resize(self.num_envs)

    def _resize(self, num_envs: int) -> None:
        self._pending: tuple[np.ndarray, np.ndarray] | None = None
        self._last: tuple[np.ndarray, np.ndarray] | None = None

    def _apply_config(self, changed: set[str]) -> None:
        if changed & {"lr", "lr_end", "lr_decay_steps"}:
            self._set_lr()

    @property
    def learning_rate(self) -> float:
        """Current learning rate (linear in the number of real transitions seen when ``lr_decay_steps`` > 0)."""
        cfg = self.config
        if cfg.lr_decay_steps == 0:
            return cfg.lr
        frac = min(1.0, self.steps / cfg.lr_decay_steps)
        return cfg.lr + frac * (cfg.lr_end - cfg.lr)

    def _set_lr(self) -> None:
        lr = self.learning_rate
        for group in self.optimizer.param_groups:
            group["lr"] = lr

    @property
    def epsilon(self) -> float:
        """Current exploration rate (linear in the number of real transitions seen)."""
        cfg = self.config
        frac = 1.0 if cfg.exploration_steps == 0 else min(1.0, self.steps / cfg.exploration_steps)
        return cfg.epsilon_start + frac * (cfg.epsilon_end - cfg.epsilon_start)

    def _features(self, packed: np.ndarray) -> torch.Tensor:
        return torch.as_tensor(self.encoder(packed), device=self.device)

    def act(self, obs: np.ndarray) -> np.ndarray:
        """Epsilon-greedy actions in training mode (uniformly random ones for the first
        ``learning_starts`` transitions), greedy ones after :meth:`eval`."""
        packed = self.encoder.pack(obs)
        n = int(packed.shape[0])
        cfg = self.config
        exploration: tuple[np.ndarray, np.ndarray] | None = None  # which sub-envs explore, and random actions
        if self.training:
            if self.steps < cfg.learning_starts:
                explore = np.ones(n, dtype=bool)
            else:
                explore = self.np_rng.random(n) < self.epsilon
            exploration = (explore, self.np_rng.integers(self._n_actions, size=n))
        actions: np.ndarray
        if exploration is not None and exploration[0].all() and not cfg.log_step_values:
            actions = exploration[1]  # no sub-env acts greedily: the Q-values are not needed
        else:
            with torch.inference_mode():
                q = self.q_net(self._features(packed)).cpu().numpy()
            greedy = q.argmax(axis=1)
            actions = greedy if exploration is None else np.where(exploration[0], exploration[1], greedy)
            if self.training and cfg.log_step_values:
                self._last = (q[np.arange(n), actions], np.ones(n, dtype=bool))
        if self.training:
            self._pending = (np.array(packed, copy=True), actions)
        return actions + self._act_start

    def update(
        self,
        next_obs: np.ndarray,
        reward: np.ndarray,
        terminated: np.ndarray,
        truncated: np.ndarray,
        call_back: Callable[[dict[str, Any]], None] | None = None,
        valid: np.ndarray | None = None,
    ) -> None:
        """Store the real transitions of this step, then train and update the target on schedule.

        Raises:
            RuntimeError: when called in training mode without a preceding :meth:`act`.
        """
        step = self._pending_step(valid)
        if step is None:
            return
        (obs, actions), real = step
        if self._last is not None:
            self._last = (self._last[0], real)
        n_real = int(np.count_nonzero(real))
        if n_real == 0:
            return
        self.buffer.add(
            obs[real],
            actions[real],
            np.asarray(reward)[real],
            self.encoder.pack(next_obs)[real],
            np.asarray(terminated, dtype=bool)[real],
        )
        cfg = self.config
        before, self.steps = self.steps, self.steps + n_real
        if self.steps >= cfg.learning_starts and len(self.buffer) >= cfg.batch_size:
            rounds = self.steps // cfg.train_freq - before // cfg.train_freq
            if rounds:
                self._train(rounds * cfg.gradient_steps, call_back)
        if self.steps // cfg.target_update_interval > before // cfg.target_update_interval:
            self._update_target()

    @flush_denormals()
    def _train(self, n_steps: int, call_back: Callable[[dict[str, Any]], None] | None) -> None:
        """``n_steps`` gradient steps. The batches are drawn together, and without Double DQN their
        targets are computed in one forward pass (the target network does not change in between)."""
        cfg = self.config
        self._set_lr()
        loss_fn = nn.functional.smooth_l1_loss if cfg.loss == "huber" else nn.functional.mse_loss
        batch = self.buffer.sample(self.np_rng, cfg.batch_size * n_steps)
        obs = self._features(batch["obs"]).split(cfg.batch_size)
        actions = torch.as_tensor(batch["actions"], device=self.device).unsqueeze(1).split(cfg.batch_size)
        rewards = torch.as_tensor(batch["rewards"], device=self.device)
        not_terminal = torch.as_tensor(~batch["terminated"], device=self.device, dtype=torch.float32)
        next_obs = self._features(batch["next_obs"])
        if cfg.double_dqn:
            next_obs_split, rewards_split = next_obs.split(cfg.batch_size), rewards.split(cfg.batch_size)
            not_terminal_split = not_terminal.split(cfg.batch_size)
        else:
            targets = self.td_targets(rewards, next_obs, not_terminal).split(cfg.batch_size)
        params = list(self.q_net.parameters())
        for i in range(n_steps):
            if cfg.double_dqn:
                target = self.td_targets(rewards_split[i], next_obs_split[i], not_terminal_split[i])
            else:
                target = targets[i]
            q = self.q_net(obs[i]).gather(1, actions[i]).squeeze(1)
            loss = loss_fn(q, target)
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if cfg.max_grad_norm is not None:
                nn.utils.clip_grad_norm_(params, cfg.max_grad_norm, foreach=True)
            self.optimizer.step()
            self.gradient_steps_done += 1
            if call_back is not None:
                self._loss_sum += loss.detach()
                self._q_sum += q.detach().mean()
                self._n_logged += 1
                if self.gradient_steps_done % cfg.log_interval == 0:
                    call_back(
                        {
                            "loss": float(self._loss_sum) / self._n_logged,
                            "q_mean": float(self._q_sum) / self._n_logged,
                            "epsilon": self.epsilon,
                            "gradient_steps": self.gradient_steps_done,
                        }
                    )
                    self._loss_sum = self._q_sum = 0.0
                    self._n_logged = 0

    @torch.no_grad()
    def td_targets(self, rewards: torch.Tensor, next_obs: torch.Tensor, not_terminal: torch.Tensor) -> torch.Tensor:
        """``r + gamma * (1 - terminated) * Q_target(s', a*)``; ``a*`` from the online net if ``double_dqn``."""
        next_q = self.target_net(next_obs)
        source = self.q_net(next_obs) if self.config.double_dqn else next_q
        best = source.argmax(dim=1, keepdim=True)
        return rewards + self.config.gamma * not_terminal * next_q.gather(1, best).squeeze(1)

    def _update_target(self) -> None:
        tau = self.config.tau
        if tau == 1.0:
            self.target_net.load_state_dict(self.q_net.state_dict())
            return
        with torch.no_grad():
            for target, online in zip(self.target_net.parameters(), self.q_net.parameters()):
                target.lerp_(online, tau)

    def log(self) -> list[dict[str, np.ndarray] | None] | None:
        """Per-sub-env ``q`` (of the action taken) and ``epsilon`` (``log_step_values`` only)."""
        if self._last is None or not self.training or not self.config.log_step_values:
            return None
        q, real = self._last
        eps = np.array([self.epsilon])
        return [{"q": q[i : i + 1], "epsilon": eps} if real[i] else None for i in range(len(q))]

    def _state(self) -> dict[str, Any]:
        return {
            "q_net": self.q_net.state_dict(),
            "target_net": self.target_net.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "gradient_steps": self.gradient_steps_done,
            # the report in progress, so that a resumed run logs the means an uninterrupted one logs
            "report": [float(self._loss_sum), float(self._q_sum), self._n_logged],
        }

    def _buffer_state(self, data: bool) -> dict[str, Any]:
        return {"buffer": self.buffer.state_dict(with_data=data)}

    def _load_state(self, state: dict[str, Any]) -> None:
        self.q_net.load_state_dict(state["q_net"])
        self.target_net.load_state_dict(state["target_net"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.buffer.load_state_dict(state["buffer"])
        self.gradient_steps_done = int(state["gradient_steps"])
        if "report" in state:
            loss_sum, q_sum, n_logged = state["report"]
            # on the agent's device: the next update adds its CUDA losses to them (a checkpoint loads on the CPU)
            self._loss_sum = torch.tensor(loss_sum, device=self.device)
            self._q_sum = torch.tensor(q_sum, device=self.device)
            self._n_logged = int(n_logged)
        self._set_lr()
