"""A feature map fitted on the **public** pool alone, for fine-grained PATE's neighbour search
(`pate.release.fine_grained_release`): each input's coefficients under the map `[features] map`
names (`MAPS`: the scattering coefficients of `pate.programs.scattering`, fixed filters, each
example group-normalised with its own statistics; an image's pixels; a row of features as it
is; the last spatial map of an encoder learned from the pool's images alone,
`pate.programs.learned_map`; histograms of oriented gradients, `pate.programs.hog`; Coates-Ng
k-means filters fitted on the pool's patches, `pate.programs.coates_ng`; or several of them
joined by "+", each part scaled by its root mean square norm over the pool), projected on the
top principal directions of the public pool's coefficients, as quantised unit rows
(`analysis.mechanisms.fine_grained.quantise_rows`). With `[features] whiten`, each part gets its
own pool PCA, each component divided by its pool s.d., and each part's projection is scaled to
unit norm row by row before the parts are joined.

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
from pate.programs import coates_ng, scattering
from pate.programs import hog as hog_map
from pate.programs.projection import top_directions
from pate.store.rundir import NonFiniteRows, cached_rows


@dataclasses.dataclass(frozen=True, kw_only=True)
class MapSettings:
    """The public settings the maps read (one value, carried by the fitted map): the scattering's
    (`[fine_grained]` `scattering_j`, `scattering_l`, `groups`), the learned map's weights
    (`[features] weights`), the Coates-Ng filters (`[features] filters`) and HOG's cells, bins,
    signedness and blocks (`[features] hog_*`)."""

    scattering_j: int = 2
    scattering_l: int = 8
    groups: int = 27
    weights: str = ""
    filters: str = ""
    hog: hog_map.Settings = hog_map.Settings()

    @classmethod
    def of(cls, config) -> "MapSettings":
        """The settings of a run config."""
        fg, f = config.fine_grained, config.features
        return cls(scattering_j=fg.scattering_j, scattering_l=fg.scattering_l, groups=fg.groups, weights=f.weights,
                   filters=f.filters, hog=hog_map.Settings(cell=f.hog_cell, bins=f.hog_bins, signed=f.hog_signed,
                                                           block=f.hog_block))


@dataclasses.dataclass(frozen=True)
class FeatureMap:
    """One public map of `[features] map`: what it computes and what input it takes."""

    name: str
    images: bool  # True: it needs images (N, H, W, C); False: rows of features (N, F)
    describe: str
    # (inputs, settings[, cache_dir, tag, progress]) -> (n, F); a map that costs time caches in
    # cache_dir (owner-only: the inputs may be private) under tag
    coefficients: Callable[..., np.ndarray]
    # (settings) -> None: refuses, in one line, public inputs the map lacks (read before any data)
    ready: Callable[[MapSettings], None] | None = None
    # (settings) -> {labels.npz key: sha256}: the digests of the public weights the map was loaded by
    digests: Callable[[MapSettings], dict[str, str]] | None = None
    # (settings) -> str: the map with its settings, for the release's progress line
    detail: Callable[[MapSettings], str] | None = None
    # (settings) -> str: the config key and folder of the public weights it loads ("" for none)
    source: Callable[[MapSettings], str] | None = None


def _scattering(x: np.ndarray, s: MapSettings, cache_dir: Path | None = None, tag: str = "",
                progress: bool = False) -> np.ndarray:
    feats = scattering.features(x, s.scattering_j, s.scattering_l, s.groups, cache_dir, tag, section="fine_grained",
                                progress=f"scattering ({tag})" if progress else "")
    return feats.reshape(feats.shape[0], -1)


def _flat(x: np.ndarray, *_settings, **_cache_and_progress) -> np.ndarray:
    return np.asarray(x, np.float32).reshape(np.shape(x)[0], -1)


def _learned(x: np.ndarray, s: MapSettings, cache_dir: Path | None = None, tag: str = "",
             progress: bool = False) -> np.ndarray:
    from pate.programs import learned_map  # imports JAX

    encoder = learned_map.load(s.weights)
    x = np.ascontiguousarray(x, np.float32)
    path = None
    if cache_dir is not None:  # keyed by the inputs' content (shape included) and the weights' digest
        inputs = hashlib.sha256(repr(x.shape).encode() + x.tobytes()).hexdigest()[:16]
        path = Path(cache_dir) / f"{tag}-learned-{encoder.sha256[:16]}-{inputs}.npy"
    return cached_rows(path, x.shape[0], lambda: learned_map.features(
        encoder, x, progress=f"learned map ({tag})" if progress else ""))


def _learned_ready(s: MapSettings) -> None:
    from pate.programs import learned_map

    learned_map.check_weights(s.weights)


def _learned_digests(s: MapSettings) -> dict[str, str]:
    from pate.programs import learned_map

    return {"feature_weights_sha256": learned_map.check_weights(s.weights)}


def _hog(x: np.ndarray, s: MapSettings, cache_dir: Path | None = None, tag: str = "",
         progress: bool = False) -> np.ndarray:
    return hog_map.features(x, s.hog, cache_dir, tag)


def _coates_ng(x: np.ndarray, s: MapSettings, cache_dir: Path | None = None, tag: str = "",
               progress: bool = False) -> np.ndarray:
    return coates_ng.features(coates_ng.load(s.filters), x, cache_dir, tag,
                              progress=f"coates-ng ({tag})" if progress else "")


#: The maps by name (their names are `pate.config.checks.FEATURE_MAPS`).
MAPS = {m.name: m for m in (
    FeatureMap("scattering", True, "ScatterNet coefficients", _scattering,
               detail=lambda s: f"scattering J {s.scattering_j}, L {s.scattering_l}"),
    FeatureMap("pixels", True, "pixels", _flat),
    FeatureMap("none", False, "the rows as they are", _flat),
    FeatureMap("learned", True, "a SimCLR encoder learned from the public pool", _learned, _learned_ready,
               _learned_digests, source=lambda s: f"features.weights = {s.weights!r}"),
    FeatureMap("hog", True, "histograms of oriented gradients", _hog,
               detail=lambda s: f"HOG cells {s.hog.cell}, {s.hog.bins} {'signed' if s.hog.signed else 'unsigned'} "
                                f"bins, blocks {s.hog.block}"),
    FeatureMap("coates-ng", True, "Coates-Ng k-means filters fitted on the public pool's patches", _coates_ng,
               lambda s: s.filters and coates_ng.check_weights(s.filters),  # none named: fitted on the pool
               lambda s: {"feature_filters_sha256": coates_ng.check_weights(s.filters)},
               source=lambda s: f"features.filters = {s.filters!r}" if s.filters else "its filters fitted on the pool"),
)}


def parts(name: str) -> tuple[FeatureMap, ...]:
    """The maps a `[features] map` value names ("scattering+pixels": two)."""
    return tuple(MAPS[p] for p in name.split("+"))


def describe(name: str, settings: MapSettings) -> str:
    """The map's parts with their settings, joined by " + "."""
    return " + ".join(p.detail(settings) if p.detail else p.describe for p in parts(name))


