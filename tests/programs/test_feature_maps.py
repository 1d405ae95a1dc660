"""`[features] map`: fine-grained PATE's public map as a setting of the run (scattering, pixels,
none for embeddings, concatenations), fitted on the public pool alone."""

from __future__ import annotations

import json

import numpy as np
import pytest

from analysis.core.errors import PateError
from analysis.core.noise import NoiseSource
from conftest import TINY, invoke
from pate.config import load_config
from pate.config.checks import FEATURE_MAPS
from pate.data import Splits
from pate.programs import public_features
from pate.release import fine_grained_release
from conftest import embedding_sets as sets_for, write_embeddings


def test_the_config_names_exactly_the_maps_there_are():
    assert tuple(public_features.MAPS) == FEATURE_MAPS
    assert load_config(TINY, {"features.map": "scattering+pixels"}).features.map == "scattering+pixels"
    for bad in ("bogus", "pixels+pixels", "scattering+", ""):
        with pytest.raises(PateError, match="features.map must be one of scattering, pixels, none"):
            load_config(TINY, {"features.map": bad})


def test_none_is_the_pool_pca_of_the_rows_as_they_are():
    rng = np.random.default_rng(0)
    pool = rng.normal(size=(60, 10)) * np.linspace(3, 0.1, 10)
    fitted, rows = public_features.fit(pool, 4, feature_map="none")
    plain = public_features.fit_coefficients(pool, 4)
    np.testing.assert_array_equal(rows, plain.rows(None, pool))
    np.testing.assert_array_equal(fitted.rows(pool[:7]), rows[:7])
    with pytest.raises(PateError, match="scattering takes images but the data are embeddings"):
        public_features.fit(pool, 4, feature_map="scattering")
    with pytest.raises(PateError, match="none takes rows of features but the data are images"):
        public_features.fit(pool.reshape(60, 5, 2, 1), 4, feature_map="none")


def test_a_concatenation_scales_each_part_to_unit_rms_norm_over_the_pool():
    rng = np.random.default_rng(1)
    pool = rng.uniform(size=(40, 8, 8, 1)).astype(np.float32)
    settings = public_features.MapSettings(scattering_j=1, groups=9)
    fitted, rows = public_features.fit(pool, 5, settings=settings, feature_map="scattering+pixels")
    scat = public_features.MAPS["scattering"].coefficients(pool, settings)
    pix = pool.reshape(40, -1)
    expected = (1 / np.sqrt(np.mean(np.sum(scat.astype(np.float64) ** 2, axis=1))),
                1 / np.sqrt(np.mean(np.sum(pix.astype(np.float64) ** 2, axis=1))))
    np.testing.assert_allclose(fitted.scales, expected, rtol=1e-6)
    joined = np.concatenate([expected[0] * scat, expected[1] * pix], axis=1)
    np.testing.assert_allclose(fitted.coefficients(pool), joined, rtol=1e-5, atol=1e-6)
    one = public_features.fit(pool, 5, settings=settings, feature_map="pixels")[1]
    assert not np.array_equal(rows, one)  # the scattering part counts


@pytest.mark.parametrize("feature_map, embeddings", [("none", True), ("pixels+scattering", False)])
def test_replacing_private_rows_leaves_the_map_unchanged(monkeypatch, feature_map, embeddings):
    """The release fits the map once per call; two private sets that differ in every row (the
    pool the same) give the same map, bit for bit, and their rows under it differ."""
    rng = np.random.default_rng(3)
    shape = (12,) if embeddings else (8, 8, 1)
    pool, pool_y = rng.uniform(size=(50, *shape)).astype(np.float32), rng.integers(0, 3, 50)
    config = load_config(TINY, {"features.map": feature_map, "aggregation.mechanism": "fine-grained",
                                "fine_grained.pca": 6, "fine_grained.smoothing": 5, "fine_grained.scattering_j": 1,
                                "fine_grained.groups": 9})
    fitted = []
    real_fit = public_features.fit
    monkeypatch.setattr(public_features, "fit", lambda *a, **kw: fitted.append(real_fit(*a, **kw)) or fitted[-1])
    train_rows = []
    for seed in (10, 11):
        train = np.random.default_rng(seed).uniform(size=(80, *shape)).astype(np.float32)
        splits = Splits(train, np.random.default_rng(seed).integers(0, 3, 80), pool, pool_y, pool[:5], pool_y[:5], 3)
        fine_grained_release.release(config, splits, NoiseSource(seed), echo=lambda *_: None)
        train_rows.append(fitted[-1][0].rows(train))
    (a, rows_a), (b, rows_b) = fitted
    for field in ("mean", "directions"):
        np.testing.assert_array_equal(getattr(a, field), getattr(b, field))
    assert a.scales == b.scales and a.name == b.name == feature_map
    np.testing.assert_array_equal(rows_a, rows_b)
    assert not np.array_equal(*train_rows)


@pytest.mark.slow  # 8 s; the fast suite runs rows with the map "none" in tests/steps/test_embeddings.py, whose plan refuses scattering on rows
def test_a_fine_grained_run_on_embeddings_with_the_map_none(tmp_path):
    """The end-to-end check of the setting: `pate run` labels an embeddings pool in the rows'
    own space, labels.npz records the map, and the scattering map is refused there in one line."""
    from pate.release.labels import read_labels

    path = write_embeddings(tmp_path / "e.npz")
    fine = ["--set", "aggregation.mechanism=\"fine-grained\"", "--set", "fine_grained.pca=8",
            "--set", "fine_grained.smoothing=10"]
    # an explicit image map on rows is refused (left out, the data chooses "none": issue 53)
    refused = invoke("run", "--config", TINY, "--workdir", tmp_path / "no", *sets_for(path), *fine,
                     "--set", "features.map=\"scattering\"")
    assert refused.exit_code == 1 and "set features.map = \"none\"" in refused.output, refused.output
    assert not (tmp_path / "no" / "labels.npz").exists()
    run = tmp_path / "run"
    result = invoke("run", "--config", TINY, "--workdir", run, "--no-progress", *sets_for(path), *fine,
                    "--set", "features.map=\"none\"")
    assert result.exit_code == 0, result.output
    labels = read_labels(run / "labels.npz")
    assert str(labels["feature_map"]) == "none"
    pool_y = np.load(path)["y_test"][:200]
    assert np.mean(labels["labels"] == pool_y) > 0.7
    assert json.loads((run / "student.json").read_text())["accuracy"] > 0.7
