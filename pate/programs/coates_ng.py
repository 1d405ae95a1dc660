"""A single layer of k-means filters learned from the **public pool's** image patches (Coates, Lee &
Ng, "An analysis of single-layer networks in unsupervised feature learning", AISTATS 2011):
`[features] map = "coates-ng"`, its filters made by `pate features --kind coates-ng --out DIR` and
loaded by digest from `[features] filters = "DIR"`.

Fitting (`fit`, the public pool's images alone, no label, no private record): `Recipe.patches`
patches of `size` x `size` pixels drawn at random positions of random pool images (a seeded numpy
generator), each normalised by its own mean and variance (brightness and contrast, the paper's
`var + 10` on 0-255 pixels, 10 / 255² here on [0, 1]), ZCA-whitened (eps 0.1, the paper's) and
clustered by k-means (`filters` centroids started on distinct patches, `iterations` Lloyd steps; an
empty cluster keeps its centroid). Last, each of the map's numbers is standardised by its mean and
s.d. over the pool's images (sqrt(variance + 0.01), as Coates & Ng standardise the features before
their classifier), both stored with the filters.

Mapping an image: every `size` x `size` patch (stride 1) normalised and whitened the same way, its
"triangle" activation f_k = max(0, mean_j(z_j) - z_k) with z_k its distance to centroid k, summed
over the four quadrants of the image: 4 x `filters` numbers. An image's row is a function of that
image and the public filters alone, computed in batches of one shape (`BATCH` images, the last
padded) so BLAS orders its operations the same way whatever else is mapped with it.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import io
import json
import time
from pathlib import Path

import numpy as np

from analysis.core.errors import PateError
from pate.programs import weights_folder
from pate.store.rundir import cached_rows

WEIGHTS = "filters.npz"
#: Images per matrix product (the last batch padded with zero images): one shape, one order.
BATCH = 64
#: The paper's patch normalisation (var + 10 on 0-255 pixels) on [0, 1] pixels.
NORM_EPS = 10.0 / 255.0 ** 2
#: The features' standardisation (Coates & Ng's code: sqrt(var + 0.01)).
FEATURE_EPS = 0.01


@dataclasses.dataclass(frozen=True, kw_only=True)
class Recipe:
    """How the filters are fitted. Defaults: 256 filters of 5 x 5 patches (issue 55's probe on the
    Fashion-MNIST pool), 100 000 patches, 30 k-means steps, ZCA eps 0.1 (the paper's)."""

    filters: int = 256
    size: int = 5
    patches: int = 100_000
    iterations: int = 30
    zca_eps: float = 0.1
    seed: int = 0

    def check(self) -> None:
        """Refuses, in one line, a recipe that cannot be fitted."""
        if not (self.filters >= 2 and self.size >= 2 and self.patches >= self.filters and self.iterations >= 1
                and np.isfinite(self.zca_eps) and self.zca_eps > 0):
            raise PateError(f"coates-ng recipe: filters {self.filters} (at least 2), size {self.size} (at least 2), "
                            f"patches {self.patches} (at least the filters), iterations {self.iterations} (at least "
                            f"1) and zca_eps {self.zca_eps} (positive) do not make a fit")


@dataclasses.dataclass(frozen=True)
class Filters:
    """Loaded filters: the recipe document, the patch size, the ZCA mean and matrix, the centroids
    (in whitened patch space) and the weights' sha256."""

    recipe: dict
    size: int
    mean: np.ndarray  # (d,) float32
    zca: np.ndarray  # (d, d) float32
    centroids: np.ndarray  # (K, d) float32
    sha256: str
    feature_mean: np.ndarray | None = None  # (4 K,) the pool's mean of each number (None: not standardised)
    feature_sd: np.ndarray | None = None  # (4 K,) its s.d. over the pool, sqrt(var + FEATURE_EPS)


def _normalise(p: np.ndarray) -> np.ndarray:
    """Each patch (row) less its mean, over sqrt(its variance + NORM_EPS) (the paper's)."""
    p = p - p.mean(axis=1, keepdims=True)
    return p / np.sqrt(p.var(axis=1, keepdims=True) + NORM_EPS)


def _all_patches(x: np.ndarray, size: int) -> np.ndarray:
    """(b, H - size + 1, W - size + 1, size * size * C) every patch of images (b, H, W, C), stride 1."""
    windows = np.lib.stride_tricks.sliding_window_view(x, (size, size), axis=(1, 2))  # b, h, w, C, s, s
    return np.ascontiguousarray(np.moveaxis(windows, 3, -1)).reshape(*windows.shape[:3], -1)


def fit(pool_x: np.ndarray, recipe: Recipe = Recipe()) -> tuple[dict[str, np.ndarray], dict]:
    """The filters fitted on the pool's images `pool_x` (N, H, W, C) in [0, 1] alone (module
    docstring), and the record of the fit. Deterministic given the pool and the recipe's seed.

    Raises:
      PateError: the pool is not images, or its images are smaller than a patch.
    """
    recipe.check()
    x = np.asarray(pool_x, np.float32)
    if x.ndim != 4:
        raise PateError(f"the coates-ng map needs images (N, H, W, C); the pool holds rows of features {x.shape}: "
                        "use features.map = \"none\" for them")
    n, h, w, c = x.shape
    if min(h, w) < recipe.size:
        raise PateError(f"coates-ng patches of {recipe.size}x{recipe.size} do not fit {h}x{w} images; lower --size")
    start = time.perf_counter()
    rng = np.random.default_rng(recipe.seed)
    img = rng.integers(0, n, recipe.patches)
    top = rng.integers(0, h - recipe.size + 1, recipe.patches)
    left = rng.integers(0, w - recipe.size + 1, recipe.patches)
    offsets = np.arange(recipe.size)
    rows = (top[:, None] + offsets)[:, :, None]
    cols = (left[:, None] + offsets)[:, None, :]
    patches = x[img[:, None, None], rows, cols].reshape(recipe.patches, -1).astype(np.float64)
    patches = _normalise(patches)
    mean = patches.mean(axis=0)
    values, vectors = np.linalg.eigh(np.cov(patches - mean, rowvar=False))
    zca = (vectors / np.sqrt(np.maximum(values, 0) + recipe.zca_eps)) @ vectors.T
    white = (patches - mean) @ zca
    centroids = white[rng.choice(recipe.patches, recipe.filters, replace=False)]
    squared = np.einsum("ij,ij->i", white, white)
    for _ in range(recipe.iterations):
        nearest = np.empty(recipe.patches, np.int64)
        for i in range(0, recipe.patches, 8192):
            block = white[i:i + 8192]
            d = squared[i:i + 8192, None] - 2 * block @ centroids.T + np.einsum("ij,ij->i", centroids, centroids)
            nearest[i:i + 8192] = d.argmin(axis=1)
        counts = np.bincount(nearest, minlength=recipe.filters)
        sums = np.zeros_like(centroids)
        np.add.at(sums, nearest, white)
        kept = counts > 0
        centroids[kept] = sums[kept] / counts[kept, None]
    weights = {"mean": mean.astype(np.float32), "zca": zca.astype(np.float32),
               "centroids": centroids.astype(np.float32), "size": np.array(recipe.size)}
    unscaled = Filters({}, recipe.size, weights["mean"], weights["zca"], weights["centroids"], "")
    pool_rows = np.asarray(_rows(unscaled, x), np.float64)
    weights["feature_mean"] = pool_rows.mean(axis=0).astype(np.float32)
    weights["feature_sd"] = np.sqrt(pool_rows.var(axis=0) + FEATURE_EPS).astype(np.float32)
    record = {"pool": {"sha256": pool_digest(x), "images": int(n), "shape": [h, w, c]},
              "seconds": round(time.perf_counter() - start, 1), "empty_clusters": int(np.sum(counts == 0))}
    return weights, record


def pool_digest(pool_x: np.ndarray) -> str:
    """sha256 of the pool's images as the fit sees them (float32, C order, with their shape)."""
    x = np.ascontiguousarray(pool_x, np.float32)
    return hashlib.sha256(repr(x.shape).encode() + x.tobytes()).hexdigest()


def weights_bytes(weights: dict[str, np.ndarray]) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **dict(sorted(weights.items())))
    return buf.getvalue()