def check_ready(name: str, settings: MapSettings) -> None:
    """Refuses, in one line and before any data is read, a map whose public inputs are missing
    or damaged (a learned map's weights, Coates-Ng filters, checked against their recipe's digest)."""
    for part in parts(name):
        if part.ready is not None:
            part.ready(settings)


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


def check_pca(name: str, pool_x: np.ndarray, dims: int, settings: MapSettings) -> None:
    """Refuses, in one line, ``dims`` principal directions above what the map ``name`` gives on
    the public pool ``pool_x`` (its size, or the map's feature count: measured on one pool
    point with ``settings``): what `fit` refuses, found before any private record is read
    (`pate plan --config`)."""
    check_ready(name, settings)
    check_input(name, pool_x)
    width = sum(int(np.asarray(block).shape[1]) for block in part_coefficients(name, pool_x[:1], settings))
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


def part_coefficients(name: str, inputs: np.ndarray, settings: MapSettings, cache_dir: Path | None = None,
                      tag: str = "", key: str = "features.map", progress: bool = False) -> list[np.ndarray]:
    """Each part's (n, F_i) coefficients of `inputs` under the map `name` (named by the config's
    `key`), unscaled (`progress`: a bar for the parts that take time).

    Raises:
      PateError: the map does not take these inputs, or a part gives a NaN or inf (one line naming
        the map and its weights; nothing cached, `pate.store.rundir.cached_rows`).
    """
    check_input(name, inputs, key)
    cache = {} if cache_dir is None else {"cache_dir": cache_dir, "tag": tag, "progress": progress}
    out = []
    for part in parts(name):
        try:  # a map that caches refuses NaN/inf before writing (`cached_rows`); the others here
            rows = part.coefficients(inputs, settings, **cache)
            finite = np.isfinite(np.asarray(rows).reshape(len(rows), -1)).all(axis=1)
            if not finite.all():
                raise NonFiniteRows(int((~finite).sum()), int(finite.size))
            out.append(rows)
        except NonFiniteRows as err:
            raise PateError(f"{key} = {name!r}: {_which(name, part, settings)} gives NaN or inf for {err.bad} of "
                            f"{err.total} inputs{f' ({tag})' if tag else ''}; nothing was cached, and no row of it "
                            f"may train or label: {_remedy(part, settings)}") from None
    return out


