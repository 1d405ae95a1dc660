"""Issue 55's public maps (`pate.programs.hog`, `pate.programs.coates_ng`) and the per-part PCA
whitening of `pate.programs.public_features`: each map is deterministic given the pool, a
function of public images only (private rows replaced: the same map, the same fitted
statistics), cached owner-only and read back; whitening gives every pool component variance 1."""

from __future__ import annotations

import dataclasses
import json
import stat
from pathlib import Path

import numpy as np
import pytest

from analysis.core.errors import PateError
from analysis.core.noise import NoiseSource
from conftest import TINY, invoke, one_line_error
from pate import data
from pate.config import load_config
from pate.data import Splits
from pate.programs import coates_ng, hog, public_features, weights_folder
from pate.release import fine_grained_release

SMALL = coates_ng.Recipe(filters=6, size=3, patches=400, iterations=4)


def images(n: int, seed: int, side: int = 8) -> np.ndarray:
    rng = np.random.default_rng(seed)
    protos = rng.uniform(size=(3, side, side, 1))
    return np.clip(protos[rng.integers(0, 3, n)] + 0.2 * rng.normal(size=(n, side, side, 1)), 0, 1).astype(np.float32)


@pytest.fixture(scope="module")
def filters(tmp_path_factory):
    """Coates-Ng filters fitted on a pool of 8 x 8 images, written as `pate features` writes them."""
    out = tmp_path_factory.mktemp("filters") / "f"
    weights, record = coates_ng.fit(images(60, 0), SMALL)
    coates_ng.write(out, weights, SMALL, record)
    return str(out)


