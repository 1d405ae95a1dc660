"""The learned feature map (`pate.programs.learned_map`, `[features] map = "learned"`): `pate
features` trains the encoder from the public pool alone (the private split never read, its rows
changing nothing), its weights are loaded by digest, and the map's rows go through `pate ceiling`
and a fine-grained `pate label`; bad weights are refused in one line before any data is read."""

from __future__ import annotations

import json
import re
import shutil

import numpy as np
import pytest

from analysis.core.errors import PateError
from conftest import SMALL_ENCODER as SMALL
from conftest import TINY, invoke, one_line_error
from pate import data
from pate.config import load_config
from pate.programs import learned_map, public_features, weights_folder
from pate.release import ceiling as ceiling_mod
from pate.store import rundir


def write_images(path, train: int = 120, test: int = 260, seed: int = 0) -> str:
    """8 x 8 grey images in [0, 1]: 4 prototypes plus noise."""
    rng = np.random.default_rng(seed)
    protos = rng.uniform(size=(4, 8, 8))

    def draw(n):
        y = rng.integers(0, 4, n)
        return np.clip(protos[y] + 0.2 * rng.normal(size=(n, 8, 8)), 0, 1).astype(np.float32), y

    (xtr, ytr), (xte, yte) = draw(train), draw(test)
    np.savez(path, x_train=xtr, y_train=ytr, x_test=xte, y_test=yte)
    return str(path)


def poisoned_copy(clean, path) -> str:
    """`clean` with every private row NaN and every private label -1 (any loader of the private split refuses it)."""
    with np.load(clean) as f:
        arrays = dict(f)
    np.savez(path, **{**arrays, "x_train": np.full_like(arrays["x_train"], np.nan),
                      "y_train": np.full_like(arrays["y_train"], -1)})
    return str(path)


def npz_sets(path, public_size: int = 200) -> list[str]:
    """The pool the size of the tiny config's (200 images of 8 x 8): the same training program."""
    return ["--set", 'data.name="npz"', "--set", f"data.path={json.dumps(str(path))}",
            "--set", f"data.public_size={public_size}"]


# --------------------------------------------------------------------------- the command


def test_the_command_reads_the_pool_alone_and_the_weights_depend_on_it_only(tmp_path, monkeypatch, tiny_encoder):
    """`pate features` on an .npz whose private rows are NaN, with the data set's loaders replaced
    by failures, writes the very weights of the clean .npz (same seed); the recipe records the
    pool's digest, its size and the weights' digest; another seed gives other weights."""
    clean = write_images(tmp_path / "clean.npz")
    poisoned = poisoned_copy(clean, tmp_path / "poisoned.npz")
    with pytest.raises(PateError):
        data.load_npz(poisoned)
    first = invoke("features", "--config", TINY, *npz_sets(clean), "--out", tmp_path / "a", *SMALL)
    assert first.exit_code == 0, first.output

    def no_private_data(*_args, **_kw):
        raise AssertionError("the private split was loaded")

    monkeypatch.setattr(data, "load_dataset", no_private_data)
    monkeypatch.setattr(data, "load_npz", no_private_data)
    result = invoke("features", "--config", TINY, *npz_sets(poisoned), "--out", tmp_path / "c", *SMALL)
    assert result.exit_code == 0, result.output
    weights = [(tmp_path / d / learned_map.WEIGHTS).read_bytes() for d in "ac"]
    assert weights[0] == weights[1]  # the same seed, the same pool: the same weights, whatever the private rows
    recipe = json.loads((tmp_path / "c" / weights_folder.RECIPE).read_text())
    with np.load(clean) as f:
        pool = f["x_test"][:200, ..., None]
    assert recipe["pool"] == {"sha256": learned_map.pool_digest(pool), "images": 200, "shape": [8, 8, 1]}
    assert recipe["epochs"] == 1 and recipe["seed"] == 3 and recipe["architecture"]["widths"] == [4, 8]
    assert recipe["weights"]["sha256"] == learned_map.check_weights(str(tmp_path / "c"))
    assert len(recipe["loss"]) == 1 and np.isfinite(recipe["loss"][0]) and recipe["seconds"] >= 0
    other = invoke("features", "--config", TINY, *npz_sets(clean), "--out", tmp_path / "d", *SMALL[:-3],
                   "--seed", 4, "--no-progress")
    assert other.exit_code == 0 and (tmp_path / "d" / learned_map.WEIGHTS).read_bytes() != weights[0]