def write(out: str | Path, weights: dict[str, np.ndarray], recipe: Recipe, record: dict, *,
          overwrite: bool = False, config=None) -> dict:
    """Writes `filters.npz` and `recipe.json` into `out`, all or nothing; returns the recipe document.

    Raises:
      PateError: `pate.programs.weights_folder.check_out` refuses `out`.
    """
    out = Path(out)
    weights_folder.check_out(out, (WEIGHTS, weights_folder.RECIPE), overwrite=overwrite, config=config)
    raw = weights_bytes(weights)
    doc = {"map": "coates-ng", "method": "k-means on normalised, ZCA-whitened patches of the public pool's images "
                                         "only (Coates, Lee & Ng 2011), no labels",
           "recipe": dataclasses.asdict(recipe),
           "activation": "triangle, summed over the 4 quadrants, each number standardised by its pool mean and s.d. "
                         "(sqrt(var + 0.01))",
           "patch_norm_eps": NORM_EPS, "seconds": record["seconds"], "empty_clusters": record["empty_clusters"],
           "pool": record["pool"], "weights": {"file": WEIGHTS, "sha256": hashlib.sha256(raw).hexdigest()}}
    weights_folder.write(out, WEIGHTS, raw, doc)
    return doc


def cache_home() -> Path:
    """Where filters fitted on a pool without a named folder live: ``$PATE_CACHE_DIR``, else
    ``$XDG_CACHE_HOME/pate`` when that is absolute (the XDG Base Directory rule), else
    ``~/.cache/pate``; each fit in ``coates-ng-POOL-RECIPE`` (public values only)."""
    import os

    named = os.environ.get("PATE_CACHE_DIR") or ""
    if named:
        return Path(named)
    xdg = os.environ.get("XDG_CACHE_HOME") or ""
    return (Path(xdg) if os.path.isabs(xdg) else Path.home() / ".cache") / "pate"


