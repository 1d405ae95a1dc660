"""Data loaders (IDX, SVHN .mat, npz, synthetic), splits and the teacher partition."""

from __future__ import annotations

import gzip
import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analysis.core.errors import PateError
from pate import data
from pate.config import DataConfig


def idx_bytes(array: np.ndarray) -> bytes:
    array = np.asarray(array, dtype=np.uint8)
    header = struct.pack(">BBBB", 0, 0, 0x08, array.ndim)
    header += b"".join(struct.pack(">I", d) for d in array.shape)
    return header + array.tobytes()


def write_idx_dir(directory, n_train=12, n_test=8, compress=True, labels_max=9):
    rng = np.random.default_rng(0)
    directory.mkdir(parents=True, exist_ok=True)
    arrays = {
        "train-images-idx3-ubyte": rng.integers(0, 256, (n_train, 28, 28)),
        "train-labels-idx1-ubyte": rng.integers(0, labels_max + 1, n_train),
        "t10k-images-idx3-ubyte": rng.integers(0, 256, (n_test, 28, 28)),
        "t10k-labels-idx1-ubyte": rng.integers(0, labels_max + 1, n_test),
    }
    for name, arr in arrays.items():
        raw = idx_bytes(arr)
        if compress:
            (directory / f"{name}.gz").write_bytes(gzip.compress(raw))
        else:
            (directory / name).write_bytes(raw)
    return arrays


@pytest.mark.parametrize("compress", [True, False])
def test_idx_loader_scales_and_shapes(tmp_path, compress):
    arrays = write_idx_dir(tmp_path / "fm", compress=compress)
    ds = data.load_idx("fashion_mnist", str(tmp_path / "fm"))
    assert ds.x_train.shape == (12, 28, 28, 1) and ds.x_train.dtype == np.float32
    assert ds.y_train.dtype == np.int32 and ds.num_classes == 10
    np.testing.assert_allclose(ds.x_test[..., 0] * 255, arrays["t10k-images-idx3-ubyte"], atol=1e-3)
    np.testing.assert_array_equal(ds.y_train, arrays["train-labels-idx1-ubyte"])
    assert 0.0 <= ds.x_train.min() and ds.x_train.max() <= 1.0


def test_idx_bad_magic_truncated_and_corrupt(tmp_path):
    good = idx_bytes(np.zeros((2, 3, 3)))
    (tmp_path / "magic").write_bytes(b"\x12\x34" + good[2:])
    with pytest.raises(PateError, match="not an IDX file"):
        data.read_idx(tmp_path / "magic")
    (tmp_path / "short").write_bytes(good[:-5])
    with pytest.raises(PateError, match="truncated or corrupt"):
        data.read_idx(tmp_path / "short")
    (tmp_path / "short.gz").write_bytes(gzip.compress(good)[:-10])
    with pytest.raises(PateError, match="truncated or corrupt"):
        data.read_idx(tmp_path / "short.gz")
    (tmp_path / "bad.gz").write_bytes(b"\x1f\x8b" + b"\x00" * 30)
    with pytest.raises(PateError, match="truncated or corrupt"):
        data.read_idx(tmp_path / "bad.gz")
    with pytest.raises(PateError, match="not found"):
        data.read_idx(tmp_path / "absent")


def test_idx_count_mismatch_and_label_range(tmp_path):
    arrays = write_idx_dir(tmp_path / "a")
    (tmp_path / "a" / "train-labels-idx1-ubyte.gz").write_bytes(
        gzip.compress(idx_bytes(arrays["train-labels-idx1-ubyte"][:5])))
    with pytest.raises(PateError, match="holds 12 images but .* holds 5 labels"):
        data.load_idx("mnist", str(tmp_path / "a"))
    write_idx_dir(tmp_path / "b", labels_max=12)
    with pytest.raises(PateError, match=r"labels must lie in 0\.\.9"):
        data.load_idx("mnist", str(tmp_path / "b"))


def test_missing_fashion_mnist_says_how_to_get_it(tmp_path, monkeypatch):
    import dataclasses

    monkeypatch.setitem(data.FORMATS, "fashion_mnist",
                        dataclasses.replace(data.FORMATS["fashion_mnist"], default_dir=tmp_path / "default"))
    monkeypatch.delenv(data.DATA_DIR_ENV, raising=False)
    with pytest.raises(PateError) as err:
        data.load_dataset(DataConfig(name="fashion_mnist"))
    message = str(err.value)
    assert "train-images-idx3-ubyte" in message and str(tmp_path / "default") in message
    assert "apt-get install dataset-fashion-mnist" in message
    assert "\n" not in message


