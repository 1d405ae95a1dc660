"""Flax models for teachers and students: a small CNN (optionally behind a fixed Gabor
front end) and an MLP, sized by the config; the DP-SGD baseline's networks (a tanh
CNN, a linear classifier on features); and the PATE-GAN's class-conditional MLP generator
and discriminator (`pate synth`).

Why a home-made convolution: vmapped over hundreds of teachers, `nn.Conv` becomes one
grouped convolution, which XLA:CPU runs slowly (on 2 cores, over 100 s per epoch of
Fashion-MNIST for 250 teachers with a two-layer stride-2 CNN). The same layer built as
strided slices (the k*k patches) and one matmul against the reshaped kernel turns into a
batched matmul under `vmap`, which XLA:CPU runs at matmul speed (about 16 times faster
for that CNN). On accelerators the plain `lax.conv` path is the fast one. Both paths
compute the same function of the same parameters (`kernel` in HWIO layout, `bias`), so
a checkpoint trained with one runs with the other.

Why a fixed front end: a teacher sees a few hundred images. Replacing the first learned
convolution by the modulus of a fixed bank of oriented Gabor filters (the first layer of
a scattering transform: Bruna & Mallat, "Invariant scattering convolution networks",
2013; Oyallon et al., "Scaling the scattering transform", ICCV 2017, on hybrids that
learn well from little data) raised 250 Fashion-MNIST teachers of 240 images from a
mean accuracy of 0.780 to 0.797 and their plurality vote from 0.840 to 0.856 (against a
learned 32-channel 5x5 first layer, same training otherwise; wider or deeper learned
nets, more epochs, other regularisers did not get there). The filters depend on no
data, so they change nothing in PATE's privacy analysis.
"""

from __future__ import annotations

import math
from typing import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from analysis.core.errors import PateError
from pate.config import Config, DpsgdConfig, StudentConfig, TeachersConfig
from pate.config.data_defaults import DataFacts
from pate.programs import user_model


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


