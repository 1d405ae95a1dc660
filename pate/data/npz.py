"""A data set of one .npz file holding ``x_train``, ``y_train``, ``x_test``, ``y_test`` (and
optionally ``ids``, one per train record): images (N, H, W[, C]), uint8 or floats in [0, 1], or
rows of features (N, F) — a foundation model's embeddings, text's, tabular records' — kept as
float32. Labels are integers 0..C-1. Private rows are read from the members at their offsets (a
stored member seeks; a compressed one is decompressed as a stream), the train split's count from
``x_train``'s array header.
"""

from __future__ import annotations

import contextlib
import dataclasses
from pathlib import Path
from typing import Iterator

import numpy as np

from analysis.core.errors import PateError
from pate.data.format import DataFormat, DataSection
from pate.data.rows import check_rows, read_runs
from pate.data.splits import Dataset, PublicPool, float_images, is_embedding

#: The most classes an .npz data set may have: every model's last layer, vote histogram and
#: label one-hot has this width, so a stray huge label would exhaust memory mid-run.
MAX_CLASSES = 10_000
#: Up to this many classes, empty ones are let be (a small or one-class slice of a data set).
_FEW_CLASSES = 10
#: The most bytes one record's id may take (``ids`` in an .npz).
MAX_ID_BYTES = 256
#: The largest magnitude a feature of a row may have. Past it the squares and sums downstream
#: (the pool's PCA, nearest-neighbour distances, the teachers' logits) overflow float32 or leave
#: training no scale to work at (1e300 was cast to inf with a RuntimeWarning, 1e30 overflowed the
#: distances): standardised features lie within a few units, raw counts and amounts within this.
MAX_FEATURE = 1e6
_KEYS = ("x_train", "y_train", "x_test", "y_test")
_HOW_TO_GET = "set data.path to an .npz with x_train, y_train, x_test, y_test"


def _not_found(p: Path) -> PateError:
    return PateError(f"{p} not found; {_HOW_TO_GET}")


def load_npz(path: str) -> Dataset:
    """A data set from one .npz with `x_train`, `y_train`, `x_test`, `y_test`.

    Images may be uint8 (scaled by 1/255) or floats already in [0, 1], shaped
    (N, H, W) or (N, H, W, C). 2-D `x_*` arrays (N, F) are embeddings: finite numbers of
    magnitude at most `MAX_FEATURE`, kept as float32 (no scaling). Labels are integers 0..C-1;
    C is the largest label plus one, refused when the labels are not 0..C-1 as meant (`_npz_classes`).
    """
    p = Path(path)
    try:
        with np.load(p, allow_pickle=False) as f:
            arrays = {k: f[k] for k in _KEYS if k in f}
            keys = list(f.keys())
    except FileNotFoundError:
        raise _not_found(p) from None
    except Exception as err:
        raise PateError(f"{p} is not a readable .npz ({err})") from None
    missing = [k for k in _KEYS if k not in arrays]
    if missing:
        raise PateError(f"{p} lacks {', '.join(missing)} (it holds {', '.join(keys) or 'nothing'})")
    out = {}
    for split in ("train", "test"):
        out[f"x_{split}"], out[f"y_{split}"] = _npz_split(p, split, arrays[f"x_{split}"], arrays[f"y_{split}"])
    _check_same_inputs(p, out["x_train"], out["x_test"])
    return Dataset(p.stem, num_classes=_npz_classes(p, out["y_train"], out["y_test"]), **out)


def _check_same_inputs(p: Path, x_train: np.ndarray, x_test: np.ndarray) -> None:
    if x_train.shape[1:] != x_test.shape[1:]:
        kind = "embeddings" if is_embedding(x_train) else "images"
        raise PateError(f"{p}: train {kind} {x_train.shape[1:]} and test inputs {x_test.shape[1:]} differ in shape")


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
        return float_images(x)
    x = np.asarray(x, dtype=np.float32)
    x = x[..., None] if x.ndim == 3 else x
    if x.size and (not np.isfinite(x).all() or x.min() < 0 or x.max() > 1):
        raise PateError(f"{p}: float images in x_{split} must lie in [0, 1]")
    return x


