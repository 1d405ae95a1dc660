"""`pate.data.load_train_rows`, `train_chunks` and the streamed `training_digest`: the private rows
a process asks for, byte for byte those of `load_dataset`, read without the whole split, with the
loaders' one-line errors."""

from __future__ import annotations

import gzip
import hashlib
import io
import zipfile

import numpy as np
import pytest

from analysis.core.errors import PateError
from pate import data
from pate.data import loading
from pate.config import DataConfig

from test_data import idx_bytes, write_idx_dir

ROWS = np.array([7, 3, 3, 49, 0, 10, 48, 49, 22])


def _same(cfg: DataConfig, rows=ROWS) -> None:
    full = data.load_dataset(cfg)
    x, y = data.load_train_rows(cfg, rows)
    assert x.dtype == full.x_train.dtype and y.dtype == full.y_train.dtype
    assert x.shape == full.x_train[rows].shape
    assert x.tobytes() == full.x_train[rows].tobytes() and y.tobytes() == full.y_train[rows].tobytes()
    assert data.train_count(cfg) == full.x_train.shape[0]
    chunks = list(data.train_chunks(cfg, chunk=7))
    assert np.concatenate([c[0] for c in chunks]).tobytes() == full.x_train.tobytes()
    assert np.concatenate([c[1] for c in chunks]).tobytes() == full.y_train.tobytes()
    # the digest as it was computed from the whole split in memory
    h = hashlib.sha256(b"pate-training-split-v1")
    for array in (np.ascontiguousarray(full.x_train, np.float32), np.ascontiguousarray(full.y_train, np.int32)):
        h.update(repr((array.dtype.str, array.shape)).encode("ascii"))
        h.update(memoryview(array).cast("B"))
    assert data.training_digest(cfg) == h.hexdigest()


@pytest.mark.parametrize("compress", [True, False])
def test_idx_rows_are_the_loaders(tmp_path, compress):
    write_idx_dir(tmp_path / "fm", n_train=50, compress=compress)
    _same(DataConfig(name="fashion_mnist", path=str(tmp_path / "fm")))


def test_idx_rows_refuse_a_truncated_a_longer_or_a_foreign_file(tmp_path):
    write_idx_dir(tmp_path / "a", n_train=50)
    cfg = DataConfig(name="mnist", path=str(tmp_path / "a"))
    images = tmp_path / "a" / "train-images-idx3-ubyte.gz"
    good = gzip.decompress(images.read_bytes())
    for payload, what in ((good[:-5], "truncated or corrupt"), (good + b"\x00", "longer"),
                          (b"\x12\x34" + good[2:], "not an IDX file")):
        images.write_bytes(gzip.compress(payload))
        with pytest.raises(PateError, match=what):
            data.load_train_rows(cfg, [0, 1])
        with pytest.raises(PateError, match=what):
            data.training_digest(cfg)
    images.write_bytes(gzip.compress(good)[:-20])  # the gzip stream itself cut short
    with pytest.raises(PateError, match="truncated or corrupt"):
        data.load_train_rows(cfg, [1])
    images.unlink()
    (tmp_path / "a" / "train-images-idx3-ubyte").write_bytes(good[:-5])  # raw: its size tells
    with pytest.raises(PateError, match=r"truncated or corrupt: \d+ bytes, header \[50, 28, 28\]"):
        data.load_train_rows(cfg, [1])
    (tmp_path / "a" / "train-images-idx3-ubyte").write_bytes(good)
    with pytest.raises(PateError, match="internal error: private rows 0..50"):
        data.load_train_rows(cfg, [0, 50])


def test_idx_rows_check_the_labels_they_read(tmp_path):
    write_idx_dir(tmp_path / "b", n_train=50, labels_max=12)
    cfg = DataConfig(name="mnist", path=str(tmp_path / "b"))
    with pytest.raises(PateError, match=r"labels must lie in 0\.\.9"):
        data.load_train_rows(cfg, np.arange(50))
    write_idx_dir(tmp_path / "c", n_train=50)
    (tmp_path / "c" / "train-labels-idx1-ubyte.gz").write_bytes(gzip.compress(idx_bytes(np.zeros(5))))
    with pytest.raises(PateError, match="holds 50 images but .* holds 5 labels"):
        data.load_train_rows(DataConfig(name="mnist", path=str(tmp_path / "c")), [0])


def _npz(path, compressed: bool, kind: str) -> None:
    rng = np.random.default_rng(3)
    x = {"uint8": rng.integers(0, 256, (50, 6, 5), dtype=np.uint8),
         "float": rng.uniform(size=(50, 4, 4, 2)),
         "embedding": rng.normal(size=(50, 9)).astype(np.float16)}[kind]
    save = np.savez_compressed if compressed else np.savez
    save(path, x_train=x, y_train=rng.integers(0, 4, 50), x_test=x[:6], y_test=np.arange(6) % 4)


@pytest.mark.parametrize("compressed", [False, True])
@pytest.mark.parametrize("kind", ["uint8", "float", "embedding"])
def test_npz_rows_are_the_loaders(tmp_path, compressed, kind):
    _npz(tmp_path / "d.npz", compressed, kind)
    _same(DataConfig(name="npz", path=str(tmp_path / "d.npz")))


def _rewrite_member(path, name: str, payload: bytes, compressed: bool) -> None:
    with zipfile.ZipFile(path) as z:
        members = {n: z.read(n) for n in z.namelist()}
    members[name] = payload
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED if compressed else zipfile.ZIP_STORED) as z:
        for n, b in members.items():
            z.writestr(n, b)
    path.write_bytes(buf.getvalue())


