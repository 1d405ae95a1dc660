"""Teachers on a public map (`[teachers] features`): heads trained on, scored on and voting with
each input's coefficients under a public feature map, while the student keeps the images."""

from __future__ import annotations

import json
import stat

import numpy as np
import pytest

from analysis.core.errors import PateError
from conftest import invoke, one_line_error
from pate.config import load_config
from pate.data import load_dataset, split
from pate.programs import public_features

TINY = "configs/tiny.toml"
HEADS = ["--set", 'teachers.model="linear"', "--set", "teachers.conv_features=[]", "--set",
         "teachers.conv_kernels=[]", "--set", "teachers.conv_strides=[]", "--set", "teachers.epochs=2",
         "--set", "teachers.checkpoint_every=2"]


@pytest.mark.parametrize("sets, message", [
    (['teachers.features="scattering"'], 'teachers.features = \'scattering\' gives the teachers rows of features, '
                                         'which a CNN cannot read; set teachers.model = "linear"'),
    (['teachers.model="linear"', "teachers.conv_features=[]", "teachers.conv_kernels=[]",
      "teachers.conv_strides=[]", 'teachers.features="wavelets"'], "teachers.features must be one of scattering, pixels, none"),
])
def test_a_bad_teacher_map_is_refused_before_anything_is_written(tmp_path, sets, message):
    extra = [a for s in sets for a in ("--set", s)]
    result = invoke("train-teachers", "--config", TINY, "--workdir", tmp_path / "run", "--no-progress", *extra)
    assert message in one_line_error(result, 1)
    assert not (tmp_path / "run" / "teachers.json").exists()


def _train_and_vote(tmp_path, name: str, *sets: str) -> tuple[dict, np.ndarray]:
    run = tmp_path / name
    extra = [a for s in sets for a in ("--set", s)]
    result = invoke("train-teachers", "--config", TINY, "--workdir", run, "--no-progress", *HEADS, *extra)
    assert result.exit_code == 0, result.output
    result = invoke("label", "--workdir", run, "--seed", "7")  # the run's config.toml
    assert result.exit_code == 0, result.output
    return json.loads((run / "teachers.json").read_text()), np.load(run / "votes.npz")["votes"]


def test_pixels_through_the_map_are_the_flattened_images(tmp_path):
    """`features = "pixels"` routes every input through the map, and a linear head flattens its
    input anyway: the same teachers, the same accuracies and the same votes as no map at all
    (what fails if the map is skipped on one side, applied twice, or reorders the rows)."""
    plain, plain_votes = _train_and_vote(tmp_path, "plain")
    mapped, mapped_votes = _train_and_vote(tmp_path, "mapped", 'teachers.features="pixels"')
    assert mapped["image_shape"] == [64] and plain["image_shape"] == [8, 8, 1]
    np.testing.assert_allclose(mapped["accuracy"], plain["accuracy"], atol=1e-6)
    np.testing.assert_array_equal(mapped_votes, plain_votes)


def test_teachers_on_scattering_rows_vote_and_cache_privately(tmp_path):
    info, votes = _train_and_vote(tmp_path, "scat", 'teachers.features="scattering"', "fine_grained.scattering_j=1",
                                  "fine_grained.scattering_l=4", "fine_grained.groups=1")
    assert info["image_shape"] == [5 * 4 * 4]  # 1 + J L channels of (8 / 2^J)^2 positions
    assert votes.shape == (100, 4) and (votes.sum(axis=1) == 6).all()
    cache = tmp_path / "scat" / "dpsgd-features"
    assert stat.S_IMODE(cache.stat().st_mode) == 0o700  # features of private images: owner-only
    files = sorted(p.name.split("-")[0] for p in cache.iterdir())
    assert files == ["eval", "queries", "train"]
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in cache.iterdir())
    # A second label reads the cached rows: the same votes.
    again = invoke("label", "--workdir", tmp_path / "scat", "--overwrite", "--seed", "7")
    assert again.exit_code == 0, again.output
    np.testing.assert_array_equal(np.load(tmp_path / "scat" / "votes.npz")["votes"], votes)


