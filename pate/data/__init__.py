"""The data room: every data set `[data] name` may name is a format record
(`pate.data.format.DataFormat`, one module per format, registered by name in
`pate.data.formats`), and the entry points every layer reads data through ask the record
(`pate.data.loading`), never the name.

| module | what |
|---|---|
| `splits` | the values: `Dataset`, `Splits`, `PublicPool`, `Partition`; `split`, `partition` |
| `format` | the record type: facts and capabilities of a format; where its files are looked up |
| `formats` | the registry: `FORMATS`, `NAMES`, `format_of` (one-line error naming the known ones) |
| `idx`, `svhn`, `npz`, `synthetic` | one module per format and its record(s) |
| `rows` | private records read by index, as runs of rows of a file |
| `loading` | the entry points: whole data sets, the public pool alone, private rows by index |

Every loader returns int32 labels and float32 images in [0, 1] shaped (N, H, W, C), or, for an
.npz whose `x_*` arrays are 2-D, float32 rows of features shaped (N, F): a data set of
embeddings (a foundation model's, text's, tabular records'), split and partitioned as images are.

The names below are this package's public ones: import them from `pate.data`.
"""

from pate.data.format import DATA_DIR_ENV, DataFormat, DataSection
from pate.data.formats import FORMATS, NAMES, format_of
from pate.data.idx import FASHION_MNIST_DIR, load_idx, read_idx
from pate.data.loading import (
    dataset_name,
    legacy_identity,
    load_dataset,
    load_pool,
    load_public,
    load_train_rows,
    split_rows,
    train_chunks,
    train_count,
    train_ids,
    training_digest,
    training_files,
)
from pate.data.npz import MAX_CLASSES, MAX_FEATURE, MAX_ID_BYTES, check_feature_values, load_npz
from pate.data.rows import ROW_CHUNK
from pate.data.splits import Dataset, Partition, PublicPool, Splits, is_embedding, partition, split
from pate.data.svhn import load_svhn
from pate.data.synthetic import synthetic

__all__ = [
    "DATA_DIR_ENV", "DataFormat", "DataSection", "FORMATS", "NAMES", "format_of",
    "FASHION_MNIST_DIR", "load_idx", "read_idx",
    "dataset_name", "legacy_identity", "load_dataset", "load_pool", "load_public", "load_train_rows", "split_rows",
    "train_chunks", "train_count", "train_ids", "training_digest", "training_files",
    "MAX_CLASSES", "MAX_FEATURE", "MAX_ID_BYTES", "check_feature_values", "load_npz", "ROW_CHUNK",
    "Dataset", "Partition", "PublicPool", "Splits", "is_embedding", "partition", "split",
    "load_svhn", "synthetic",
]