@pytest.mark.parametrize("compressed", [False, True])
def test_npz_rows_refuse_a_truncated_member_a_bad_label_and_a_missing_one(tmp_path, compressed):
    path = tmp_path / "d.npz"
    _npz(path, compressed, "uint8")
    cfg = DataConfig(name="npz", path=str(path))
    with zipfile.ZipFile(path) as z:
        member = z.read("x_train.npy")
    _rewrite_member(path, "x_train.npy", member[:-31], compressed)
    with pytest.raises(PateError, match="not a readable .npz .*x_train is truncated"):
        data.load_train_rows(cfg, [0])
    _rewrite_member(path, "x_train.npy", b"\x93NUMPY garbage", compressed)
    with pytest.raises(PateError, match="not a readable .npz"):
        data.load_train_rows(cfg, [0])
    _npz(path, compressed, "uint8")
    y = np.arange(50) - 1  # a negative label, in row 0 only
    buf = io.BytesIO()
    np.save(buf, y)
    _rewrite_member(path, "y_train.npy", buf.getvalue(), compressed)
    with pytest.raises(PateError, match="y_train must hold non-negative integer labels"):
        data.load_train_rows(cfg, [3, 0])
    assert data.load_train_rows(cfg, [3])[1].tolist() == [2]  # the labels read are checked
    np.savez(path, x_train=np.zeros((2, 3)), x_test=np.zeros((1, 3)), y_test=[0])
    with pytest.raises(PateError, match="lacks y_train"):
        data.load_train_rows(cfg, [0])
    (tmp_path / "cut.npz").write_bytes(path.read_bytes()[:40])
    with pytest.raises(PateError, match="not a readable .npz"):
        data.load_train_rows(DataConfig(name="npz", path=str(tmp_path / "cut.npz")), [0])
    with pytest.raises(PateError, match="not found"):
        data.load_train_rows(DataConfig(name="npz", path=str(tmp_path / "none.npz")), [0])


def test_svhn_rows_are_the_loaders_and_a_damaged_file_is_one_line(tmp_path):
    import scipy.io

    rng = np.random.default_rng(1)
    for split, n in (("train", 50), ("test", 3)):
        scipy.io.savemat(tmp_path / f"{split}_32x32.mat", {"X": rng.integers(0, 256, (32, 32, 3, n)).astype(np.uint8),
                                                           "y": rng.integers(1, 11, (n, 1)).astype(np.uint8)})
    cfg = DataConfig(name="svhn", path=str(tmp_path))
    _same(cfg)
    (tmp_path / "train_32x32.mat").write_bytes((tmp_path / "train_32x32.mat").read_bytes()[:500])
    with pytest.raises(PateError, match="train_32x32.mat is truncated or corrupt"):
        data.load_train_rows(cfg, [0])


def test_synthetic_rows_are_the_loaders():
    _same(DataConfig(name="synthetic", synthetic_train_size=50, synthetic_test_size=20,
                     synthetic_shape=[5, 5, 1], synthetic_classes=3))


def test_every_call_reports_the_rows_it_holds(tmp_path, monkeypatch):
    write_idx_dir(tmp_path / "fm", n_train=50, compress=False)
    seen = []
    monkeypatch.setattr(loading, "on_rows_loaded", lambda x, y: seen.append((x.shape, y.shape)))
    data.load_train_rows(DataConfig(name="mnist", path=str(tmp_path / "fm")), [4, 9])
    assert seen == [((2, 28, 28, 1), (2,))]


@pytest.mark.parametrize("name", ["mnist", "svhn", "npz", "synthetic"])
def test_split_rows_is_split_with_the_train_rows_cut(tmp_path, name):
    import scipy.io

    if name == "mnist":
        write_idx_dir(tmp_path, n_train=50, n_test=12)
        cfg = DataConfig(name="mnist", path=str(tmp_path))
    elif name == "svhn":
        rng = np.random.default_rng(1)
        for split, n in (("train", 50), ("test", 12)):
            images = rng.integers(0, 256, (32, 32, 3, n)).astype(np.uint8)
            scipy.io.savemat(tmp_path / f"{split}_32x32.mat", {"X": images, "y": rng.integers(1, 11, (n, 1)).astype(np.uint8)})
        cfg = DataConfig(name="svhn", path=str(tmp_path))
    elif name == "npz":
        rng = np.random.default_rng(3)
        y = rng.integers(0, 3, 50)
        y[17] = 6  # the largest label lies in the train split, outside the rows asked for
        np.savez(tmp_path / "d.npz", x_train=rng.normal(size=(50, 4)), y_train=y, x_test=rng.normal(size=(12, 4)),
                 y_test=np.arange(12) % 3)
        cfg = DataConfig(name="npz", path=str(tmp_path / "d.npz"))
    else:
        cfg = DataConfig(name="synthetic", synthetic_train_size=50, synthetic_test_size=12,
                         synthetic_shape=[5, 5, 1], synthetic_classes=3)
    whole = data.split(data.load_dataset(cfg), 5)
    cut = data.split_rows(cfg, 5, ROWS)
    assert cut.train_x.tobytes() == whole.train_x[ROWS].tobytes()
    assert cut.train_y.tobytes() == whole.train_y[ROWS].tobytes()
    for key in ("pool_x", "pool_y", "eval_x", "eval_y"):
        assert getattr(cut, key).tobytes() == getattr(whole, key).tobytes(), key
    assert cut.num_classes == whole.num_classes
    with pytest.raises(PateError, match="leaves no evaluation points"):
        data.split_rows(cfg, 12, ROWS)
