"""A feature map fitted on the **public** pool alone, for fine-grained PATE's neighbour search
(`pate.release.fine_grained_release`): each input's coefficients under the map `[features] map`
names (`MAPS`: the scattering coefficients of `pate.programs.scattering`, fixed filters, each
example group-normalised with its own statistics; an image's pixels; a row of features as it
is; the last spatial map of an encoder learned from the pool's images alone,
`pate.programs.learned_map`; or several of them concatenated, each part scaled by its root
mean square norm over the pool), projected on the top principal directions of the public pool's coefficients, as
quantised unit rows (`analysis.mechanisms.fine_grained.quantise_rows`).

Nothing private enters the fit, and each input's row is computed from that input and the fitted
public map alone (row by row or by BLAS, whose order of operations depends on shapes, never on
values): what the release's sensitivity needs of a record's neighbours.
"""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path
from typing import Callable

import numpy as np

from analysis.mechanisms import fine_grained
from analysis.core.errors import PateError
from pate.programs import scattering
from pate.programs.projection import top_directions
from pate.store.rundir import cached_rows


@dataclasses.dataclass(frozen=True)
class FeatureMap:
    """One public map of `[features] map`: what it computes and what input it takes."""

    name: str
    images: bool  # True: it needs images (N, H, W, C); False: rows of features (N, F)
    describe: str
    # (inputs, scattering_j, scattering_l, groups, weights[, cache_dir, tag]) -> (n, F); a map that
    # costs time caches in cache_dir (private: the inputs may be private images) under tag
    coefficients: Callable[..., np.ndarray]
    # (weights) -> None: refuses, in one line, public inputs the map lacks (read before any data)
    ready: Callable[[str], None] | None = None


def _scattering(x: np.ndarray, j: int, l: int, groups: int, weights: str = "", cache_dir: Path | None = None,
                tag: str = "", progress: bool = False) -> np.ndarray:
    feats = scattering.features(x, j, l, groups, cache_dir, tag, section="fine_grained",
                                progress=f"scattering ({tag})" if progress else "")
    return feats.reshape(feats.shape[0], -1)


def _flat(x: np.ndarray, *_settings, **_cache_and_progress) -> np.ndarray:
    return np.asarray(x, np.float32).reshape(np.shape(x)[0], -1)


def _learned(x: np.ndarray, j: int, l: int, groups: int, weights: str = "", cache_dir: Path | None = None,
             tag: str = "", progress: bool = False) -> np.ndarray:
    from pate.programs import learned_map  # imports JAX

    encoder = learned_map.load(weights)
    x = np.ascontiguousarray(x, np.float32)
    path = None
    if cache_dir is not None:  # keyed by the inputs' content (shape included) and the weights' digest
        inputs = hashlib.sha256(repr(x.shape).encode() + x.tobytes()).hexdigest()[:16]
        path = Path(cache_dir) / f"{tag}-learned-{encoder.sha256[:16]}-{inputs}.npy"
    return cached_rows(path, x.shape[0], lambda: learned_map.features(
        encoder, x, progress=f"learned map ({tag})" if progress else ""))


def _learned_ready(weights: str) -> None:
    from pate.programs import learned_map

    learned_map.check_weights(weights)


#: The maps by name (their names are `pate.config.checks.FEATURE_MAPS`).
MAPS = {m.name: m for m in (
    FeatureMap("scattering", True, "ScatterNet coefficients", _scattering),
    FeatureMap("pixels", True, "pixels", _flat),
    FeatureMap("none", False, "the rows as they are", _flat),
    FeatureMap("learned", True, "a SimCLR encoder learned from the public pool", _learned, _learned_ready),
)}


def parts(name: str) -> tuple[FeatureMap, ...]:
    """The maps a `[features] map` value names ("scattering+pixels": two)."""
    return tuple(MAPS[p] for p in name.split("+"))


def check_ready(name: str, weights: str) -> None:
    """Refuses, in one line and before any data is read, a map whose public inputs are missing
    or damaged (a learned map's weights, checked against their recipe's digest)."""
    for part in parts(name):
        if part.ready is not None:
            part.ready(weights)


def check_input(name: str, inputs: np.ndarray, key: str = "features.map") -> None:
    """Refuses, in one line, a map that does not take these inputs (images against embeddings);
    `key` is the config key that named the map."""
    embeddings = np.ndim(inputs) == 2
    for part in parts(name):
        if part.images == embeddings:
            data = "embeddings (rows of features)" if embeddings else "images"
            use = "\"none\"" if embeddings else "\"scattering\" or \"pixels\""
            raise PateError(f"{key} = {name!r}: {part.name} takes {'images' if part.images else 'rows of features'} "
                            f"but the data are {data}; set {key} = {use}")


