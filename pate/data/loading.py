"""The entry points every layer reads a `[data]` section through: each asks the section's format
record (`pate.data.formats.format_of`) and never tests a name.

Whole data sets (`load_dataset`); the public pool alone (`load_public`, with the train split's
size from a file header, never a record: `pate ceiling`, the data's defaults; `load_pool`, the
pool's inputs only, the train files not even opened: the voting processes of `pate label
--distributed`); and the private records by index (`load_train_rows`, `split_rows`: byte for byte
`load_dataset`'s rows, read at their offsets or from a stream, so a process of `--distributed`
reads only its own teachers' shards or block; `train_chunks`, from which the split's digests are
computed as a stream).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

from pate.data.format import DataSection
from pate.data.formats import format_of
from pate.data.rows import ROW_CHUNK
from pate.data.splits import Dataset, PublicPool, Splits, check_pool_size, split

#: Tests and the scaling bench: called with the (x, y) of every call of `load_train_rows` (what
#: this process holds of the private split). None in every real run.
on_rows_loaded: Callable[[np.ndarray, np.ndarray], None] | None = None


def load_dataset(cfg: DataSection) -> Dataset:
    """Loads the data set named by a `[data]` config section."""
    return format_of(cfg.name).load(cfg)


def dataset_name(cfg: DataSection) -> str:
    """The name `load_dataset(cfg)` gives its data set (an .npz's: its file's stem), read from no file."""
    return format_of(cfg.name).dataset_name(cfg)


def load_pool(cfg: DataSection, public_size: int) -> np.ndarray:
    """The public pool's inputs (the first `public_size` test points, as `split` cuts them),
    read without opening the private train split: all that a process which only votes needs
    (`pate label --distributed` on every process but 0). Synthetic data is drawn whole (its
    test points follow its train points in one random stream; it is nobody's data).

    Raises:
      PateError: the test inputs are missing or malformed.
    """
    return format_of(cfg.name).pool_inputs(cfg, public_size)


def load_public(cfg: DataSection) -> PublicPool:
    """The public pool of a `[data]` section, read without reading a private record.

    IDX: the test files, and the train images' header (their count); SVHN: the test .mat, and
    the train .mat's variable headers (`scipy.io.whosmat`); .npz: the `x_test` and `y_test`
    members, and `x_train`'s array header; synthetic data (generated, nothing private) as
    `load_dataset` makes it. The classes are the data set's (IDX, SVHN: 10; synthetic: the
    config's); an .npz's are the pool's largest label plus one (its train labels are private).

    Raises:
      PateError: a file is missing or damaged, or the pool leaves no evaluation points.
    """
    pool = format_of(cfg.name).public(cfg)
    check_pool_size(pool.name, cfg.public_size, pool.pool_x.shape[0])
    return PublicPool(pool.name, pool.pool_x[: cfg.public_size], pool.pool_y[: cfg.public_size], pool.num_classes,
                      pool.train_size)


def train_count(cfg: DataSection) -> int:
    """The number of records of the private train split, from a file header, never a record
    (IDX: the images' header; SVHN: the .mat's variable headers; .npz: `x_train`'s array header;
    synthetic: the config)."""
    return format_of(cfg.name).train_count(cfg)


def load_train_rows(cfg: DataSection, rows) -> tuple[np.ndarray, np.ndarray]:
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
    x, y = format_of(cfg.name).train_rows(cfg, wanted)
    at = np.searchsorted(wanted, rows)
    x, y = (x, y) if np.array_equal(wanted, rows) else (x[at], y[at])
    if on_rows_loaded is not None:
        on_rows_loaded(x, y)
    return x, y


def train_chunks(cfg: DataSection, chunk: int = ROW_CHUNK) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """The private train split of `load_dataset(cfg)` in order, `chunk` records at a time (each
    (x, y) as `load_train_rows` gives them, one pass over each file): a digest of the whole
    split in the memory of a chunk (`training_digest`). SVHN's arrays are read whole (scipy),
    synthetic data drawn whole (nobody's)."""
    return format_of(cfg.name).train_chunks(cfg, chunk)


def split_rows(cfg: DataSection, public_size: int, rows) -> Splits:
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
    return split(format_of(cfg.name).with_train(cfg, x_train, y_train), public_size)


def training_files(cfg: DataSection) -> list[Path]:
    """The files the private training split of a `[data]` section is read from (none for
    synthetic data): what a cached digest of that split (`training_digest`) is keyed on."""
    return format_of(cfg.name).training_files(cfg)


def train_ids(cfg: DataSection) -> list[bytes] | None:
    """The optional id of each private training record, in the split's order, as bytes: an
    .npz's ``ids`` array (one integer or string per record: ``7`` and ``"7"`` are the same
    id), or None (no ``ids``, or a format without ids). What says two splits hold the same
    people when their content cannot (re-encoded pixels, embeddings of the same people;
    `pate.store.identity.data_identity`). Private: kept only keyed, never in a run file.

    Raises:
      PateError: ``ids`` is not one integer or string per record."""
    return format_of(cfg.name).train_ids(cfg)


def legacy_identity(cfg: DataSection) -> str:
    """The name an older pate gave the same `[data]` section's ledger: the data set and the
    resolved location of its files (synthetic data: its generating parameters)."""
    return format_of(cfg.name).legacy_identity(cfg)


def training_digest(cfg: DataSection) -> str:
    """sha256 of the private training split's content (images and labels as loaded, with
    their shapes): the same data under another path, gzipped or not, has the same digest.
    Read as a stream (`train_chunks`): the images in the memory of a chunk, the labels (four
    bytes a record) kept until the images are hashed. A plain fingerprint of private data: it
    goes into private files only (the ledger, votes.npz, teachers.json), never into a released
    one, and the agreement of a distributed training (`pate.steps.teachers.fingerprint`)."""
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
