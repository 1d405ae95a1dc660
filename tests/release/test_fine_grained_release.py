"""Fine-grained PATE as the CLI and `pate run` release it (`pate.release.fine_grained_release`): one
release labels every pool point with no teachers; labels.npz holds the labels and the record of
the noise, nothing private; the ledger is charged the release's data-independent cost; the
report is that cost alone; the feature map is fitted on the public pool only; one-line refusals.
The mechanism's own proofs and samplers: tests/analysis/test_fine_grained.py."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from analysis.mechanisms import fine_grained, registry
from analysis.core.errors import PateError
from analysis.core.noise import LABELS_STREAM, NoiseSource
from pate.config import load_config
from pate.data import load_dataset, split
from pate.programs import public_features
from pate.release import fine_grained_release as fine_release
from pate.release.labels import RELEASED_KEYS, read_labels
from pate.store import ledger as ledger_mod
from pate.store.identity import data_identity
from pate.steps import ledger_import
from pate.store import rundir

from conftest import TINY, invoke, one_line_error, snapshot

FINE = ["--set", 'aggregation.mechanism="fine-grained"', "--set", "fine_grained.pca=16"]
SEED = 20261126


@pytest.fixture(scope="module")
def fine_run(tmp_path_factory):
    """One `pate run` of the tiny config with the fine-grained mechanism (research seed)."""
    import os

    folder = tmp_path_factory.mktemp("fine")
    old = os.environ.get("PATE_LEDGER_DIR")
    os.environ["PATE_LEDGER_DIR"] = str(folder / "ledger")
    try:
        result = invoke("run", "--config", TINY, *FINE, "--workdir", folder / "run", "--seed", SEED, "--no-progress")
    finally:
        if old is None:
            os.environ.pop("PATE_LEDGER_DIR", None)
        else:
            os.environ["PATE_LEDGER_DIR"] = old
    assert result.exit_code == 0, result.output
    return folder, result.output


def _config():
    """The run's config: the keys tiny.toml leaves out (the smoothing) decided by its data, as `pate run` does."""
    from pate.programs.data_facts import with_data_defaults

    return with_data_defaults(load_config(TINY, {"aggregation.mechanism": "fine-grained", "fine_grained.pca": 16}))


def test_one_release_labels_every_pool_point_with_nothing_private_written(fine_run):
    folder, output = fine_run
    run = folder / "run"
    assert not (run / rundir.VOTES_NPZ).exists() and not (run / rundir.TEACHERS_JSON).exists()
    labels = read_labels(run / rundir.LABELS_NPZ)
    config = _config()
    assert np.array_equal(labels["indices"], np.arange(config.data.public_size))
    assert set(labels) - {"meta"} <= set(RELEASED_KEYS)
    assert not registry.from_arrays(labels).needs_teachers and (labels["labels"] >= 0).all()
    with np.load(run / rundir.LABELS_NPZ) as npz:  # no count, vote or feature of a private record:
        # one value per pool point at most, but the released noisy histogram (its noise: the test below)
        assert all(npz[k].size <= config.data.public_size for k in npz.files if k != fine_release.NOISY_COUNTS)
        assert npz[fine_release.NOISY_COUNTS].shape == (config.data.public_size, config.data.synthetic_classes)
    assert "fine-grained, every one of the 200 pool points from one release" in output


def test_the_release_is_the_mechanism_on_the_private_records_with_the_research_seed(fine_run):
    """The labels equal a second computation from `analysis.mechanisms.fine_grained`'s pieces: the map
    fitted on the pool, each private record's nearest pool point, one noisy histogram (the
    same seed and stream), the smoothing over the pool's graph."""
    folder, _ = fine_run
    config = _config()
    cfg = config.fine_grained
    splits = split(load_dataset(config.data), config.data.public_size)
    fmap, pool_rows = public_features.fit(splits.pool_x, cfg.pca)
    neighbours = fine_grained.nearest_public(fmap.rows(splits.train_x), pool_rows, cfg.votes_per_record)
    counts = fine_grained.vote_histogram(neighbours, splits.train_y, pool_rows.shape[0], splits.num_classes)
    noise = fine_grained.laplace_noise(cfg.eps, cfg.votes_per_record)
    noisy = fine_grained.release(counts, noise, NoiseSource(SEED, LABELS_STREAM))
    expected, _ = fine_grained.labels_and_margins(fine_grained.smooth(
        noisy, fine_grained.nearest_public(pool_rows, pool_rows, cfg.smoothing), cfg.smoothing_weights))
    labels = read_labels(folder / "run" / rundir.LABELS_NPZ)
    assert np.array_equal(labels["labels"], expected)
    # the histogram kept beside the labels is the release itself, C + Z, never the private C
    assert np.array_equal(labels[fine_release.NOISY_COUNTS], noisy) and not np.array_equal(noisy, counts)
    assert registry.from_arrays(labels).noise == noise
    assert (labels.get("meta") or {}).get("research_seed") is True