def test_the_command_refuses_in_one_line_and_writes_nothing(tmp_path, tiny_encoder):
    before = (tiny_encoder / learned_map.WEIGHTS).read_bytes()
    line = one_line_error(invoke("features", "--config", TINY, "--out", tiny_encoder, *SMALL), 1)
    assert "is not empty; pass --overwrite" in line
    assert (tiny_encoder / learned_map.WEIGHTS).read_bytes() == before
    line = one_line_error(invoke("features", "--config", TINY, "--out", tmp_path / "x", "--widths", "4,8",
                                 "--epochs", 1), 1)
    assert "need one entry per convolution each (give --strides with --widths)" in line
    assert one_line_error(invoke("features", "--config", TINY, "--out", tmp_path / "x", "--widths", "4,x"), 2)
    embeddings = tmp_path / "e.npz"
    np.savez(embeddings, x_train=np.zeros((10, 3), np.float32), y_train=np.zeros(10, int),
             x_test=np.zeros((30, 3), np.float32), y_test=np.zeros(30, int))
    line = one_line_error(invoke("features", "--config", TINY, *npz_sets(embeddings, 20), "--out", tmp_path / "x",
                                 *SMALL), 1)
    assert "a learned map needs images" in line
    for degrees in ("nan", "inf"):  # nan passed click's range and was written into recipe.json (issue 52)
        line = one_line_error(invoke("features", "--config", TINY, "--out", tmp_path / "x", "--degrees", degrees), 2)
        assert "must be a number of degrees in [0, 90]" in line
    with pytest.raises(PateError, match=r"--degrees nan must be a number of degrees in \[0, 90\]"):
        learned_map.Recipe(degrees=float("nan")).check()  # the Python API's entry too
    assert not (tmp_path / "x").exists()


def test_overwrite_replaces_only_an_encoder_the_command_wrote(tmp_path, tiny_encoder, ledger_dir, finished_tiny):
    """`--overwrite` replaced (and deleted) whatever --out named (issue 52): a finished run, the
    ledger folder. Now a folder holding anything but `pate features`' own two files, a link, or
    a folder inside a ledger folder is refused in one line before any training, and left as it
    was; an encoder's folder is still replaced."""
    from conftest import own_copy, snapshot

    run = own_copy(finished_tiny, tmp_path / "run")
    mixed = tmp_path / "mixed"
    shutil.copytree(tiny_encoder, mixed)
    (mixed / "notes.txt").write_text("mine")
    (tmp_path / "link").symlink_to(tiny_encoder)
    for out, words in ((run, "also holds"), (mixed, "also holds notes.txt"), (ledger_dir, "inside the ledger folder"),
                       (ledger_dir / "enc", "inside the ledger folder"), (tmp_path / "link", "symbolic link")):
        before = {p: snapshot(p) for p in (run, mixed, ledger_dir, tiny_encoder)}
        line = one_line_error(invoke("features", "--config", TINY, "--out", out, "--overwrite", *SMALL), 1)
        assert words in line, line
        assert {p: snapshot(p) for p in (run, mixed, ledger_dir, tiny_encoder)} == before
    assert not (ledger_dir / "enc").exists()
    mine = tmp_path / "mine"
    shutil.copytree(tiny_encoder, mine)
    result = invoke("features", "--config", TINY, "--out", mine, "--overwrite", *SMALL[:-3], "--seed", 4,
                    "--no-progress")
    assert result.exit_code == 0, result.output
    assert (mine / learned_map.WEIGHTS).read_bytes() != (tiny_encoder / learned_map.WEIGHTS).read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".mine")) == []


# --------------------------------------------------------------------------- the map


def test_each_row_is_a_function_of_its_input_and_the_weights_alone(tiny_encoder):
    """The rows of a few inputs are the same mapped alone or among others (one batch shape,
    no batch statistics); the map gives one flat spatial map per input."""
    pool = data.load_pool(load_config(TINY).data, 200)
    encoder = learned_map.load(str(tiny_encoder))
    rows = learned_map.features(encoder, pool)
    assert rows.shape == (200, 2 * 2 * 8) and rows.dtype == np.float32
    np.testing.assert_array_equal(learned_map.features(encoder, pool[3:5]), rows[3:5])
    changed = pool.copy()
    changed[:3] = 0.0
    np.testing.assert_array_equal(learned_map.features(encoder, changed)[3:], rows[3:])
    assert learned_map.features(encoder, pool[:0]).shape == (0, 32)
    with pytest.raises(PateError, match=r"trained on images of shape \[8, 8, 1\]"):
        learned_map.features(encoder, np.zeros((2, 9, 9, 1), np.float32))


