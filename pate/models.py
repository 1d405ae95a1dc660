"""Flax models for teachers and students: a small CNN and an MLP, sized by the config.

Why a home-made convolution: vmapped over hundreds of teachers, `nn.Conv` becomes one
grouped convolution, which XLA:CPU runs slowly (on 2 cores, over 100 s per epoch of
Fashion-MNIST for 250 teachers with a two-layer stride-2 CNN). The same layer built as
strided slices (the k*k patches) and one matmul against the reshaped kernel turns into a
batched matmul under `vmap`, which XLA:CPU runs at matmul speed (about 16 times faster
for that CNN). On accelerators the plain `lax.conv` path is the fast one. Both paths
compute the same function of the same parameters (`kernel` in HWIO layout, `bias`), so
a checkpoint trained with one runs with the other.
"""

from __future__ import annotations

import math
from typing import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from pate.config import TeachersConfig


def lecun_normal(key: jax.Array, shape: Sequence[int], dtype=jnp.float32) -> jax.Array:
    """LeCun-normal initialisation (truncated normal, variance 1/fan_in), drawn flat.

    Same distribution as `nn.initializers.lecun_normal()`; drawing a flat vector and
    reshaping it compiles several times faster on XLA:CPU than drawing a 4-d shape.
    """
    fan_in = math.prod(shape[:-1])
    std = math.sqrt(1.0 / fan_in) / 0.87962566103423978  # std of N(0,1) truncated to [-2, 2]
    flat = jax.random.truncated_normal(key, -2.0, 2.0, (math.prod(shape),), dtype)
    return flat.reshape(shape) * std


def extract_patches(x: jax.Array, kernel: int, stride: int, padding: int) -> jax.Array:
    """The k*k patches of `x`, concatenated on the channel axis.

    Args:
      x: images (N, H, W, C).
      kernel, stride, padding: a square window, its stride, zero padding on each side.

    Returns:
      (N, H', W', k*k*C) with feature index `(dy * k + dx) * C + c`, which matches a
      kernel of shape (k, k, C, F) reshaped to (k*k*C, F).
    """
    if padding:
        x = jnp.pad(x, ((0, 0), (padding, padding), (padding, padding), (0, 0)))
    _, h, w, _ = x.shape
    ho, wo = (h - kernel) // stride + 1, (w - kernel) // stride + 1
    cols = [x[:, dy: dy + stride * (ho - 1) + 1: stride, dx: dx + stride * (wo - 1) + 1: stride, :]
            for dy in range(kernel) for dx in range(kernel)]
    return jnp.concatenate(cols, axis=-1)


class Conv(nn.Module):
    """A square convolution with symmetric zero padding `kernel // 2`.

    Attributes:
      features: output channels.
      kernel: window size.
      stride: step of the window.
      impl: "patches" (slices + matmul, fast on CPU under vmap) or "xla" (`lax.conv`).
    """

    features: int
    kernel: int = 5
    stride: int = 1
    impl: str = "patches"

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        channels = x.shape[-1]
        w = self.param("kernel", lecun_normal,
                       (self.kernel, self.kernel, channels, self.features))
        b = self.param("bias", nn.initializers.zeros, (self.features,))
        pad = self.kernel // 2
        if self.impl == "patches":
            patches = extract_patches(x, self.kernel, self.stride, pad)
            y = patches @ w.reshape(-1, self.features)
        elif self.impl == "xla":
            y = jax.lax.conv_general_dilated(
                x, w, (self.stride, self.stride), [(pad, pad), (pad, pad)],
                dimension_numbers=("NHWC", "HWIO", "NHWC"))
        else:
            raise ValueError(f"unknown convolution impl {self.impl!r}")
        return y + b


class CNN(nn.Module):
    """Convolutions (ReLU, optional 2x2 max pool), then dense layers, then logits.

    Attributes:
      num_classes: output logits.
      features: channels of each convolution.
      kernel, stride: window and stride of every convolution.
      pool: a 2x2 max pool after each convolution.
      hidden: widths of the dense layers before the classifier.
      impl: convolution implementation, see `Conv`.
    """

    num_classes: int
    features: Sequence[int] = (16, 32)
    kernel: int = 5
    stride: int = 2
    pool: bool = False
    hidden: Sequence[int] = ()
    impl: str = "patches"

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        for f in self.features:
            x = nn.relu(Conv(f, self.kernel, self.stride, self.impl)(x))
            if self.pool:
                x = nn.max_pool(x, (2, 2), (2, 2), padding="SAME")
        x = x.reshape(x.shape[0], -1)
        for width in self.hidden:
            x = nn.relu(nn.Dense(width, kernel_init=lecun_normal)(x))
        return nn.Dense(self.num_classes, kernel_init=lecun_normal)(x)


class MLP(nn.Module):
    """Dense ReLU layers of widths `hidden`, then logits."""

    num_classes: int
    hidden: Sequence[int] = (256,)

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        x = x.reshape(x.shape[0], -1)
        for width in self.hidden:
            x = nn.relu(nn.Dense(width, kernel_init=lecun_normal)(x))
        return nn.Dense(self.num_classes, kernel_init=lecun_normal)(x)


def conv_impl(requested: str, backend: str | None = None) -> str:
    """Resolves "auto" to "patches" on CPU and "xla" on accelerators."""
    if requested != "auto":
        return requested
    return "patches" if (backend or jax.default_backend()) == "cpu" else "xla"


def make_model(cfg: TeachersConfig, num_classes: int, backend: str | None = None) -> nn.Module:
    """The teacher model a `[teachers]` section describes.

    Args:
      cfg: the teachers config (model kind and sizes).
      num_classes: number of logits.
      backend: the JAX backend that will run it (default: the current one); decides
        `conv_impl = "auto"`.
    """
    if cfg.model == "mlp":
        return MLP(num_classes=num_classes, hidden=tuple(cfg.hidden))
    return CNN(num_classes=num_classes, features=tuple(cfg.conv_features),
               kernel=cfg.conv_kernel, stride=cfg.conv_stride, pool=cfg.conv_pool,
               hidden=tuple(cfg.hidden), impl=conv_impl(cfg.conv_impl, backend))