def _which(name: str, part: FeatureMap, settings: MapSettings) -> str:
    """The part of a map a message names: "the map" alone, "its part 'learned'" in a concatenation,
    with the folder of its weights."""
    which = "the map" if name == part.name else f"its part {part.name!r}"
    return which + (f" ({part.source(settings)})" if part.source is not None else "")


def _remedy(part: FeatureMap, settings: MapSettings) -> str:
    return ("remake its weights with `pate features`" if part.source is not None
            else "check the inputs, or choose another map")


#: A map whose rows spread across the public pool less than this fraction of their size (root mean
#: square of the rows less their mean, against that of the rows) gives one row to every input:
#: float32 rounding alone spreads identical rows by about 1e-7 of their size.
MIN_SPREAD = 1e-6

#: The public pool's inputs a map's spread is measured on where the whole pool is not mapped anyway.
SPREAD_SAMPLE = 256


def check_spread(name: str, part: FeatureMap, rows: np.ndarray, settings: MapSettings,
                 key: str = "features.map") -> None:
    """Refuses, in one line, a part of the map `name` whose `rows` of public pool inputs are all one
    row (`MIN_SPREAD`): zero or constant weights. Such a map separates nothing: every neighbour
    search ties and every model sees one input, so the labels it would release (and charge) are one
    class. A check of public rows only, made before any private record is mapped.

    Raises:
      PateError: naming the map, its weights and the pool points measured.
    """
    x = np.asarray(rows, np.float64).reshape(len(rows), -1)
    if x.shape[0] < 2:
        return
    spread = float(np.sqrt(np.mean(np.sum((x - x.mean(axis=0)) ** 2, axis=1))))
    size = float(np.sqrt(np.mean(np.sum(x ** 2, axis=1))))
    if not spread > MIN_SPREAD * size:
        raise PateError(f"{key} = {name!r}: {_which(name, part, settings)} gives one row to all {x.shape[0]} public "
                        "pool inputs it was tried on: it separates nothing (its labels would be one class); nothing "
                        f"was trained or charged: {_remedy(part, settings)}")


def _coefficients(name: str, inputs: np.ndarray, settings: MapSettings, scales: tuple[float, ...],
                  cache_dir: Path | None = None, tag: str = "", key: str = "features.map",
                  progress: bool = False) -> np.ndarray:
    """(n, F) coefficients of `inputs` under the map `name`, each part times its scale."""
    out = [scale * b for scale, b in zip(scales, part_coefficients(name, inputs, settings, cache_dir, tag, key,
                                                                    progress), strict=True)]
    return out[0] if len(out) == 1 else np.concatenate(out, axis=1)