def _convolve(x: jax.Array, w: jax.Array, stride: int, padding: int, impl: str) -> jax.Array:
    """NHWC input, HWIO kernel, symmetric zero padding: patches+matmul or lax.conv."""
    if impl == "patches":
        patches = extract_patches(x, w.shape[0], stride, padding)
        return patches @ w.reshape(-1, w.shape[-1])
    if impl == "xla":
        return jax.lax.conv_general_dilated(
            x, w, (stride, stride), [(padding, padding), (padding, padding)],
            dimension_numbers=("NHWC", "HWIO", "NHWC"))
    raise ValueError(f"unknown convolution impl {impl!r}")


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
        y = _convolve(x, w, self.stride, self.kernel // 2, self.impl)
        return y + b


def gabor_bank(orientations: int, kernel: int = 5, sigma: float = 1.2,
               wavelength: float = 3.0) -> np.ndarray:
    """A fixed filter bank: `orientations` complex Gabor filters and one Gaussian.

    Returns:
      (kernel, kernel, 2 * orientations + 1) float32: for orientation i, channels 2i and
      2i+1 are the zero-mean cosine and sine (real and imaginary) parts; the last channel
      is the Gaussian low-pass. Every filter has unit L2 norm.
    """
    r = np.arange(kernel) - kernel // 2
    xx, yy = np.meshgrid(r, r)
    filters = []
    for i in range(orientations):
        theta = np.pi * i / orientations
        along = xx * np.cos(theta) + yy * np.sin(theta)
        across = -xx * np.sin(theta) + yy * np.cos(theta)
        envelope = np.exp(-(along**2 + across**2) / (2 * sigma**2))
        for phase in (0.0, np.pi / 2):
            f = envelope * np.cos(2 * np.pi * along / wavelength + phase)
            f = f - f.mean()
            filters.append(f / np.linalg.norm(f))
    gauss = np.exp(-(xx**2 + yy**2) / (2 * sigma**2))
    filters.append(gauss / np.linalg.norm(gauss))
    return np.stack(filters, axis=-1).astype(np.float32)


class GaborModulus(nn.Module):
    """A fixed (untrained, data-independent) first layer: per input channel, the modulus
    of `orientations` complex Gabor responses plus a Gaussian low-pass, with stride.

    Output channels: `channels * (orientations + 1)`, ordered channel-major. No
    parameters. The kernel is a constant shared by all teachers, so under `vmap` this
    stays one ordinary `lax.conv` (the teacher axis folds into the batch), which is
    fast on CPU and accelerators alike.
    """

    orientations: int = 8
    kernel: int = 5
    stride: int = 2

    def __call__(self, x: jax.Array) -> jax.Array:
        channels, n = x.shape[-1], self.orientations
        bank = gabor_bank(n, self.kernel)  # (k, k, 2n + 1): re/im interleaved, then low-pass
        ordered = np.concatenate([bank[..., 0:2 * n:2], bank[..., 1:2 * n:2], bank[..., 2 * n:]],
                                 axis=-1)  # re (n), im (n), low-pass (1)
        # block-diagonal HWIO kernel: input channel c feeds only its own 2n + 1 outputs
        w = np.zeros((self.kernel, self.kernel, channels, channels, 2 * n + 1), np.float32)
        for c in range(channels):
            w[:, :, c, c, :] = ordered
        w = w.reshape(self.kernel, self.kernel, channels, channels * (2 * n + 1))
        y = _convolve(x, jnp.asarray(w), self.stride, self.kernel // 2, "xla")
        y = y.reshape(*y.shape[:-1], channels, 2 * n + 1)
        modulus = jnp.sqrt(y[..., :n] ** 2 + y[..., n:2 * n] ** 2 + 1e-6)
        out = jnp.concatenate([modulus, y[..., 2 * n:]], axis=-1)
        return out.reshape(*out.shape[:-2], channels * (n + 1))


class CNN(nn.Module):
    """Convolutions (ReLU, optional 2x2 max pool), dense layers, dropout, then logits.

    Attributes:
      num_classes: output logits.
      gabor_orientations: when > 0, a fixed `GaborModulus` layer (5x5, stride 2) comes
        first.
      features, kernels, strides: channels, window and stride of each convolution.
      pool: a 2x2 max pool after each convolution.
      hidden: widths of the dense layers before the classifier.
      dropout: dropout rate before the classifier (training only).
      impl: convolution implementation, see `Conv`.
    """

    num_classes: int
    gabor_orientations: int = 0
    features: Sequence[int] = (32, 64)
    kernels: Sequence[int] = (5, 3)
    strides: Sequence[int] = (2, 2)
    pool: bool = False
    hidden: Sequence[int] = ()
    dropout: float = 0.0
    impl: str = "patches"

    @nn.compact
    def __call__(self, x: jax.Array, train: bool = False, features: bool = False) -> jax.Array:
        if self.gabor_orientations:
            x = GaborModulus(self.gabor_orientations)(x)
        for f, k, s in zip(self.features, self.kernels, self.strides, strict=True):
            x = nn.relu(Conv(f, k, s, self.impl)(x))
            if self.pool:
                x = nn.max_pool(x, (2, 2), (2, 2), padding="SAME")
        x = x.reshape(x.shape[0], -1)
        for width in self.hidden:
            x = nn.relu(nn.Dense(width, kernel_init=lecun_normal)(x))
        if features:  # the classifier's input (`penultimate`)
            return x
        x = _dropout(self, x, self.dropout, train)
        return nn.Dense(self.num_classes, kernel_init=lecun_normal)(x)


class MLP(nn.Module):
    """Dense ReLU layers of widths `hidden`, dropout (training only), then logits."""

    num_classes: int
    hidden: Sequence[int] = (256,)
    dropout: float = 0.0

    @nn.compact
    def __call__(self, x: jax.Array, train: bool = False, features: bool = False) -> jax.Array:
        x = x.reshape(x.shape[0], -1)
        for width in self.hidden:
            x = nn.relu(nn.Dense(width, kernel_init=lecun_normal)(x))
        if features:
            return x
        x = _dropout(self, x, self.dropout, train)
        return nn.Dense(self.num_classes, kernel_init=lecun_normal)(x)


class WideResNet(nn.Module):
    """A Wide-ResNet-style student for accelerators (Zagoruyko & Komodakis 2016, the
    network FixMatch trains): a 3x3 stem of ``widths[0]`` channels, then per group ``i``
    ``blocks`` pre-activation residual blocks of ``widths[i]`` channels (the first with
    stride ``strides[i]``; a 1x1 projection where the shape changes), GroupNorm instead
    of BatchNorm (no running statistics: the same pure ``apply`` as every other model),
    global average pooling, dropout and the classifier. WRN-16-2 on 28x28: widths
    (32, 64, 128), strides (1, 2, 2), 2 blocks."""

    num_classes: int
    widths: Sequence[int] = (32, 64, 128)
    strides: Sequence[int] = (1, 2, 2)
    blocks: int = 2
    dropout: float = 0.0
    impl: str = "xla"

    @nn.compact
    def __call__(self, x: jax.Array, train: bool = False) -> jax.Array:
        x = Conv(self.widths[0], 3, 1, self.impl)(x)
        for width, stride in zip(self.widths, self.strides, strict=True):
            for b in range(self.blocks):
                x = self._block(x, width, stride if b == 0 else 1)
        x = nn.relu(nn.GroupNorm(num_groups=_groups(x.shape[-1]))(x))
        x = jnp.mean(x, axis=(1, 2))
        x = _dropout(self, x, self.dropout, train)
        return nn.Dense(self.num_classes, kernel_init=lecun_normal)(x)

    def _block(self, x: jax.Array, width: int, stride: int) -> jax.Array:
        h = nn.relu(nn.GroupNorm(num_groups=_groups(x.shape[-1]))(x))
        shortcut = x if (stride == 1 and x.shape[-1] == width) else Conv(width, 1, stride, self.impl)(h)
        h = Conv(width, 3, stride, self.impl)(h)
        h = nn.relu(nn.GroupNorm(num_groups=_groups(width))(h))
        return shortcut + Conv(width, 3, 1, self.impl)(h)


def _groups(channels: int) -> int:
    """GroupNorm groups: 8 channels per group where they divide, else one group."""
    return channels // 8 if channels % 8 == 0 and channels >= 8 else 1


class FlipAveraged(nn.Module):
    """Test-time augmentation: at inference, the mean log-probabilities of `inner` on
    each image and its horizontal mirror; in training, `inner` unchanged."""

    inner: nn.Module

    def __call__(self, x: jax.Array, train: bool = False, features: bool = False) -> jax.Array:
        if features:  # the features of the image itself (no mirror)
            return self.inner(x, features=True)
        if train:
            return self.inner(x, train=True)
        both = self.inner(jnp.concatenate([x, x[:, :, ::-1, :]]), train=False)
        logp = jax.nn.log_softmax(both)
        return 0.5 * (logp[: x.shape[0]] + logp[x.shape[0]:])


def _dropout(module: nn.Module, x: jax.Array, rate: float, train: bool) -> jax.Array:
    """Inverted dropout with the rate rounded to 1/256: one random byte per unit (four
    times fewer random words than a float32 Bernoulli draw, which matters on CPU)."""
    if not train or rate <= 0:
        return x
    threshold = int(round(rate * 256))
    bits = jax.random.bits(module.make_rng("dropout"), (x.size,), jnp.uint8).reshape(x.shape)
    keep = bits >= threshold
    return jnp.where(keep, x * (256.0 / (256 - threshold)), 0.0)


def conv_impl(requested: str, backend: str | None = None) -> str:
    """Resolves "auto" to "patches" on CPU and "xla" on accelerators."""
    if requested != "auto":
        return requested
    return "patches" if (backend or jax.default_backend()) == "cpu" else "xla"


def make_model(cfg: TeachersConfig | StudentConfig, num_classes: int,
               backend: str | None = None) -> nn.Module:
    """The model a `[teachers]` (or `[student]`: same model keys) section describes.

    Every model is called as `model.apply(params, x, train=..., rngs={"dropout": key})`
    and returns logits (log-probabilities with `eval_flip`) of shape (N, num_classes).
    `model = "linear"` is a linear head (an `MLP` without hidden layers), `"mlp"` dense
    layers of widths `hidden`: both flatten their input, so they run on images and on rows
    of features (embeddings) alike; `"module"` is the user's flax module `module` names
    (`pate.programs.user_model`).

    Args:
      cfg: the teachers config (model kind and sizes).
      num_classes: number of logits.
      backend: the JAX backend that will run it (default: the current one); decides
        `conv_impl = "auto"`.
    """
    if cfg.model == "mlp":
        model = MLP(num_classes=num_classes, hidden=tuple(cfg.hidden), dropout=cfg.dropout)
    elif cfg.model == "linear":
        model = MLP(num_classes=num_classes, hidden=(), dropout=cfg.dropout)
    elif cfg.model == "module":
        model = user_model.build(cfg.module, num_classes, f"{_section(cfg)}.module")
    elif cfg.model == "wrn":
        model = WideResNet(num_classes=num_classes, widths=tuple(cfg.conv_features), strides=tuple(cfg.conv_strides),
                           blocks=cfg.wrn_blocks, dropout=cfg.dropout, impl=conv_impl(cfg.conv_impl, backend))
    else:
        model = CNN(num_classes=num_classes, gabor_orientations=cfg.gabor_orientations,
                    features=tuple(cfg.conv_features),
                    kernels=tuple(cfg.conv_kernels), strides=tuple(cfg.conv_strides),
                    pool=cfg.conv_pool, hidden=tuple(cfg.hidden), dropout=cfg.dropout,
                    impl=conv_impl(cfg.conv_impl, backend))
    return FlipAveraged(model) if cfg.eval_flip else model


def check_module(cfg: TeachersConfig | StudentConfig, num_classes: int, input_shape: tuple[int, ...]) -> None:
    """With ``model = "module"``: the user's module built and tried on a sample batch of
    ``input_shape`` inputs (`pate.programs.user_model.check`), before anything trains; nothing
    for the built-in models.

    Raises:
      PateError: one line naming the module: it does not build or run, its output is not
        (batch, num_classes), it keeps batch statistics, or its outputs are not finite.
    """
    if cfg.model == "module":
        where = f"{_section(cfg)}.module"
        user_model.check(user_model.build(cfg.module, num_classes, where), num_classes, tuple(input_shape), where)


def check_models(config: Config, facts: DataFacts, *, teachers: bool = True) -> None:
    """Refuses, in one line and before any training, vote or charge, a `[teachers]` or
    `[student]` model that cannot run on the data's inputs (``facts``: public): an image model or
    augmentation on rows (`check_input`), a user's module that fails on a sample batch
    (`check_module`). The teachers are checked only when they see the inputs as they are
    (`[teachers] features` empty: the teachers step checks them on the map's rows), and not at all
    with ``teachers=False`` (a fine-grained release has none)."""
    sections = ([config.teachers] if teachers and not config.teachers.features else []) + [config.student]
    for cfg in sections:
        check_input(cfg, facts.input_shape)
        check_module(cfg, facts.num_classes, facts.input_shape)


def non_finite_advice(cfg: TeachersConfig | StudentConfig, then: str) -> str:
    """What to do when training made a NaN/inf loss or parameter: a built-in model's learning rate
    is too high; a user's module is named, and its own arithmetic is the place to look (its logits
    were finite on the sample batches `check_module` tried, and the learning rate may not be the
    cause: lowering it would hide a log of zero)."""
    section = _section(cfg)
    if cfg.model == "module":
        return (f"the user's module {cfg.module} ({section}.module) made them: find what makes its logits or their "
                f"gradients NaN/inf in its __call__ (a log, a division or an exp of its own), then {then}")
    return f"lower {section}.learning_rate and {then}"


def _section(cfg: TeachersConfig | StudentConfig) -> str:
    return "teachers" if isinstance(cfg, TeachersConfig) else "student"


#: The models that take rows of features (N, F): those that flatten their input first, and a
#: user's module (its own business).
FEATURE_MODELS = ("linear", "mlp", "module")


def check_input(cfg: TeachersConfig | StudentConfig, input_shape: tuple[int, ...]) -> None:
    """Refuses, in one line, a `[teachers]` or `[student]` section that cannot run on inputs of
    `input_shape` (one example's): on rows of features (embeddings, `(F,)`), a convolutional
    model or an image augmentation (shifts, flips, cutout, affine maps, mirrored evaluation).

    Raises:
      PateError: the setting at fault and what to set instead.
    """
    if len(input_shape) != 1:
        return
    s = _section(cfg)
    what = f"the data are embeddings (rows of {input_shape[0]} features), not images"
    if cfg.model not in FEATURE_MODELS:
        raise PateError(f"{s}.model = {cfg.model!r} needs images but {what}; set {s}.model to "
                        f"{' or '.join(repr(m) for m in FEATURE_MODELS)}")
    image_only = {"augment_shift": 0, "augment_flip": False, "eval_flip": False, "cutout": 0, "affine_degrees": 0.0}
    for key, off in image_only.items():
        if getattr(cfg, key, off) != off:
            raise PateError(f"{s}.{key} = {getattr(cfg, key)!r} augments images but {what}; set "
                            f"{s}.{key} = {str(off).lower()}")


# --------------------------------------------------------------------------- DP-SGD baseline


class TanhConv(nn.Module):
    """A square convolution (patches + matmul: per-example gradients stay matmuls
    under vmap on CPU) with explicit symmetric zero padding."""

    features: int
    kernel: int
    stride: int
    padding: int

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        w = self.param("kernel", lecun_normal, (self.kernel, self.kernel, x.shape[-1], self.features))
        b = self.param("bias", nn.initializers.zeros, (self.features,))
        patches = extract_patches(x, self.kernel, self.stride, self.padding)
        return jnp.tanh(patches @ w.reshape(-1, self.features) + b)


def max_pool_2x2_stride_1(x: jax.Array) -> jax.Array:
    """2x2 max pool with stride 1 (no padding) as the max of four shifted slices: the
    same function as `nn.max_pool(x, (2, 2), (1, 1))`, with a gradient that runs about
    twice as fast under vmap on CPU than reduce_window's select-and-scatter."""
    a = jnp.maximum(x[:, :-1, :-1], x[:, 1:, :-1])
    b = jnp.maximum(x[:, :-1, 1:], x[:, 1:, 1:])
    return jnp.maximum(a, b)


class TanhCNN(nn.Module):
    """Tramer & Boneh's end-to-end CNN for (Fashion-)MNIST (their `MNIST_CNN`, after
    Papernot et al., "Tempered Sigmoid Activations", AAAI 2021): per layer a tanh
    convolution then a 2x2 stride-1 max pool; dense tanh layers; a linear classifier.
    Defaults: 16 8x8 stride 2 pad 2, 32 4x4 stride 2 pad 0, dense 32 (26 010 parameters
    on 28x28x1)."""

    num_classes: int
    features: Sequence[int] = (16, 32)
    kernels: Sequence[int] = (8, 4)
    strides: Sequence[int] = (2, 2)
    padding: Sequence[int] = (2, 0)
    hidden: Sequence[int] = (32,)

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        for f, k, s, p in zip(self.features, self.kernels, self.strides, self.padding, strict=True):
            x = TanhConv(f, k, s, p)(x)
            x = max_pool_2x2_stride_1(x)
        x = x.reshape(x.shape[0], -1)
        for width in self.hidden:
            x = jnp.tanh(nn.Dense(width, kernel_init=lecun_normal)(x))
        return nn.Dense(self.num_classes, kernel_init=lecun_normal)(x)


class Linear(nn.Module):
    """A linear classifier on flattened features, initialised at zero."""

    num_classes: int

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        x = x.reshape(x.shape[0], -1)
        return nn.Dense(self.num_classes, kernel_init=nn.initializers.zeros)(x)


def cnn_output_side(side: int, cfg: DpsgdConfig) -> int:
    """The spatial side after the CNN's convolutions and pools (<= 0: the image is too
    small for these layers)."""
    for k, s, p in zip(cfg.conv_kernels, cfg.conv_strides, cfg.conv_padding):
        side = (side + 2 * p - k) // s + 1 if side + 2 * p >= k else 0
        side -= 1  # 2x2 stride-1 max pool
        if side <= 0:
            return 0
    return side


def penultimate(model: nn.Module, params, x: jax.Array) -> jax.Array:
    """The input of a `make_model` network's classifier layer for images `x`, flattened
    (N, D): the last convolution's (or dense layer's) activations, before dropout."""
    return model.apply(params, x, features=True)


# --------------------------------------------------------------------------- PATE-GAN


class Generator(nn.Module):
    """PATE-GAN's generator: a latent vector and a one-hot class through ReLU dense layers
    of widths `hidden` to sigmoid pixels of `shape`, in [0, 1]: the public range of the
    scaled data (pixels / 255), so no bound is read from the private data."""

    shape: Sequence[int]
    hidden: Sequence[int] = (256, 512)

    @nn.compact
    def __call__(self, z: jax.Array, onehot: jax.Array) -> jax.Array:
        x = jnp.concatenate([z, onehot], axis=-1)
        for width in self.hidden:
            x = nn.relu(nn.Dense(width, kernel_init=lecun_normal)(x))
        x = nn.sigmoid(nn.Dense(math.prod(self.shape), kernel_init=lecun_normal)(x))
        return x.reshape(x.shape[0], *self.shape)


class Discriminator(nn.Module):
    """A real/fake discriminator of (image, one-hot class) pairs: leaky-ReLU dense layers
    of widths `hidden`, then one logit (> 0: "real"). The teachers and the student."""

    hidden: Sequence[int] = (128,)

    @nn.compact
    def __call__(self, x: jax.Array, onehot: jax.Array) -> jax.Array:
        x = jnp.concatenate([x.reshape(x.shape[0], -1), onehot], axis=-1)
        for width in self.hidden:
            x = nn.leaky_relu(nn.Dense(width, kernel_init=lecun_normal)(x), 0.2)
        return nn.Dense(1, kernel_init=lecun_normal)(x)[:, 0]
