"""Proximal Policy Optimisation (clipped objective, GAE) for Discrete and Box actions."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from online_trainer.agents._base import AgentBase, require
from online_trainer.agents._encoders import ObsEncoder, feature_layers, space_shape
from online_trainer.agents._networks import ACTIVATIONS, adam, resolve_device
from online_trainer.agents._normalize import RewardScaler, RunningMeanStd
from online_trainer.agents._policy import ActorCritic
from online_trainer.agents._rollout import Rollout
from online_trainer.agents._schedules import is_scheduled, parse_schedule, progress_remaining

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True, kw_only=True)
class PPOConfig:
    """Hyperparameters of :class:`PPOAgent`. Step counts are real env transitions, summed over sub-envs."""

    KNOWN_AS: ClassVar[dict[str, str]] = {
        "learning_rate": "lr",
        "clip_range": "clip_coef",
        "batch_size": "minibatch_size",
        "num_steps": "n_steps",
        "update_epochs": "n_epochs",
        "norm_adv": "normalize_advantage",
    }
    """Other libraries' names of these fields (Stable-Baselines3's, CleanRL's), named in the error of an unknown key."""

    lr: float | str = 3e-4
    """Adam learning rate: a number, or ``"lin_<start>"`` (rl-zoo3's form) for a linear decay from
    ``start`` to 0 over ``total_steps``, at the progress after each rollout (as SB3 does). With
    ``anneal_lr`` a number is the initial rate."""
    n_steps: int = 128
    """Env steps per sub-env in one rollout (reset steps included, then masked out)."""
    n_epochs: int = 4
    """Passes over the rollout per update phase."""
    minibatch_size: int = 64
    """Transitions per gradient step."""
    gamma: float = 0.99
    """Discount factor."""
    gae_lambda: float = 0.95
    """GAE's lambda."""
    clip_coef: float | str = 0.2
    """Clip range of the probability ratio: a number, or ``"lin_<start>"`` (SB3's ``clip_range``
    schedule: linear from ``start`` to 0 over ``total_steps``)."""
    value_clip: float | None = None
    """Clip range of the value change around the rollout's values (None: unclipped value loss)."""
    ent_coef: float = 0.0
    """Weight of the entropy bonus."""
    vf_coef: float = 0.5
    """Weight of the value loss ``0.5 * (V - return)^2``."""
    max_grad_norm: float | None = 0.5
    """Clip the global gradient norm to this value (None: no clipping)."""
    normalize_advantage: bool = True
    """Standardise advantages per minibatch."""
    normalize_obs: bool = False
    """Standardise ``Box`` observations with running mean/std (updated from real transitions)."""
    normalize_reward: bool = False
    """Divide rewards by the running std of the discounted return (learning only)."""
    obs_clip: float = 10.0
    """Normalised observations are clipped to ``[-obs_clip, obs_clip]``."""
    reward_clip: float = 10.0
    """Scaled rewards are clipped to ``[-reward_clip, reward_clip]``."""
    target_kl: float | None = None
    """Stop the epochs of an update phase once the mean approximate KL exceeds this."""
    anneal_lr: bool = False
    """Decay the learning rate linearly to 0 over ``total_steps``."""
    total_steps: int | None = None
    """Transitions of the whole run (needed by ``anneal_lr`` and ``"lin_"`` schedules)."""
    hidden_sizes: tuple[int, ...] = (64, 64)
    """Hidden widths of the policy and value networks."""
    activation: str = "tanh"
    """Hidden activation: ``"tanh"`` or ``"relu"``."""
    log_std_init: float = 0.0
    """Initial log std of the Gaussian policy (Box actions)."""
    adam_eps: float = 1e-5
    """Adam's epsilon."""
    cnn_features: int = 512
    """Width of the CNN encoder's output for image observations (unused for vectors)."""
    log_step_values: bool = False
    """When True, :meth:`PPOAgent.log` returns per-sub-env ``value`` and ``log_prob`` each step."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "hidden_sizes", tuple(int(h) for h in self.hidden_sizes))
        parse_schedule(self.lr, "lr")
        parse_schedule(self.clip_coef, "clip_coef")
        scheduled = [name for name in ("lr", "clip_coef") if is_scheduled(getattr(self, name))]
        require(
            not self.anneal_lr or "lr" not in scheduled,
            "anneal_lr",
            self.anneal_lr,
            f"False when lr is a schedule (lr={self.lr!r} decays already)",
        )
        require(
            not scheduled or (self.total_steps is not None and self.total_steps > 0),
            "total_steps",
            self.total_steps,
            f"a positive int when {' and '.join(scheduled)} decay(s) over the run",
        )
        for name in ("n_steps", "n_epochs", "minibatch_size", "cnn_features"):
            require(getattr(self, name) >= 1, name, getattr(self, name), ">= 1")
        require(0 <= self.gamma <= 1, "gamma", self.gamma, "in [0, 1]")
        require(0 <= self.gae_lambda <= 1, "gae_lambda", self.gae_lambda, "in [0, 1]")
        for name in ("value_clip", "max_grad_norm", "target_kl"):
            value = getattr(self, name)
            require(value is None or value > 0, name, value, "> 0 or None")
        require(self.ent_coef >= 0, "ent_coef", self.ent_coef, ">= 0")
        require(self.vf_coef >= 0, "vf_coef", self.vf_coef, ">= 0")
        require(self.obs_clip > 0, "obs_clip", self.obs_clip, "> 0")
        require(self.reward_clip > 0, "reward_clip", self.reward_clip, "> 0")
        require(
            not self.anneal_lr or (self.total_steps is not None and self.total_steps > 0),
            "total_steps",
            self.total_steps,
            "a positive int when anneal_lr=True",
        )
        require(all(h >= 1 for h in self.hidden_sizes), "hidden_sizes", self.hidden_sizes, "positive widths")
        require(self.activation in ACTIVATIONS, "activation", self.activation, f"one of {sorted(ACTIVATIONS)}")


class PPOAgent(AgentBase):
    """PPO with GAE(lambda), a clipped objective, and minibatch epochs over each rollout.

    A rollout is ``n_steps`` env steps of every sub-env. Autoreset steps (``valid``
    False) keep their slot but are masked out: they get no advantage, no loss, no
    statistics, and GAE skips over them (see :mod:`online_trainer.agents._rollout`), so the losses use
    only real transitions; a rollout holds up to ``n_steps`` of them per sub-env.
    Truncated episodes bootstrap from the value of the true final observation (computed
    in ``update``); terminated ones do not.

    Box actions are sampled from a Gaussian (state-independent log std): the unclipped
    sample is stored and used for log-probabilities, and the action sent to the env is
    clipped to the bounds. After :meth:`eval` actions are greedy (argmax / mean).

    After each update phase ``call_back`` receives ``policy_loss``, ``value_loss``,
    ``entropy``, ``approx_kl``, ``clip_fraction``, ``explained_variance`` and ``lr``.
    ``save`` includes the partly filled rollout and the normalisation statistics.

    Args:
        env: gymnasium ``VectorEnv`` (or ``Env``) with a ``Discrete`` or ``Box`` action
            space and a ``Box``, ``Discrete`` (one-hot) or ``MultiBinary`` observation space.
        device: torch device of the networks (``"cpu"`` or ``"cuda"``).
        seed: seed used until :meth:`reset` is called.
        **hyperparameters: fields of :class:`PPOConfig`.
    """

    Config = PPOConfig
    STRUCTURAL = frozenset({"hidden_sizes", "activation", "n_steps", "log_std_init", "normalize_obs", "cnn_features"})

    def __init__(
        self, env: Any, *, device: str | torch.device = "cpu", seed: int | None = None, **hyperparameters: Any
    ) -> None:
        self.device = resolve_device(device)
        super().__init__(env, seed=seed, **hyperparameters)

    def _check_spaces(self) -> None:
        space = self.action_space
        if not isinstance(space, (gym.spaces.Discrete, gym.spaces.Box)):
            raise ValueError(f"PPOAgent needs a Discrete or Box action space but got action_space={space}.")
        self.encoder = ObsEncoder(self.observation_space)
        self._discrete = isinstance(space, gym.spaces.Discrete)
        if isinstance(space, gym.spaces.Discrete):
            self._act_start = int(space.start)
        else:
            self._low, self._high = space.low.reshape(-1), space.high.reshape(-1)

    def _build(self) -> None:
        cfg = self.config
        if cfg.normalize_obs and not self.encoder.vector and not self.encoder.one_hot:
            raise ValueError(
                f"normalize_obs=True applies to vector Box observations but got observation_space="
                f"{self.observation_space}: image pixels are scaled by the CNN encoder. Set "
                f"normalize_obs=False."
            )
        features, width = feature_layers(self.observation_space, cfg.cnn_features, self.torch_gen, orthogonal=True)
        self.policy = ActorCritic(
            width,
            self.action_space,
            cfg.hidden_sizes,
            cfg.activation,
            cfg.log_std_init,
            self.torch_gen,
            features=features,
        ).to(self.device)
        self._lr_schedule = parse_schedule(cfg.lr, "lr")
        self._clip_schedule = parse_schedule(cfg.clip_coef, "clip_coef")
        self.optimizer = adam(self.policy.parameters(), self._lr_schedule(1.0), cfg.adam_eps)
        self.obs_rms = RunningMeanStd((self.encoder.dim,))
        self.updates = 0
        self._rollout_start = 0
        self._new_per_env_state(self.num_envs)

    def _resize(self, num_envs: int) -> None:
        if self.rollout.pos:
            logger.debug("PPOAgent drops a partial rollout of %d steps on set_num_env(%d).", self.rollout.pos, num_envs)
        self._new_per_env_state(num_envs)

    def _new_per_env_state(self, num_envs: int) -> None:
        """An empty rollout, a fresh reward scaler and no pending step, for ``num_envs`` sub-envs."""
        rollout = self.config.n_steps * num_envs
        if self.config.minibatch_size > rollout:
            logger.warning(
                "minibatch_size=%d is more than a rollout's n_steps * num_envs = %d * %d = %d transitions: each "
                "epoch is one full-batch gradient step. Set minibatch_size <= %d for minibatch updates.",
                self.config.minibatch_size,
                self.config.n_steps,
                num_envs,
                rollout,
                rollout,
            )
        action_shape = () if self._discrete else (self.policy.out_dim,)
        action_dtype = np.int64 if self._discrete else np.float32
        self.rollout = Rollout(self.config.n_steps, num_envs, self.encoder.dim, action_shape, action_dtype)
        self.reward_scaler = RewardScaler(num_envs, self.config.gamma, self.config.reward_clip)
        self._pending: dict[str, np.ndarray] | None = None
        self._last: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None

    def _apply_config(self, changed: set[str]) -> None:
        self._lr_schedule = parse_schedule(self.config.lr, "lr")
        self._clip_schedule = parse_schedule(self.config.clip_coef, "clip_coef")
        if "lr" in changed:
            for group in self.optimizer.param_groups:
                group["lr"] = self._lr_schedule(self._progress())
        self.reward_scaler.gamma = self.config.gamma
        self.reward_scaler.clip = self.config.reward_clip

    # ----------------------------------------------------------------- acting
    def _features(self, obs: np.ndarray | dict[str, np.ndarray]) -> np.ndarray:
        x = self.encoder(self.encoder.pack(obs))
        if self.config.normalize_obs and self.encoder.vector:
            x = self.obs_rms.normalize(x, self.config.obs_clip)
        return x

    def _values(self, x: np.ndarray) -> np.ndarray:
        """State values of features ``x`` (from :meth:`_features`)."""
        with torch.inference_mode():
            return self.policy.value(torch.as_tensor(x, device=self.device)).cpu().numpy()

    def act(self, obs: np.ndarray) -> np.ndarray:
        """Sampled actions in training mode, greedy ones after :meth:`eval`."""
        x = self._features(obs)
        with torch.inference_mode():
            xt = torch.as_tensor(x, device=self.device)
            if not self.training:
                return self._to_env(self.policy.greedy(self.policy.policy_out(xt)).cpu().numpy())
            out, values = self.policy(xt)
            actions = self.policy.sample(out, self.np_rng)
            log_probs, _ = self.policy.log_prob_entropy(out, actions)
        actions_np = actions.cpu().numpy()
        self._pending = {
            "obs": x,
            "actions": actions_np,
            "log_probs": log_probs.cpu().numpy(),
            "values": values.cpu().numpy(),
        }
        return self._to_env(actions_np)

    def _to_env(self, actions: np.ndarray) -> np.ndarray:
        if self._discrete:
            return actions.astype(np.int64) + self._act_start
        clipped = np.clip(actions, self._low, self._high)
        return clipped.reshape(-1, *space_shape(self.action_space)).astype(self.action_space.dtype)

    def _progress(self) -> float:
        """SB3's progress remaining after the transitions seen (1.0 without ``total_steps``)."""
        total = self.config.total_steps
        return 1.0 if total is None else progress_remaining(self.steps, total)

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
        """Store this env step in the rollout; learn when ``n_steps`` steps are stored.

        Raises:
            RuntimeError: when called in training mode without a preceding :meth:`act`.
        """
        step = self._pending_step(valid)
        if step is None:
            return
        pending, real = step
        cfg = self.config
        terminated = np.asarray(terminated, dtype=bool)
        truncated = np.asarray(truncated, dtype=bool)
        reward = np.asarray(reward, dtype=np.float64)
        if cfg.normalize_obs and self.encoder.vector:
            self.obs_rms.update(self.encoder(self.encoder.pack(next_obs))[real])
        rewards = (
            self.reward_scaler(reward, terminated | truncated, real)
            if cfg.normalize_reward
            else reward.astype(np.float32)
        )
        final_values = np.zeros(self.num_envs, dtype=np.float32)
        bootstrap = real & truncated & ~terminated
        if bootstrap.any():
            final_values[bootstrap] = self._values(self._features(next_obs)[bootstrap])
        self.rollout.add(
            **pending,
            rewards=rewards,
            terminated=terminated,
            truncated=truncated,
            final_values=final_values,
            valid=real,
        )
        if cfg.log_step_values:
            self._last = (pending["values"], pending["log_probs"], real)
        self.steps += int(np.count_nonzero(real))
        if self.rollout.full:
            self._learn(self._values(self._features(next_obs)), call_back)

    def _learn(self, last_values: np.ndarray, call_back: Callable[[dict[str, Any]], None] | None) -> None:
        cfg, rollout = self.config, self.rollout
        advantages, returns = rollout.advantages(last_values, cfg.gamma, cfg.gae_lambda)
        idx = np.flatnonzero(rollout.valid.reshape(-1))
        rollout.pos = 0
        start_steps, self._rollout_start = self._rollout_start, self.steps
        if idx.size == 0:
            return
        if cfg.anneal_lr:
            lr = self._lr_schedule(1.0) * max(0.0, 1.0 - start_steps / cfg.total_steps)
        else:
            lr = self._lr_schedule(self._progress())
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        clip = self._clip_schedule(self._progress())

        def flat(array: np.ndarray) -> torch.Tensor:
            return torch.as_tensor(array.reshape(-1, *array.shape[2:])[idx], device=self.device)

        obs, actions, old_log_probs = flat(rollout.obs), flat(rollout.actions), flat(rollout.log_probs)
        old_values, adv, ret = flat(rollout.values), flat(advantages), flat(returns)
        stats: dict[str, list[torch.Tensor]] = {
            k: [] for k in ("policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction")
        }
        params = list(self.policy.parameters())
        for _ in range(cfg.n_epochs):
            epoch_kl = []
            perm = torch.as_tensor(self.np_rng.permutation(idx.size), device=self.device)
            for mb in perm.split(cfg.minibatch_size):
                out, values = self.policy(obs[mb])
                log_probs, entropy = self.policy.log_prob_entropy(out, actions[mb])
                log_ratio = log_probs - old_log_probs[mb]
                ratio = log_ratio.exp()
                a = adv[mb]
                if cfg.normalize_advantage and a.numel() > 1:
                    a = (a - a.mean()) / (a.std() + 1e-8)
                policy_loss = torch.max(-a * ratio, -a * ratio.clamp(1 - clip, 1 + clip)).mean()
                value_loss = (values - ret[mb]).pow(2)
                if cfg.value_clip is not None:
                    clipped = old_values[mb] + (values - old_values[mb]).clamp(-cfg.value_clip, cfg.value_clip)
                    value_loss = torch.max(value_loss, (clipped - ret[mb]).pow(2))
                value_loss = 0.5 * value_loss.mean()
                entropy = entropy.mean()
                loss = policy_loss - cfg.ent_coef * entropy + cfg.vf_coef * value_loss
                self.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                if cfg.max_grad_norm is not None:
                    nn.utils.clip_grad_norm_(params, cfg.max_grad_norm, foreach=True)
                self.optimizer.step()
                with torch.no_grad():
                    approx_kl = ((ratio - 1) - log_ratio).mean()
                    clip_fraction = ((ratio - 1).abs() > clip).float().mean()
                for key, value in zip(stats, (policy_loss, value_loss, entropy, approx_kl, clip_fraction)):
                    stats[key].append(value.detach())
                epoch_kl.append(approx_kl)
            if cfg.target_kl is not None and torch.stack(epoch_kl).mean().item() > cfg.target_kl:
                break
        self.updates += 1
        if call_back is not None:
            report = {key: torch.stack(values).mean().item() for key, values in stats.items()}
            var_ret = ret.var().item() if ret.numel() > 1 else 0.0
            report["explained_variance"] = (
                float("nan") if var_ret == 0 else 1.0 - (ret - old_values).var().item() / var_ret
            )
            report["lr"] = lr
            report["clip_range"] = clip
            report["updates"] = self.updates
            call_back(report)

    # ------------------------------------------------------------ persistence
    def log(self) -> list[dict[str, np.ndarray] | None] | None:
        """Per-sub-env ``value`` and ``log_prob`` of the last step (``log_step_values`` only)."""
        if self._last is None or not self.training or not self.config.log_step_values:
            return None
        values, log_probs, real = self._last
        return [
            {"value": values[i : i + 1], "log_prob": log_probs[i : i + 1]} if real[i] else None
            for i in range(len(real))
        ]

    def _state(self) -> dict[str, Any]:
        return {
            "policy": self.policy.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "obs_rms": self.obs_rms.state_dict(),
            "reward_scaler": self.reward_scaler.state_dict(),
            "rollout": self.rollout.state_dict(),
            "updates": self.updates,
            "rollout_start": self._rollout_start,
        }

    def _load_state(self, state: dict[str, Any]) -> None:
        self.policy.load_state_dict(state["policy"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.obs_rms.load_state_dict(state["obs_rms"])
        self.reward_scaler.load_state_dict(state["reward_scaler"])
        self.rollout.load_state_dict(state["rollout"])
        self.updates = int(state["updates"])
        self._rollout_start = int(state["rollout_start"])