def test_the_ledger_is_charged_the_release_once_and_the_report_is_its_eps(fine_run):
    folder, _ = fine_run
    book = ledger_mod.Ledger(data_identity(_config().data, folder / "ledger"), folder / "ledger")
    (entry,) = book.entries()
    assert entry["kind"] == "labels" and entry["cost"] == {"kind": "pure", "eps0": 1.0, "count": 1}
    assert entry["mechanism"]["name"] == "fine-grained"
    release = json.loads((folder / "run" / rundir.RELEASE_JSON).read_text())
    assert release["release_eps"] == 1.0 and release["release_delta"] == 0.0 and release["mechanism"] == "fine-grained"
    assert release["eps"] <= 1.0  # the data set's: this one release, composed (PLD) or its own figure
    assert "noisy vote histogram" in release["notes"]
    assert release["neighbouring_relation"] == "replace-one" and "k nearest public points" in \
        release["neighbouring_relation_note"]
    assert release["details"]["votes_per_record"] == 1 and release["details"]["labelled_points"] == 200
    assert release["data_set"]["releases"] == 1
    privacy = json.loads((folder / "run" / rundir.PRIVACY_JSON).read_text())
    assert privacy["private"] == {"warnings": []}  # no data-dependent or smooth-sensitivity row


def test_a_second_run_skips_every_step_and_charges_nothing(fine_run):
    folder, _ = fine_run
    before = snapshot(folder / "run")
    import os

    os.environ["PATE_LEDGER_DIR"] = str(folder / "ledger")
    result = invoke("run", "--config", TINY, *FINE, "--workdir", folder / "run", "--no-progress")
    assert result.exit_code == 0, result.output
    assert result.output.count("up to date: skipped") == 3
    after = snapshot(folder / "run")
    assert {k: v for k, v in after.items() if k != rundir.PIPELINE_JSON} == \
        {k: v for k, v in before.items() if k != rundir.PIPELINE_JSON}
    book = ledger_mod.Ledger(data_identity(_config().data, folder / "ledger"), folder / "ledger")
    assert len(book.entries()) == 1


def test_a_smoothing_change_on_a_finished_release_is_refused_not_drawn_again(fine_run, tmp_path, monkeypatch):
    """Smoothing is post-processing, but the charged labels are written once with theirs: `pate run`
    with only the smoothing changed refuses in one line, draws nothing and charges nothing (issue 44:
    it used to draw and charge a new release silently); --overwrite releases again on purpose."""
    folder, _ = fine_run
    run = tmp_path / "run"
    shutil.copytree(folder / "run", run)
    shutil.copytree(folder / "ledger", tmp_path / "ledger")
    monkeypatch.setenv("PATE_LEDGER_DIR", str(tmp_path / "ledger"))
    before = snapshot(run)
    book = ledger_mod.Ledger(data_identity(_config().data, tmp_path / "ledger"), tmp_path / "ledger")
    entries = len(book.entries())
    for change in ("fine_grained.smoothing=10", 'fine_grained.smoothing_weights="uniform"'):
        line = one_line_error(invoke("run", "--config", TINY, *FINE, "--set", change, "--workdir", run,
                                     "--no-progress"), 1)
        assert "post-processing" in line and change.split("=")[0] in line and "--overwrite" in line
    assert snapshot(run) == before and len(book.entries()) == entries