def test_learned_rows_through_ceiling_and_a_concatenation(tiny_encoder):
    """`pate ceiling` of the learned map and of "learned+pixels": rows of the PCA's width, figures
    that are accuracies; the map's part is the encoder's rows, scaled in a concatenation."""
    sets = {"features.map": "learned", "features.weights": str(tiny_encoder), "fine_grained.pca": 8,
            "fine_grained.smoothing": 5, "teachers.model": "linear", "teachers.conv_features": [],
            "teachers.conv_kernels": [], "teachers.conv_strides": []}
    for name in ("learned", "learned+pixels"):
        config = load_config(TINY, {**sets, "features.map": name})
        report = ceiling_mod.ceiling(config, heads=1, echo=lambda *_: None)
        assert report.feature_map == name and report.pca == 8
        assert 0 <= report.fine_grained["accuracy"] <= 1 and 0 <= report.forward_knn["accuracy"] <= 1
    pool = data.load_pool(config.data, 200)
    fitted, rows = public_features.fit(pool, 8, feature_map="learned+pixels",
                                        settings=public_features.MapSettings(weights=str(tiny_encoder)))
    assert rows.shape == (200, 8) and fitted.weights == str(tiny_encoder)
    encoded = learned_map.features(learned_map.load(str(tiny_encoder)), pool)
    np.testing.assert_allclose(fitted.coefficients(pool)[:, :32], fitted.scales[0] * encoded, rtol=1e-6)


def _fine_config(tmp_path, weights) -> str:
    config = tmp_path / "fine.toml"
    text = re.sub(r'(?m)^mechanism = ".*"$', 'mechanism = "fine-grained"', TINY.read_text(), count=1)
    config.write_text(text + f"\n[fine_grained]\npca = 8\n\n[features]\nmap = \"learned\"\nweights = "
                             f"{json.dumps(str(weights))}\n")
    return str(config)


def test_a_fine_grained_label_on_the_learned_map(tmp_path, tiny_encoder, ledger_dir):
    """`pate label` of the tiny config, fine-grained in the learned map: every pool point labelled."""
    result = invoke("label", "--workdir", tmp_path / "run", "--config", _fine_config(tmp_path, tiny_encoder),
                    "--seed", 7)
    assert result.exit_code == 0, result.output
    labels = rundir.read_npz(tmp_path / "run" / rundir.LABELS_NPZ)
    assert labels["labels"].shape == (200,) and labels["labels"].min() >= 0
    assert str(labels["feature_map"]) == "learned"
    assert str(labels["feature_weights_sha256"]) == learned_map.check_weights(str(tiny_encoder))


def test_bad_weights_are_refused_in_one_line_before_any_data_is_read(tmp_path, tiny_encoder, monkeypatch,
                                                                      ledger_dir):
    """A missing folder, a missing recipe, weights that are not the recipe's, and an empty
    `weights`: one line from plan, label and ceiling, the data never loaded, nothing written."""
    import shutil

    tampered = tmp_path / "tampered"
    shutil.copytree(tiny_encoder, tampered)
    raw = bytearray((tampered / learned_map.WEIGHTS).read_bytes())
    raw[-30] ^= 1
    (tampered / learned_map.WEIGHTS).write_bytes(bytes(raw))
    no_recipe = tmp_path / "no-recipe"
    shutil.copytree(tiny_encoder, no_recipe)
    (no_recipe / weights_folder.RECIPE).unlink()

    def no_data(*_args, **_kw):
        raise AssertionError("data was loaded")

    for name in ("load_dataset", "load_npz", "load_public", "load_pool"):
        monkeypatch.setattr(data, name, no_data)
    from pate.release import ceiling as ceiling_module

    monkeypatch.setattr(ceiling_module, "load_public", no_data)
    for weights, needle in ((tmp_path / "missing", "recipe.json not found; make it with `pate features"),
                            (no_recipe, "recipe.json not found"),
                            (tampered, "encoder.npz (sha256 ")):
        config = _fine_config(tmp_path, weights)
        for args in (("plan", "--config", config), ("label", "--workdir", tmp_path / "run", "--config", config),
                     ("ceiling", "--config", config)):
            line = one_line_error(invoke(*args), 1)
            assert line.startswith("pate: ") and needle in line, (args[0], line)
    assert not (tmp_path / "run" / rundir.LABELS_NPZ).exists()
    line = one_line_error(invoke("ceiling", "--config", TINY, "--set", 'features.map="learned+scattering"'), 1)
    assert "features.weights is empty but map = 'learned+scattering' names \"learned\"" in line


