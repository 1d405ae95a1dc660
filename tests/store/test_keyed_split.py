"""`Ledger.keyed_split_digest`: the keyed digest of a whole train split read as a stream is the
one of its bytes in memory (what a distributed command's process 0 charges with)."""

from __future__ import annotations

import numpy as np
import pytest

from pate import data
from pate.config import DataConfig
from pate.store.ledger import Ledger


@pytest.mark.parametrize("rows", [0, 1, 50, 4097])
def test_the_streamed_keyed_digest_is_the_in_memory_one(tmp_path, rows):
    rng = np.random.default_rng(rows)
    y = rng.integers(0, 5, rows)  # the test split's labels are classes of the train split (pate.data.npz._npz_classes)
    np.savez(tmp_path / "d.npz", x_train=rng.integers(0, 256, (rows, 3, 4), dtype=np.uint8),
             y_train=y, x_test=np.zeros((4, 3, 4), np.uint8), y_test=np.resize(y, 4) if rows else np.arange(4))
    cfg = DataConfig(name="npz", path=str(tmp_path / "d.npz"))
    book = Ledger("test", tmp_path / "ledgers")
    whole = data.load_dataset(cfg)
    assert book.keyed_split_digest(cfg) == book.keyed_digest(whole.x_train.tobytes(), whole.y_train.tobytes())
