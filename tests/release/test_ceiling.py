"""`pate ceiling`: a map's noiseless ceilings on the public proxy, computed from the public pool
alone (`pate.release.ceiling`, `pate.data.load_public`), each figure checked against a plain
loop, and the private train split never read."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest

from analysis.core.errors import PateError
from conftest import ROOT, TINY, clean_and_poisoned_embeddings, invoke, one_line_error, write_embeddings
from pate import data
from pate.config import load_config
from pate.release import ceiling as ceiling_mod
from pate.release import public_proxy

#: Synthetic images, a small pool: 10 teachers of 100 records (shard 100), two heads fit the proxy.
IMAGES = {"data.name": "synthetic", "data.public_size": 400, "data.synthetic_train_size": 1000,
          "data.synthetic_test_size": 600, "data.synthetic_noise": 0.6, "data.synthetic_classes": 10, "features.map": "pixels",
          "fine_grained.pca": 16, "fine_grained.smoothing": 5, "teachers.num_teachers": 10, "teachers.epochs": 20}


#: An .npz of embeddings (`write_embeddings`): a pool of 200, 1 teacher (its shard: the whole train split).
EMBEDDINGS = {"data.public_size": 200, "features.map": "none", "fine_grained.pca": 8, "fine_grained.smoothing": 5,
              "teachers.num_teachers": 1, "teachers.epochs": 10}


def embeddings_config(path):
    return load_config(TINY, {"data.name": "npz", "data.path": str(path), **EMBEDDINGS})


@pytest.fixture(scope="module")
def images_report():
    config = load_config(TINY, IMAGES)
    return config, ceiling_mod.ceiling(config, heads=3, echo=lambda *_: None)


# --------------------------------------------------------------------------- the figures


def _plain_fine_grained(private_rows, private_y, pool_rows, pool_y, classes, k, m, weights):
    """A plain loop: each stand-in private record's k nearest pool points (exact squared
    distances, ties to the lowest index) get its vote; each pool point's label is the argmax of
    its m nearest pool points' rows, the r-th weighted ⌊2^20 / r⌋ (harmonic: 1/r in integers) or 1."""
    p, q = private_rows.astype(np.float64), pool_rows.astype(np.float64)
    counts = np.zeros((len(q), classes), np.int64)
    for i in range(len(p)):
        d = [float(np.sum((p[i] - q[j]) ** 2)) for j in range(len(q))]
        for j in sorted(range(len(q)), key=lambda j: (d[j], j))[:k]:
            counts[j, private_y[i]] += 1
    right = 0
    for j in range(len(q)):
        d = [float(np.sum((q[j] - q[o]) ** 2)) for o in range(len(q))]
        near = sorted(range(len(q)), key=lambda o: (d[o], o))[:m]
        score = sum(counts[o].astype(np.int64) * (2**20 // (r + 1) if weights == "harmonic" else 1)
                    for r, o in enumerate(near))
        right += int(np.argmax(score) == pool_y[j])
    return right / len(q)


def _plain_knn(private_rows, private_y, pool_rows, pool_y, classes, k):
    p, q = private_rows.astype(np.float64), pool_rows.astype(np.float64)
    right = 0
    for j in range(len(q)):
        d = [float(np.sum((q[j] - p[i]) ** 2)) for i in range(len(p))]
        votes = np.bincount([private_y[i] for i in sorted(range(len(p)), key=lambda i: (d[i], i))[:k]],
                            minlength=classes)
        right += int(np.argmax(votes) == pool_y[j])
    return right / len(q)


def test_the_figures_are_the_plain_loops_on_the_pool_halves(images_report):
    """The noiseless fine-grained and forward 10-NN figures equal plain loops on the halves of
    the pool (the map refitted on the second half alone); every figure is an accuracy."""
    config, report = images_report
    pool = data.load_public(config.data)
    assert report.stand_in_private == report.stand_in_pool == 200 and report.num_classes == 10
    halves = public_proxy.cut(pool.pool_x, pool.pool_y, "pixels", 16)
    np.testing.assert_array_equal(halves.private_y, pool.pool_y[:200])
    args = (halves.private_rows, halves.private_y, halves.pool_rows, halves.pool_y, 10)
    assert report.fine_grained["accuracy"] == _plain_fine_grained(*args, 1, 5, "harmonic")
    assert report.forward_knn == {"k": 10, "accuracy": _plain_knn(*args, 10)}
    assert report.fine_grained["smoothing_weights"] == "harmonic" and report.fine_grained["votes_per_record"] == 1
    assert 0.3 < report.fine_grained["accuracy"] < 1 and 0.3 < report.forward_knn["accuracy"] <= 1


def test_the_map_is_fitted_on_the_stand_in_pool_alone():
    """The proxy's map is the one a release fits on its pool: here the second half; the first
    half's rows follow from that map, row by row."""
    from pate.programs import public_features

    rng = np.random.default_rng(3)
    x, y = rng.normal(size=(40, 6)), rng.integers(0, 3, 40)
    halves = public_proxy.cut(x, y, "none", 4)
    fitted, rows = public_features.fit(x[20:], 4, feature_map="none")
    np.testing.assert_array_equal(halves.pool_rows, rows)
    np.testing.assert_array_equal(halves.private_rows, fitted.rows(x[:20]))
    changed = x.copy()
    changed[:20] = 0.0  # the stand-in private half changes nothing of the map
    np.testing.assert_array_equal(public_proxy.cut(changed, y, "none", 4).pool_rows, halves.pool_rows)


def test_the_heads_train_on_disjoint_shards_of_the_teachers_size(images_report):
    """Shard 1000 / 10 = 100; the 200 stand-in records hold two, so two heads of the config's
    training, each scored on the stand-in pool; a head learns (above chance)."""
    _, report = images_report
    head = report.head
    assert head["shard_size"] == head["trained_on"] == 100 and head["heads"] == 2
    assert head["model"] == "linear" and head["epochs"] == 20 and head["num_teachers"] == 10
    assert len(head["accuracies"]) == 2 and head["min"] <= head["mean"] <= head["max"]
    assert head["mean"] > 0.3  # 10 classes: chance is 0.1


def test_the_text_leads_with_what_it_is(images_report):
    _, report = images_report
    lines = report.render().splitlines()
    assert lines[0].startswith("pate ceiling: benchmark output on the public proxy") and "no eps is spent" in lines[0]
    assert [line.split()[0] for line in lines[1:]] == ["proxy", "map", "fine-grained", "forward", "linear", "time"]
    assert f"{report.forward_knn['accuracy']:.4f}" in lines[4] and "2 head(s), each on 100" in lines[5]


def test_the_head_keeps_a_head_model_and_drops_image_settings():
    config = load_config(ROOT / "configs" / "fashion_mnist.toml")
    tc = ceiling_mod.head_config(config.teachers, 120)
    assert tc.model == "linear" and tc.hidden == () and not tc.eval_flip and tc.augment_shift == 0
    mlp = ceiling_mod.head_config(load_config(TINY, {"teachers.model": "mlp", "teachers.hidden": [8],
                                                                    "teachers.conv_features": []}).teachers, 4)
    assert mlp.model == "mlp" and mlp.hidden == (8,) and mlp.batch_size == 4


# --------------------------------------------------------------------------- nothing private is read


def test_the_private_split_is_never_read(tmp_path, monkeypatch, ledger_dir):
    """`pate ceiling --json` on an .npz whose train rows are NaN and train labels negative (every
    loader of the private split refuses it), with the data set's loaders replaced by failures,
    prints the very report of the same pool beside a clean train split; it leads with what it
    is, spends no eps and writes no file. One teacher of 400 records: more than the 100
    stand-in records, so one head on all of them, and the report says so."""
    clean, poisoned = clean_and_poisoned_embeddings(tmp_path, train=400)
    with pytest.raises(PateError):
        data.load_npz(str(poisoned))
    expected = ceiling_mod.ceiling(embeddings_config(clean), heads=2, echo=lambda *_: None)
    assert expected.head["shard_size"] == 400 and expected.head["trained_on"] == 100 and expected.head["heads"] == 1
    assert "holds only 100, so one head on all of it" in expected.render()

    def no_private_data(*_args, **_kw):
        raise AssertionError("the private split was loaded")

    monkeypatch.setattr(data, "load_dataset", no_private_data)
    monkeypatch.setattr(data, "load_npz", no_private_data)
    monkeypatch.chdir(tmp_path)
    before = sorted(str(p) for p in tmp_path.rglob("*"))
    sets = [a for key, value in EMBEDDINGS.items() for a in ("--set", f"{key}={json.dumps(value)}")]
    result = invoke("ceiling", "--config", TINY, "--set", "data.name=\"npz\"", "--set",
                    f"data.path={json.dumps(str(poisoned))}", *sets, "--heads", 2, "--json")
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["benchmark_output"] is True and out["spends_eps"] == 0.0 and out["reads"] == "the public pool only"
    assert out["note"].startswith("benchmark output on the public proxy")
    assert set(out.pop("seconds")) >= {"data", "map", "neighbours", "heads", "total"}
    reference = expected.to_json()
    reference.pop("seconds")
    assert out == reference
    assert sorted(str(p) for p in tmp_path.rglob("*")) == before
    assert not any(p.is_file() for p in ledger_dir.rglob("*"))


def _idx(array: np.ndarray) -> bytes:
    array = np.asarray(array, np.uint8)
    return bytes([0, 0, 0x08, array.ndim]) + b"".join(d.to_bytes(4, "big") for d in array.shape) + array.tobytes()


@pytest.mark.parametrize("compress", [True, False])
def test_idx_reads_the_test_files_and_the_train_header_only(tmp_path, compress):
    """IDX: a train images file whose payload is cut off (its header intact) and train labels
    out of range are refused by the data set's loader; the public pool loads, and the train
    count is the header's."""
    rng = np.random.default_rng(0)
    files = {"train-images-idx3-ubyte": _idx(rng.integers(0, 256, (50, 28, 28)))[:400],
             "train-labels-idx1-ubyte": _idx(np.full(50, 77)),
             "t10k-images-idx3-ubyte": _idx(rng.integers(0, 256, (30, 28, 28))),
             "t10k-labels-idx1-ubyte": _idx(rng.integers(0, 10, 30))}
    for name, raw in files.items():
        if compress:
            (tmp_path / f"{name}.gz").write_bytes(gzip.compress(raw))
        else:
            (tmp_path / name).write_bytes(raw)
    cfg = load_config(TINY, {"data.name": "fashion_mnist", "data.path": str(tmp_path), "data.public_size": 20}).data
    with pytest.raises(PateError):
        data.load_dataset(cfg)
    pool = data.load_public(cfg)
    assert pool.train_size == 50 and pool.num_classes == 10 and pool.pool_x.shape == (20, 28, 28, 1)
    np.testing.assert_allclose(pool.pool_x[..., 0] * 255, np.frombuffer(files["t10k-images-idx3-ubyte"][16:],
                                                                          np.uint8).reshape(30, 28, 28)[:20], atol=1e-3)


def test_svhn_reads_the_test_file_and_the_train_headers_only(tmp_path):
    """SVHN: train labels out of range (the data set's loader refuses them) do not matter; the
    count is the train .mat's X header's."""
    import scipy.io

    rng = np.random.default_rng(1)
    scipy.io.savemat(tmp_path / "train_32x32.mat", {"X": rng.integers(0, 256, (32, 32, 3, 7), dtype=np.uint8),
                                                     "y": np.full((7, 1), 99)})
    scipy.io.savemat(tmp_path / "test_32x32.mat", {"X": rng.integers(0, 256, (32, 32, 3, 12), dtype=np.uint8),
                                                    "y": rng.integers(1, 11, (12, 1))})
    cfg = load_config(TINY, {"data.name": "svhn", "data.path": str(tmp_path), "data.public_size": 8}).data
    with pytest.raises(PateError):
        data.load_dataset(cfg)
    pool = data.load_public(cfg)
    assert pool.train_size == 7 and pool.pool_x.shape == (8, 32, 32, 3) and pool.num_classes == 10


def test_the_pool_is_the_splits_pool():
    """`load_public` cuts the pool where `split` does."""
    cfg = load_config(TINY).data
    pool, splits = data.load_public(cfg), data.split(data.load_dataset(cfg), cfg.public_size)
    np.testing.assert_array_equal(pool.pool_x, splits.pool_x)
    np.testing.assert_array_equal(pool.pool_y, splits.pool_y)
    assert pool.train_size == splits.train_x.shape[0] and pool.num_classes == splits.num_classes


def test_refusals_are_one_line(tmp_path):
    path = write_embeddings(tmp_path / "e.npz", train=100, test=60)
    for sets, match in (
        (["fine_grained.smoothing=40"], "too few for fine_grained.smoothing = 40; raise data.public_size"),
        (["data.public_size=16"], "too few for the forward k-NN's 10 neighbours"),
        (["features.map=\"pixels\""], "features.map = 'pixels'"),
    ):
        args = ["ceiling", "--config", TINY, "--set", "data.name=\"npz\"", "--set", f"data.path={json.dumps(path)}",
                "--set", "data.public_size=50", "--set", "fine_grained.pca=4", "--set", "fine_grained.smoothing=5"]
        line = one_line_error(invoke(*args, *[a for s in sets for a in ("--set", s)]), 1)
        assert line.startswith("pate: ") and match in line, line


# --------------------------------------------------------------------------- ranking candidate maps


def test_candidate_maps_are_ranked_in_one_call_with_the_single_maps_figures(images_report):
    """`pate ceiling --maps`: each candidate (whitened and not) scored as one `pate ceiling` of it
    scores it, sorted by the noiseless fine-grained labels, then the forward 10-NN; the text and
    the JSON say it is benchmark output on the public proxy."""
    config, report = images_report
    ranking = ceiling_mod.rank(config, ["pixels", "hog", "pixels+hog"], (False, True), echo=lambda *_: None)
    assert [(r["map"], r["whiten"]) for r in ranking.rows if r["map"] == "pixels" and not r["whiten"]] == [
        ("pixels", False)]
    assert len(ranking.rows) == 6 and ranking.stand_in_pool == 200
    pixels = next(r for r in ranking.rows if r["map"] == "pixels" and not r["whiten"])
    assert pixels["fine_grained"] == report.fine_grained["accuracy"]
    assert pixels["forward_knn"] == report.forward_knn["accuracy"]
    joined = next(r for r in ranking.rows if r["map"] == "pixels+hog" and r["whiten"])
    assert joined["dims"] == 2 * 16 and pixels["dims"] == 16
    keys = [(-r["fine_grained"], -r["forward_knn"]) for r in ranking.rows]
    assert keys == sorted(keys)
    doc = ranking.to_json()
    assert doc["benchmark_output"] is True and doc["spends_eps"] == 0.0 and len(doc["ranking"]) == 6
    sets = [a for k, v in IMAGES.items() for a in ("--set", f"{k}={json.dumps(v)}")]
    text = invoke("ceiling", "--config", TINY, *sets, "--maps", "pixels, hog", "--whiten", "no")
    assert text.exit_code == 0, text.output
    lines = text.stdout.splitlines()
    assert lines[0].startswith("pate ceiling: benchmark output on the public proxy")
    assert lines[2].split()[:3] == ["rank", "map", "whiten"] and {lines[3].split()[1], lines[4].split()[1]} == {
        "pixels", "hog"}
    bad = invoke("ceiling", "--config", TINY, "--maps", "pixels,bogus")
    assert bad.exit_code == 2 and "'bogus' is not a map" in bad.output
