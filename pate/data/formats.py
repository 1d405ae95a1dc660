"""The registry of data formats: every kind of data set `[data] name` may name, by name, and the
one lookup of a name (`format_of`).

A record (`pate.data.format.DataFormat`) carries everything that depends on which data set it is
— its loaders, where its files are looked up, what the error says when they are missing, the
facts known before any file is read — so the config's checks, the defaults, `plan`, `audit`, the
ledger's identity and the CLI read this table and never test a name. Adding a format is its
module (a subclass and its record) and one entry in `FORMATS`.

| record | inputs | classes | files (`data.path`) | module |
|---|---|---|---|---|
| ``fashion_mnist`` | 28x28 grey images | 10 | four IDX files in a folder (default /usr/share/datasets/fashion-mnist) | `pate.data.idx` |
| ``mnist`` | 28x28 grey images | 10 | four IDX files in a folder (default /usr/share/datasets/mnist) | `pate.data.idx` |
| ``svhn`` | 32x32 colour images | 10 | train_32x32.mat and test_32x32.mat in a folder | `pate.data.svhn` |
| ``npz`` | images or rows of features (the file's) | the file's labels 0..C-1 | one .npz (required) | `pate.data.npz` |
| ``synthetic`` | `synthetic_shape` images | `synthetic_classes` | none: generated | `pate.data.synthetic` |
"""

from __future__ import annotations

from analysis.core.errors import PateError
from pate.data.format import DataFormat
from pate.data.idx import FASHION_MNIST, MNIST
from pate.data.npz import NPZ
from pate.data.svhn import SVHN
from pate.data.synthetic import SYNTHETIC

FORMATS: dict[str, DataFormat] = {f.name: f for f in (FASHION_MNIST, MNIST, SVHN, NPZ, SYNTHETIC)}
#: The names `[data] name` accepts (`pate.config.DataConfig.name`).
NAMES = tuple(FORMATS)


def format_of(name: str) -> DataFormat:
    """The record of the data format named ``name``.

    Raises:
      PateError: one line naming the known formats, when pate knows none by that name."""
    if name not in FORMATS:
        raise PateError(f"unknown data set '{name}'; data.name must be one of {', '.join(NAMES)}")
    return FORMATS[name]
