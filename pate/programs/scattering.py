"""ScatterNet features (Oyallon & Mallat; as used for DP-SGD by Tramer & Boneh, "Differentially
Private Learning Needs Better Features (or Much More Data)", ICLR 2021): a fixed
scattering transform from `kymatio`, normalised per example.

The transform (J scales, L orientations; J = 2, L = 8 on 28x28 gives 81 channels of
7x7 per image channel) depends on no data. The normalisation is Tramer & Boneh's
"GroupNorm" option without learned parameters: each example's channels are cut into
`groups` groups and each group is standardised with that example's own mean and
variance. No statistic of the private set enters, so the features of one example are a
function of that example alone and DP-SGD on them is DP with respect to the images
(their other option, data normalisation, needs privately computed statistics and some
privacy budget).

kymatio runs on its NumPy backend (about 1 s per 1000 Fashion-MNIST images on one core;
its JAX backend is no faster on CPU). kymatio 0.3's top-level `kymatio.numpy` imports
its 3-D transform, which needs `scipy.special.sph_harm` (removed in SciPy 1.17), so the
2-D frontend is imported directly.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

from analysis.core.errors import PateError
from pate.programs.progress import Progress
from pate.store.rundir import cached_rows


def scattering_channels(J: int, L: int) -> int:
    """Channels per image channel of an order-2 scattering: 1 + J L + L^2 J (J - 1) / 2."""
    return 1 + J * L + L * L * J * (J - 1) // 2


def _transform(shape: tuple[int, int], J: int, L: int, section: str = "dpsgd"):
    try:
        from kymatio.scattering2d.frontend.numpy_frontend import ScatteringNumPy2D
    except ImportError as err:  # pragma: no cover - kymatio is a dependency
        raise PateError(f"the ScatterNet model needs kymatio ({err}); pip install kymatio") from None
    h, w = shape
    if h % (2 ** J) or w % (2 ** J):
        raise PateError(f"scattering with J = {J} needs image sides divisible by {2 ** J}, "
                        f"got {h}x{w}; lower {section}.scattering_j")
    return ScatteringNumPy2D(J=J, shape=(h, w), L=L)


def scatter(images: np.ndarray, J: int = 2, L: int = 8, batch_size: int = 1000, section: str = "dpsgd",
            progress: str = "") -> np.ndarray:
    """The scattering coefficients of images (N, H, W, C) in [0, 1] (`section`: the config section
    whose keys an error names; `progress`: a bar's label, none when empty).

    Returns:
      float32 (N, H / 2^J, W / 2^J, C * K) with K = `scattering_channels(J, L)`
      (channels last, image channel major).
    """
    images = np.asarray(images, np.float32)
    n, h, w, c = images.shape
    transform = _transform((h, w), J, L, section)
    out = []
    with Progress(progress, n, show=bool(progress)) as bar:
        for start in range(0, n, batch_size):
            x = np.moveaxis(images[start: start + batch_size], -1, 1)  # (b, C, H, W)
            s = transform(x)  # (b, C, K, h', w')
            s = s.reshape(s.shape[0], -1, *s.shape[-2:])
            out.append(np.moveaxis(s, 1, -1).astype(np.float32))
            bar.update(min(start + batch_size, n))
    return np.concatenate(out) if out else np.zeros((0, h >> J, w >> J, c * scattering_channels(J, L)),
                                                    np.float32)


def group_normalize(features: np.ndarray, groups: int, eps: float = 1e-5, section: str = "dpsgd") -> np.ndarray:
    """Per-example group normalisation (GroupNorm without affine parameters).

    Channels (last axis) are split into `groups` contiguous groups; each example's group
    is centred and scaled by its own mean and variance over the group's channels and
    positions. Uses no statistic of other examples.
    """
    n, h, w, k = features.shape
    if groups < 1 or k % groups:
        raise PateError(f"{section}.groups = {groups} must divide the {k} scattering channels")
    x = features.reshape(n, h * w, groups, k // groups).astype(np.float64)
    mean = x.mean(axis=(1, 3), keepdims=True)
    var = x.var(axis=(1, 3), keepdims=True)
    x = (x - mean) / np.sqrt(var + eps)
    return x.reshape(n, h, w, k).astype(np.float32)


def features(images: np.ndarray, J: int, L: int, groups: int, cache_dir: str | Path | None = None,
             name: str = "", section: str = "dpsgd", progress: str = "") -> np.ndarray:
    """Normalised scattering features, cached in `cache_dir` (keyed by a digest of the
    images and the settings) so a run computes them once.

    The cache holds features of private images: keep it inside the (private) run
    directory. Returns float32 (N, H / 2^J, W / 2^J, C * K).
    """
    images = np.ascontiguousarray(images, np.float32)
    digest = hashlib.sha256(images.tobytes()).hexdigest()[:16]
    path = None if cache_dir is None else Path(cache_dir) / f"{name}-J{J}-L{L}-G{groups}-{digest}.npy"
    return cached_rows(path, images.shape[0], lambda: group_normalize(
        scatter(images, J, L, section=section, progress=progress), groups, section=section))
