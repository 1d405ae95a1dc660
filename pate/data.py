"""Data sets (IDX, SVHN .mat, .npz, synthetic), the benchmark splits, and the partition
of the private training set into disjoint teacher shards.

A process of a distributed command reads only the private records it needs, by index
(`load_train_rows`, `split_rows`), and the split's digests are computed from a stream of it
(`train_chunks`): neither holds the whole split.

Every loader returns int32 labels and float32 images in [0, 1] shaped (N, H, W, C), or, for an
.npz whose `x_*` arrays are 2-D, float32 rows of features shaped (N, F): a data set of
embeddings (a foundation model's, text's, tabular records'), split and partitioned as images are.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gzip
import os
import zlib
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

from analysis.core.errors import PateError
from pate.config import DataConfig

#: Where the Debian package `dataset-fashion-mnist` installs Fashion-MNIST.
FASHION_MNIST_DIR = Path("/usr/share/datasets/fashion-mnist")
#: Environment variable naming a data directory (or a root holding one per data set).
DATA_DIR_ENV = "PATE_DATA_DIR"

_DEFAULT_DIRS = {
    "fashion_mnist": FASHION_MNIST_DIR,
    "mnist": Path("/usr/share/datasets/mnist"),
    "svhn": Path("/usr/share/datasets/svhn"),
}
_SUBDIRS = {"fashion_mnist": "fashion-mnist", "mnist": "mnist", "svhn": "svhn"}
_HOW_TO_GET = {
    "fashion_mnist": "install it with `apt-get install dataset-fashion-mnist`, or download the "
                     "four IDX files from https://github.com/zalandoresearch/fashion-mnist",
    "mnist": "download the four IDX files from https://yann.lecun.com/exdb/mnist/ (or a mirror)",
    "svhn": "download train_32x32.mat and test_32x32.mat from "
            "http://ufldl.stanford.edu/housenumbers/",
}
_IDX_FILES = {
    "x_train": "train-images-idx3-ubyte",
    "y_train": "train-labels-idx1-ubyte",
    "x_test": "t10k-images-idx3-ubyte",
    "y_test": "t10k-labels-idx1-ubyte",
}
_SVHN_FILES = {"train": "train_32x32.mat", "test": "test_32x32.mat"}


@dataclasses.dataclass(frozen=True)
class Dataset:
    """A labelled data set with a train and a test split."""

    name: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    num_classes: int


@dataclasses.dataclass(frozen=True)
class Splits:
    """The benchmark protocol: private train set, public pool, evaluation set.

    The pool is the first `public_size` test points (their labels are kept only to
    score the student); evaluation is the rest of the test split.
    """

    train_x: np.ndarray
    train_y: np.ndarray
    pool_x: np.ndarray
    pool_y: np.ndarray
    eval_x: np.ndarray
    eval_y: np.ndarray
    num_classes: int


@dataclasses.dataclass(frozen=True)
class Partition:
    """Disjoint, equal teacher shards of the training set.

    `indices[t]` are the training-set rows of teacher t; `left_out` the rows in no
    shard (the remainder of `num_points / num_teachers`).
    """

    indices: np.ndarray  # (num_teachers, shard_size) int64
    left_out: np.ndarray  # (remainder,) int64

    @property
    def num_teachers(self) -> int:
        return int(self.indices.shape[0])

    @property
    def shard_size(self) -> int:
        return int(self.indices.shape[1])


# --------------------------------------------------------------------------- IDX


_IDX_TYPES = {0x08: np.uint8, 0x09: np.int8, 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


def read_idx(path: str | Path) -> np.ndarray:
    """Reads an IDX file (MNIST format), gzip-compressed or raw.

    Checks the magic number and that the payload size matches the header.

    Raises:
      PateError: the file is missing, truncated or not an IDX file.
    """
    path = Path(path)
    try:
        raw = path.read_bytes()
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
    except FileNotFoundError:
        raise PateError(f"{path} not found") from None
    except (EOFError, gzip.BadGzipFile, zlib.error) as err:
        raise PateError(f"{path} is truncated or corrupt ({err}); download it again") from None
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] not in _IDX_TYPES or raw[3] == 0:
        raise PateError(f"{path} is not an IDX file (bad magic number {raw[:4].hex()})")
    ndim = raw[3]
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise PateError(f"{path} is truncated (header cut short); download it again")
    dims = [int.from_bytes(raw[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim)]
    dtype = np.dtype(_IDX_TYPES[raw[2]])
    expected = header + int(np.prod(dims)) * dtype.itemsize
    if len(raw) != expected:
        raise PateError(f"{path} is truncated or corrupt: {len(raw)} bytes, header {dims} "
                        f"needs {expected}; download it again")
    return np.frombuffer(raw, dtype=dtype, offset=header).reshape(dims)


def _candidate_dirs(name: str, path: str) -> list[Path]:
    if path:
        return [Path(path)]
    dirs = []
    env = os.environ.get(DATA_DIR_ENV)
    if env:
        dirs += [Path(env) / _SUBDIRS[name], Path(env)]
    dirs.append(_DEFAULT_DIRS[name])
    return dirs


def _find(name: str, path: str, filenames: list[str]) -> Path:
    """The first candidate directory holding all `filenames` (each raw or .gz)."""
    dirs = _candidate_dirs(name, path)
    for d in dirs:
        if all((d / f).exists() or (d / f"{f}.gz").exists() for f in filenames):
            return d
    missing = filenames[0]
    for f in filenames:
        if not any((d / f).exists() or (d / f"{f}.gz").exists() for d in dirs):
            missing = f
            break
    where = ", ".join(str(d) for d in dirs)
    raise PateError(f"{name} file {missing}(.gz) not found; looked in {where}. "
                    f"To get it: {_HOW_TO_GET[name]}; or set data.path or ${DATA_DIR_ENV}")


def source_location(name: str, path: str) -> Path:
    """Where the files of data set `name` are read from (the folder `_find` picks, or the
    first candidate when none holds them yet; a .npz's own path): the source that names a
    data set's privacy ledger (`pate.store.identity.data_identity`)."""
    if name not in _SUBDIRS:
        return Path(path)
    dirs = _candidate_dirs(name, path)
    for d in dirs:
        if d.is_dir() and any(d.iterdir()):
            return d
    return dirs[0]


def training_files(cfg: DataConfig) -> list[Path]:
    """The files the private training split of a `[data]` section is read from (none for
    synthetic data): what a cached digest of that split (`training_digest`) is keyed on."""
    if cfg.name in ("fashion_mnist", "mnist"):
        d = _find(cfg.name, cfg.path, list(_IDX_FILES.values()))
        return [_resolve(d, _IDX_FILES["x_train"]), _resolve(d, _IDX_FILES["y_train"])]
    if cfg.name == "svhn":
        return [_find("svhn", cfg.path, list(_SVHN_FILES.values())) / _SVHN_FILES["train"]]
    if cfg.name == "npz":
        return [Path(cfg.path)]
    return []


def training_digest(cfg: DataConfig) -> str:
    """sha256 of the private training split's content (images and labels as loaded, with
    their shapes): the same data under another path, gzipped or not, has the same digest.
    Read as a stream (`train_chunks`): the images in the memory of a chunk, the labels (four
    bytes a record) kept until the images are hashed. A plain fingerprint of private data: it
    goes into private files only (the ledger, votes.npz, teachers.json), never into a released
    one, and the agreement of a distributed training (`pate.steps.teachers.fingerprint`)."""
    import hashlib

    h = hashlib.sha256(b"pate-training-split-v1")
    labels, row_shape = [], None
    for x, y in train_chunks(cfg):
        x = np.ascontiguousarray(x, dtype=np.float32)
        if row_shape is None:
            row_shape = x.shape[1:]
            h.update(repr((x.dtype.str, (train_count(cfg), *row_shape))).encode("ascii"))
        h.update(memoryview(x).cast("B"))
        labels.append(np.ascontiguousarray(y, dtype=np.int32))
    if row_shape is None:  # an empty split: its shape as the loader gives it
        x = load_train_rows(cfg, [])[0]
        h.update(repr((np.dtype(np.float32).str, x.shape)).encode("ascii"))
    y = np.concatenate(labels) if labels else np.zeros(0, np.int32)
    h.update(repr((y.dtype.str, y.shape)).encode("ascii"))
    h.update(memoryview(y).cast("B"))
    return h.hexdigest()


#: The most bytes one record's id may take (``ids`` in an .npz).
MAX_ID_BYTES = 256


def train_ids(cfg: DataConfig) -> list[bytes] | None:
    """The optional id of each private training record, in the split's order, as bytes: an
    .npz's ``ids`` array (one integer or string per record: ``7`` and ``"7"`` are the same
    id), or None (no ``ids``, or not an .npz). What says two splits hold the same people when
    their content cannot (re-encoded pixels, embeddings of the same people;
    `pate.store.identity.data_identity`). Private: kept only keyed, never in a run file.

    Raises:
      PateError: ``ids`` is not one integer or string per record."""
    import zipfile

    if cfg.name != "npz":
        return None
    p = Path(cfg.path)
    try:
        with zipfile.ZipFile(p) as z:
            if "ids.npy" not in z.namelist():
                return None
    except FileNotFoundError:
        raise PateError(f"{p} not found; set data.path to an .npz with x_train, y_train, x_test, y_test") from None
    except (OSError, zipfile.BadZipFile) as err:
        raise PateError(f"{p} is not a readable .npz ({err})") from None
    try:
        with np.load(p, allow_pickle=False) as f:
            ids = f["ids"]
    except Exception as err:  # numpy raises several types for a damaged or object member
        raise PateError(f"{p}: ids cannot be read ({err}); give one integer or string per training record") from None
    count = train_count(cfg)
    if ids.ndim != 1 or ids.shape[0] != count:
        raise PateError(f"{p}: ids must hold one id per record of x_train ({count},), got shape {ids.shape}")
    if np.issubdtype(ids.dtype, np.integer):
        out = [str(int(i)).encode("ascii") for i in ids]
    elif ids.dtype.kind in "US":
        out = [i.encode("utf-8") if isinstance(i, str) else bytes(i) for i in ids.tolist()]
    else:
        raise PateError(f"{p}: ids must be integers or strings (one per record), found dtype {ids.dtype}")
    if any(len(i) > MAX_ID_BYTES or not i for i in out):
        raise PateError(f"{p}: every id must be a non-empty value of at most {MAX_ID_BYTES} bytes")
    return out


def _resolve(d: Path, stem: str) -> Path:
    gz = d / f"{stem}.gz"
    return gz if gz.exists() else d / stem


def _images(x: np.ndarray) -> np.ndarray:
    """uint8 images (N, H, W[, C]) → float32 in [0, 1] shaped (N, H, W, C)."""
    x = np.asarray(x, dtype=np.float32) / 255.0
    return x[..., None] if x.ndim == 3 else x


def load_idx(name: str, directory: str = "") -> Dataset:
    """MNIST or Fashion-MNIST from the four IDX files (gzip or raw).

    Args:
      name: "mnist" or "fashion_mnist" (decides the default directory and messages).
      directory: where the files are; empty means `$PATE_DATA_DIR` or the default.
    """
    d = _find(name, directory, list(_IDX_FILES.values()))
    arrays = {k: read_idx(_resolve(d, stem)) for k, stem in _IDX_FILES.items()}
    for split in ("train", "test"):
        x, y = arrays[f"x_{split}"], arrays[f"y_{split}"]
        xs, ys = _IDX_FILES[f"x_{split}"], _IDX_FILES[f"y_{split}"]
        if x.ndim != 3 or y.ndim != 1:
            raise PateError(f"{d / xs}: expected images (N, H, W) and labels (N,), "
                            f"got {x.shape} and {y.shape}")
        if x.shape[0] != y.shape[0]:
            raise PateError(f"{d}: {xs} holds {x.shape[0]} images but {ys} holds "
                            f"{y.shape[0]} labels")
        if y.size and (y.min() < 0 or y.max() > 9):
            raise PateError(f"{d / ys}: labels must lie in 0..9, found {int(y.min())}.."
                            f"{int(y.max())}")
    return Dataset(name=name, x_train=_images(arrays["x_train"]),
                   y_train=arrays["y_train"].astype(np.int32),
                   x_test=_images(arrays["x_test"]),
                   y_test=arrays["y_test"].astype(np.int32), num_classes=10)


# --------------------------------------------------------------------------- SVHN


def _read_svhn_mat(path: Path) -> tuple[np.ndarray, np.ndarray]:
    x, y = _svhn_raw(path)
    return _images(np.transpose(x, (3, 0, 1, 2))), y


def _svhn_raw(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """An SVHN .mat's X as stored (uint8, (32, 32, 3, N)) and its labels (label 10 → 0), checked."""
    import scipy.io

    try:
        mat = scipy.io.loadmat(path)
    except FileNotFoundError:
        raise PateError(f"{path} not found") from None
    except Exception as err:  # scipy raises several types for a damaged file
        raise PateError(f"{path} is truncated or corrupt ({err}); download it again") from None
    if "X" not in mat or "y" not in mat:
        raise PateError(f"{path}: expected variables X and y (the SVHN format)")
    x, y = mat["X"], np.asarray(mat["y"]).reshape(-1).astype(np.int64)
    if x.ndim != 4 or x.shape[:3] != (32, 32, 3) or x.shape[3] != y.shape[0]:
        raise PateError(f"{path}: expected X of shape (32, 32, 3, N) matching y, got "
                        f"{x.shape} and {y.shape}")
    if y.size and (y.min() < 1 or y.max() > 10):
        raise PateError(f"{path}: SVHN labels must lie in 1..10, found {y.min()}..{y.max()}")
    return x, np.where(y == 10, 0, y).astype(np.int32)


def load_svhn(directory: str = "") -> Dataset:
    """SVHN (cropped digits) from `train_32x32.mat` and `test_32x32.mat`; label 10 → 0."""
    d = _find("svhn", directory, list(_SVHN_FILES.values()))
    x_train, y_train = _read_svhn_mat(d / _SVHN_FILES["train"])
    x_test, y_test = _read_svhn_mat(d / _SVHN_FILES["test"])
    return Dataset("svhn", x_train, y_train, x_test, y_test, num_classes=10)


# --------------------------------------------------------------------------- npz


#: The most classes an .npz data set may have: every model's last layer, vote histogram and
#: label one-hot has this width, so a stray huge label would exhaust memory mid-run.
MAX_CLASSES = 10_000


def is_embedding(x: np.ndarray) -> bool:
    """Whether inputs `x` are rows of features (N, F) rather than images (N, H, W, C)."""
    return np.ndim(x) == 2


def load_npz(path: str) -> Dataset:
    """A data set from one .npz with `x_train`, `y_train`, `x_test`, `y_test`.

    Images may be uint8 (scaled by 1/255) or floats already in [0, 1], shaped
    (N, H, W) or (N, H, W, C). 2-D `x_*` arrays (N, F) are embeddings: finite numbers of
    any range, kept as float32 (no scaling). Labels are integers 0..C-1; C is the
    largest label plus one, refused when the labels are not 0..C-1 as meant (`_npz_classes`).
    """
    p = Path(path)
    try:
        with np.load(p, allow_pickle=False) as f:
            arrays = {k: f[k] for k in ("x_train", "y_train", "x_test", "y_test") if k in f}
            keys = list(f.keys())
    except FileNotFoundError:
        raise PateError(f"{p} not found; set data.path to an .npz with x_train, y_train, "
                        "x_test, y_test") from None
    except Exception as err:
        raise PateError(f"{p} is not a readable .npz ({err})") from None
    missing = [k for k in ("x_train", "y_train", "x_test", "y_test") if k not in arrays]
    if missing:
        raise PateError(f"{p} lacks {', '.join(missing)} (it holds {', '.join(keys) or 'nothing'})")
    out = {}
    for split in ("train", "test"):
        out[f"x_{split}"], out[f"y_{split}"] = _npz_split(p, split, arrays[f"x_{split}"], arrays[f"y_{split}"])
    if out["x_train"].shape[1:] != out["x_test"].shape[1:]:
        kind = "embeddings" if is_embedding(out["x_train"]) else "images"
        raise PateError(f"{p}: train {kind} {out['x_train'].shape[1:]} and test inputs "
                        f"{out['x_test'].shape[1:]} differ in shape")
    return Dataset(p.stem, num_classes=_npz_classes(p, out["y_train"], out["y_test"]), **out)


#: Up to this many classes, empty ones are let be (a small or one-class slice of a data set).
_FEW_CLASSES = 10


def _npz_classes(p: Path, y: np.ndarray, y_test: np.ndarray | None = None, split: str = "y_train") -> int:
    """An .npz data set's class count C, the largest label of ``y`` (``split``) plus one (at least
    2), once its labels are 0..C-1 as a user means them: every label of ``y_test`` is a class ``y``
    has (the teachers learn the classes from the train split alone), and at least half of 0..C-1
    occur in ``y`` (or C is at most `_FEW_CLASSES`). A stray label (9999 among 0..9) would otherwise make thousands of classes,
    every one an empty vote. The public pool's reader passes the test split alone as ``y``.

    Raises:
      PateError: naming the split, the label and what to do (relabel to 0..K-1).
    """
    seen = np.unique(y)
    if y_test is not None and seen.size:  # an empty train split is refused where records are needed
        unseen = np.setdiff1d(np.unique(y_test), seen)
        if unseen.size:
            shown = ", ".join(str(int(v)) for v in unseen[:5]) + (", ..." if unseen.size > 5 else "")
            raise PateError(f"{p}: y_test holds label(s) {shown} that no record of {split} has; labels are the "
                            f"classes 0..C-1 of the train split: relabel y_test (or drop those records)")
    classes = max(int(seen.max(initial=0)) + 1, 2)
    if seen.size and classes > max(2 * seen.size, _FEW_CLASSES):
        raise PateError(f"{p}: {split}'s largest label {classes - 1} makes {classes} classes, but only {seen.size} "
                        f"of them occur; relabel the classes to 0..{seen.size - 1} (np.unique(y, "
                        "return_inverse=True)), or fix the stray label")
    return classes


def _npz_split(p: Path, split: str, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One split of an .npz data set, checked and converted (`load_npz`)."""
    if x.ndim not in (2, 3, 4) or y.ndim != 1 or x.shape[0] != y.shape[0]:
        raise PateError(f"{p}: x_{split} must be images (N, H, W[, C]) or embeddings (N, F), and "
                        f"y_{split} (N,), got {x.shape} and {y.shape}")
    if not np.issubdtype(y.dtype, np.integer) or (y.size and y.min() < 0):
        raise PateError(f"{p}: y_{split} must hold non-negative integer labels")
    if y.size and int(y.max()) >= MAX_CLASSES:  # before int32: a label past 2**31 would wrap
        raise PateError(f"{p}: y_{split} holds the label {int(y.max())}, which would make "
                        f"{int(y.max()) + 1} classes; labels are 0..C-1 with C at most {MAX_CLASSES} "
                        "(is a label wrong?)")
    return _npz_inputs(x, p, split), y.astype(np.int32)


def _npz_inputs(x: np.ndarray, p: Path, split: str) -> np.ndarray:
    """An .npz's ``x_{split}`` as the models read it: embeddings as float32, uint8 images
    scaled by 1/255, float images checked to lie in [0, 1]; images shaped (N, H, W, C)."""
    if is_embedding(x):
        return _embeddings(x, f"{p}: x_{split}")
    if x.dtype == np.uint8:
        return _images(x)
    x = np.asarray(x, dtype=np.float32)
    x = x[..., None] if x.ndim == 3 else x
    if x.size and (not np.isfinite(x).all() or x.min() < 0 or x.max() > 1):
        raise PateError(f"{p}: float images in x_{split} must lie in [0, 1]")
    return x


def _embeddings(x: np.ndarray, what: str) -> np.ndarray:
    """Rows of features (N, F) as float32, refused when empty of features, non-numeric or not finite."""
    if x.shape[1] < 1:
        raise PateError(f"{what} has no features (shape {x.shape}); give rows of at least one feature")
    if not (np.issubdtype(x.dtype, np.floating) or np.issubdtype(x.dtype, np.integer)):
        raise PateError(f"{what} must hold numbers, found dtype {x.dtype}")
    out = np.asarray(x, dtype=np.float32)
    if out.size and not np.isfinite(out).all():
        raise PateError(f"{what} holds NaN or infinite values (or values past float32's range); "
                        "embeddings must be finite")
    return out


# --------------------------------------------------------------------------- synthetic


def synthetic(train_size: int, test_size: int, shape: tuple[int, ...] = (8, 8, 1),
              num_classes: int = 10, noise: float = 0.3, seed: int = 0) -> Dataset:
    """A learnable synthetic data set: one random prototype image per class plus noise.

    Each image is `clip(prototype[label] + noise * N(0, 1), 0, 1)` with uniform labels;
    small noise makes the classes separable, large noise makes them overlap.
    """
    rng = np.random.default_rng(seed)
    prototypes = rng.uniform(0.0, 1.0, size=(num_classes, *shape)).astype(np.float32)

    def draw(n: int) -> tuple[np.ndarray, np.ndarray]:
        y = rng.integers(0, num_classes, size=n).astype(np.int32)
        x = prototypes[y] + noise * rng.standard_normal((n, *shape)).astype(np.float32)
        return np.clip(x, 0.0, 1.0).astype(np.float32), y

    x_train, y_train = draw(train_size)
    x_test, y_test = draw(test_size)
    return Dataset("synthetic", x_train, y_train, x_test, y_test, num_classes)


# --------------------------------------------------------------------------- the public pool alone


@dataclasses.dataclass(frozen=True)
class PublicPool:
    """The public pool of a `[data]` section and nothing private: its inputs and labels (the
    first `public_size` test points, as `split` cuts them), the number of classes, and the
    private train split's record count (`train_size`, read from a file header, never a record:
    under replace-one the count is public)."""

    name: str
    pool_x: np.ndarray
    pool_y: np.ndarray
    num_classes: int
    train_size: int


def load_public(cfg: DataConfig) -> PublicPool:
    """The public pool of a `[data]` section, read without reading a private record.

    IDX: the test files, and the train images' header (their count); SVHN: the test .mat, and
    the train .mat's variable headers (`scipy.io.whosmat`); .npz: the `x_test` and `y_test`
    members, and `x_train`'s array header; synthetic data (generated, nothing private) as
    `load_dataset` makes it. The classes are the data set's (IDX, SVHN: 10; synthetic: the
    config's); an .npz's are the pool's largest label plus one (its train labels are private).

    Raises:
      PateError: a file is missing or damaged, or the pool leaves no evaluation points.
    """
    if cfg.name in ("fashion_mnist", "mnist"):
        d = _find(cfg.name, cfg.path, list(_IDX_FILES.values()))
        x, y = (read_idx(_resolve(d, _IDX_FILES[k])) for k in ("x_test", "y_test"))
        if x.ndim != 3 or y.ndim != 1 or x.shape[0] != y.shape[0]:
            raise PateError(f"{d / _IDX_FILES['x_test']}: expected images (N, H, W) and as many labels, "
                            f"got {x.shape} and {y.shape}")
        if y.size and (y.min() < 0 or y.max() > 9):
            raise PateError(f"{d / _IDX_FILES['y_test']}: labels must lie in 0..9, found {int(y.min())}.."
                            f"{int(y.max())}")
        pool = PublicPool(cfg.name, _images(x), y.astype(np.int32), 10, _idx_count(_resolve(d, _IDX_FILES["x_train"])))
    elif cfg.name == "svhn":
        d = _find("svhn", cfg.path, list(_SVHN_FILES.values()))
        x, y = _read_svhn_mat(d / _SVHN_FILES["test"])
        pool = PublicPool("svhn", x, y, 10, _svhn_count(d / _SVHN_FILES["train"]))
    elif cfg.name == "npz":
        pool = _npz_public(Path(cfg.path))
    else:
        full = load_dataset(cfg)
        pool = PublicPool(full.name, full.x_test, full.y_test, full.num_classes, int(full.x_train.shape[0]))
    n_test = pool.pool_x.shape[0]
    if cfg.public_size >= n_test:
        raise PateError(f"data.public_size = {cfg.public_size} leaves no evaluation points: the "
                        f"{pool.name} test split has {n_test}; lower data.public_size")
    return dataclasses.replace(pool, pool_x=pool.pool_x[: cfg.public_size], pool_y=pool.pool_y[: cfg.public_size])


def _idx_count(path: Path) -> int:
    """The first dimension of an IDX file, from its header alone (a gzip file decompressed only
    that far)."""
    try:
        with open(path, "rb") as f:
            zipped = f.read(2) == b"\x1f\x8b"
        with (_GzipPrefix(path) if zipped else open(path, "rb")) as f:
            head = f.read(8)
    except FileNotFoundError:
        raise PateError(f"{path} not found") from None
    except (EOFError, OSError, zlib.error) as err:
        raise PateError(f"{path} is truncated or corrupt ({err}); download it again") from None
    if len(head) < 8 or head[0] != 0 or head[1] != 0 or head[2] not in _IDX_TYPES or head[3] == 0:
        raise PateError(f"{path} is not an IDX file (bad header {head.hex()})")
    return int.from_bytes(head[4:8], "big")


def _svhn_count(path: Path) -> int:
    """The number of images in an SVHN .mat, from its variable headers (`scipy.io.whosmat`)."""
    import scipy.io

    try:
        shapes = {name: shape for name, shape, _ in scipy.io.whosmat(path)}
    except FileNotFoundError:
        raise PateError(f"{path} not found") from None
    except Exception as err:  # scipy raises several types for a damaged file
        raise PateError(f"{path} is truncated or corrupt ({err}); download it again") from None
    if len(shapes.get("X", ())) != 4:
        raise PateError(f"{path}: expected a variable X of shape (32, 32, 3, N) (the SVHN format)")
    return int(shapes["X"][3])


def _npz_public(p: Path) -> PublicPool:
    """An .npz's test split, and its train split's row count from `x_train`'s header."""
    import zipfile

    try:
        with np.load(p, allow_pickle=False) as f:
            keys = list(f.keys())
            missing = [k for k in ("x_train", "y_train", "x_test", "y_test") if k not in keys]
            if missing:
                raise PateError(f"{p} lacks {', '.join(missing)} (it holds {', '.join(keys) or 'nothing'})")
            x, y = _npz_split(p, "test", f["x_test"], f["y_test"])
        with zipfile.ZipFile(p) as z, z.open("x_train.npy") as member:
            version = np.lib.format.read_magic(member)
            shape = (np.lib.format.read_array_header_1_0(member) if version == (1, 0)
                     else np.lib.format.read_array_header_2_0(member))[0]
    except FileNotFoundError:
        raise PateError(f"{p} not found; set data.path to an .npz with x_train, y_train, "
                        "x_test, y_test") from None
    except PateError:
        raise
    except Exception as err:
        raise PateError(f"{p} is not a readable .npz ({err})") from None
    if len(shape) not in (2, 3, 4) or (len(shape) == 2) != is_embedding(x):
        raise PateError(f"{p}: x_train {tuple(shape)} and x_test {x.shape} are not the same kind of input")
    return PublicPool(p.stem, x, y, _npz_classes(p, y, split="y_test"), int(shape[0]))


# --------------------------------------------------------------------------- private rows by index


#: Rows read at once when private records are streamed (a gzip file or a compressed npz member
#: decompressed this many rows at a time; raw files seek to each run of wanted rows).
ROW_CHUNK = 4096

#: Tests and the scaling bench: called with the (x, y) of every call of `load_train_rows` (what
#: this process holds of the private split). None in every real run.
on_rows_loaded: Callable[[np.ndarray, np.ndarray], None] | None = None


def train_count(cfg: DataConfig) -> int:
    """The number of records of the private train split, from a file header, never a record
    (IDX: the images' header; SVHN: the .mat's variable headers; .npz: `x_train`'s array header;
    synthetic: the config)."""
    if cfg.name in ("fashion_mnist", "mnist"):
        d = _find(cfg.name, cfg.path, list(_IDX_FILES.values()))
        return _idx_count(_resolve(d, _IDX_FILES["x_train"]))
    if cfg.name == "svhn":
        return _svhn_count(_find("svhn", cfg.path, list(_SVHN_FILES.values())) / _SVHN_FILES["train"])
    if cfg.name == "npz":
        p = Path(cfg.path)
        with _npz_member(p, "x_train") as (_f, _dtype, shape, _size):
            return int(shape[0])
    return int(cfg.synthetic_train_size)


def load_train_rows(cfg: DataConfig, rows) -> tuple[np.ndarray, np.ndarray]:
    """``(x_train[rows], y_train[rows])`` of `load_dataset(cfg)`, byte for byte, read without
    holding the whole split: what one process of a distributed command needs of the private
    records (its teachers' shards, its block of a fine-grained release).

    IDX: the rows read at their offsets (a raw file seeks; a gzip file is decompressed in
    `ROW_CHUNK`-row pieces, the wanted rows kept, and read to its end to check its length).
    .npz: the `x_train` / `y_train` members read the same way (a stored member seeks; a
    compressed one is decompressed as a stream). SVHN: scipy reads a .mat's variable whole (it
    cannot read part of one), so the train images are read as uint8 and only the wanted rows
    converted and kept. Synthetic data (nobody's) are drawn whole. The checks are the loaders'
    (a truncated or damaged file, a bad magic number, labels out of range — of the rows read),
    each one line.

    Args:
      cfg: the `[data]` section.
      rows: record numbers (any order, repeats allowed), each in ``[0, train_count(cfg))``.

    Raises:
      PateError: a file is missing, truncated or damaged, a row is out of range, or a label read is.
    """
    rows = np.asarray(rows, dtype=np.int64).reshape(-1)
    wanted = np.unique(rows)
    if cfg.name in ("fashion_mnist", "mnist"):
        x, y = _idx_train_rows(cfg, wanted)
    elif cfg.name == "svhn":
        x, y = _svhn_train_rows(cfg, wanted)
    elif cfg.name == "npz":
        x, y = _npz_train_rows(Path(cfg.path), wanted)
    else:
        full = load_dataset(cfg)
        _check_rows(wanted, full.x_train.shape[0], "the synthetic train split")
        x, y = full.x_train[wanted], full.y_train[wanted]
        del full
    at = np.searchsorted(wanted, rows)
    x, y = (x, y) if np.array_equal(wanted, rows) else (x[at], y[at])
    if on_rows_loaded is not None:
        on_rows_loaded(x, y)
    return x, y


def train_chunks(cfg: DataConfig, chunk: int = ROW_CHUNK) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """The private train split of `load_dataset(cfg)` in order, `chunk` records at a time (each
    (x, y) as `load_train_rows` gives them, one pass over each file): a digest of the whole
    split in the memory of a chunk (`training_digest`). SVHN's arrays are read whole (scipy),
    synthetic data drawn whole (nobody's)."""
    if cfg.name in ("fashion_mnist", "mnist"):
        fx, fy = _idx_train_files(cfg)
        with _idx_stream(fx) as xs, _idx_stream(fy) as ys:
            for first in range(0, fx.dims[0], chunk):
                wanted = np.arange(first, min(first + chunk, fx.dims[0]))
                yield _idx_checked(fy, _idx_read_rows(fx, wanted, xs), _idx_read_rows(fy, wanted, ys))
            _idx_end(fx, xs)
            _idx_end(fy, ys)
        return
    if cfg.name == "npz":
        p = Path(cfg.path)
        x_shape, _ = _npz_train_shapes(p)
        with _npz_member(p, "x_train") as xm, _npz_member(p, "y_train") as ym:
            for first in range(0, x_shape[0], chunk):
                wanted = np.arange(first, min(first + chunk, x_shape[0]))
                yield _npz_split(p, "train", _npz_read_rows(p, "x_train", wanted, xm),
                                 _npz_read_rows(p, "y_train", wanted, ym))
        return
    if cfg.name == "svhn":
        x, y = _svhn_train_rows(cfg, None)
    else:
        full = load_dataset(cfg)
        x, y = full.x_train, full.y_train
    for first in range(0, x.shape[0], chunk):
        yield x[first:first + chunk], y[first:first + chunk]


def _check_rows(wanted: np.ndarray, total: int, what: str) -> None:
    if wanted.size and (wanted[0] < 0 or wanted[-1] >= total):
        raise PateError(f"internal error: private rows {int(wanted[0])}..{int(wanted[-1])} asked of {what}, "
                        f"which has {total}")


def _read_runs(f, data_start: int, row_bytes: int, wanted: np.ndarray, chunk: int = ROW_CHUNK) -> bytes:
    """The bytes of rows `wanted` (sorted, unique) of a file of rows of `row_bytes` from
    `data_start`, in order: each run of wanted rows within `chunk` rows is read in one piece
    (a seek forward and a read; a gzip file or compressed zip member decompresses what it
    skips, as a stream). Raises EOFError when the file ends before a row."""
    out = bytearray()
    i = 0
    while i < wanted.size:
        first = int(wanted[i])
        j = int(np.searchsorted(wanted, first + chunk))
        last = int(wanted[j - 1])
        f.seek(data_start + first * row_bytes)
        need = (last - first + 1) * row_bytes
        piece = f.read(need)
        if len(piece) != need:
            raise EOFError(f"the file ends before row {last}")
        if j - i == last - first + 1:
            out += piece
        else:
            block = np.frombuffer(piece, np.uint8).reshape(last - first + 1, row_bytes)
            out += block[wanted[i:j] - first].tobytes()
        i = j
    return bytes(out)


@dataclasses.dataclass(frozen=True)
class _IdxFile:
    path: Path
    zipped: bool
    dtype: np.dtype
    dims: tuple[int, ...]
    header: int


class _GzipPrefix:
    """The first bytes of a gzip file, decompressed from as few compressed bytes as it takes: one
    byte is fed at a time and no more output is asked for than ``read`` wants. ``gzip.open`` reads
    the compressed file in 8 KiB chunks and decompresses a block ahead, so reading a 16-byte header
    of a private training file held thousands of bytes of its records in memory (issue 51)."""

    def __init__(self, path: Path):
        self._file = open(path, "rb")
        self._inflate = zlib.decompressobj(wbits=31)  # a gzip header, then deflate

    def read(self, n: int) -> bytes:
        out = b""
        while len(out) < n and not self._inflate.eof:
            pending = self._inflate.unconsumed_tail or self._file.read(1)
            if not pending:
                raise EOFError("the compressed stream ends early")
            out += self._inflate.decompress(pending, n - len(out))
        return out

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._file.close()


def _idx_header(path: Path) -> _IdxFile:
    """An IDX file's header (magic number, dims), read alone; a raw file's length checked."""
    try:
        with open(path, "rb") as f:
            zipped = f.read(2) == b"\x1f\x8b"
        with (_GzipPrefix(path) if zipped else open(path, "rb")) as f:
            head = f.read(4)
            if len(head) < 4 or head[0] != 0 or head[1] != 0 or head[2] not in _IDX_TYPES or head[3] == 0:
                raise PateError(f"{path} is not an IDX file (bad magic number {head[:4].hex()})")
            raw_dims = f.read(4 * head[3])
    except FileNotFoundError:
        raise PateError(f"{path} not found") from None
    except (EOFError, gzip.BadGzipFile, OSError, zlib.error) as err:
        raise PateError(f"{path} is truncated or corrupt ({err}); download it again") from None
    ndim = head[3]
    if len(raw_dims) < 4 * ndim:
        raise PateError(f"{path} is truncated (header cut short); download it again")
    dims = tuple(int.from_bytes(raw_dims[4 * i: 4 * i + 4], "big") for i in range(ndim))
    out = _IdxFile(path, zipped, np.dtype(_IDX_TYPES[head[2]]), dims, 4 + 4 * ndim)
    if not zipped:
        size, expected = path.stat().st_size, _idx_expected(out)
        if size != expected:
            raise PateError(f"{path} is truncated or corrupt: {size} bytes, header {list(dims)} "
                            f"needs {expected}; download it again")
    return out


def _idx_expected(f: _IdxFile) -> int:
    return f.header + int(np.prod(f.dims)) * f.dtype.itemsize


_IDX_ERRORS = (EOFError, gzip.BadGzipFile, OSError, zlib.error)


@contextlib.contextmanager
def _idx_stream(f: _IdxFile):
    """An IDX file opened for `_idx_read_rows` (a damaged one: one line)."""
    try:
        with (gzip.open(f.path, "rb") if f.zipped else open(f.path, "rb")) as stream:
            yield stream
    except _IDX_ERRORS as err:
        raise PateError(f"{f.path} is truncated or corrupt ({err}); download it again") from None


def _idx_read_rows(f: _IdxFile, wanted: np.ndarray, stream) -> np.ndarray:
    """Rows `wanted` (sorted, unique, past those read before from a gzip `stream`) of an IDX file."""
    row_bytes = int(np.prod(f.dims[1:], dtype=np.int64)) * f.dtype.itemsize
    _check_rows(wanted, f.dims[0], str(f.path))
    try:
        raw = _read_runs(stream, f.header, row_bytes, wanted)
    except _IDX_ERRORS as err:
        raise PateError(f"{f.path} is truncated or corrupt ({err}); header {list(f.dims)}; "
                        "download it again") from None
    return np.frombuffer(raw, dtype=f.dtype).reshape(wanted.size, *f.dims[1:])


def _idx_end(f: _IdxFile, stream) -> None:
    """`read_idx`'s length check of a gzip file, read to its end as a stream (a raw file's
    length was checked from its size)."""
    if not f.zipped:
        return
    expected = _idx_expected(f)
    try:
        stream.seek(expected)
        short = stream.tell() != expected
        longer = bool(stream.read(1))
    except _IDX_ERRORS as err:
        raise PateError(f"{f.path} is truncated or corrupt ({err}); download it again") from None
    if short or longer:
        raise PateError(f"{f.path} is truncated or corrupt: its payload is {'shorter' if short else 'longer'} "
                        f"than its header {list(f.dims)} needs ({expected} bytes); download it again")


def _idx_train_files(cfg: DataConfig) -> tuple[_IdxFile, _IdxFile]:
    """The train images' and labels' headers, checked as `load_idx` checks the arrays' shapes."""
    d = _find(cfg.name, cfg.path, list(_IDX_FILES.values()))
    xs, ys = _IDX_FILES["x_train"], _IDX_FILES["y_train"]
    fx, fy = _idx_header(_resolve(d, xs)), _idx_header(_resolve(d, ys))
    if len(fx.dims) != 3 or len(fy.dims) != 1:
        raise PateError(f"{d / xs}: expected images (N, H, W) and labels (N,), got {fx.dims} and {fy.dims}")
    if fx.dims[0] != fy.dims[0]:
        raise PateError(f"{d}: {xs} holds {fx.dims[0]} images but {ys} holds {fy.dims[0]} labels")
    return fx, fy


def _idx_checked(fy: _IdxFile, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    if y.size and (y.min() < 0 or y.max() > 9):
        raise PateError(f"{fy.path.parent / _IDX_FILES['y_train']}: labels must lie in 0..9, found "
                        f"{int(y.min())}..{int(y.max())}")
    return _images(x), y.astype(np.int32)


def _idx_train_rows(cfg: DataConfig, wanted: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    fx, fy = _idx_train_files(cfg)
    with _idx_stream(fx) as xs, _idx_stream(fy) as ys:
        x, y = _idx_read_rows(fx, wanted, xs), _idx_read_rows(fy, wanted, ys)
        _idx_end(fx, xs)
        _idx_end(fy, ys)
    return _idx_checked(fy, x, y)


def _svhn_train_rows(cfg: DataConfig, wanted: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """SVHN's train rows `wanted` (None: all): the .mat's X and y are read whole (scipy reads a
    variable whole), checked as `load_svhn` checks them, and only the wanted images converted."""
    path = _find("svhn", cfg.path, list(_SVHN_FILES.values())) / _SVHN_FILES["train"]
    x, y = _svhn_raw(path)
    if wanted is not None:
        _check_rows(wanted, x.shape[3], str(path))
        x, y = x[..., wanted], y[wanted]
    return _images(np.transpose(x, (3, 0, 1, 2))), y


@contextlib.contextmanager
def _npz_member(p: Path, key: str):
    """An .npz member opened as a stream after its .npy header: ``(file, dtype, shape,
    data size)``. One line for a missing file or member, a damaged archive, object arrays or
    Fortran order (pate writes neither; `load_npz` then reads the whole member)."""
    import zipfile

    try:
        with zipfile.ZipFile(p) as z:
            names = z.namelist()
            if f"{key}.npy" not in names:
                keys = [n[:-4] for n in names if n.endswith(".npy")]
                raise PateError(f"{p} lacks {key} (it holds {', '.join(keys) or 'nothing'})")
            info = z.getinfo(f"{key}.npy")
            with z.open(info) as f:
                version = np.lib.format.read_magic(f)
                shape, fortran, dtype = (np.lib.format.read_array_header_1_0(f) if version == (1, 0)
                                         else np.lib.format.read_array_header_2_0(f))
                if dtype.hasobject:
                    raise PateError(f"{p} is not a readable .npz ({key} holds Python objects, which are "
                                    "not loaded: allow_pickle=False)")
                if fortran and len(shape) > 1:
                    raise PateError(f"{p}: {key} is stored in Fortran order; save it in C order "
                                    "(np.ascontiguousarray) to read it by rows")
                start = f.tell()
                size = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
                if info.file_size != start + size:
                    raise PateError(f"{p} is not a readable .npz ({key} is truncated: {info.file_size} bytes, "
                                    f"its header {tuple(shape)} needs {start + size})")
                yield _Offset(f, start), dtype, tuple(shape), size
    except FileNotFoundError:
        raise PateError(f"{p} not found; set data.path to an .npz with x_train, y_train, "
                        "x_test, y_test") from None
    except PateError:
        raise
    except Exception as err:  # zipfile, zlib and numpy's header reader raise several types
        raise PateError(f"{p} is not a readable .npz ({err})") from None


class _Offset:
    """A member stream whose positions count from its .npy data (so `_read_runs` seeks from 0)."""

    def __init__(self, f, start: int):
        self.f, self.start = f, start

    def seek(self, pos: int) -> None:
        self.f.seek(self.start + pos)

    def read(self, n: int) -> bytes:
        return self.f.read(n)


def _npz_read_rows(p: Path, key: str, wanted: np.ndarray, member=None) -> np.ndarray:
    """Rows `wanted` (sorted, unique, past those read before from an open `member`) of an .npz member."""
    if member is None:
        with _npz_member(p, key) as opened:
            return _npz_read_rows(p, key, wanted, opened)
    f, dtype, shape, _size = member
    if len(shape) < 1:
        raise PateError(f"{p}: {key} must be an array of rows, got shape {shape}")
    _check_rows(wanted, shape[0], f"{p}: {key}")
    row_bytes = int(np.prod(shape[1:], dtype=np.int64)) * dtype.itemsize
    try:
        raw = _read_runs(f, 0, row_bytes, wanted) if row_bytes else b""
    except PateError:
        raise
    except Exception as err:  # a damaged member: zlib, zipfile (bad CRC) and EOF raise several types
        raise PateError(f"{p} is not a readable .npz ({key}: {err})") from None
    return np.frombuffer(raw, dtype=dtype).reshape(wanted.size, *shape[1:])


def _npz_train_shapes(p: Path) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The shapes of an .npz's `x_train` and `y_train` from their headers, checked as `load_npz` checks them."""
    with _npz_member(p, "x_train") as xm, _npz_member(p, "y_train") as ym:
        x_shape, y_shape = xm[2], ym[2]
    if len(x_shape) not in (2, 3, 4) or len(y_shape) != 1 or x_shape[0] != y_shape[0]:
        raise PateError(f"{p}: x_train must be images (N, H, W[, C]) or embeddings (N, F), and "
                        f"y_train (N,), got {x_shape} and {y_shape}")
    return x_shape, y_shape


def _npz_train_rows(p: Path, wanted: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """An .npz's train rows `wanted`, checked and converted as `load_npz` does (its checks of
    the labels and inputs see the rows read)."""
    _npz_train_shapes(p)
    return _npz_split(p, "train", _npz_read_rows(p, "x_train", wanted), _npz_read_rows(p, "y_train", wanted))


# --------------------------------------------------------------------------- entry points


def load_dataset(cfg: DataConfig) -> Dataset:
    """Loads the data set named by a `[data]` config section."""
    if cfg.name in ("fashion_mnist", "mnist"):
        return load_idx(cfg.name, cfg.path)
    if cfg.name == "svhn":
        return load_svhn(cfg.path)
    if cfg.name == "npz":
        return load_npz(cfg.path)
    return synthetic(cfg.synthetic_train_size, cfg.synthetic_test_size,
                     tuple(cfg.synthetic_shape), cfg.synthetic_classes,
                     cfg.synthetic_noise, cfg.synthetic_seed)


def load_pool(cfg: DataConfig, public_size: int) -> np.ndarray:
    """The public pool's inputs (the first `public_size` test points, as `split` cuts them),
    read without opening the private train split: all that a process which only votes needs
    (`pate label --distributed` on every process but 0). Synthetic data is drawn whole (its
    test points follow its train points in one random stream; it is nobody's data).

    Raises:
      PateError: the test inputs are missing or malformed.
    """
    if cfg.name in ("fashion_mnist", "mnist"):
        stem = _IDX_FILES["x_test"]
        path = _resolve(_find(cfg.name, cfg.path, [stem]), stem)
        x = read_idx(path)
        if x.ndim != 3:
            raise PateError(f"{path}: expected images (N, H, W), got {x.shape}")
        return _images(x[:public_size])
    if cfg.name == "svhn":
        name = _SVHN_FILES["test"]
        return _read_svhn_mat(_find("svhn", cfg.path, [name]) / name)[0][:public_size]
    if cfg.name == "npz":
        p = Path(cfg.path)
        try:
            with np.load(p, allow_pickle=False) as f:  # reads x_test alone
                x = f["x_test"] if "x_test" in f else None
        except FileNotFoundError:
            raise PateError(f"{p} not found; set data.path to an .npz with x_train, y_train, "
                            "x_test, y_test") from None
        except Exception as err:
            raise PateError(f"{p} is not a readable .npz ({err})") from None
        if x is None or x.ndim not in (2, 3, 4):
            raise PateError(f"{p}: x_test must be images (N, H, W[, C]) or embeddings (N, F)")
        return _npz_inputs(x, p, "test")[:public_size]
    return split(load_dataset(cfg), public_size).pool_x


def split(dataset: Dataset, public_size: int) -> Splits:
    """Splits per the benchmark protocol: pool = first `public_size` test points.

    Raises:
      PateError: the test split has no points left for evaluation.
    """
    n_test = dataset.x_test.shape[0]
    if public_size >= n_test:
        raise PateError(f"data.public_size = {public_size} leaves no evaluation points: the "
                        f"{dataset.name} test split has {n_test}; lower data.public_size")
    return Splits(
        train_x=dataset.x_train, train_y=dataset.y_train,
        pool_x=dataset.x_test[:public_size], pool_y=dataset.y_test[:public_size],
        eval_x=dataset.x_test[public_size:], eval_y=dataset.y_test[public_size:],
        num_classes=dataset.num_classes)


def dataset_name(cfg: DataConfig) -> str:
    """The name `load_dataset(cfg)` gives its data set (an .npz's: its file's stem), read from no file."""
    return Path(cfg.path).stem if cfg.name == "npz" else cfg.name


def split_rows(cfg: DataConfig, public_size: int, rows) -> Splits:
    """`split(load_dataset(cfg), public_size)` with the private train split cut to its records
    `rows` (`load_train_rows`; ``train_x[i]`` is record ``rows[i]``): the public pool and the
    evaluation split as `split` makes them (the test files read whole), and the data set's
    classes (IDX, SVHN: 10; synthetic: the config's; an .npz's: its largest label plus one, of
    both splits: its `y_train` member is read whole for that, four or eight bytes a record, and
    dropped).

    Raises:
      PateError: a file is missing or damaged, or the pool leaves no evaluation points.
    """
    x_train, y_train = load_train_rows(cfg, rows)
    if cfg.name in ("fashion_mnist", "mnist"):
        d = _find(cfg.name, cfg.path, list(_IDX_FILES.values()))
        x, y = (read_idx(_resolve(d, _IDX_FILES[k])) for k in ("x_test", "y_test"))
        xs, ys = _IDX_FILES["x_test"], _IDX_FILES["y_test"]
        if x.ndim != 3 or y.ndim != 1:
            raise PateError(f"{d / xs}: expected images (N, H, W) and labels (N,), got {x.shape} and {y.shape}")
        if x.shape[0] != y.shape[0]:
            raise PateError(f"{d}: {xs} holds {x.shape[0]} images but {ys} holds {y.shape[0]} labels")
        if y.size and (y.min() < 0 or y.max() > 9):
            raise PateError(f"{d / ys}: labels must lie in 0..9, found {int(y.min())}..{int(y.max())}")
        test = Dataset(cfg.name, x_train, y_train, _images(x), y.astype(np.int32), 10)
    elif cfg.name == "svhn":
        x, y = _read_svhn_mat(_find("svhn", cfg.path, list(_SVHN_FILES.values())) / _SVHN_FILES["test"])
        test = Dataset("svhn", x_train, y_train, x, y, 10)
    elif cfg.name == "npz":
        p = Path(cfg.path)
        x_shape, _ = _npz_train_shapes(p)
        try:
            with np.load(p, allow_pickle=False) as f:
                x, y = f["x_test"], f["y_test"]
        except Exception as err:
            raise PateError(f"{p} is not a readable .npz ({err})") from None
        x, y = _npz_split(p, "test", x, y)
        if x.shape[1:] != x_train.shape[1:]:
            kind = "embeddings" if is_embedding(x_train) else "images"
            raise PateError(f"{p}: train {kind} {x_train.shape[1:]} and test inputs {x.shape[1:]} differ in shape")
        labels = _npz_read_rows(p, "y_train", np.arange(x_shape[0]))
        _npz_split(p, "train", np.zeros((labels.shape[0], 1), np.float32), labels)  # load_npz's label checks
        test = Dataset(p.stem, x_train, y_train, x, y, _npz_classes(p, labels.astype(np.int32), y))
    else:
        full = load_dataset(cfg)
        test = dataclasses.replace(full, x_train=x_train, y_train=y_train)
    return split(test, public_size)


def partition(num_points: int, num_teachers: int, seed: int) -> Partition:
    """Splits `range(num_points)` into `num_teachers` disjoint, equal shards.

    A seeded permutation is cut into shards of `num_points // num_teachers`; the
    remainder is left out (reported as `Partition.left_out`).

    Raises:
      PateError: more teachers than points.
    """
    if num_teachers > num_points:
        raise PateError(f"{num_teachers} teachers but only {num_points} training points: each "
                        "teacher needs at least one; lower teachers.num_teachers")
    shard = num_points // num_teachers
    order = np.random.default_rng(seed).permutation(num_points)
    return Partition(indices=order[: shard * num_teachers].reshape(num_teachers, shard),
                     left_out=np.sort(order[shard * num_teachers:]))