def test_the_feature_map_is_fitted_on_the_public_pool_alone(monkeypatch):
    """`release` fits the map on the pool's images only: private images of NaN give the same
    map (its fit never sees them) and are refused when their rows are computed."""
    config = _config()
    splits = split(load_dataset(config.data), config.data.public_size)
    seen = []
    real_fit = public_features.fit

    def spy(pool_images, dims, **kw):
        seen.append(np.array(pool_images))
        return real_fit(pool_images, dims, **kw)

    monkeypatch.setattr(public_features, "fit", spy)
    fine_release.release(config, splits, NoiseSource(1, LABELS_STREAM), echo=lambda *_: None)
    assert len(seen) == 1 and np.array_equal(seen[0], splits.pool_x)
    a, rows_a = real_fit(splits.pool_x, 16)
    nan_train = np.full_like(splits.train_x, np.nan)
    b, rows_b = real_fit(splits.pool_x, 16)  # the train split (now NaN) is no argument of the fit
    assert np.array_equal(a.directions, b.directions) and np.array_equal(rows_a, rows_b)
    with pytest.raises(PateError, match="gives NaN or inf for 480 of 480 inputs"):
        b.rows(nan_train)


@pytest.mark.parametrize("sets, message", [
    (["fine_grained.eps=0"], "fine_grained.eps must be a positive number"),
    (["fine_grained.votes_per_record=-1"], "fine_grained.votes_per_record must be >= 1, or 0"),
    (["fine_grained.smoothing=-1"], "fine_grained.smoothing must be >= 1, or 0"),
    (['fine_grained.smoothing_weights="cosine"'], "fine_grained.smoothing_weights"),
    (["fine_grained.pca=5000"], "at most data.public_size"),
    (["privacy.target_eps=2"], "plan a teachers' release"),
])
def test_run_refuses_bad_settings_in_one_line_before_anything_is_written(tmp_path, sets, message):
    args = ["run", "--config", TINY, *FINE, "--workdir", tmp_path / "run"]
    for item in sets:
        args += ["--set", item]
    result = invoke(*args)
    assert result.exit_code != 0
    assert message in one_line_error(result, result.exit_code)
    assert not (tmp_path / "run" / rundir.LABELS_NPZ).exists()


def test_label_with_a_config_releases_in_a_new_directory_and_refuses_in_one_line(tmp_path):
    fresh = tmp_path / "fresh"
    line = one_line_error(invoke("label", "--workdir", fresh, "--mechanism", "fine-grained"), 1)
    assert "give --config" in line
    line = one_line_error(invoke("label", "--workdir", fresh, "--votes", "v.npz", "--num-classes", 4,
                                 "--mechanism", "fine-grained"), 2)
    assert "a fine-grained release reads the private data itself" in line
    line = one_line_error(invoke("label", "--workdir", fresh, "--config", TINY, "--mechanism", "fine-grained",
                                 "--budget", 1), 1)
    assert "spends fine_grained.eps once" in line
    assert not fresh.exists() or not (fresh / rundir.LABELS_NPZ).exists()
    result = invoke("label", "--workdir", fresh, "--config", TINY, "--mechanism", "fine-grained")
    assert result.exit_code == 0, result.output
    assert not registry.from_arrays(read_labels(fresh / rundir.LABELS_NPZ)).needs_teachers
    assert load_config(fresh / rundir.CONFIG_TOML).aggregation.mechanism == "fine-grained"
    line = one_line_error(invoke("label", "--workdir", fresh, "--config", TINY, "--mechanism", "fine-grained"), 1)
    assert "--overwrite" in line  # a finished release is never replaced by accident


def _fine_config(tmp_path):
    """The tiny config as a file with the fine-grained mechanism."""
    import re

    config = tmp_path / "fine.toml"
    text = re.sub(r'(?m)^mechanism = ".*"$', 'mechanism = "fine-grained"', TINY.read_text(), count=1)
    config.write_text(text + "\n[fine_grained]\npca = 16\n")
    assert load_config(config).aggregation.mechanism == "fine-grained"
    return config