def check_pca(name: str, pool_x: np.ndarray, dims: int, settings: tuple[int, int, int, str]) -> None:
    """Refuses, in one line, ``dims`` principal directions above what the map ``name`` gives on
    the public pool ``pool_x`` (its size, or the map's feature count: measured on one pool
    point, settings ``(scattering_j, scattering_l, groups, weights)``): what `fit` refuses,
    found before any private record is read (`pate plan --config`)."""
    check_ready(name, settings[3])
    check_input(name, pool_x)
    width = sum(int(np.asarray(part.coefficients(pool_x[:1], *settings)).shape[1]) for part in parts(name))
    if not 1 <= dims <= min(pool_x.shape[0], width):
        raise PateError(f"fine_grained.pca = {dims} but the public pool gives at most {min(pool_x.shape[0], width)} "
                        f"principal directions ({pool_x.shape[0]} points of {width} features under the map {name!r}); "
                        "lower fine_grained.pca")


def _scales(blocks: list[np.ndarray]) -> tuple[float, ...]:
    """Each part's scale in a concatenation: its mean squared norm over the pool to 1, so no part
    drowns the others (1 for a single map)."""
    if len(blocks) == 1:
        return (1.0,)
    return tuple(1.0 / max(float(np.sqrt(np.mean(np.sum(np.asarray(b, np.float64) ** 2, axis=1)))), 1e-12)
                 for b in blocks)


def _coefficients(name: str, inputs: np.ndarray, settings: tuple[int, int, int, str], scales: tuple[float, ...],
                  cache_dir: Path | None = None, tag: str = "", key: str = "features.map",
                  progress: bool = False) -> np.ndarray:
    """(n, F) coefficients of `inputs` under the map `name` (named by the config's `key`), each part
    times its scale (`progress`: a bar for the parts that take time)."""
    check_input(name, inputs, key)
    cache = {} if cache_dir is None else {"cache_dir": cache_dir, "tag": tag, "progress": progress}
    out = [scale * part.coefficients(inputs, *settings, **cache)
           for part, scale in zip(parts(name), scales, strict=True)]
    return out[0] if len(out) == 1 else np.concatenate(out, axis=1)


@dataclasses.dataclass(frozen=True)
class PublicMap:
    """The fitted map: the map's name, the scattering settings, each part's scale and the pool's
    mean and principal directions."""

    scattering_j: int
    scattering_l: int
    groups: int
    mean: np.ndarray  # (F,) float64
    directions: np.ndarray  # (F, dims) float64, columns by decreasing variance
    name: str = "scattering"
    scales: tuple[float, ...] = (1.0,)  # one per part: 1 / its RMS norm over the pool (1 for one part)
    weights: str = ""  # a learned map's folder ([features] weights)

    def coefficients(self, inputs: np.ndarray) -> np.ndarray:
        """(n, F) coefficients of inputs (images (n, H, W, C) in [0, 1], or rows (n, F))."""
        return _coefficients(self.name, inputs, (self.scattering_j, self.scattering_l, self.groups, self.weights),
                             self.scales)

    def rows(self, images: np.ndarray | None, coefficients: np.ndarray | None = None) -> np.ndarray:
        """(n, dims) int64 quantised unit rows of inputs (or of their `coefficients`)."""
        x = self.coefficients(images) if coefficients is None else coefficients
        return fine_grained.quantise_rows((np.asarray(x, np.float64) - self.mean) @ self.directions)


def fit(pool_images: np.ndarray, dims: int, *, scattering_j: int = 2, scattering_l: int = 8,
        groups: int = 27, feature_map: str = "scattering", weights: str = "") -> tuple[PublicMap, np.ndarray]:
    """The map `feature_map` names fitted on the public pool's inputs (images or rows of
    features), and the pool's quantised rows (`weights`: a learned map's folder).

    Raises:
      PateError: the map does not take these inputs, its weights are missing or damaged, or
        ``dims`` is above what the pool gives.
    """
    check_ready(feature_map, weights)
    check_input(feature_map, pool_images)
    settings = (scattering_j, scattering_l, groups, weights)
    blocks = [np.asarray(part.coefficients(pool_images, *settings), np.float64) for part in parts(feature_map)]
    scales = _scales(blocks)
    blocks = [scale * b for scale, b in zip(scales, blocks)]
    coefficients = blocks[0] if len(blocks) == 1 else np.concatenate(blocks, axis=1)
    fitted = fit_coefficients(coefficients, dims, scattering_j=scattering_j, scattering_l=scattering_l,
                              groups=groups)
    fitted = dataclasses.replace(fitted, name=feature_map, scales=scales, weights=weights)
    return fitted, fitted.rows(None, coefficients)


