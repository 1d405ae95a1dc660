"""SVHN (cropped digits): two MATLAB files, ``train_32x32.mat`` and ``test_32x32.mat``, each an
``X`` of (32, 32, 3, N) uint8 images and ``y`` labels 1..10 (10 is the digit 0). scipy reads a
variable whole, so the train images are read as uint8 and only the rows wanted converted; the
train split's count comes from the variable headers (`scipy.io.whosmat`)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Iterator

import numpy as np

from analysis.core.errors import PateError
from pate.data.format import DataFormat, DataSection
from pate.data.rows import check_rows
from pate.data.splits import Dataset, PublicPool, float_images

_SVHN_FILES = {"train": "train_32x32.mat", "test": "test_32x32.mat"}
_SHAPE = (32, 32, 3)


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
    if x.ndim != 4 or x.shape[:3] != _SHAPE or x.shape[3] != y.shape[0]:
        raise PateError(f"{path}: expected X of shape (32, 32, 3, N) matching y, got "
                        f"{x.shape} and {y.shape}")
    if y.size and (y.min() < 1 or y.max() > 10):
        raise PateError(f"{path}: SVHN labels must lie in 1..10, found {y.min()}..{y.max()}")
    return x, np.where(y == 10, 0, y).astype(np.int32)


def _read_svhn_mat(path: Path) -> tuple[np.ndarray, np.ndarray]:
    x, y = _svhn_raw(path)
    return float_images(np.transpose(x, (3, 0, 1, 2))), y


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


@dataclasses.dataclass(frozen=True, kw_only=True)
class SvhnFormat(DataFormat):
    """SVHN's two .mat files in a folder: 10 classes, 32x32 colour images."""

    def classes(self, section: DataSection) -> int:
        return 10

    def input_shape(self, section: DataSection) -> tuple[int, ...]:
        return _SHAPE

    def _file(self, section_path: str, split: str, both: bool = True) -> Path:
        names = list(_SVHN_FILES.values()) if both else [_SVHN_FILES[split]]
        return self.find(section_path, names) / _SVHN_FILES[split]

    def load(self, section: DataSection) -> Dataset:
        return self.load_from(section.path)

    def load_from(self, directory: str) -> Dataset:
        """The data set from the two files in `directory` (empty: `$PATE_DATA_DIR` or the default)."""
        x_train, y_train = _read_svhn_mat(self._file(directory, "train"))
        x_test, y_test = _read_svhn_mat(self._file(directory, "test"))
        return Dataset(self.name, x_train, y_train, x_test, y_test, num_classes=10)

    def public(self, section: DataSection) -> PublicPool:
        x, y = _read_svhn_mat(self._file(section.path, "test"))
        return PublicPool(self.name, x, y, 10, _svhn_count(self._file(section.path, "train")))

    def pool_inputs(self, section: DataSection, public_size: int) -> np.ndarray:
        return _read_svhn_mat(self._file(section.path, "test", both=False))[0][:public_size]

    def with_train(self, section: DataSection, x_train: np.ndarray, y_train: np.ndarray) -> Dataset:
        x, y = _read_svhn_mat(self._file(section.path, "test"))
        return Dataset(self.name, x_train, y_train, x, y, 10)

    def training_files(self, section: DataSection) -> list[Path]:
        return [self._file(section.path, "train")]

    def train_count(self, section: DataSection) -> int:
        return _svhn_count(self._file(section.path, "train"))

    def train_rows(self, section: DataSection, wanted: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """The train rows `wanted` (None: all): the .mat's X and y are read whole (scipy reads a
        variable whole), checked as `load` checks them, and only the wanted images converted."""
        path = self._file(section.path, "train")
        x, y = _svhn_raw(path)
        if wanted is not None:
            check_rows(wanted, x.shape[3], str(path))
            x, y = x[..., wanted], y[wanted]
        return float_images(np.transpose(x, (3, 0, 1, 2))), y

    def train_chunks(self, section: DataSection, chunk: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        x, y = self.train_rows(section, None)
        for first in range(0, x.shape[0], chunk):
            yield x[first:first + chunk], y[first:first + chunk]


SVHN = SvhnFormat(
    name="svhn", summary="SVHN: 32x32 colour images of house-number digits, 73 257 + 26 032",
    subdir="svhn", default_dir=Path("/usr/share/datasets/svhn"),
    how_to_get="download train_32x32.mat and test_32x32.mat from http://ufldl.stanford.edu/housenumbers/")


def load_svhn(directory: str = "") -> Dataset:
    """SVHN (cropped digits) from `train_32x32.mat` and `test_32x32.mat`; label 10 → 0."""
    return SVHN.load_from(directory)