def test_teachers_see_their_inputs_through_the_learned_map(tiny_encoder):
    """`[teachers] features = "learned"`: the teachers' rows are the encoder's, unprojected."""
    config = load_config(TINY, {"teachers.features": "learned", "teachers.model": "linear",
                                "teachers.conv_features": [], "teachers.conv_kernels": [], "teachers.conv_strides": [],
                                "features.map": "learned", "features.weights": str(tiny_encoder)})
    pool = data.load_pool(config.data, 200)
    view = public_features.input_map(config, pool)
    np.testing.assert_array_equal(view(pool[:5]), learned_map.features(learned_map.load(str(tiny_encoder)), pool[:5]))


def test_pate_run_makes_the_release_again_when_the_map_or_its_weights_change(tiny_encoder):
    """The fine-grained label step's hash names `[features] map` and `weights` (left out at their
    defaults, so runs that do not use them keep their hashes); the teachers' names the weights."""
    from pate.steps import pipeline

    label = pipeline.FINE_GRAINED_STEPS[0].sections
    base = load_config(TINY, {"aggregation.mechanism": "fine-grained"})
    learned = load_config(TINY, {"aggregation.mechanism": "fine-grained", "features.map": "learned",
                                 "features.weights": str(tiny_encoder)})
    elsewhere = load_config(TINY, {"aggregation.mechanism": "fine-grained", "features.map": "learned",
                                   "features.weights": str(tiny_encoder) + "-2"})
    hashes = {pipeline.section_hash(c, label) for c in (base, learned, elsewhere)}
    assert len(hashes) == 3
    assert pipeline.section_hash(base, label) == pipeline.section_hash(base, ("data", "aggregation", "fine_grained"))


def test_nt_xent_is_the_plain_loop_of_simclr_eq_1():
    """ℓ(i, j) = -log(exp(sim(z_i, z_j)/τ) / Σ_{k≠i} exp(sim(z_i, z_k)/τ)), averaged over the 2B views."""
    rng = np.random.default_rng(5)
    z1, z2, tau = rng.normal(size=(3, 4)), rng.normal(size=(3, 4)), 0.3
    z = np.concatenate([z1, z2])
    z = z / np.linalg.norm(z, axis=1, keepdims=True)
    total = 0.0
    for i in range(6):
        j = (i + 3) % 6
        den = sum(np.exp(z[i] @ z[k] / tau) for k in range(6) if k != i)
        total += -np.log(np.exp(z[i] @ z[j] / tau) / den)
    got = float(learned_map.nt_xent(z1.astype(np.float32), z2.astype(np.float32), tau))
    assert abs(got - total / 6) < 1e-5  # float32 arithmetic on values of order 1


def resigned(source, target, weights_file: str, change=None, recipe=None) -> str:
    """A copy of the weights folder `source` at `target` whose weights (`change(arrays)`) or recipe
    (`recipe(doc)`) were edited and signed again: the digest is right, the content is not."""
    import hashlib
    import io

    shutil.copytree(source, target)
    with np.load(target / weights_file) as f:
        arrays = dict(f)
    if change is not None:
        change(arrays)
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    (target / weights_file).write_bytes(buf.getvalue())
    doc = json.loads((target / weights_folder.RECIPE).read_text())
    if recipe is not None:
        recipe(doc)
    doc["weights"]["sha256"] = hashlib.sha256(buf.getvalue()).hexdigest()
    (target / weights_folder.RECIPE).write_text(json.dumps(doc))
    return str(target)


def _set(name, value):
    return lambda arrays: arrays.__setitem__(name, value(arrays[name]))


def _nan_first(a):
    a = a.copy()
    a.flat[0] = np.nan
    return a


def _architecture(key, value):
    return lambda doc: doc["architecture"].__setitem__(key, value)