#: The recipe of filters fitted on a pool without a named folder (`fitted_on_pool`).
DEFAULT = Recipe()


def fitted_on_pool(pool_x: np.ndarray, recipe: Recipe | None = None, *, config=None) -> str:
    """The folder of the filters fitted on the pool `pool_x` with `recipe` (default `DEFAULT`; `[features] filters`
    left empty): a function of the public pool and the seeded recipe alone, so fitted once and kept
    in `cache_home()` under the pool's and the recipe's digests (all or nothing; a folder made by
    another process in the meantime is read, not fitted again). The release records the filters'
    sha256 as for a named folder, and `pate features --kind coates-ng` makes the same filters.

    Raises:
      PateError: the pool cannot be fitted (`fit`), or the cache folder is not writable or inside a
        ledger folder.
    """
    recipe = recipe or DEFAULT
    recipe_id = hashlib.sha256(repr(sorted(dataclasses.asdict(recipe).items())).encode()).hexdigest()[:12]
    folder = cache_home() / f"coates-ng-{pool_digest(pool_x)[:16]}-{recipe_id}"
    if not (folder / WEIGHTS).is_file():
        weights, record = fit(pool_x, recipe)
        try:
            write(folder, weights, recipe, record, config=config)
        except (OSError, PateError) as err:
            if not (folder / WEIGHTS).is_file():  # not another process's fit renamed into place first
                raise PateError(f"the coates-ng filters fitted on the pool cannot be kept in {folder} ({err}); set "
                                "$PATE_CACHE_DIR to a writable folder, or [features] filters to one made by `pate "
                                "features --kind coates-ng`") from None
    return str(folder)


def _read(folder: str, key: str) -> tuple[dict, str, bytes]:
    return weights_folder.read_named(folder, key, WEIGHTS, "coates-ng",
                                     "`pate features --kind coates-ng --out DIR`", f"make it with {_command(folder)}")


def _command(folder: str, more: str = "") -> str:
    return f"`pate features --kind coates-ng --config CONFIG --out {folder}{more}`"


def check_weights(folder: str, key: str = "features.filters") -> str:
    """The sha256 of the filters in `folder`, checked against its recipe and for what the digest
    cannot say (`_checked`; reads the folder only, no data)."""
    return load(folder, key).sha256


#: The arrays of filters.npz.
KEYS = ("centroids", "feature_mean", "feature_sd", "mean", "size", "zca")


def load(folder: str, key: str = "features.filters") -> Filters:
    """The filters in `folder`, checked against its recipe's digest and for what it cannot say
    (`_checked`).

    Raises:
      PateError: in one line naming the folder: missing, not the recipe's weights, or damaged.
    """
    doc, digest, raw = _read(folder, key)
    try:
        size, mean, zca, centroids, feature_mean, feature_sd = _checked(digest, json.dumps(doc, sort_keys=True), raw)
    except weights_folder.Damaged as err:
        raise weights_folder.refuse(key, folder, err, f"remake them with {_command(folder, ' --overwrite')}") from None
    return Filters(doc, size, mean, zca, centroids, digest, feature_mean, feature_sd)


