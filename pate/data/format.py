"""What a data format is: the record type every kind of data set `[data] name` may name extends,
with the facts and capabilities the rest of pate asks about instead of testing the name.

A record (one instance a data set, registered by name in `pate.data.formats`) says:

- facts known from the `[data]` section alone, no file opened: ``inputs`` (``"images"``, or
  ``"images or rows"`` when the files decide), `DataFormat.classes` and `DataFormat.input_shape`
  (None where the files decide), ``needs_path`` and ``path_names`` (what ``data.path`` names);
- where its files are looked up (``subdir`` under ``$PATE_DATA_DIR``, ``default_dir``) and what
  the error says when they are missing (``how_to_get``);
- how to read it: the whole data set (`DataFormat.load`), the public pool alone (`public`,
  `pool_inputs`: no private record read), the private records by index and as a stream
  (`train_count`, `train_rows`, `train_chunks`), the test split around given train rows
  (`with_train`), the files and ids its ledger identity reads (`training_files`, `train_ids`,
  `legacy_identity`), and the name its data set goes by (`dataset_name`).

Adding a format is one module defining a subclass and its record, and one entry in
`pate.data.formats.FORMATS`; `tests/test_data_formats.py` runs the contract on every record.
"""

from __future__ import annotations

import abc
import dataclasses
import os
from pathlib import Path
from typing import Iterator, Protocol

import numpy as np

from analysis.core.errors import PateError
from pate.data.splits import Dataset, PublicPool

#: Environment variable naming a data directory (or a root holding one per data set).
DATA_DIR_ENV = "PATE_DATA_DIR"


class DataSection(Protocol):
    """What a format reads of a `[data]` section (`pate.config.DataConfig`)."""

    name: str
    path: str
    public_size: int
    synthetic_train_size: int
    synthetic_test_size: int
    synthetic_shape: tuple[int, ...]
    synthetic_classes: int
    synthetic_noise: float
    synthetic_seed: int


@dataclasses.dataclass(frozen=True, kw_only=True)
class DataFormat(abc.ABC):
    """Base of the records; ``name`` is the value of `[data] name` that picks it."""

    name: str
    #: One line for the docs and the registry's table.
    summary: str
    #: "images" (N, H, W, C), or "images or rows" (an .npz: its arrays' rank decides).
    inputs: str = "images"
    #: Whether `[data] path` must be given (an .npz file), and what it names.
    needs_path: bool = False
    path_names: str = "the folder holding its files"
    #: Its folder under `$PATE_DATA_DIR`, and where a package installs it (None: no default).
    subdir: str = ""
    default_dir: Path | None = None
    #: What to do when its files are missing: the end of the missing-file error.
    how_to_get: str = ""

    # ----------------------------------------------------------------- facts from the section

    def classes(self, section: DataSection) -> int | None:
        """The data set's class count from the section alone, or None where its files decide."""
        return None

    def input_shape(self, section: DataSection) -> tuple[int, ...] | None:
        """One input's shape from the section alone, or None where its files decide."""
        return None

    def dataset_name(self, section: DataSection) -> str:
        """The name `load` gives its data set, read from no file."""
        return self.name

    # ----------------------------------------------------------------- reading

    @abc.abstractmethod
    def load(self, section: DataSection) -> Dataset:
        """The whole data set, checked (one line for a missing or damaged file)."""

    @abc.abstractmethod
    def public(self, section: DataSection) -> PublicPool:
        """Its whole test split (the caller cuts the pool), its classes and the train split's
        record count, read without a private record (a file header's count)."""

    @abc.abstractmethod
    def pool_inputs(self, section: DataSection, public_size: int) -> np.ndarray:
        """The first `public_size` test inputs, the train files not even opened."""

    @abc.abstractmethod
    def train_count(self, section: DataSection) -> int:
        """The train split's record count, from a file header, never a record."""

    @abc.abstractmethod
    def train_rows(self, section: DataSection, wanted: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(x_train[wanted], y_train[wanted])`` of `load`, byte for byte, for sorted unique
        ``wanted``, read without holding the whole split where the format allows."""

    @abc.abstractmethod
    def train_chunks(self, section: DataSection, chunk: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """The train split of `load` in order, `chunk` records at a time."""

    @abc.abstractmethod
    def with_train(self, section: DataSection, x_train: np.ndarray, y_train: np.ndarray) -> Dataset:
        """The data set with its train split replaced by the rows given: the test split read
        whole, the data set's classes (an .npz's from every train label, read as labels only)."""

    def training_files(self, section: DataSection) -> list[Path]:
        """The files its private train split is read from (none: generated data)."""
        return []

    def train_ids(self, section: DataSection) -> list[bytes] | None:
        """Each private record's id (an .npz's ``ids``), or None."""
        return None

    def legacy_identity(self, section: DataSection) -> str:
        """The name an older pate gave this data set's ledger: its name and the resolved
        location of its files (`pate.store.identity.legacy_identity`)."""
        return f"{self.name}:{self.source(section.path).expanduser().resolve()}"

    # ----------------------------------------------------------------- where the files are

    def folders(self, path: str) -> list[Path]:
        """The folders its files are looked for in, in order: ``data.path`` when given, else
        `$PATE_DATA_DIR`'s subfolder and itself, then the default."""
        if path:
            return [Path(path)]
        dirs = []
        env = os.environ.get(DATA_DIR_ENV)
        if env:
            dirs += [Path(env) / self.subdir, Path(env)]
        if self.default_dir is not None:
            dirs.append(self.default_dir)
        return dirs

    def find(self, path: str, filenames: list[str]) -> Path:
        """The first folder holding all `filenames` (each raw or .gz).

        Raises:
          PateError: none does; naming the first file missing everywhere, the folders looked in
            and how to get the data set."""
        dirs = self.folders(path)
        for d in dirs:
            if all((d / f).exists() or (d / f"{f}.gz").exists() for f in filenames):
                return d
        missing = filenames[0]
        for f in filenames:
            if not any((d / f).exists() or (d / f"{f}.gz").exists() for d in dirs):
                missing = f
                break
        where = ", ".join(str(d) for d in dirs)
        raise PateError(f"{self.name} file {missing}(.gz) not found; looked in {where}. "
                        f"To get it: {self.how_to_get}; or set data.path or ${DATA_DIR_ENV}")

    def source(self, path: str) -> Path:
        """Where its files are read from: the folder `find` picks, or the first one looked in
        when none holds them yet (an .npz: its own path)."""
        if self.needs_path:
            return Path(path)
        dirs = self.folders(path)
        for d in dirs:
            if d.is_dir() and any(d.iterdir()):
                return d
        return dirs[0]