def test_pate_plan_prints_the_release_and_its_eps_known_before_the_run(tmp_path):
    config = _fine_config(tmp_path)
    result = invoke("plan", "--config", config)
    assert result.exit_code == 0, result.output
    assert "pure eps 1 (delta 0)" in result.output and "one release labels all 200 pool points" in result.output
    result = invoke("plan", "--config", config, "--set", "fine_grained.noise=\"gaussian\"")
    assert result.exit_code == 0 and "at delta 1e-05 (rho-zCDP" in result.output, result.output
    line = one_line_error(invoke("plan", "--config", config, "--target-eps", 2), 1)
    assert "set that (--set fine_grained.eps=E)" in line


def test_pate_plan_refuses_a_smoothing_larger_than_the_pool_as_label_does(tmp_path):
    """`plan --config` accepted settings `pate label` refuses (one shared check, one line)."""
    config = _fine_config(tmp_path)
    text = config.read_text()
    for change in ("smoothing = 201", "votes_per_record = 201"):
        config.write_text(text + change + "\n")  # in [fine_grained], the file's last section
        planned = one_line_error(invoke("plan", "--config", config), 1)
        labelled = one_line_error(invoke("label", "--config", config, "--workdir", tmp_path / "run"), 1)
        assert planned == labelled and "at most the 200 points of the public pool" in planned
    assert not (tmp_path / "run" / rundir.LABELS_NPZ).exists()


def test_pate_audit_holds_a_fine_grained_claim_and_catches_half_the_noise(tmp_path, fine_run):
    """`pate audit` of a fine-grained config or run: the Clopper–Pearson lower bound over
    releases of two replace-one neighbours (2k cells moved) stays at or below the claimed ε;
    the same audit of half the noise, held to the same claim, finds the violation."""
    from pate.steps.audit import run_fine_grained_audit

    config = _fine_config(tmp_path)
    result = invoke("audit", "--config", config, "--seed", 5, "--json", tmp_path / "audit.json")
    assert result.exit_code == 0, result.output
    assert "no violation found" in result.output
    doc = json.loads((tmp_path / "audit.json").read_text())
    assert doc["mechanism"] == "fine-grained" and doc["violation"] is False and doc["eps_claimed"] == 1.0
    assert 0.5 < doc["eps_lower_bound"] <= 1.0  # close to the claim: the pair and event attain it
    folder, _ = fine_run
    result = invoke("audit", "--workdir", folder / "run", "--seed", 6)
    assert result.exit_code == 0 and "no violation found" in result.output, result.output
    line = one_line_error(invoke("audit", "--config", config, "--sigma", 3), 2)
    assert "does not apply to a fine-grained config" in line
    noise = fine_grained.laplace_noise(1, 1)
    halved = fine_grained.Noise.laplace(noise.parameter / 2, 1)
    caught = run_fine_grained_audit(halved, seed=7, claimed=noise.eps())
    assert caught.bound.eps > noise.eps() + 0.5 and caught.to_json()["violation"] is True
    assert "VIOLATION" in caught.render()


def test_ledger_import_of_a_fine_grained_run_charges_its_one_release(fine_run, tmp_path, monkeypatch):
    folder, _ = fine_run
    monkeypatch.setenv("PATE_LEDGER_DIR", str(tmp_path / "imported"))
    written = ledger_import.import_run(folder / "run", echo=lambda *_: None)
    assert [(e["kind"], e["cost"]) for e in written] == [("labels", {"kind": "pure", "eps0": 1.0, "count": 1})]
    assert ledger_import.import_run(folder / "run", echo=lambda *_: None) == []  # once


def _own_fine_copy(fine_run, tmp_path, monkeypatch):
    """A copy of the fine-grained run with its ledger folder, that folder the test's ledger."""
    folder, _ = fine_run
    shutil.copytree(folder / "run", tmp_path / "run")
    shutil.copytree(folder / "ledger", tmp_path / "ledger")
    monkeypatch.setenv("PATE_LEDGER_DIR", str(tmp_path / "ledger"))
    return tmp_path / "run", ledger_mod.Ledger(data_identity(_config().data, tmp_path / "ledger"), tmp_path / "ledger")