@functools.lru_cache(maxsize=4)
def _checked(digest: str, doc_text: str, raw: bytes) -> tuple:
    """``(size, mean, zca, centroids, feature_mean, feature_sd)`` once they make a map of the
    recipe's pool images (H, W, C): every array of `KEYS` there and no other; ``size`` an integer
    patch side of at most the images' sides, d = size² C; ``mean`` (d,), ``zca`` (d, d),
    ``centroids`` (K, d), ``feature_mean`` and ``feature_sd`` (4 K,), finite floating-point numbers,
    each s.d. at least sqrt(`FEATURE_EPS`) (what `fit` stores); and no image in [0, 1] mapped past
    `weights_folder.MAX_REACH`: a normalised patch's entries lie within sqrt(d), so a whitened one's
    within (sqrt(d) + max |mean|) times zca's largest column sum of |.|, a squared distance within
    d (that + max |centroid|)², an activation within its root, a quadrant sum within the patches'
    count times that, and a standardised number within (it + max |feature_mean|) / min feature_sd.

    Raises:
      weights_folder.Damaged: what is wrong, in words.
    """
    doc = json.loads(doc_text)
    pool = doc.get("pool") if isinstance(doc.get("pool"), dict) else {}
    h, w, c = weights_folder.positive_ints(pool.get("shape"), "pool.shape (the images' H, W, C)", 3)
    f = weights_folder.arrays(raw, WEIGHTS)
    missing, extra = [k for k in KEYS if k not in f], sorted(set(f) - set(KEYS))
    if missing or extra:
        raise weights_folder.Damaged(f"{WEIGHTS} " + (f"lacks {missing[0]}" if missing else f"holds {extra[0]}, "
                                     f"which is none of {', '.join(KEYS)}"))
    size = f["size"]
    if size.shape != () or size.dtype.kind not in "iu" or not 2 <= int(size) <= min(h, w):
        raise weights_folder.Damaged(f"{WEIGHTS}'s size ({size.tolist()}) is no patch side of 2 to {min(h, w)} "
                                     f"pixels (the recipe's {h}x{w} images)")
    size = int(size)
    d = size * size * c
    k = f["centroids"].shape[0] if f["centroids"].ndim == 2 else 0
    shapes = {"mean": (d,), "zca": (d, d), "centroids": (k, d), "feature_mean": (4 * k,), "feature_sd": (4 * k,)}
    for name, shape in shapes.items():
        if f[name].shape != shape or not k:
            raise weights_folder.Damaged(
                f"{WEIGHTS}'s {name} has shape {list(f[name].shape)} where patches of {size}x{size}x{c} and "
                f"{k or 'some'} centroids make {list(shape)}")
    named = {name: f[name] for name in shapes}
    weights_folder.check_values(WEIGHTS, named)
    least = float(np.float32(np.sqrt(FEATURE_EPS)))
    if float(f["feature_sd"].min()) < least * (1 - 1e-6):
        raise weights_folder.Damaged(f"{WEIGHTS}'s feature_sd holds {float(f['feature_sd'].min()):.3g}, below "
                                     f"sqrt({FEATURE_EPS}), the least s.d. a fit stores")
    big = {name: float(np.abs(value.astype(np.float64)).max()) for name, value in named.items()}
    white = (np.sqrt(d) + big["mean"]) * float(np.abs(f["zca"].astype(np.float64)).sum(axis=0).max())
    squared = d * (white + big["centroids"]) ** 2
    patches = (h - size + 1) * (w - size + 1)
    reach = (patches * np.sqrt(squared) + big["feature_mean"]) / float(f["feature_sd"].min())
    if not max(squared, reach) <= weights_folder.MAX_REACH:
        raise weights_folder.Damaged(f"{WEIGHTS}'s filters can map an image to {max(squared, reach):.3g}, past "
                                     f"{weights_folder.MAX_REACH:g} (its rows would overflow float32)")
    return size, f["mean"], f["zca"], f["centroids"], f["feature_mean"], f["feature_sd"]