def check_feature_values(x: np.ndarray, what: str) -> None:
    """Refuses, in one line, rows of features (any numeric dtype) holding NaN, an infinity or a
    value of magnitude past `MAX_FEATURE`, before any cast (a cast to float32 of 1e300 warns and
    gives inf). Two reductions over ``x``, no copy of it."""
    if not x.size:
        return
    lo, hi = x.min(), x.max()  # NaN propagates through both
    if not (np.isfinite(lo) and np.isfinite(hi)):
        raise PateError(f"{what} holds NaN or infinite values; embeddings must be finite")
    top = max(abs(float(lo)), abs(float(hi)))
    if top > MAX_FEATURE:
        raise PateError(f"{what} holds a value of magnitude {top:.3g}, past {MAX_FEATURE:g}: features that large "
                        "overflow float32 in the distances, the PCA and the models' training; scale the rows "
                        "(standardise each feature) before saving them")


def _embeddings(x: np.ndarray, what: str) -> np.ndarray:
    """Rows of features (N, F) as float32, refused when empty of features, non-numeric, not
    finite or too large (`check_feature_values`)."""
    if x.shape[1] < 1:
        raise PateError(f"{what} has no features (shape {x.shape}); give rows of at least one feature")
    if not (np.issubdtype(x.dtype, np.floating) or np.issubdtype(x.dtype, np.integer)):
        raise PateError(f"{what} must hold numbers, found dtype {x.dtype}")
    check_feature_values(x, what)
    return np.asarray(x, dtype=np.float32)


def _npz_public(p: Path) -> PublicPool:
    """An .npz's test split, and its train split's row count from `x_train`'s header."""
    import zipfile

    try:
        with np.load(p, allow_pickle=False) as f:
            keys = list(f.keys())
            missing = [k for k in _KEYS if k not in keys]
            if missing:
                raise PateError(f"{p} lacks {', '.join(missing)} (it holds {', '.join(keys) or 'nothing'})")
            x, y = _npz_split(p, "test", f["x_test"], f["y_test"])
        with zipfile.ZipFile(p) as z, z.open("x_train.npy") as member:
            version = np.lib.format.read_magic(member)
            shape = (np.lib.format.read_array_header_1_0(member) if version == (1, 0)
                     else np.lib.format.read_array_header_2_0(member))[0]
    except FileNotFoundError:
        raise _not_found(p) from None
    except PateError:
        raise
    except Exception as err:
        raise PateError(f"{p} is not a readable .npz ({err})") from None
    if len(shape) not in (2, 3, 4) or (len(shape) == 2) != is_embedding(x):
        raise PateError(f"{p}: x_train {tuple(shape)} and x_test {x.shape} are not the same kind of input")
    return PublicPool(p.stem, x, y, _npz_classes(p, y, split="y_test"), int(shape[0]))


# --------------------------------------------------------------------------- members read by rows


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
        raise _not_found(p) from None
    except PateError:
        raise
    except Exception as err:  # zipfile, zlib and numpy's header reader raise several types
        raise PateError(f"{p} is not a readable .npz ({err})") from None


class _Offset:
    """A member stream whose positions count from its .npy data (so `read_runs` seeks from 0)."""

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
    check_rows(wanted, shape[0], f"{p}: {key}")
    row_bytes = int(np.prod(shape[1:], dtype=np.int64)) * dtype.itemsize
    try:
        raw = read_runs(f, 0, row_bytes, wanted) if row_bytes else b""
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


# --------------------------------------------------------------------------- the record


