"""The IDX format (MNIST's): four files, train and test images and labels, gzip-compressed or
raw; the records of Fashion-MNIST and MNIST. Private rows are read at their offsets (a raw file
seeks; a gzip file is decompressed as a stream), the train split's count from its header alone.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gzip
import zlib
from pathlib import Path
from typing import Iterator

import numpy as np

from analysis.core.errors import PateError
from pate.data.format import DataFormat, DataSection
from pate.data.rows import check_rows, read_runs
from pate.data.splits import Dataset, PublicPool, float_images

#: Where the Debian package `dataset-fashion-mnist` installs Fashion-MNIST.
FASHION_MNIST_DIR = Path("/usr/share/datasets/fashion-mnist")

_IDX_FILES = {
    "x_train": "train-images-idx3-ubyte",
    "y_train": "train-labels-idx1-ubyte",
    "x_test": "t10k-images-idx3-ubyte",
    "y_test": "t10k-labels-idx1-ubyte",
}
_IDX_TYPES = {0x08: np.uint8, 0x09: np.int8, 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}
#: An IDX data set's labels are digits or the ten Fashion-MNIST classes.
_CLASSES = 10


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


def _resolve(d: Path, stem: str) -> Path:
    gz = d / f"{stem}.gz"
    return gz if gz.exists() else d / stem


def _checked_split(d: Path, split: str, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One split's images (N, H, W) and labels (N,) in 0..9, as float images and int32 labels."""
    xs, ys = _IDX_FILES[f"x_{split}"], _IDX_FILES[f"y_{split}"]
    if x.ndim != 3 or y.ndim != 1:
        raise PateError(f"{d / xs}: expected images (N, H, W) and labels (N,), got {x.shape} and {y.shape}")
    if x.shape[0] != y.shape[0]:
        raise PateError(f"{d}: {xs} holds {x.shape[0]} images but {ys} holds {y.shape[0]} labels")
    _check_labels(d / ys, y)
    return float_images(x), y.astype(np.int32)


def _check_labels(path: Path, y: np.ndarray) -> None:
    if y.size and (y.min() < 0 or y.max() >= _CLASSES):
        raise PateError(f"{path}: labels must lie in 0..{_CLASSES - 1}, found {int(y.min())}..{int(y.max())}")


