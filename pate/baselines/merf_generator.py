"""DP-MERF's training program (Harder, Adamczewski & Park, AISTATS 2021), the `merf` method
of `pate synth`: random Fourier features of the images, the private class-conditional
mean embedding as an exact integer sum (released with noise by `analysis.baselines.merf`), and a
class-conditional generator fitted to the noisy embedding.

- **Features (public).** ``φ(x) = [cos(ω_j·x), sin(ω_j·x)]_{j<D/2} / √(D/2)`` of the
  flattened image scaled to [0, 1] by its public bound, with ``ω_j ~ N(0, I/ℓ²)`` drawn
  from the config's public seed (`frequencies`: the features are part of the mechanism's
  public description; the guarantee holds for every fixed ω, so they need no secret
  randomness). The kernel length-scale ℓ is ``synth.merf_length_scale`` or, when 0, the
  median pairwise distance of the **public pool** images (`median_length_scale`), never
  of the private split.
- **Private sum.** `private_sum` computes φ of the private train split in chunks and
  hands the rows to `analysis.baselines.merf.quantise_rows` / `embedding_sum` (exact int64); the
  result is PRIVATE and only `analysis.baselines.merf.noisy_sum` may see it.
- **Generator (post-processing).** `MerfGenerator` (`pate.programs.models.Generator`: latent and
  one-hot class through ReLU layers to sigmoid pixels) takes Adam steps on
  ``‖μ̃ − μ_G‖²`` with ``μ_G = (1/B) Σ_b φ(G(z_b, c_b)) ⊗ e_{c_b}`` over batches of
  **balanced** classes ``c_b = b mod C`` (a public prior: no class count is read; on
  balanced data such as Fashion-MNIST this matches the data's blocks). It reads nothing
  but the released μ̃ and public settings.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax

from analysis.baselines.merf import embedding_sum, quantise_rows
from pate.programs import keys
from pate.programs.models import Generator

_FREQ_STREAM, _TRAIN_STREAM, _SAMPLES_STREAM = 5, 6, 7  # sub-streams of the config seed's key


@dataclasses.dataclass(frozen=True)
class MerfSpec:
    """The public settings the program is built from (`pate.config.baseline_sections.SynthConfig`)."""

    image_shape: tuple[int, ...]
    num_classes: int
    num_features: int
    length_scale: float
    latent_dim: int = 64
    generator_hidden: tuple[int, ...] = (256, 512)
    learning_rate: float = 1e-3
    batch_size: int = 500
    seed: int = 0

    @classmethod
    def of(cls, cfg, image_shape: Sequence[int], num_classes: int, length_scale: float) -> "MerfSpec":
        return cls(tuple(int(d) for d in image_shape), int(num_classes), cfg.merf_features, float(length_scale),
                   cfg.latent_dim, tuple(cfg.generator_hidden), cfg.merf_learning_rate, cfg.merf_batch_size,
                   cfg.seed)


def median_length_scale(public_x: np.ndarray, max_points: int = 1000) -> float:
    """The median pairwise Euclidean distance of (up to ``max_points`` of) the public
    pool's images, flattened, in [0, 1] pixels: the kernel heuristic of DP-MERF, on public
    data only."""
    x = np.asarray(public_x, np.float64).reshape(len(public_x), -1)[:max_points]
    sq = np.einsum("ij,ij->i", x, x)
    d2 = np.maximum(sq[:, None] + sq[None, :] - 2.0 * x @ x.T, 0.0)
    upper = d2[np.triu_indices(x.shape[0], k=1)]
    return float(np.sqrt(np.median(upper))) if upper.size else 1.0


def frequencies(spec: MerfSpec) -> jax.Array:
    """ω: (D/2, pixels) ~ N(0, I/ℓ²), from the config's public seed."""
    key = keys.stream(keys.training_key(spec.seed), _FREQ_STREAM)
    dim = int(np.prod(spec.image_shape))
    return jax.random.normal(key, (spec.num_features // 2, dim), jnp.float32) / spec.length_scale


@jax.jit
def features(x: jax.Array, omega: jax.Array) -> jax.Array:
    """φ(x): (m, D) random Fourier features of unit L2 norm (module docstring)."""
    proj = x.reshape(x.shape[0], -1) @ omega.T
    return jnp.concatenate([jnp.cos(proj), jnp.sin(proj)], axis=-1) / jnp.sqrt(omega.shape[0] * 1.0)


def private_sum(train_x: np.ndarray, train_y: np.ndarray, omega: jax.Array, num_classes: int,
                chunk: int = 2000) -> np.ndarray:
    """S = Σ_i q(x_i) ⊗ onehot(y_i), exact int64 (D, C), over the private split. PRIVATE."""
    total = np.zeros((omega.shape[0] * 2, int(num_classes)), np.int64)
    for start in range(0, train_x.shape[0], chunk):
        xs = jnp.asarray(np.asarray(train_x[start: start + chunk], np.float32))
        rows = quantise_rows(np.asarray(features(xs, omega)))
        total += embedding_sum(rows, np.asarray(train_y[start: start + chunk]), num_classes)
    return total


class MerfGenerator:
    """The class-conditional generator and its training on a released embedding μ̃."""

    def __init__(self, spec: MerfSpec):
        self.spec = spec
        self.omega = frequencies(spec)
        self.gen = Generator(spec.image_shape, spec.generator_hidden)
        root = keys.training_key(spec.seed)
        self._root = root
        c0 = jnp.zeros((1, spec.num_classes), jnp.float32)
        self.params = jax.jit(self.gen.init)(keys.stream(root, keys.INIT_STREAM),
                                             jnp.zeros((1, spec.latent_dim)), c0)

    def _embedding(self, params, key: jax.Array, omega: jax.Array | None = None) -> jax.Array:
        """μ_G of one balanced batch: (D, C)."""
        spec = self.spec
        y = jnp.arange(spec.batch_size) % spec.num_classes
        onehot = jax.nn.one_hot(y, spec.num_classes, dtype=jnp.float32)
        z = jax.random.normal(key, (spec.batch_size, spec.latent_dim))
        phi = features(self.gen.apply(params, z, onehot), self.omega if omega is None else omega)
        return phi.T @ onehot / spec.batch_size

    def train(self, target: np.ndarray, steps: int, on_step: Callable[[int], None] | None = None) -> None:
        """``steps`` Adam steps on ‖target − μ_G‖² (target: the released μ̃, (D, C))."""
        step, tx = _train_step(self, int(steps))
        goal = jnp.asarray(target, jnp.float32)
        params, opt = self.params, tx.init(self.params)
        for s in range(steps):
            params, opt = step(params, opt, jnp.int32(s), goal, self.omega)
            if on_step is not None:
                on_step(s + 1)
        self.params = params

    def distance(self, target: np.ndarray, batches: int = 4) -> float:
        """‖target − μ_G‖², μ_G averaged over ``batches`` fixed balanced batches (diagnostics, tests)."""
        key = keys.stream(self._root, _SAMPLES_STREAM)
        mu = sum(self._embedding(self.params, jax.random.fold_in(key, b)) for b in range(batches)) / batches
        return float(jnp.sum((jnp.asarray(target, jnp.float32) - mu) ** 2))

    def sample(self, n: int, chunk: int = 1000) -> tuple[np.ndarray, np.ndarray]:
        """``n`` synthetic images (float32 in [0, 1]) with balanced classes ``i mod C``."""
        y = np.arange(n, dtype=np.int32) % self.spec.num_classes
        key = keys.stream(self._root, _SAMPLES_STREAM)
        apply = jax.jit(self.gen.apply)
        out = []
        for start in range(0, n, chunk):
            yc = jax.nn.one_hot(jnp.asarray(y[start: start + chunk]), self.spec.num_classes, dtype=jnp.float32)
            z = jax.random.normal(jax.random.fold_in(key, start), (yc.shape[0], self.spec.latent_dim))
            out.append(np.asarray(apply(self.params, z, yc)))
        return np.concatenate(out), y


_STEPS: dict = {}


def _train_step(gen: MerfGenerator, steps: int) -> tuple[Callable, optax.GradientTransformation]:
    """The jitted Adam step of a run of ``steps`` steps and its optimizer, shared by every
    generator of the same spec (they depend on the spec and the step count alone)."""
    if (gen.spec, steps) not in _STEPS:
        spec = gen.spec
        tx = optax.adam(optax.exponential_decay(spec.learning_rate, max(1, steps // 10), 0.9))
        key = keys.stream(gen._root, _TRAIN_STREAM)

        def step(params, opt, s, goal, omega):
            def loss(p):
                return jnp.sum((goal - gen._embedding(p, jax.random.fold_in(key, s), omega)) ** 2)

            updates, opt = tx.update(jax.grad(loss)(params), opt, params)
            return optax.apply_updates(params, updates), opt

        _STEPS[gen.spec, steps] = (jax.jit(step), tx)
    return _STEPS[gen.spec, steps]