def fit_coefficients(coefficients: np.ndarray, dims: int, *, scattering_j: int = 2, scattering_l: int = 8,
                     groups: int = 27) -> PublicMap:
    """The map fitted on the public pool's scattering `coefficients` ((n, F), `PublicMap.coefficients`).

    The principal directions are the top ``dims`` eigenvectors of the pool's scatter matrix
    (`pate.programs.projection.top_directions`).

    Raises:
      PateError: ``dims`` above what the pool gives (its size or its feature count).
    """
    n, f = coefficients.shape
    if not 1 <= dims <= min(n, f):
        raise PateError(f"fine_grained.pca = {dims} but the public pool gives at most {min(n, f)} principal "
                        "directions; lower fine_grained.pca")
    x = np.asarray(coefficients, np.float64)
    mean = x.mean(axis=0)
    return PublicMap(scattering_j, scattering_l, groups, mean, top_directions(x - mean, dims))


@dataclasses.dataclass(frozen=True)
class InputMap:
    """What a model sees of its inputs under `[teachers] features`: the map's coefficients, without
    the pool PCA (a head learns its own projection), as float32 rows. Each input's row is a function
    of that input and of public values alone (the scattering filters and per-example normalisation;
    a concatenation's part scales, fitted on the public pool), so the private records' rows are what
    the records are, seen through a public lens.

    Calling it maps inputs (images, or rows for "none") to rows, cached by content in `cache_dir`
    (owner-only: the inputs may be private) under `tag` (no tag: not cached). `key` is the config key
    that named the map (`[teachers] features`, `[dpsgd] features`), which its errors name."""

    name: str
    settings: tuple[int, int, int, str]  # scattering_j, scattering_l, groups ([fine_grained]'s), [features] weights
    scales: tuple[float, ...]
    cache_dir: Path | None = None
    show_progress: bool = False
    key: str = "teachers.features"

    def __call__(self, inputs: np.ndarray, tag: str = "") -> np.ndarray:
        rows = _coefficients(self.name, inputs, self.settings, self.scales, self.cache_dir if tag else None, tag,
                             self.key, self.show_progress)
        return np.asarray(rows, np.float32)


def map_view(config, name: str, pool_x: np.ndarray, cache_dir: Path | None = None, *, key: str,
             show_progress: bool = False) -> InputMap:
    """The public map `name` (named by the config's `key`) as a model sees its inputs through it,
    fitted on the public pool `pool_x` (a concatenation's part scales), with `config`'s scattering
    settings (`[fine_grained]`) and learned weights (`[features] weights`).

    Raises:
      PateError: the map's weights are missing or damaged (before any input is read), or the map
        does not take the pool's inputs.
    """
    check_ready(name, config.features.weights)
    check_input(name, pool_x, key)
    fg = config.fine_grained
    settings = (fg.scattering_j, fg.scattering_l, fg.groups, config.features.weights)
    scales = (1.0,)
    if len(parts(name)) > 1:
        cache = {} if cache_dir is None else {"cache_dir": cache_dir, "tag": "pool"}
        scales = _scales([part.coefficients(pool_x, *settings, **cache) for part in parts(name)])
    return InputMap(name, settings, scales, cache_dir, show_progress, key)


def input_map(config, pool_x: np.ndarray, cache_dir: Path | None = None, *,
              show_progress: bool = False) -> InputMap | None:
    """The map the teachers of `config` see their inputs through (`[teachers] features`), fitted on
    the public pool `pool_x` (a concatenation's part scales); None when they see the inputs as
    they are (features = "")."""
    name = config.teachers.features
    if not name:
        return None
    return map_view(config, name, pool_x, cache_dir, key="teachers.features", show_progress=show_progress)


def teacher_inputs(config, x: np.ndarray, pool_x: np.ndarray, cache_dir: Path | None = None,
                   tag: str = "") -> np.ndarray:
    """`x` as the teachers of `config` see their inputs: through their public map (`[teachers]
    features`, fitted on the public pool `pool_x`; cached in `cache_dir` under `tag`), else as it is."""
    view = input_map(config, pool_x, cache_dir)
    return x if view is None else view(x, tag)
