"""Soft Actor-Critic (Haarnoja et al. 2018) for Box action spaces, with automatic entropy tuning."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
import torch

from online_trainer.agents._base import AgentBase, require
from online_trainer.agents._encoders import ObsEncoder, feature_layers, space_shape
from online_trainer.agents._networks import ACTIVATIONS, adam, flush_denormals, resolve_device
from online_trainer.agents._replay import ReplayBuffer
from online_trainer.agents._sac_networks import SquashedGaussianActor, TwinQ


def parse_ent_coef(value: float | str) -> tuple[bool, float]:
    """``(tuned, initial value)`` of an ``ent_coef`` setting: ``"auto"``, ``"auto_<init>"`` or a number.

    Raises:
        ValueError: naming the value when it is none of these, or not positive.
    """
    if isinstance(value, str):
        init: float | None = 1.0 if value == "auto" else None
        if value.startswith("auto_"):
            try:
                init = float(value[len("auto_") :])
            except ValueError:
                init = None
        if init is None or not init > 0:
            raise ValueError(
                f"ent_coef must be 'auto', 'auto_<initial value>' such as 'auto_0.1', or a positive "
                f"number but got ent_coef={value!r}."
            )
        return True, init
    require(value > 0, "ent_coef", value, "> 0, 'auto' or 'auto_<initial value>'")
    return False, float(value)


@dataclasses.dataclass(frozen=True, kw_only=True)
class SACConfig:
    """Hyperparameters of :class:`SACAgent` (Stable-Baselines3's defaults). Step counts are real env
    transitions, summed over sub-envs."""

    KNOWN_AS: ClassVar[dict[str, str]] = {
        "learning_rate": "lr",
        "policy_lr": "lr",
        "q_lr": "lr",
        "net_arch": "hidden_sizes",
    }
    """Other libraries' names of these fields (Stable-Baselines3's, CleanRL's), named in the error of an unknown key."""

    lr: float = 3e-4
    """Adam learning rate of the actor, the critics and the entropy coefficient."""
    gamma: float = 0.99
    """Discount factor."""
    tau: float = 0.005
    """Polyak coefficient: ``target = tau * online + (1 - tau) * target`` after each target update."""
    buffer_size: int = 1_000_000
    """Replay buffer capacity."""
    batch_size: int = 256
    """Transitions per gradient step."""
    learning_starts: int = 100
    """Transitions collected with uniformly random actions, and no gradient step, before learning starts."""
    train_freq: int = 1
    """Transitions between two training rounds."""
    gradient_steps: int = 1
    """Gradient steps per training round."""
    target_update_interval: int = 1
    """Gradient steps between two Polyak updates of the target critics."""
    ent_coef: float | str = "auto"
    """Entropy coefficient alpha: ``"auto"`` (tuned, starting at 1.0), ``"auto_<init>"`` (tuned,
    starting at ``init``) or a fixed positive number."""
    target_entropy: float | None = None
    """Entropy the tuning aims at (None: minus the number of action dimensions)."""
    hidden_sizes: tuple[int, ...] = (256, 256)
    """Hidden widths of the actor and of each critic."""
    activation: str = "relu"
    """Hidden activation: ``"relu"`` or ``"tanh"``."""
    log_std_min: float = -20.0
    """Lower clamp of the policy's log std."""
    log_std_max: float = 2.0
    """Upper clamp of the policy's log std."""
    cnn_features: int = 512
    """Width of the CNN encoders' output for image observations (unused for vectors)."""
    log_interval: int = 100
    """Gradient steps between two ``call_back`` reports."""
    save_buffer: bool = False
    """Include the replay buffer's transitions in :meth:`SACAgent.save` (counters always are). Off by
    default: checkpoints stay small, and a run resumed from one refills its buffer from empty."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "hidden_sizes", tuple(int(h) for h in self.hidden_sizes))
        require(self.lr > 0, "lr", self.lr, "> 0")
        require(0 <= self.gamma <= 1, "gamma", self.gamma, "in [0, 1]")
        require(0 < self.tau <= 1, "tau", self.tau, "in (0, 1]")
        for name in (
            "buffer_size",
            "batch_size",
            "train_freq",
            "gradient_steps",
            "target_update_interval",
            "cnn_features",
            "log_interval",
        ):
            require(getattr(self, name) >= 1, name, getattr(self, name), ">= 1")
        require(self.learning_starts >= 0, "learning_starts", self.learning_starts, ">= 0")
        parse_ent_coef(self.ent_coef)
        require(
            self.log_std_min < self.log_std_max, "log_std_min", self.log_std_min, f"< log_std_max={self.log_std_max}"
        )
        require(all(h >= 1 for h in self.hidden_sizes), "hidden_sizes", self.hidden_sizes, "positive widths")
        require(self.activation in ACTIVATIONS, "activation", self.activation, f"one of {sorted(ACTIVATIONS)}")


class SACAgent(AgentBase):
    """SAC: a squashed-Gaussian actor, twin critics with Polyak-averaged targets, and automatic
    entropy tuning, learning from a replay buffer.

    The first ``learning_starts`` transitions are acted uniformly at random within the action
    bounds; then every ``train_freq`` real transitions it takes ``gradient_steps`` gradient
    steps, each in SB3's order: the entropy coefficient, the critics (target
    ``r + gamma * (1 - terminated) * (min_k Q'_k(s', a') - alpha * log pi(a'|s'))``, bootstrapped
    on truncation from the true final observation), then the actor. Entries with ``valid``
    False never reach the buffer or the counters. Actions are squashed to ``[-1, 1]`` and
    rescaled to the bounds; the buffer keeps them in ``[-1, 1]``. After :meth:`eval` actions
    are ``tanh`` of the mean. Every ``log_interval`` gradient steps ``call_back`` receives
    ``actor_loss``, ``critic_loss``, ``ent_coef``, ``q_mean`` and ``gradient_steps``.

    ``save(path)`` writes ``path + ".pt"`` (``torch.load(..., weights_only=True)``): networks,
    targets, optimisers, the entropy coefficient, counters, generators and (``save_buffer``)
    the buffer's transitions.

    Args:
        env: gymnasium ``VectorEnv`` (or ``Env``) with a bounded ``Box`` action space and a
            ``Box`` (vectors or images), ``Discrete``, ``MultiBinary`` or ``Dict`` observation space.
        device: torch device of the networks: ``"cpu"``, ``"cuda"`` or ``"auto"`` (CUDA when available).
        seed: seed used until :meth:`reset` is called.
        **hyperparameters: fields of :class:`SACConfig`.
    """

    Config = SACConfig
    STRUCTURAL = frozenset(
        {"hidden_sizes", "activation", "buffer_size", "ent_coef", "cnn_features", "log_std_min", "log_std_max"}
    )

    def __init__(
        self, env: Any, *, device: str | torch.device = "cpu", seed: int | None = None, **hyperparameters: Any
    ) -> None:
        self.device = resolve_device(device)
        super().__init__(env, seed=seed, **hyperparameters)

    def _check_spaces(self) -> None:
        space = self.action_space
        if not isinstance(space, gym.spaces.Box):
            raise ValueError(
                f"SACAgent needs a Box action space but got action_space={space}; for Discrete "
                f"actions use DQNAgent or PPOAgent."
            )
        if not (np.all(np.isfinite(space.low)) and np.all(np.isfinite(space.high))):
            raise ValueError(
                f"SACAgent needs a bounded Box action space (it squashes actions into the bounds) but "
                f"got action_space={space}; wrap the env with gymnasium.wrappers.RescaleAction or "
                f"ClipAction to give it bounds."
            )
        self.encoder = ObsEncoder(self.observation_space)
        self._action_dim = int(np.prod(space.shape))
        low, high = space.low.reshape(-1).astype(np.float64), space.high.reshape(-1).astype(np.float64)
        self._center, self._half = (high + low) / 2.0, (high - low) / 2.0

    def _build(self) -> None:
        cfg = self.config
        gen = self.torch_gen
        features, width = feature_layers(self.observation_space, cfg.cnn_features, gen)
        self.actor = SquashedGaussianActor(
            features, width, self._action_dim, cfg.hidden_sizes, cfg.activation, (cfg.log_std_min, cfg.log_std_max), gen
        ).to(self.device)
        features, width = feature_layers(self.observation_space, cfg.cnn_features, gen)
        self.critic = TwinQ(features, width, self._action_dim, cfg.hidden_sizes, cfg.activation, gen).to(self.device)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        self.actor_optimizer = adam(self.actor.parameters(), cfg.lr)
        self.critic_optimizer = adam(self.critic.parameters(), cfg.lr)
        self.tune_entropy, init = parse_ent_coef(cfg.ent_coef)
        self.log_ent_coef = torch.tensor(
            [np.log(init)], dtype=torch.float32, device=self.device, requires_grad=self.tune_entropy
        )
        self.ent_optimizer = adam([self.log_ent_coef], cfg.lr) if self.tune_entropy else None
        self.target_entropy = float(-self._action_dim if cfg.target_entropy is None else cfg.target_entropy)
        self.buffer = ReplayBuffer(
            cfg.buffer_size, self.encoder.storage_shape, self.encoder.storage_dtype, (self._action_dim,), np.float32
        )
        self.gradient_steps_done = 0
        self._stats: dict[str, torch.Tensor | float] = {}  # sums of detached tensors between two reports
        self._n_logged = 0
        self._pending: tuple[np.ndarray, np.ndarray] | None = None

    def _resize(self, num_envs: int) -> None:
        self._pending = None

    def _apply_config(self, changed: set[str]) -> None:
        lr = self.config.lr
        for optimizer in (self.actor_optimizer, self.critic_optimizer, self.ent_optimizer):
            for group in getattr(optimizer, "param_groups", ()):
                group["lr"] = lr
        target = self.config.target_entropy
        self.target_entropy = float(-self._action_dim if target is None else target)

    @property
    def ent_coef(self) -> float:
        """The current entropy coefficient alpha."""
        return float(self.log_ent_coef.detach().exp())

    # ----------------------------------------------------------------- acting
    def _features(self, packed: np.ndarray) -> torch.Tensor:
        return torch.as_tensor(self.encoder(packed), device=self.device)

    def _to_env(self, squashed: np.ndarray) -> np.ndarray:
        actions = self._center + self._half * squashed
        return actions.reshape(-1, *space_shape(self.action_space)).astype(self.action_space.dtype)

    def act(self, obs: np.ndarray) -> np.ndarray:
        """Sampled actions in training mode (uniformly random ones for the first ``learning_starts``
        transitions), ``tanh(mean)`` after :meth:`eval`."""
        packed = self.encoder.pack(obs)
        n = packed.shape[0]
        if not self.training:
            with torch.inference_mode():
                return self._to_env(self.actor.greedy(self._features(packed)).cpu().numpy())
        if self.steps < self.config.learning_starts:
            squashed = self.np_rng.uniform(-1.0, 1.0, size=(n, self._action_dim)).astype(np.float32)
        else:
            noise = torch.as_tensor(
                self.np_rng.standard_normal((n, self._action_dim), dtype=np.float32), device=self.device
            )
            with torch.inference_mode():
                squashed = self.actor.act(self._features(packed), noise).cpu().numpy()
        self._pending = (np.array(packed, copy=True), squashed)
        return self._to_env(squashed)

    # --------------------------------------------------------------- learning
    def update(
        self,
        next_obs: np.ndarray,
        reward: np.ndarray,
        terminated: np.ndarray,
        truncated: np.ndarray,
        call_back: Callable[[dict[str, Any]], None] | None = None,
        valid: np.ndarray | None = None,
    ) -> None:
        """Store the real transitions of this step, then train on schedule.

        Raises:
            RuntimeError: when called in training mode without a preceding :meth:`act`.
        """
        step = self._pending_step(valid)
        if step is None:
            return
        (obs, actions), real = step
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

    @flush_denormals()
    def _train(self, n_steps: int, call_back: Callable[[dict[str, Any]], None] | None) -> None:
        """``n_steps`` gradient steps, each on a batch of its own, with Polyak updates on schedule."""
        cfg = self.config
        for _ in range(n_steps):
            batch = self.buffer.sample(self.np_rng, cfg.batch_size)
            obs, next_obs = self._features(batch["obs"]), self._features(batch["next_obs"])
            actions = torch.as_tensor(batch["actions"], device=self.device)
            rewards = torch.as_tensor(batch["rewards"], device=self.device)
            not_terminal = torch.as_tensor(~batch["terminated"], device=self.device, dtype=torch.float32)
            noise = torch.randn((2, cfg.batch_size, self._action_dim), generator=self.torch_gen).to(self.device)
            stats = self._gradient_step(obs, actions, rewards, next_obs, not_terminal, noise[0], noise[1])
            self.gradient_steps_done += 1
            if self.gradient_steps_done % cfg.target_update_interval == 0:
                with torch.no_grad():
                    torch._foreach_lerp_(list(self.critic_target.parameters()), list(self.critic.parameters()), cfg.tau)
            if call_back is not None:
                for key, value in stats.items():
                    self._stats[key] = self._stats.get(key, 0.0) + value
                self._n_logged += 1
                if self.gradient_steps_done % cfg.log_interval == 0:
                    report = {key: float(value) / self._n_logged for key, value in self._stats.items()}
                    report["gradient_steps"] = self.gradient_steps_done
                    call_back(report)
                    self._stats, self._n_logged = {}, 0

    def _gradient_step(
        self,
        obs: torch.Tensor,
        actions: torch.Tensor,
        rewards: torch.Tensor,
        next_obs: torch.Tensor,
        not_terminal: torch.Tensor,
        noise: torch.Tensor,
        next_noise: torch.Tensor,
    ) -> dict[str, torch.Tensor]:
        """One update of the entropy coefficient, the critics and the actor; detached statistics."""
        pi_actions, log_prob = self.actor.sample(obs, noise)
        ent_coef = self.log_ent_coef.detach().exp()
        stats: dict[str, torch.Tensor] = {}
        if self.ent_optimizer is not None:
            # loss -(log_alpha * (log_prob + target_entropy)).mean(): its gradient, written out, saves a
            # backward pass
            excess = (log_prob.detach() + self.target_entropy).mean()
            stats["ent_coef_loss"] = -self.log_ent_coef.detach()[0] * excess
            self.log_ent_coef.grad = -excess.reshape(1)
            self.ent_optimizer.step()
        with torch.no_grad():
            next_actions, next_log_prob = self.actor.sample(next_obs, next_noise)
            next_q = self.critic_target(next_obs, next_actions).min(dim=0).values - ent_coef * next_log_prob
            target = rewards + self.config.gamma * not_terminal * next_q
        q = self.critic(obs, actions)
        critic_loss = 0.5 * (q - target).pow(2).mean(dim=1).sum()
        self.critic_optimizer.zero_grad(set_to_none=True)
        critic_loss.backward()
        self.critic_optimizer.step()
        q_pi = self.critic(obs, pi_actions, detach_params=True).min(dim=0).values
        actor_loss = (ent_coef * log_prob - q_pi).mean()
        self.actor_optimizer.zero_grad(set_to_none=True)
        actor_loss.backward()
        self.actor_optimizer.step()
        stats.update(
            actor_loss=actor_loss.detach(),
            critic_loss=critic_loss.detach(),
            ent_coef=ent_coef,
            q_mean=q.detach().mean(),
        )
        return stats

    # ------------------------------------------------------------ persistence
    def _state(self) -> dict[str, Any]:
        return {
            "actor": self.actor.state_dict(),
            "critic": self.critic.state_dict(),
            "critic_target": self.critic_target.state_dict(),
            "actor_optimizer": self.actor_optimizer.state_dict(),
            "critic_optimizer": self.critic_optimizer.state_dict(),
            "log_ent_coef": self.log_ent_coef.detach(),
            "ent_optimizer": None if self.ent_optimizer is None else self.ent_optimizer.state_dict(),
            "gradient_steps": self.gradient_steps_done,
            # the report in progress, so that a resumed run logs the means an uninterrupted one logs
            "report": [{key: float(value) for key, value in self._stats.items()}, self._n_logged],
        }

    def _buffer_state(self, data: bool) -> dict[str, Any]:
        return {"buffer": self.buffer.state_dict(with_data=data)}

    def _load_state(self, state: dict[str, Any]) -> None:
        self.actor.load_state_dict(state["actor"])
        self.critic.load_state_dict(state["critic"])
        self.critic_target.load_state_dict(state["critic_target"])
        self.actor_optimizer.load_state_dict(state["actor_optimizer"])
        self.critic_optimizer.load_state_dict(state["critic_optimizer"])
        with torch.no_grad():
            self.log_ent_coef.copy_(state["log_ent_coef"])
        if self.ent_optimizer is not None:
            self.ent_optimizer.load_state_dict(state["ent_optimizer"])
        self.buffer.load_state_dict(state["buffer"])
        self.gradient_steps_done = int(state["gradient_steps"])
        if "report" in state:
            stats, n_logged = state["report"]
            # on the agent's device: the next update adds its CUDA statistics to them (a checkpoint loads on the CPU)
            self._stats = {key: torch.tensor(value, device=self.device) for key, value in stats.items()}
            self._n_logged = int(n_logged)