def test_data_dir_env_and_config_path(tmp_path, monkeypatch):
    write_idx_dir(tmp_path / "root" / "fashion-mnist", n_train=4)
    monkeypatch.setenv(data.DATA_DIR_ENV, str(tmp_path / "root"))
    assert data.load_dataset(DataConfig(name="fashion_mnist")).x_train.shape[0] == 4
    write_idx_dir(tmp_path / "flat", n_train=6)  # PATE_DATA_DIR may hold the files itself
    monkeypatch.setenv(data.DATA_DIR_ENV, str(tmp_path / "flat"))
    assert data.load_dataset(DataConfig(name="fashion_mnist")).x_train.shape[0] == 6
    write_idx_dir(tmp_path / "explicit", n_train=7)  # data.path wins over the environment
    ds = data.load_dataset(DataConfig(name="fashion_mnist", path=str(tmp_path / "explicit")))
    assert ds.x_train.shape[0] == 7


def test_svhn_mat_loader(tmp_path):
    import scipy.io

    rng = np.random.default_rng(1)
    for split, n in (("train", 5), ("test", 3)):
        x = rng.integers(0, 256, (32, 32, 3, n)).astype(np.uint8)
        y = np.array([[10], [1], [2], [10], [9]][:n], dtype=np.uint8)
        scipy.io.savemat(tmp_path / f"{split}_32x32.mat", {"X": x, "y": y})
    ds = data.load_dataset(DataConfig(name="svhn", path=str(tmp_path)))
    assert ds.x_train.shape == (5, 32, 32, 3) and ds.x_test.shape == (3, 32, 32, 3)
    np.testing.assert_array_equal(ds.y_train, [0, 1, 2, 0, 9])
    x = scipy.io.loadmat(tmp_path / "train_32x32.mat")["X"]
    np.testing.assert_allclose(ds.x_train[2] * 255, x[..., 2], atol=1e-3)
    (tmp_path / "test_32x32.mat").write_bytes(b"MATLAB 5.0 garbage")
    with pytest.raises(PateError, match="test_32x32.mat is truncated or corrupt"):
        data.load_svhn(str(tmp_path))
    with pytest.raises(PateError, match="train_32x32.mat.*ufldl"):
        data.load_svhn(str(tmp_path / "empty"))


def test_npz_loader(tmp_path):
    rng = np.random.default_rng(2)
    path = tmp_path / "d.npz"
    np.savez(path, x_train=rng.integers(0, 256, (6, 5, 5), dtype=np.uint8),
             y_train=np.array([0, 1, 2, 0, 1, 2]),
             x_test=rng.uniform(size=(4, 5, 5)).astype(np.float32), y_test=np.array([0, 1, 2, 1]))
    ds = data.load_dataset(DataConfig(name="npz", path=str(path)))
    assert ds.x_train.shape == (6, 5, 5, 1) and ds.x_test.shape == (4, 5, 5, 1)
    assert ds.num_classes == 3 and ds.x_train.max() <= 1.0
    np.savez(tmp_path / "bad.npz", x_train=np.zeros((2, 3, 3)))
    with pytest.raises(PateError, match="lacks y_train, x_test, y_test"):
        data.load_npz(str(tmp_path / "bad.npz"))
    np.savez(tmp_path / "range.npz", x_train=np.full((2, 3, 3), 7.0), y_train=[0, 1],
             x_test=np.zeros((1, 3, 3)), y_test=[0])
    with pytest.raises(PateError, match=r"must lie in \[0, 1\]"):
        data.load_npz(str(tmp_path / "range.npz"))
    with pytest.raises(PateError, match="not found"):
        data.load_npz(str(tmp_path / "none.npz"))