@dataclasses.dataclass(frozen=True)
class PublicMap:
    """The fitted map: the map's name and settings, each part's scale and the pool's mean and
    principal directions. Whitened (`[features] whiten`), each part has its own PCA, each
    component divided by its s.d. over the pool: `directions` is then block diagonal, part by
    part, and each part's projection is scaled to unit norm, row by row, before the parts are
    joined (`blocks`: the projected width of each part)."""

    mean: np.ndarray  # (F,) float64
    directions: np.ndarray  # (F, dims) float64, columns by decreasing variance (whitened: within each part)
    name: str = "scattering"
    scales: tuple[float, ...] = (1.0,)  # one per part: 1 / its RMS norm over the pool (1 for one part)
    settings: MapSettings = MapSettings()
    whiten: bool = False
    blocks: tuple[int, ...] = ()  # each part's projected width when whitened; () otherwise (one block)
    widths: tuple[int, ...] = ()  # each part's coefficient count when whitened

    @property
    def weights(self) -> str:
        """A learned map's folder ([features] weights)."""
        return self.settings.weights

    def digests(self) -> dict[str, str]:
        """The digests of the public weights the map was loaded by (labels.npz keys)."""
        out = {}
        for part in parts(self.name):
            if part.digests is not None:
                out.update(part.digests(self.settings))
        return out

    def coefficients(self, inputs: np.ndarray) -> np.ndarray:
        """(n, F) coefficients of inputs (images (n, H, W, C) in [0, 1], or rows (n, F))."""
        return _coefficients(self.name, inputs, self.settings, self.scales)

    def project(self, coefficients: np.ndarray) -> np.ndarray:
        """(n, dims) float64: the coefficients on the pool's principal directions (whitened: each
        component over its pool s.d.), before any unit norm."""
        x = np.asarray(coefficients, np.float64) - self.mean
        if len(self.blocks) <= 1:
            return x @ self.directions
        # block diagonal: each part's coefficients on its own directions (the zero blocks skipped)
        rows = np.cumsum((0, *self.widths))
        cols = np.cumsum((0, *self.blocks))
        return np.concatenate([x[:, rows[i]:rows[i + 1]] @ self.directions[rows[i]:rows[i + 1], cols[i]:cols[i + 1]]
                               for i in range(len(self.blocks))], axis=1)

    def unit_rows(self, coefficients: np.ndarray) -> np.ndarray:
        """(n, dims) float64: the coefficients projected (`project`), each part's projection to unit
        norm row by row (whitened; unwhitened: the whole row): what a model sees of the fitted map."""
        z = self.project(coefficients)
        edges = np.cumsum((0, *(self.blocks or (z.shape[1],))))
        return np.concatenate([_unit(z[:, a:b]) for a, b in zip(edges[:-1], edges[1:])], axis=1)

    def rows(self, images: np.ndarray | None, coefficients: np.ndarray | None = None) -> np.ndarray:
        """(n, dims) int64 quantised unit rows of inputs (or of their `coefficients`)."""
        z = self.project(self.coefficients(images) if coefficients is None else coefficients)
        if len(self.blocks) > 1:  # each part to unit norm, row by row, before the whole row is
            edges = np.cumsum((0, *self.blocks))
            z = np.concatenate([_unit(z[:, a:b]) for a, b in zip(edges[:-1], edges[1:])], axis=1)
        return fine_grained.quantise_rows(z)


def _unit(z: np.ndarray) -> np.ndarray:
    norms = np.sqrt(np.einsum("ij,ij->i", z, z))[:, None]
    return np.divide(z, norms, out=np.zeros_like(z), where=norms > 0)


def fit(pool_images: np.ndarray, dims: int, *, feature_map: str = "scattering",
        settings: MapSettings = MapSettings(), whiten: bool = False) -> tuple[PublicMap, np.ndarray]:
    """The map `feature_map` names fitted on the public pool's inputs (images or rows of
    features), and the pool's quantised rows (`settings`: the maps' public settings; `whiten`: a
    PCA per part, whitened, each part to unit norm).

    Raises:
      PateError: the map does not take these inputs, its weights are missing or damaged, or
        ``dims`` is above what the pool gives.
    """
    check_ready(feature_map, settings)
    blocks = [np.asarray(b, np.float64) for b in part_coefficients(feature_map, pool_images, settings)]
    return fit_parts(blocks, dims, feature_map=feature_map, settings=settings, whiten=whiten)


