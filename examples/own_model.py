"""A user's own flax module for pate's teachers and student (docs/own-model.md).

pate builds it as `ResidualHead(num_classes=C)` and calls `apply(params, x, train=...,
rngs={"dropout": key})`; the teachers are this module vmapped over the teacher axis. Name it in a
config as `module = "own_model:ResidualHead"` with `model = "module"` (this folder on PYTHONPATH).
"""

from __future__ import annotations

import flax.linen as nn
import jax


class ResidualHead(nn.Module):
    """A small residual MLP head on rows of features (or flattened images): a projection to
    `width`, `blocks` residual blocks (LayerNorm, dense, ReLU, dense), dropout, the classifier."""

    num_classes: int
    width: int = 64
    blocks: int = 1
    dropout: float = 0.1

    @nn.compact
    def __call__(self, x: jax.Array, train: bool = False) -> jax.Array:
        h = nn.Dense(self.width)(x.reshape(x.shape[0], -1))
        for _ in range(self.blocks):
            r = nn.relu(nn.Dense(self.width)(nn.LayerNorm()(h)))
            h = h + nn.Dense(self.width)(r)
        h = nn.Dropout(self.dropout, deterministic=not train)(nn.relu(h))
        return nn.Dense(self.num_classes)(h)