def test_the_student_learns_from_the_noise_posterior_of_the_released_histogram(fine_run, tmp_path, monkeypatch):
    """`[student] targets = "posterior"`: the targets are the noise posterior of labels.npz's own
    histogram over the public graph (a second computation from `analysis.mechanisms.fine_grained`'s
    pieces); `pate train-student` trains on them with the neighbour student averaging them, records
    them, and charges nothing (post-processing)."""
    from pate.release import soft_targets
    from pate.release.labels import read_release

    run, book = _own_fine_copy(fine_run, tmp_path, monkeypatch)
    config = load_config(run / rundir.CONFIG_TOML, {"student.targets": "posterior"})
    splits = split(load_dataset(config.data), config.data.public_size)
    release = read_release(run, pool_size=splits.pool_x.shape[0], num_classes=splits.num_classes)
    got = soft_targets.with_targets(config, release, run / rundir.LABELS_NPZ, splits.pool_x, splits.num_classes,
                                    echo=lambda _line: None)
    labels = read_labels(run / rundir.LABELS_NPZ)
    cfg = config.fine_grained
    _, pool_rows = public_features.fit(splits.pool_x, cfg.pca)
    graph = fine_grained.nearest_public(pool_rows, pool_rows, cfg.smoothing)
    expected = fine_grained.label_posterior(
        labels[fine_release.NOISY_COUNTS], graph, fine_grained.laplace_noise(cfg.eps, cfg.votes_per_record),
        soft_targets.DRAWS, NoiseSource(config.student.seed, stream=soft_targets.STREAM), cfg.smoothing_weights)
    np.testing.assert_allclose(got.targets, expected[release.indices], atol=1e-6)
    assert (got.targets.max(axis=1) < 1).any() and np.allclose(got.targets.sum(axis=1), 1, atol=1e-6)

    entries, hard = len(book.entries()), json.loads((run / rundir.STUDENT_JSON).read_text())
    result = invoke("train-student", "--workdir", run, "--set", 'student.targets="posterior"', "--set",
                    "student.neighbours=5", "--overwrite", "--no-progress")
    assert result.exit_code == 0, result.output
    assert "soft targets from the release's noise posterior" in result.output
    student = json.loads((run / rundir.STUDENT_JSON).read_text())
    assert student["student"]["targets"] == "posterior" and student["neighbours"] == 5
    assert hard["student"]["targets"] == "hard" and student["checkpoint_sha256"] != hard["checkpoint_sha256"]
    assert len(book.entries()) == entries


def test_soft_targets_under_another_map_or_from_a_teachers_release_are_refused_in_one_line(
        fine_run, finished_tiny, tmp_path, monkeypatch):
    """Refused in one line, before any training: a config whose map does not give back the released
    labels (another PCA: its graph is another release's), a teachers' release (labels alone, no
    histogram: nothing written), and `pate run` asking for soft targets with a teachers' mechanism
    (before any teacher trains)."""
    from conftest import own_copy
    from pate.release import soft_targets
    from pate.release.labels import read_release

    run, _ = _own_fine_copy(fine_run, tmp_path, monkeypatch)
    config = load_config(run / rundir.CONFIG_TOML, {"student.targets": "posterior", "fine_grained.pca": 4})
    splits = split(load_dataset(config.data), config.data.public_size)
    release = read_release(run, pool_size=splits.pool_x.shape[0], num_classes=splits.num_classes)
    with pytest.raises(PateError, match="do not give back the released labels"):
        soft_targets.with_targets(config, release, run / rundir.LABELS_NPZ, splits.pool_x, splits.num_classes)

    teachers_run = own_copy(finished_tiny, tmp_path / "teachers-run")
    before = snapshot(teachers_run)
    line = one_line_error(invoke("train-student", "--workdir", teachers_run, "--set", 'student.targets="posterior"',
                                 "--overwrite", "--no-progress"), 1)
    assert "noisy histogram" in line and 'student.targets = "hard"' in line
    assert snapshot(teachers_run) == before

    line = one_line_error(invoke("run", "--config", TINY, "--set", 'student.targets="posterior"', "--workdir",
                                 tmp_path / "new", "--no-progress"), 1)
    assert "aggregation.mechanism" in line and not (tmp_path / "new" / rundir.TEACHERS_JSON).exists()
    line = one_line_error(invoke("run", "--config", TINY, "--set", 'student.targets="soft"', "--workdir",
                                 tmp_path / "new", "--no-progress"), 1)
    assert "student.targets must be one of hard, posterior" in line