def _batch(filters: Filters, x: np.ndarray) -> np.ndarray:
    """(BATCH, 4 K) rows of a full batch of images."""
    p = _all_patches(x, filters.size)  # b, h', w', d
    b, ph, pw, d = p.shape
    white = (_normalise(p.reshape(-1, d)) - filters.mean) @ filters.zca
    c = filters.centroids
    z = white @ (-2 * c.T)  # the squared distances to the centroids, then the distances, in place
    z += np.einsum("ij,ij->i", c, c)
    z += np.einsum("ij,ij->i", white, white)[:, None]
    np.sqrt(np.maximum(z, 0, out=z), out=z)
    f = np.maximum(np.subtract(z.mean(axis=1, keepdims=True), z, out=z), 0, out=z).reshape(b, ph, pw, -1)
    hh, hw = ph // 2, pw // 2
    quadrants = [f[:, :hh, :hw], f[:, :hh, hw:], f[:, hh:, :hw], f[:, hh:, hw:]]
    return np.concatenate([q.sum(axis=(1, 2)) for q in quadrants], axis=1)


def features(filters: Filters, images: np.ndarray, cache_dir: str | Path | None = None, name: str = "",
             progress: str = "") -> np.ndarray:
    """(N, 4 K) float32 rows of images (N, H, W, C), cached in `cache_dir` (keyed by the images'
    content and the filters' digest; owner-only: the images may be private).

    Raises:
      PateError: the images' shape is not the pool's the filters were fitted on.
    """
    x = np.ascontiguousarray(images, np.float32)
    fitted = tuple(filters.recipe.get("pool", {}).get("shape", ()))
    if x.ndim != 4 or tuple(x.shape[1:]) != fitted:
        raise PateError(f"features.filters: the filters were fitted on images of shape {list(fitted)}, these are "
                        f"{list(x.shape[1:])}; fit them on this pool with `pate features --kind coates-ng`")
    path = None
    if cache_dir is not None:
        inputs = hashlib.sha256(repr(x.shape).encode() + x.tobytes()).hexdigest()[:16]
        path = Path(cache_dir) / f"{name}-coates-ng-{filters.sha256[:16]}-{inputs}.npy"
    return cached_rows(path, x.shape[0], lambda: _rows(filters, x, progress))


def _rows(filters: Filters, x: np.ndarray, progress: str = "") -> np.ndarray:
    """(N, 4 K) float32 rows of images x, BATCH images at a time (the last padded), standardised
    when the filters carry the pool's statistics."""
    from pate.programs.progress import Progress

    out = []
    with Progress(progress, x.shape[0], show=bool(progress)) as bar:
        for first in range(0, x.shape[0], BATCH):
            block = x[first:first + BATCH]
            padded = np.concatenate([block, np.zeros((BATCH - len(block), *x.shape[1:]), np.float32)])
            rows = _batch(filters, padded)[:len(block)]
            if filters.feature_mean is not None:
                rows = (rows - filters.feature_mean) / filters.feature_sd
            out.append(rows.astype(np.float32))
            bar.update(first + len(block))
    return np.concatenate(out) if out else np.zeros((0, 4 * filters.centroids.shape[0]), np.float32)


def make(config, out: str | Path, *, overwrite: bool = False, echo=print, **recipe) -> dict:
    """`pate features --kind coates-ng`: the filters fitted on the public pool of `config` alone
    (`pate.data.load_pool`: the test inputs, the train files never opened; no label) and written
    into `out`; returns the recipe document. `recipe`: `Recipe` fields to change (None: default).

    Raises:
      PateError: `out` refused (before any fit), a bad recipe, a pool that is not images.
    """
    from pate.data import load_pool

    recipe = Recipe(**{k: v for k, v in recipe.items() if v is not None})
    recipe.check()
    out = Path(out)
    weights_folder.check_out(out, (WEIGHTS, weights_folder.RECIPE), overwrite=overwrite, config=config)
    pool_x = load_pool(config.data, config.data.public_size)
    echo(f"features: {recipe.filters} k-means filters of {recipe.size}x{recipe.size} patches fitted on "
         f"{recipe.patches} patches of the {len(pool_x)} public pool images alone (no private record, no label)")
    weights, record = fit(pool_x, recipe)
    doc = write(out, weights, recipe, record, overwrite=overwrite, config=config)
    recipe = out / weights_folder.RECIPE
    echo(f"features: wrote {out / WEIGHTS} (sha256 {doc['weights']['sha256'][:12]}) and {recipe} in "
         f"{record['seconds']:.0f} s; use it with [features] map = \"coates-ng\", filters = \"{out}\"")
    return doc