def test_npz_labels_must_be_the_train_splits_classes_0_to_k_minus_1(tmp_path):
    """The class count was the largest label of either split plus one: one stray test label
    (9999) made 10,000 classes, and LNMax then labelled the pool at 0.00, charged (issue 52).
    Now a test label that no training record has, or a largest label past twice the classes
    that occur, is refused in one line saying to relabel, by every reader of an .npz (the
    data set, the public pool alone, the private rows by index); 0..K-1 with a class or two
    missing is accepted."""
    rng = np.random.default_rng(0)

    def npz(name, y_train, y_test):
        path = tmp_path / f"{name}.npz"
        np.savez(path, x_train=rng.normal(size=(len(y_train), 3)).astype(np.float32), y_train=np.array(y_train),
                 x_test=rng.normal(size=(len(y_test), 3)).astype(np.float32), y_test=np.array(y_test))
        return DataConfig(name="npz", path=str(path), public_size=len(y_test) // 2)

    classes = list(range(10)) * 3
    stray_test = npz("stray-test", classes, classes[:-1] + [9999])
    for read in (lambda c: data.load_dataset(c), lambda c: data.split_rows(c, c.public_size, np.arange(4))):
        with pytest.raises(PateError, match=r"y_test holds label\(s\) 9999 that no record of y_train has; .*relabel"):
            read(stray_test)
    with pytest.raises(PateError, match=r"y_test's largest label 9999 makes 10000 classes, but only 11 of them"):
        data.load_public(stray_test)
    with pytest.raises(PateError, match=r"y_train's largest label 9999 makes 10000 classes, but only 11 .*"
                                        r"relabel the classes to 0\.\.10"):
        data.load_dataset(npz("stray-train", classes[:-1] + [9999], classes))
    with pytest.raises(PateError, match=r"y_test holds label\(s\) 7, 8, 9"):
        data.load_dataset(npz("unseen", [c % 7 for c in classes], classes))
    assert data.load_dataset(npz("gap", [c for c in classes if c != 4], [c for c in classes if c != 4])).num_classes == 10
    assert data.load_dataset(npz("one-class", [0] * 8, [0] * 8)).num_classes == 2


def test_synthetic_is_deterministic_and_learnable():
    a = data.synthetic(400, 200, (6, 6, 2), num_classes=5, noise=0.3, seed=3)
    b = data.synthetic(400, 200, (6, 6, 2), num_classes=5, noise=0.3, seed=3)
    np.testing.assert_array_equal(a.x_train, b.x_train)
    assert a.x_train.shape == (400, 6, 6, 2) and a.x_train.dtype == np.float32
    assert a.y_test.dtype == np.int32 and set(np.unique(a.y_train)) == set(range(5))
    assert 0.0 <= a.x_train.min() and a.x_train.max() <= 1.0
    # nearest class mean, fitted on train, classifies test well above chance (0.2)
    means = np.stack([a.x_train[a.y_train == c].mean(0) for c in range(5)])
    dist = ((a.x_test[:, None] - means[None]) ** 2).sum(axis=(2, 3, 4))
    assert np.mean(dist.argmin(1) == a.y_test) > 0.9


def test_split_protocol():
    ds = data.synthetic(50, 30, (4, 4, 1), num_classes=3, seed=0)
    s = data.split(ds, public_size=20)
    np.testing.assert_array_equal(s.pool_x, ds.x_test[:20])
    np.testing.assert_array_equal(s.eval_y, ds.y_test[20:])
    assert s.train_x is ds.x_train and s.num_classes == 3
    with pytest.raises(PateError, match="leaves no evaluation points"):
        data.split(ds, public_size=30)


@settings(max_examples=60, deadline=None)
@given(num_points=st.integers(1, 500), num_teachers=st.integers(1, 60), seed=st.integers(0, 2**31))
def test_partition_disjoint_equal_and_covering(num_points, num_teachers, seed):
    if num_teachers > num_points:
        with pytest.raises(PateError, match="teachers but only"):
            data.partition(num_points, num_teachers, seed)
        return
    part = data.partition(num_points, num_teachers, seed)
    shard = num_points // num_teachers
    assert part.indices.shape == (num_teachers, shard)
    assert part.left_out.size == num_points - shard * num_teachers < num_teachers
    everything = np.concatenate([part.indices.ravel(), part.left_out])
    np.testing.assert_array_equal(np.sort(everything), np.arange(num_points))  # disjoint + cover
    again = data.partition(num_points, num_teachers, seed)
    np.testing.assert_array_equal(part.indices, again.indices)


def test_partition_depends_on_seed():
    a = data.partition(1000, 10, 0).indices
    b = data.partition(1000, 10, 1).indices
    assert not np.array_equal(a, b)


@pytest.mark.slow
def test_real_fashion_mnist():
    try:
        ds = data.load_dataset(DataConfig(name="fashion_mnist"))
    except PateError as err:
        pytest.skip(f"Fashion-MNIST not installed: {err}")
    assert ds.x_train.shape == (60000, 28, 28, 1) and ds.x_test.shape == (10000, 28, 28, 1)
    assert set(np.unique(ds.y_train)) == set(range(10))
    s = data.split(ds, 9000)
    assert s.pool_x.shape[0] == 9000 and s.eval_x.shape[0] == 1000


def test_an_idx_header_is_read_from_as_few_compressed_bytes_as_it_takes(tmp_path, monkeypatch):
    """`pate ceiling` and `load_public` read the train images' count from their header alone: the
    gzip reader held 8 KiB of the private file (thousands of bytes of its records) to read 16 (issue 51)."""
    import gzip as gzip_mod
    import io

    from pate.data import idx as data_mod

    rng = np.random.default_rng(0)
    images = (rng.random((3000, 28, 28)) < 0.2).astype(np.uint8) * rng.integers(0, 255, (3000, 28, 28), dtype=np.uint8)
    path = tmp_path / "train-images-idx3-ubyte.gz"
    with gzip_mod.open(path, "wb") as f:
        f.write(bytes([0, 0, 8, 3]) + b"".join(int(d).to_bytes(4, "big") for d in images.shape) + images.tobytes())
    read = []

    class Counting(io.FileIO):
        def readinto(self, buffer):
            got = super().readinto(buffer)
            read.append(got or 0)
            return got

    import builtins

    real_open = builtins.open

    def counting_open(p, mode="r", *args, **kwargs):  # every reader of the file, gzip's included
        if str(p) == str(path):
            return io.BufferedReader(Counting(p, "r"), buffer_size=1)
        return real_open(p, mode, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", counting_open)
    header = data_mod._idx_header(path)
    assert header.dims == (3000, 28, 28)
    assert sum(read) <= 1024  # gzip.open read 8 KiB here
    read.clear()
    assert data_mod._idx_count(path) == 3000  # `pate ceiling`'s count of the train split
    assert sum(read) <= 1024