#: An encoder folder signed again by hand: what its digest cannot say, and the words of its one line.
DAMAGED_ENCODERS = {
    "nan": (_set("conv0/kernel", _nan_first), None, "encoder.npz's conv0/kernel holds NaN or inf"),
    "huge": (_set("conv0/kernel", lambda a: np.full_like(a, 3e38)), None,
             "encoder.npz's weights can map an input to"),
    "int": (_set("conv1/kernel", lambda a: a.astype(np.int32)), None, "conv1/kernel holds int32 values"),
    "shape": (_set("conv1/kernel", lambda a: a[..., :-1]), None,
              "encoder.npz's conv1 has a kernel [3, 3, 4, 7] and a bias [8] where its recipe"),
    "missing": (lambda a: a.pop("conv1/bias"), None, "encoder.npz lacks conv1/bias"),
    "extra": (lambda a: a.__setitem__("head/kernel", np.zeros((2, 2), np.float32)), None,
              "encoder.npz holds head/kernel, which no convolution"),
    "widths": (None, _architecture("widths", [4, 9]), "where its recipe (widths [4, 9], 1 channel(s)) makes"),
    "strides": (None, _architecture("strides", [0, 2]), "architecture.strides must be a list of positive integers"),
    "three strides": (None, _architecture("strides", [2, 2, 2]), "architecture.strides must have 2 entries"),
}


@pytest.mark.parametrize("case", list(DAMAGED_ENCODERS))
def test_weights_signed_again_by_hand_are_refused_in_one_line_before_any_data_is_read(tmp_path, tiny_encoder,
                                                                                       monkeypatch, case):
    """The digest says the weights are the recipe's, not that they make its encoder (issue 52): NaN
    or 3e38 weights, int weights, a kernel of another shape, a missing or extra key, recipe widths
    or strides that do not fit gave "internal error (ScopeParamShapeError ...)", multi-line MLIR
    errors or NaN rows blamed later. Now loading checks them: one line naming the folder and what
    is wrong, from plan, label and ceiling alike, before any data is read, nothing written."""
    change, recipe, words = DAMAGED_ENCODERS[case]
    folder = resigned(tiny_encoder, tmp_path / "enc", learned_map.WEIGHTS, change, recipe)

    def no_data(*_args, **_kw):
        raise AssertionError("data was loaded")

    for name in ("load_dataset", "load_npz", "load_public", "load_pool"):
        monkeypatch.setattr(data, name, no_data)
    monkeypatch.setattr(ceiling_mod, "load_public", no_data)
    config = _fine_config(tmp_path, folder)
    for args in (("plan", "--config", config), ("label", "--workdir", tmp_path / "run", "--config", config),
                 ("ceiling", "--config", config)):
        line = one_line_error(invoke(*args), 1)
        assert line.startswith(f"pate: features.weights = {folder!r}: ") and words in line, (args[0], line)
        assert "remake it with `pate features" in line
    assert not (tmp_path / "run").exists()


def test_a_constant_map_is_refused_before_any_eps_is_spent(tmp_path, tiny_encoder, ledger_dir):
    """Zero weights give every input one row: the map was accepted and a fine-grained release of
    one-class labels charged (issue 52). Now the pool's rows are measured when the map is fitted
    (fine-grained, ceiling) or viewed (teachers, DP-SGD): one line, nothing written or charged."""
    zero = resigned(tiny_encoder, tmp_path / "zero", learned_map.WEIGHTS,
                    lambda arrays: [arrays.__setitem__(k, np.zeros_like(v)) for k, v in list(arrays.items())])
    line = one_line_error(invoke("label", "--workdir", tmp_path / "run", "--config", _fine_config(tmp_path, zero)), 1)
    assert line.startswith(f"pate: features.map = 'learned': the map (features.weights = {zero!r}) gives one row to "
                           "all 200 public pool inputs"), line
    assert not (tmp_path / "run").exists() and list(ledger_dir.glob("*.jsonl")) == []
    teachers = invoke("train-teachers", "--config", TINY, "--workdir", tmp_path / "run", "--no-progress",
                      "--set", 'teachers.features="learned"', "--set", f"features.weights={json.dumps(zero)}",
                      "--set", 'teachers.model="linear"', "--set", "teachers.conv_features=[]",
                      "--set", "teachers.conv_kernels=[]", "--set", "teachers.conv_strides=[]")
    assert "teachers.features = 'learned': the map (features.weights = " in one_line_error(teachers, 1)
    assert not (tmp_path / "run" / "teachers.json").exists()