@dataclasses.dataclass(frozen=True, kw_only=True)
class IdxFormat(DataFormat):
    """A data set of four IDX files (`_IDX_FILES`) in a folder: 10 classes, grey images."""

    def classes(self, section: DataSection) -> int:
        return _CLASSES

    def load(self, section: DataSection) -> Dataset:
        return self.load_from(section.path)

    def load_from(self, directory: str) -> Dataset:
        """The data set from the four files in `directory` (empty: `$PATE_DATA_DIR` or the default)."""
        d = self.find(directory, list(_IDX_FILES.values()))
        arrays = {k: read_idx(_resolve(d, stem)) for k, stem in _IDX_FILES.items()}
        x_train, y_train = _checked_split(d, "train", arrays["x_train"], arrays["y_train"])
        x_test, y_test = _checked_split(d, "test", arrays["x_test"], arrays["y_test"])
        return Dataset(self.name, x_train, y_train, x_test, y_test, _CLASSES)

    def _test_split(self, section: DataSection) -> tuple[Path, np.ndarray, np.ndarray]:
        d = self.find(section.path, list(_IDX_FILES.values()))
        x, y = (read_idx(_resolve(d, _IDX_FILES[k])) for k in ("x_test", "y_test"))
        return (d, *_checked_split(d, "test", x, y))

    def public(self, section: DataSection) -> PublicPool:
        d, x, y = self._test_split(section)
        return PublicPool(self.name, x, y, _CLASSES, _idx_count(_resolve(d, _IDX_FILES["x_train"])))

    def pool_inputs(self, section: DataSection, public_size: int) -> np.ndarray:
        stem = _IDX_FILES["x_test"]
        path = _resolve(self.find(section.path, [stem]), stem)
        x = read_idx(path)
        if x.ndim != 3:
            raise PateError(f"{path}: expected images (N, H, W), got {x.shape}")
        return float_images(x[:public_size])

    def with_train(self, section: DataSection, x_train: np.ndarray, y_train: np.ndarray) -> Dataset:
        _, x, y = self._test_split(section)
        return Dataset(self.name, x_train, y_train, x, y, _CLASSES)

    def training_files(self, section: DataSection) -> list[Path]:
        d = self.find(section.path, list(_IDX_FILES.values()))
        return [_resolve(d, _IDX_FILES["x_train"]), _resolve(d, _IDX_FILES["y_train"])]

    def train_count(self, section: DataSection) -> int:
        d = self.find(section.path, list(_IDX_FILES.values()))
        return _idx_count(_resolve(d, _IDX_FILES["x_train"]))

    def _train_files(self, section: DataSection) -> tuple[_IdxFile, _IdxFile]:
        """The train images' and labels' headers, checked as `load` checks the arrays' shapes."""
        d = self.find(section.path, list(_IDX_FILES.values()))
        xs, ys = _IDX_FILES["x_train"], _IDX_FILES["y_train"]
        fx, fy = _idx_header(_resolve(d, xs)), _idx_header(_resolve(d, ys))
        if len(fx.dims) != 3 or len(fy.dims) != 1:
            raise PateError(f"{d / xs}: expected images (N, H, W) and labels (N,), got {fx.dims} and {fy.dims}")
        if fx.dims[0] != fy.dims[0]:
            raise PateError(f"{d}: {xs} holds {fx.dims[0]} images but {ys} holds {fy.dims[0]} labels")
        return fx, fy

    def train_rows(self, section: DataSection, wanted: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        fx, fy = self._train_files(section)
        with _idx_stream(fx) as xs, _idx_stream(fy) as ys:
            x, y = _idx_read_rows(fx, wanted, xs), _idx_read_rows(fy, wanted, ys)
            _idx_end(fx, xs)
            _idx_end(fy, ys)
        return _idx_checked(fy, x, y)

    def train_chunks(self, section: DataSection, chunk: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        fx, fy = self._train_files(section)
        with _idx_stream(fx) as xs, _idx_stream(fy) as ys:
            for first in range(0, fx.dims[0], chunk):
                wanted = np.arange(first, min(first + chunk, fx.dims[0]))
                yield _idx_checked(fy, _idx_read_rows(fx, wanted, xs), _idx_read_rows(fy, wanted, ys))
            _idx_end(fx, xs)
            _idx_end(fy, ys)


FASHION_MNIST = IdxFormat(
    name="fashion_mnist", summary="Fashion-MNIST: 28x28 grey images of 10 kinds of clothing, 60 000 + 10 000",
    subdir="fashion-mnist", default_dir=FASHION_MNIST_DIR,
    how_to_get="install it with `apt-get install dataset-fashion-mnist`, or download the four IDX files from "
               "https://github.com/zalandoresearch/fashion-mnist")
MNIST = IdxFormat(
    name="mnist", summary="MNIST: 28x28 grey images of handwritten digits, 60 000 + 10 000",
    subdir="mnist", default_dir=Path("/usr/share/datasets/mnist"),
    how_to_get="download the four IDX files from https://yann.lecun.com/exdb/mnist/ (or a mirror)")
_RECORDS = {r.name: r for r in (FASHION_MNIST, MNIST)}


def load_idx(name: str, directory: str = "") -> Dataset:
    """MNIST or Fashion-MNIST from the four IDX files (gzip or raw).

    Args:
      name: "mnist" or "fashion_mnist" (decides the default directory and messages).
      directory: where the files are; empty means `$PATE_DATA_DIR` or the default.
    """
    return _RECORDS[name].load_from(directory)


# --------------------------------------------------------------------------- headers and streams


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
    check_rows(wanted, f.dims[0], str(f.path))
    try:
        raw = read_runs(stream, f.header, row_bytes, wanted)
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


def _idx_checked(fy: _IdxFile, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    _check_labels(fy.path.parent / _IDX_FILES["y_train"], y)
    return float_images(x), y.astype(np.int32)
