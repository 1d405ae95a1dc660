"""`pate.data.load_pool`: the public pool's inputs as `split` cuts them, read without the
private train split (what the voting processes of `pate label --distributed` read), for every
kind of data set."""

from __future__ import annotations

import numpy as np
import pytest

from analysis.core.errors import PateError
from conftest import write_embeddings
from pate import data
from pate.config import DataConfig
from test_data import write_idx_dir


def same_pool(cfg: DataConfig, public_size: int) -> np.ndarray:
    pool = data.load_pool(cfg, public_size)
    expected = data.split(data.load_dataset(cfg), public_size).pool_x
    assert pool.dtype == expected.dtype and pool.shape == expected.shape
    assert pool.tobytes() == expected.tobytes()
    return pool


@pytest.mark.parametrize("compress", [True, False])
def test_idx_pool_reads_no_train_file(tmp_path, compress):
    write_idx_dir(tmp_path / "fm", n_train=12, n_test=8, compress=compress)
    cfg = DataConfig(name="fashion_mnist", path=str(tmp_path / "fm"))
    assert same_pool(cfg, 5).shape == (5, 28, 28, 1)
    for f in (tmp_path / "fm").glob("train-*"):
        f.unlink()  # a host without the private split still reads the pool
    assert data.load_pool(cfg, 5).shape == (5, 28, 28, 1)


def test_svhn_pool_reads_no_train_file(tmp_path):
    import scipy.io

    rng = np.random.default_rng(1)
    for split, n in (("train", 5), ("test", 4)):
        scipy.io.savemat(tmp_path / f"{split}_32x32.mat", {"X": rng.integers(0, 256, (32, 32, 3, n)).astype(np.uint8),
                                                          "y": np.arange(1, n + 1, dtype=np.uint8)[:, None]})
    cfg = DataConfig(name="svhn", path=str(tmp_path))
    same_pool(cfg, 3)
    (tmp_path / "train_32x32.mat").unlink()
    assert data.load_pool(cfg, 3).shape == (3, 32, 32, 3)


@pytest.mark.parametrize("kind", ["uint8", "float", "embeddings"])
def test_npz_pool_reads_x_test_alone(tmp_path, kind):
    path = tmp_path / "d.npz"
    rng = np.random.default_rng(3)
    if kind == "embeddings":
        write_embeddings(path, train=10, test=6)
    else:
        draw = ((lambda n: rng.integers(0, 256, (n, 5, 5), dtype=np.uint8)) if kind == "uint8"
                else (lambda n: rng.uniform(size=(n, 5, 5, 2)).astype(np.float32)))
        np.savez(path, x_train=draw(6), y_train=np.arange(6) % 3, x_test=draw(5), y_test=np.arange(5) % 3)
    cfg = DataConfig(name="npz", path=str(path))
    same_pool(cfg, 4)
    with np.load(path) as f:
        np.savez(tmp_path / "pool-only.npz", x_test=f["x_test"])
    assert data.load_pool(DataConfig(name="npz", path=str(tmp_path / "pool-only.npz")), 4).shape[0] == 4
    np.savez(tmp_path / "none.npz", x_train=np.zeros((2, 3, 3)))
    with pytest.raises(PateError, match="x_test must be images"):
        data.load_pool(DataConfig(name="npz", path=str(tmp_path / "none.npz")), 1)


def test_synthetic_pool(tiny_config):
    same_pool(tiny_config.data, tiny_config.data.public_size)
