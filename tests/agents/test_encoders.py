"""Observation encoders: image layouts, pixel scaling, CNN and Dict features, and agents learning from them."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from online_trainer.agents import DQNAgent, PPOAgent
from online_trainer.agents._encoders import DictEncoder, ImageEncoder, ObsEncoder, feature_layers, image_layout
from tests.agents.conftest import run_loop
from tests.agents.toys import CueEnv, vector


def test_image_layouts_of_common_spaces():
    atari_rgb = image_layout(gym.spaces.Box(0, 255, (210, 160, 3), np.uint8))
    stacked = image_layout(gym.spaces.Box(0, 255, (4, 84, 84), np.uint8))
    float_image = image_layout(gym.spaces.Box(0.0, 1.0, (3, 16, 16), np.float32))
    gray = image_layout(gym.spaces.Box(0, 255, (84, 84), np.uint8))
    assert (atari_rgb.chw, atari_rgb.channels_first, atari_rgb.scale) == ((3, 210, 160), False, 1 / 255)
    assert (stacked.chw, stacked.channels_first) == ((4, 84, 84), True)
    assert (float_image.chw, float_image.scale) == ((3, 16, 16), 1.0)
    assert gray.chw == (1, 84, 84)
    assert image_layout(gym.spaces.Box(-1.0, 1.0, (4,), np.float32)) is None
    assert image_layout(gym.spaces.Box(-1.0, 1.0, (4, 4), np.float32)) is None


@pytest.mark.parametrize("shape, features", [((84, 84, 4), 512), ((4, 84, 84), 512), ((7, 7, 3), 64)])
def test_cnn_output_width_for_nature_and_small_images(shape, features):
    space = gym.spaces.Box(0, 255, shape, np.uint8)
    layers, width = feature_layers(space, features, torch.Generator().manual_seed(0))
    assert width == features and isinstance(layers[0], ImageEncoder)
    obs = np.random.default_rng(0).integers(0, 256, (5, *shape), dtype=np.uint8)
    x = torch.as_tensor(ObsEncoder(space)(obs))
    assert x.shape == (5, int(np.prod(shape)))
    assert layers[0](x).shape == (5, features)
    nature = [m for m in layers[0].cnn if isinstance(m, torch.nn.Conv2d)]
    assert [m.kernel_size[0] for m in nature] == ([8, 4, 3] if features == 512 else [2, 2, 2])


def test_uint8_pixels_are_scaled_by_1_over_255():
    uint8 = ImageEncoder(
        image_layout(gym.spaces.Box(0, 255, (8, 8, 2), np.uint8)),
        16,
        torch.Generator().manual_seed(0),
        orthogonal=False,
    )
    floats = ImageEncoder(
        image_layout(gym.spaces.Box(0.0, 1.0, (8, 8, 2), np.float32)),
        16,
        torch.Generator().manual_seed(0),
        orthogonal=False,
    )
    pixels = np.random.default_rng(1).integers(0, 256, (3, 8, 8, 2)).astype(np.float32)
    torch.testing.assert_close(
        uint8(torch.as_tensor(pixels.reshape(3, -1))), floats(torch.as_tensor(pixels.reshape(3, -1) / 255.0))
    )


def test_channels_last_images_are_permuted_to_channels_first():
    hwc = ImageEncoder(
        image_layout(gym.spaces.Box(0, 255, (8, 8, 2), np.uint8)), 16, torch.Generator().manual_seed(0), orthogonal=True
    )
    chw = ImageEncoder(
        image_layout(gym.spaces.Box(0, 255, (2, 8, 8), np.uint8)), 16, torch.Generator().manual_seed(0), orthogonal=True
    )
    images = np.random.default_rng(2).integers(0, 256, (3, 8, 8, 2)).astype(np.float32)
    as_chw = images.transpose(0, 3, 1, 2)
    torch.testing.assert_close(hwc(torch.as_tensor(images.reshape(3, -1))), chw(torch.as_tensor(as_chw.reshape(3, -1))))


def test_dict_observations_are_packed_flat_and_encoded_per_key():
    space = CueEnv("dict").observation_space
    encoder = ObsEncoder(space)
    obs = {
        "image": np.full((2, 8, 8, 1), 255, np.uint8),
        "cue": np.array([1, 0]),
        "noise": np.array([[0.5, -0.5], [0.25, 0.0]], np.float32),
    }
    packed = encoder.pack(obs)
    assert packed.shape == (2, 64 + 1 + 2) and packed.dtype == np.float32
    x = encoder(packed)
    assert x.shape == (2, 64 + 2 + 2) and encoder.dim == 68
    assert list(space.spaces) == ["cue", "image", "noise"]  # gymnasium sorts the keys; columns follow them
    np.testing.assert_array_equal(x[:, :2], [[0, 1], [1, 0]])
    np.testing.assert_array_equal(x[:, 2:66], 255.0)  # unscaled here: the CNN scales uint8 pixels
    np.testing.assert_array_equal(x[:, 66:], obs["noise"])
    layers, width = feature_layers(space, 32, torch.Generator().manual_seed(0))
    assert isinstance(layers[0], DictEncoder) and width == 2 + 32 + 2
    out = layers[0](torch.as_tensor(x))
    assert out.shape == (2, 36)
    torch.testing.assert_close(out[:, :2], torch.as_tensor(x[:, :2]))
    torch.testing.assert_close(out[:, 34:], torch.as_tensor(x[:, 66:]))


def test_dict_of_vectors_only_needs_no_extra_layer():
    space = gym.spaces.Dict({"a": gym.spaces.Box(-1, 1, (3,)), "b": gym.spaces.Discrete(4)})
    layers, width = feature_layers(space, 32, torch.Generator())
    assert layers == [] and width == 7


@pytest.mark.parametrize(
    "space",
    [
        gym.spaces.Tuple((gym.spaces.Discrete(2), gym.spaces.Discrete(3))),
        gym.spaces.Dict({"inner": gym.spaces.Dict({"x": gym.spaces.Discrete(2)})}),
        gym.spaces.Text(5),
    ],
)
def test_unsupported_spaces_suggest_a_wrapper(space):
    env = gym.vector.SyncVectorEnv([lambda: CueEnv()])
    env.single_observation_space = space
    with pytest.raises(ValueError, match=r"FlattenObservation.*ImgObsWrapper"):
        DQNAgent(env)


def greedy_accuracy(agent, env, episodes=40, seed=7):
    agent.eval()
    obs, _ = env.reset(seed=seed)
    rewards = []
    while len(rewards) < episodes:
        obs, reward, terminated, _, _ = env.step(agent.act(obs))
        rewards += reward[terminated].tolist()  # reset steps give terminated False
    agent.train()
    return float(np.mean(rewards))


def test_dqn_learns_from_images_with_the_cnn():
    env = vector(CueEnv, 2, kind="image")
    agent = DQNAgent(
        env,
        seed=0,
        lr=1e-3,
        learning_starts=64,
        batch_size=32,
        train_freq=2,
        exploration_steps=150,
        target_update_interval=50,
        hidden_sizes=(32,),
        cnn_features=32,
        buffer_size=1000,
    )
    assert isinstance(agent.q_net[0], ImageEncoder)
    assert agent.buffer.obs.dtype == np.uint8 and agent.buffer.obs.shape[1:] == (8, 8, 1)
    run_loop(env, agent, 300)
    assert greedy_accuracy(agent, env) == 1.0


def test_ppo_learns_from_dict_observations():
    env = vector(CueEnv, 4, kind="dict")
    agent = PPOAgent(env, seed=0, lr=3e-3, n_steps=16, minibatch_size=32, hidden_sizes=(32,), cnn_features=16)
    assert isinstance(agent.policy.features[0], DictEncoder)
    run_loop(env, agent, 160)
    assert greedy_accuracy(agent, env) == 1.0


def test_normalize_obs_with_images_is_an_error():
    with pytest.raises(ValueError, match="normalize_obs=True applies to vector Box observations"):
        PPOAgent(vector(CueEnv, 1, kind="image"), normalize_obs=True)