def test_a_bad_scattering_setting_names_the_fine_grained_key(tmp_path):
    result = invoke("train-teachers", "--config", TINY, "--workdir", tmp_path / "run", "--no-progress", *HEADS,
                    "--set", 'teachers.features="scattering"', "--set", "fine_grained.scattering_j=4")
    assert "lower fine_grained.scattering_j" in one_line_error(result, 1)
    assert not (tmp_path / "run" / "teachers.json").exists()


def test_the_map_is_fitted_on_the_public_pool_alone_and_maps_each_row_by_itself():
    """Replacing every private row changes neither the map (a concatenation's part scales come
    from the pool) nor any other row's coefficients: each record's row is a function of that
    record and of public values."""
    base = load_config("tiny")
    import dataclasses

    config = dataclasses.replace(base, teachers=dataclasses.replace(
        base.teachers, model="linear", conv_features=(), conv_kernels=(), conv_strides=(), features="scattering+pixels"),
        fine_grained=dataclasses.replace(base.fine_grained, scattering_j=1, scattering_l=4, groups=1))
    splits = split(load_dataset(config.data), config.data.public_size)
    view = public_features.input_map(config, splits.pool_x)
    assert view.scales != (1.0, 1.0) and len(view.scales) == 2
    rows = view(splits.train_x)
    changed = splits.train_x.copy()
    changed[10:] = np.random.default_rng(1).random(changed[10:].shape, dtype=np.float32)
    again = public_features.input_map(config, splits.pool_x)
    assert again == view
    np.testing.assert_allclose(again(changed)[:10], rows[:10], rtol=1e-5, atol=1e-6)  # FFT: batch shapes may differ
    with pytest.raises(PateError, match="teachers.features = 'scattering\\+pixels': scattering takes images"):
        view(rows)


def test_pate_run_trains_the_teachers_again_when_their_maps_settings_change():
    """The teacher map's scattering settings live in [fine_grained]: the teachers step's hash
    covers them (and leaves runs at the defaults with their old hashes)."""
    from pate.steps.pipeline import STEPS, section_hash

    teachers = next(s for s in STEPS if s.name == "teachers")
    base = load_config("tiny")
    moved = load_config("tiny", {"fine_grained.scattering_j": 1})
    assert section_hash(base, teachers.sections) != section_hash(moved, teachers.sections)
    assert section_hash(base, teachers.sections) == section_hash(base, ("data", "teachers"))


def test_a_map_the_data_do_not_take_leaves_no_cache_folder(tmp_path):
    """`check_input` ran after the map's cache folder was made: rows of features under
    `teachers.features = "scattering"` were refused, and an empty `dpsgd-features/` stayed behind
    (issue 52). The folder is now made when its first rows are written."""
    from conftest import embedding_sets, write_embeddings

    path = write_embeddings(tmp_path / "e.npz", train=120, test=60)
    result = invoke("train-teachers", "--config", TINY, "--workdir", tmp_path / "run", "--no-progress", *HEADS,
                    *embedding_sets(path), "--set", "data.public_size=30", "--set", 'teachers.features="scattering"')
    assert "scattering takes images but the data are embeddings" in one_line_error(result, 1)
    assert not (tmp_path / "run" / "dpsgd-features").exists()


def test_a_map_that_gives_nan_stops_the_teachers_in_one_line_naming_it_and_caches_nothing(tmp_path, tiny_encoder,
                                                                                          monkeypatch):
    """NaN rows of a public map trained NaN teachers, blamed on the learning rate, and the NaN
    rows were cached (issue 52). Now the map is refused where its rows are computed, naming it and
    its weights; no row is cached and nothing trains."""
    from pate.programs import learned_map

    real = learned_map.features

    def some_nan(encoder, x, *args, **kw):
        rows = real(encoder, x, *args, **kw)
        rows[::7] = np.nan
        return rows

    monkeypatch.setattr(learned_map, "features", some_nan)
    run = tmp_path / "run"
    result = invoke("train-teachers", "--config", TINY, "--workdir", run, "--no-progress", *HEADS,
                    "--set", 'teachers.features="learned"', "--set", f"features.weights={json.dumps(str(tiny_encoder))}")
    line = one_line_error(result, 1)
    assert line.startswith(f"pate: teachers.features = 'learned': the map (features.weights = "
                           f"{str(tiny_encoder)!r}) gives NaN or inf for "), line
    assert "nothing was cached" in line and "learning_rate" not in line
    assert not (run / "dpsgd-features").exists() and not (run / "teachers.json").exists()