def _plain_hog(image: np.ndarray, cell: int, bins: int, signed: bool, block: int) -> np.ndarray:
    """A plain loop over one grey image (H, W): the second implementation of `hog.features`."""
    h, w = image.shape
    full = 2 * np.pi if signed else np.pi
    cells = np.zeros((h // cell, w // cell, bins))
    for i in range(h):
        for j in range(w):
            gx = image[i, j + 1] - image[i, j - 1] if 0 < j < w - 1 else 0.0
            gy = image[i + 1, j] - image[i - 1, j] if 0 < i < h - 1 else 0.0
            if i // cell >= h // cell or j // cell >= w // cell:
                continue
            position = (np.arctan2(gy, gx) % full) / (full / bins) - 0.5
            low = int(np.floor(position))
            share = position - low
            cells[i // cell, j // cell, low % bins] += np.hypot(gx, gy) * (1 - share)
            cells[i // cell, j // cell, (low + 1) % bins] += np.hypot(gx, gy) * share
    out = []
    for bi in range(h // cell - block + 1):
        for bj in range(w // cell - block + 1):
            v = np.stack([cells[bi + a, bj + b] for a in range(block) for b in range(block)], axis=0)
            v = v.reshape(-1)
            v = np.minimum(v / np.sqrt(np.sum(v * v) + hog.EPS ** 2), hog.CLIP)
            out.append(v / np.sqrt(np.sum(v * v) + hog.EPS ** 2))
    return np.concatenate(out)


@pytest.mark.parametrize("cell, bins, signed, block", [(4, 12, True, 2), (2, 9, False, 1), (3, 6, True, 2)])
def test_hog_is_the_plain_loop_image_by_image(cell, bins, signed, block):
    """Each row is the plain loop's on that image alone, whatever else is mapped with it."""
    x = images(5, 1, side=12)
    settings = hog.Settings(cell=cell, bins=bins, signed=signed, block=block)
    rows = hog.features(x, settings)
    assert rows.shape == (5, settings.width(x.shape[1:]))
    for i in range(5):
        np.testing.assert_allclose(rows[i], _plain_hog(x[i, ..., 0].astype(np.float64), cell, bins, signed, block),
                                   rtol=1e-4, atol=1e-6)
        np.testing.assert_array_equal(hog.features(x[i:i + 1], settings)[0], rows[i])


def test_hog_settings_that_give_no_block_are_refused_in_one_line():
    with pytest.raises(PateError, match="lower hog_cell or hog_block"):
        hog.features(images(2, 0), hog.Settings(cell=8, block=2))
    with pytest.raises(PateError, match=r"features.hog_bins must be 2..64 bins"):
        load_config(TINY, {"features.hog_bins": 1})


def test_coates_ng_filters_depend_on_the_pool_and_seed_alone(tmp_path, monkeypatch):
    """`pate features --kind coates-ng` on a data set whose private rows are NaN, its private
    loaders replaced by failures, writes the clean data set's very filters; the recipe names the
    pool's digest and the weights' sha256; another seed gives other filters."""
    from test_learned_map import npz_sets, poisoned_copy, write_images

    clean = write_images(tmp_path / "clean.npz")
    poisoned = poisoned_copy(clean, tmp_path / "poisoned.npz")
    small = ("--kind", "coates-ng", "--filters", "6", "--size", "3", "--patches", "400", "--iterations", "4")
    first = invoke("features", "--config", TINY, *npz_sets(clean), "--out", tmp_path / "a", *small)
    assert first.exit_code == 0, first.output

    def no_private_data(*_args, **_kw):
        raise AssertionError("the private split was loaded")

    monkeypatch.setattr(data, "load_dataset", no_private_data)
    monkeypatch.setattr(data, "load_npz", no_private_data)
    again = invoke("features", "--config", TINY, *npz_sets(poisoned), "--out", tmp_path / "b", *small)
    assert again.exit_code == 0, again.output
    raw = [(tmp_path / d / coates_ng.WEIGHTS).read_bytes() for d in "ab"]
    assert raw[0] == raw[1]
    recipe = json.loads((tmp_path / "b" / weights_folder.RECIPE).read_text())
    with np.load(clean) as f:
        pool = f["x_test"][:200, ..., None]
    assert recipe["pool"] == {"sha256": coates_ng.pool_digest(pool), "images": 200, "shape": [8, 8, 1]}
    assert recipe["weights"]["sha256"] == coates_ng.check_weights(str(tmp_path / "b"))
    other = invoke("features", "--config", TINY, *npz_sets(clean), "--out", tmp_path / "c", *small, "--seed", "3")
    assert other.exit_code == 0 and (tmp_path / "c" / coates_ng.WEIGHTS).read_bytes() != raw[0]
    wrong = invoke("features", "--config", TINY, "--out", tmp_path / "d", "--kind", "coates-ng", "--epochs", "3")
    assert "--epochs do(es) not apply to --kind coates-ng" in wrong.output and not (tmp_path / "d").exists()


def test_bad_filters_are_refused_in_one_line_before_any_data_is_read(tmp_path, filters, monkeypatch, ledger_dir):
    import shutil

    tampered = tmp_path / "tampered"
    shutil.copytree(filters, tampered)
    raw = bytearray((tampered / coates_ng.WEIGHTS).read_bytes())
    raw[-30] ^= 1
    (tampered / coates_ng.WEIGHTS).write_bytes(bytes(raw))

    def no_data(*_args, **_kw):
        raise AssertionError("data was loaded")

    from pate.release import ceiling as ceiling_mod

    monkeypatch.setattr(ceiling_mod, "load_public", no_data)
    remake = "recipe.json not found; make it with `pate features --kind coates-ng"
    for folder, needle in ((tmp_path / "missing", remake),
                           (tampered, "filters.npz (sha256 ")):
        line = one_line_error(invoke("ceiling", "--config", TINY, "--set", 'features.map="hog+coates-ng"',
                                     "--set", f"features.filters={json.dumps(str(folder))}"), 1)
        assert line.startswith("pate: ") and needle in line, line


def test_filters_left_unnamed_are_fitted_on_the_pool_once_and_kept_by_digest(tmp_path, monkeypatch):
    """`[features] filters` left empty: the default recipe's filters fitted on the public pool,
    kept in $PATE_CACHE_DIR under the pool's digest, read (not fitted) by the next command; the
    folder is the one `pate features --kind coates-ng` would write, and private records never
    enter it (the tiny data with other private images finds the same folder)."""
    monkeypatch.setenv("PATE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(coates_ng, "DEFAULT", SMALL)  # the default recipe's fit takes seconds
    from pate.config import load_config
    from pate.programs.data_facts import with_fitted_filters

    config = load_config(TINY, {"features.map": "coates-ng"})
    fitted = with_fitted_filters(config)
    folder = Path(fitted.features.filters)
    assert folder.parent == tmp_path / "cache" and folder.name.startswith("coates-ng-")
    recipe = json.loads((folder / "recipe.json").read_text())
    assert recipe["recipe"] == dataclasses.asdict(SMALL)
    first = (folder / coates_ng.WEIGHTS).stat().st_mtime_ns
    monkeypatch.setattr(coates_ng, "fit", lambda *a, **k: pytest.fail("fitted twice"))
    assert with_fitted_filters(config).features.filters == str(folder)
    assert (folder / coates_ng.WEIGHTS).stat().st_mtime_ns == first
    assert with_fitted_filters(fitted) is fitted  # a named folder is kept as it is
    line = invoke("ceiling", "--config", TINY, "--maps", "coates-ng", "--set", "fine_grained.pca=8",
                  "--set", 'features.map="coates-ng"')
    assert line.exit_code == 0 and "coates-ng" in line.output, line.output


def test_coates_ng_rows_are_a_function_of_each_image_and_the_filters(filters):
    """One image's row is the same mapped alone or among others (batches of one shape, padded)."""
    loaded = coates_ng.load(filters)
    x = images(70, 4)
    rows = coates_ng.features(loaded, x)
    assert rows.shape == (70, 4 * SMALL.filters)
    pool_rows = coates_ng.features(loaded, images(60, 0))  # standardised on the pool it was fitted on
    np.testing.assert_allclose(pool_rows.mean(axis=0), 0, atol=1e-4)
    assert np.all(pool_rows.std(axis=0) < 1)
    for i in (0, 63, 64, 69):
        np.testing.assert_array_equal(coates_ng.features(loaded, x[i:i + 1])[0], rows[i])
    with pytest.raises(PateError, match=r"fitted on images of shape \[8, 8, 1\]"):
        coates_ng.features(loaded, images(3, 0, side=12))


@pytest.mark.parametrize("feature_map, whiten", [("hog", False), ("coates-ng", False),
                                                 ("scattering+hog+coates-ng", True), ("hog", True)])
def test_replacing_private_rows_leaves_the_map_and_its_statistics_unchanged(monkeypatch, filters, feature_map, whiten):
    """Two fine-grained releases whose private sets differ in every row (the pool the same) fit
    the same map, bit for bit: mean, directions (whitened: over each component's s.d.), part
    scales; the pool's rows are the same and the private rows differ."""
    pool, pool_y = images(50, 0), np.random.default_rng(0).integers(0, 3, 50)
    config = load_config(TINY, {"features.map": feature_map, "features.filters": filters, "features.whiten": whiten,
                                "aggregation.mechanism": "fine-grained", "fine_grained.pca": 6,
                                "fine_grained.smoothing": 5, "fine_grained.scattering_j": 1, "fine_grained.groups": 9})
    fitted = []
    real_fit = public_features.fit
    monkeypatch.setattr(public_features, "fit", lambda *a, **kw: fitted.append(real_fit(*a, **kw)) or fitted[-1])
    train_rows = []
    for seed in (10, 11):
        train = images(80, seed)
        splits = Splits(train, np.random.default_rng(seed).integers(0, 3, 80), pool, pool_y, pool[:5], pool_y[:5], 3)
        release = fine_grained_release.release(config, splits, NoiseSource(seed), echo=lambda *_: None)
        train_rows.append(fitted[-1][0].rows(train))
        if "coates-ng" in feature_map:
            assert str(release.arrays["feature_filters_sha256"]) == coates_ng.check_weights(filters)
        assert bool(release.arrays.get("feature_whiten", False)) == whiten
    (a, rows_a), (b, rows_b) = fitted
    for field in ("mean", "directions"):
        np.testing.assert_array_equal(getattr(a, field), getattr(b, field))
    assert a.scales == b.scales and a.whiten == b.whiten == whiten and a.blocks == b.blocks
    np.testing.assert_array_equal(rows_a, rows_b)
    assert not np.array_equal(*train_rows)


def test_the_fit_is_deterministic_given_the_pool(filters):
    settings = public_features.MapSettings(filters=filters, scattering_j=1, groups=9)
    pool = images(40, 2)
    one, rows = public_features.fit(pool, 5, feature_map="scattering+hog+coates-ng", settings=settings, whiten=True)
    two, again = public_features.fit(pool.copy(), 5, feature_map="scattering+hog+coates-ng", settings=settings,
                                     whiten=True)
    np.testing.assert_array_equal(rows, again)
    np.testing.assert_array_equal(one.directions, two.directions)
    assert rows.shape == (40, 15) and one.blocks == (5, 5, 5)


def test_whitening_gives_each_pool_component_variance_one_and_each_part_unit_norm(filters):
    """Whitened, the pool's coefficients on its directions have variance 1 per component; each
    part's projection is scaled to unit norm before the join (the row's parts equal in norm);
    unwhitened, one PCA of the joined coefficients, as before."""
    settings = public_features.MapSettings(filters=filters, scattering_j=1, groups=9)
    pool = images(60, 3)
    fitted, rows = public_features.fit(pool, 4, feature_map="scattering+hog+coates-ng", settings=settings, whiten=True)
    coefficients = fitted.coefficients(pool)
    z = fitted.project(coefficients)
    np.testing.assert_allclose(z, (coefficients - fitted.mean) @ fitted.directions, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(z.mean(axis=0), 0, atol=1e-5)
    np.testing.assert_allclose(z.var(axis=0), 1, rtol=1e-5)
    parts = np.asarray(rows, np.float64).reshape(60, 3, 4)
    norms = np.linalg.norm(parts, axis=2)
    np.testing.assert_allclose(norms, norms[:, :1] * np.ones((1, 3)), rtol=1e-3)
    single, single_rows = public_features.fit(pool, 4, feature_map="hog", settings=settings, whiten=True)
    np.testing.assert_allclose(single.project(single.coefficients(pool)).var(axis=0), 1, rtol=1e-5)
    plain, plain_rows = public_features.fit(pool, 4, feature_map="hog", settings=settings)
    assert plain.blocks == () and not plain.whiten
    # whitening one part reweighs its components: the unit rows differ, the PCA's span is the same
    np.testing.assert_allclose(np.linalg.matrix_rank(np.hstack([single.directions, plain.directions])), 4)


@pytest.mark.parametrize("feature_map", ["hog", "coates-ng"])
def test_the_caches_round_trip_owner_only(tmp_path, monkeypatch, filters, feature_map):
    """A run's cache of a map's rows (of private images) is written owner-only in an owner-only
    folder and read back as it was, not computed again."""
    settings = public_features.MapSettings(filters=filters)
    config = load_config(TINY, {"teachers.features": feature_map, "teachers.model": "linear",
                                "features.filters": filters})
    cache = tmp_path / "cache"
    view = public_features.map_view(config, feature_map, images(30, 0), cache, key="teachers.features")
    assert view.settings == settings
    private = images(20, 9)
    first = view(private, "train")
    files = list(cache.iterdir())
    assert len(files) == 1 and stat.S_IMODE(cache.stat().st_mode) == 0o700
    assert stat.S_IMODE(files[0].stat().st_mode) == 0o600

    def no_compute(*_args, **_kw):
        raise AssertionError("computed again")

    monkeypatch.setattr(hog, "_block", no_compute)
    monkeypatch.setattr(coates_ng, "_batch", no_compute)
    np.testing.assert_array_equal(view(private, "train"), first)
    np.testing.assert_array_equal(np.load(files[0]), first)


def _filters_set(name, value):
    return lambda arrays: arrays.__setitem__(name, value(arrays[name]))


#: Coates-Ng filters signed again by hand (`test_learned_map.resigned`) and the words of their one line.
DAMAGED_FILTERS = {
    "nan": (_filters_set("centroids", lambda a: np.where(np.arange(a.size).reshape(a.shape) == 0, np.nan, a)),
            "filters.npz's centroids holds NaN or inf"),
    "huge": (_filters_set("zca", lambda a: np.full_like(a, 3e38)), "filters.npz's filters can map an image to"),
    "tiny sd": (_filters_set("feature_sd", lambda a: np.full_like(a, 1e-38)),
                "feature_sd holds 1e-38, below sqrt(0.01)"),
    "shape": (_filters_set("zca", lambda a: a[:, :-1]), "filters.npz's zca has shape [9, 8] where patches of 3x3x1"),
    "size": (_filters_set("size", lambda _: np.array(4)), "filters.npz's mean has shape [9] where patches of 4x4x1"),
    "missing": (lambda a: a.pop("feature_mean"), "filters.npz lacks feature_mean"),
    "int": (_filters_set("mean", lambda a: a.astype(np.int64)), "filters.npz's mean holds int64 values"),
}


@pytest.mark.parametrize("case", list(DAMAGED_FILTERS))
def test_filters_signed_again_by_hand_are_refused_in_one_line_before_any_data_is_read(tmp_path, filters, monkeypatch,
                                                                                       case):
    """What the digest cannot say (issue 52): NaN or 3e38 values, a s.d. of 1e-38, shapes that do not
    fit, a missing key gave "internal error (array must not contain infs or NaNs)" or broadcast
    errors after the data were read; now one line naming the folder before any data is read."""
    from pathlib import Path

    from test_learned_map import resigned

    change, words = DAMAGED_FILTERS[case]
    folder = resigned(Path(filters), tmp_path / "f", coates_ng.WEIGHTS, change)

    def no_data(*_args, **_kw):
        raise AssertionError("data was loaded")

    from pate.release import ceiling as ceiling_mod

    monkeypatch.setattr(ceiling_mod, "load_public", no_data)
    line = one_line_error(invoke("ceiling", "--config", TINY, "--set", 'features.map="hog+coates-ng"',
                                 "--set", f"features.filters={json.dumps(folder)}"), 1)
    assert line.startswith(f"pate: features.filters = {folder!r}: ") and words in line, line
    assert "remake them with `pate features --kind coates-ng" in line


def test_nan_rows_are_never_cached_and_a_cache_of_them_is_made_again(tmp_path):
    """`cached_rows` keeps finite rows only (issue 52: a NaN map's rows were cached, and read back
    by every later command): NaN rows are refused before the file or its folder is written, and a
    cached file holding NaN (an older version's) is made again."""
    from pate.store.rundir import NonFiniteRows, cached_rows

    path = tmp_path / "cache" / "train.npy"
    with pytest.raises(NonFiniteRows, match="gives NaN or inf for 1 of 3 inputs; nothing was cached"):
        cached_rows(path, 3, lambda: np.array([[1.0, 2.0], [np.inf, 0.0], [3.0, 4.0]], np.float32))
    assert not (tmp_path / "cache").exists()
    path.parent.mkdir()
    np.save(path, np.full((3, 2), np.nan, np.float32))
    rows = cached_rows(path, 3, lambda: np.ones((3, 2), np.float32))
    np.testing.assert_array_equal(rows, np.ones((3, 2)))
    np.testing.assert_array_equal(np.load(path), np.ones((3, 2)))