def fit_parts(blocks: list[np.ndarray], dims: int, *, feature_map: str = "scattering",
              settings: MapSettings = MapSettings(), whiten: bool = False) -> tuple[PublicMap, np.ndarray]:
    """`fit` on the pool's coefficients, part by part (`part_coefficients`, unscaled), and the
    pool's quantised rows. Unwhitened: the parts scaled to unit RMS norm, joined, one PCA to
    ``dims``. Whitened: a PCA to ``dims`` per part, each component over its s.d. on the pool.

    Raises:
      PateError: ``dims`` above what the pool gives (its size or a part's feature count), or a
        part gives one row to every pool input (`check_spread`).
    """
    blocks = [np.asarray(b, np.float64) for b in blocks]
    for part, block in zip(parts(feature_map), blocks, strict=True):
        check_spread(feature_map, part, block, settings)
    scales = _scales(blocks)
    scaled = [scale * b for scale, b in zip(scales, blocks)]
    coefficients = scaled[0] if len(scaled) == 1 else np.concatenate(scaled, axis=1)
    if not whiten:
        fitted = fit_coefficients(coefficients, dims)
        fitted = dataclasses.replace(fitted, name=feature_map, scales=scales, settings=settings)
        return fitted, fitted.rows(None, coefficients)
    means, directions = [], []
    for part in scaled:
        one = fit_coefficients(part, dims)
        sd = np.sqrt(np.mean(one.project(part) ** 2, axis=0))
        means.append(one.mean)
        directions.append(one.directions / np.where(sd > 0, sd, 1.0))
    widths = [d.shape[0] for d in directions]
    block_diagonal = np.zeros((sum(widths), dims * len(directions)))
    for i, (start, d) in enumerate(zip(np.cumsum((0, *widths)), directions)):
        block_diagonal[start:start + d.shape[0], i * dims:(i + 1) * dims] = d
    fitted = PublicMap(np.concatenate(means), block_diagonal, feature_map, scales, settings, True,
                       (dims,) * len(directions), tuple(widths))
    return fitted, fitted.rows(None, coefficients)


def fit_coefficients(coefficients: np.ndarray, dims: int) -> PublicMap:
    """The map fitted on the public pool's `coefficients` ((n, F), `PublicMap.coefficients`).

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
    return PublicMap(mean, top_directions(x - mean, dims))


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
    settings: MapSettings
    scales: tuple[float, ...]
    cache_dir: Path | None = None
    show_progress: bool = False
    key: str = "teachers.features"
    whitened: PublicMap | None = None  # `[features] whiten`: each part's pool PCA, whitened, to unit norm

    def __call__(self, inputs: np.ndarray, tag: str = "") -> np.ndarray:
        rows = _coefficients(self.name, inputs, self.settings, self.scales, self.cache_dir if tag else None, tag,
                             self.key, self.show_progress)
        if self.whitened is not None:
            rows = self.whitened.unit_rows(rows)
        return np.asarray(rows, np.float32)


def map_view(config, name: str, pool_x: np.ndarray, cache_dir: Path | None = None, *, key: str,
             show_progress: bool = False) -> InputMap:
    """The public map `name` (named by the config's `key`) as a model sees its inputs through it,
    fitted on the public pool `pool_x` (a concatenation's part scales), with `config`'s scattering
    settings (`[fine_grained]`) and learned weights (`[features] weights`).

    Raises:
      PateError: the map's weights are missing or damaged (before any input is read), the map
        does not take the pool's inputs, or it gives NaN/inf or one row for all of them
        (`check_spread`: measured on the pool's first `SPREAD_SAMPLE` inputs, or the whole pool
        when a concatenation maps it for its scales).
    """
    settings = MapSettings.of(config)
    check_ready(name, settings)
    check_input(name, pool_x, key)
    whiten = config.features.whiten and name != "none"
    if not whiten and len(parts(name)) == 1:  # the pool is not mapped here: a sample of it is measured
        sample = part_coefficients(name, pool_x[:SPREAD_SAMPLE], settings, key=key)[0]
        check_spread(name, parts(name)[0], sample, settings, key)
        return InputMap(name, settings, (1.0,), cache_dir, show_progress, key)
    blocks = part_coefficients(name, pool_x, settings, cache_dir, "pool" if cache_dir else "", key)
    for part, block in zip(parts(name), blocks, strict=True):
        check_spread(name, part, block, settings, key)
    if not whiten:
        return InputMap(name, settings, _scales(blocks), cache_dir, show_progress, key)
    # The fine-grained release's whitening, fitted on the pool alone (`fit_parts`): the same map
    # for every family (`[features] whiten`; the width per part is `[fine_grained] pca`).
    fitted, _ = fit_parts(blocks, config.fine_grained.pca, feature_map=name, settings=settings, whiten=True)
    return InputMap(name, settings, fitted.scales, cache_dir, show_progress, key, fitted)


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