@dataclasses.dataclass(frozen=True, kw_only=True)
class NpzFormat(DataFormat):
    """One .npz file named by `[data] path`: its classes and inputs are the file's."""

    def dataset_name(self, section: DataSection) -> str:
        return Path(section.path).stem

    def load(self, section: DataSection) -> Dataset:
        return load_npz(section.path)

    def public(self, section: DataSection) -> PublicPool:
        return _npz_public(Path(section.path))

    def pool_inputs(self, section: DataSection, public_size: int) -> np.ndarray:
        p = Path(section.path)
        try:
            with np.load(p, allow_pickle=False) as f:  # reads x_test alone
                x = f["x_test"] if "x_test" in f else None
        except FileNotFoundError:
            raise _not_found(p) from None
        except Exception as err:
            raise PateError(f"{p} is not a readable .npz ({err})") from None
        if x is None or x.ndim not in (2, 3, 4):
            raise PateError(f"{p}: x_test must be images (N, H, W[, C]) or embeddings (N, F)")
        return _npz_inputs(x, p, "test")[:public_size]

    def with_train(self, section: DataSection, x_train: np.ndarray, y_train: np.ndarray) -> Dataset:
        p = Path(section.path)
        x_shape, _ = _npz_train_shapes(p)
        try:
            with np.load(p, allow_pickle=False) as f:
                x, y = f["x_test"], f["y_test"]
        except Exception as err:
            raise PateError(f"{p} is not a readable .npz ({err})") from None
        x, y = _npz_split(p, "test", x, y)
        _check_same_inputs(p, x_train, x)
        labels = _npz_read_rows(p, "y_train", np.arange(x_shape[0]))
        _npz_split(p, "train", np.zeros((labels.shape[0], 1), np.float32), labels)  # load_npz's label checks
        return Dataset(p.stem, x_train, y_train, x, y, _npz_classes(p, labels.astype(np.int32), y))

    def training_files(self, section: DataSection) -> list[Path]:
        return [Path(section.path)]

    def train_count(self, section: DataSection) -> int:
        with _npz_member(Path(section.path), "x_train") as (_f, _dtype, shape, _size):
            return int(shape[0])

    def train_rows(self, section: DataSection, wanted: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The train rows `wanted`, checked and converted as `load_npz` does (its checks of
        the labels and inputs see the rows read)."""
        p = Path(section.path)
        _npz_train_shapes(p)
        return _npz_split(p, "train", _npz_read_rows(p, "x_train", wanted), _npz_read_rows(p, "y_train", wanted))

    def train_chunks(self, section: DataSection, chunk: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        p = Path(section.path)
        x_shape, _ = _npz_train_shapes(p)
        with _npz_member(p, "x_train") as xm, _npz_member(p, "y_train") as ym:
            for first in range(0, x_shape[0], chunk):
                wanted = np.arange(first, min(first + chunk, x_shape[0]))
                yield _npz_split(p, "train", _npz_read_rows(p, "x_train", wanted, xm),
                                 _npz_read_rows(p, "y_train", wanted, ym))

    def train_ids(self, section: DataSection) -> list[bytes] | None:
        """The .npz's ``ids`` (one integer or string per record: ``7`` and ``"7"`` are the same
        id) as bytes, or None when it has none.

        Raises:
          PateError: ``ids`` is not one integer or string per record."""
        import zipfile

        p = Path(section.path)
        try:
            with zipfile.ZipFile(p) as z:
                if "ids.npy" not in z.namelist():
                    return None
        except FileNotFoundError:
            raise _not_found(p) from None
        except (OSError, zipfile.BadZipFile) as err:
            raise PateError(f"{p} is not a readable .npz ({err})") from None
        try:
            with np.load(p, allow_pickle=False) as f:
                ids = f["ids"]
        except Exception as err:  # numpy raises several types for a damaged or object member
            raise PateError(f"{p}: ids cannot be read ({err}); give one integer or string per training record") from None
        count = self.train_count(section)
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


NPZ = NpzFormat(
    name="npz", summary="one .npz of your own: images (N, H, W[, C]) or rows of features (N, F), labels 0..C-1",
    inputs="images or rows", needs_path=True, path_names="the .npz file", how_to_get=_HOW_TO_GET)
