"""The student: learns from the release on the tiny synthetic run, never touches the
votes or the teachers, and refuses bad input with one line, leaving the run unchanged."""

from __future__ import annotations

import json
import os
import shutil
import sys

import numpy as np
import pytest

from analysis.core.errors import PateError
from pate.store import rundir
from pate.config import config_from_dict, config_to_dict

from conftest import invoke, own_copy

STEPS = 40  # one step count everywhere: the compiled training loop is reused


def snapshot(workdir):
    return {name: os.path.getmtime(os.path.join(workdir, name)) for name in sorted(os.listdir(workdir))}


@pytest.fixture(scope="module")
def _labelled(tmp_path_factory, _trained_tiny):
    """The tiny run, labelled once by GNMax with little noise (accurate labels), its labels
    charged to a ledger folder of its own beside it (`own_copy` brings it: a student learns
    only from labels its run's ledger records)."""
    workdir, _ = _trained_tiny
    folder = tmp_path_factory.mktemp("labelled")
    shutil.copytree(workdir, folder / "run")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PATE_LEDGER_DIR", str(folder / "ledgers"))
        result = invoke("label", "--workdir", folder / "run", "--mechanism", "gnmax", "--sigma", 0.5,
                        "--queries", 120, "--seed", 0)
    assert result.exit_code == 0, result.output
    return folder / "run"


@pytest.fixture
def labelled(_labelled, tmp_path):
    return own_copy(_labelled, tmp_path / "run")


def with_student(config, **student):
    raw = config_to_dict(config)
    raw["student"].update(student)
    return config_from_dict(raw)


# --------------------------------------------------------------------------- privacy boundary


_OPENED: list[str] | None = None


def _audit(event, args):
    if _OPENED is not None and event in ("open", "os.listdir", "os.scandir") and args and args[0] is not None:
        _OPENED.append(os.fspath(args[0]) if not isinstance(args[0], int) else str(args[0]))


sys.addaudithook(_audit)


def test_student_never_opens_votes_or_teachers(labelled):
    """Every Python-level file access during training is recorded (audit hook: open,
    np.load, listdir); and the private files are replaced by dangling symlinks, so that
    an access from native code (orbax/tensorstore) would fail. Training still works."""
    global _OPENED
    hidden = labelled.parent / "hidden"
    hidden.mkdir()
    for name in (rundir.VOTES_NPZ, rundir.TEACHERS_DIR, rundir.TEACHERS_JSON):
        shutil.move(labelled / name, hidden / name)
        os.symlink(labelled / "nowhere" / name, labelled / name)
    config = with_student(rundir.RunDir(labelled).read_config(), steps=STEPS)
    from pate.steps.student import train_student

    _OPENED = []
    try:
        result = train_student(config, labelled, show_progress=False, echo=lambda *_: None)
    finally:
        opened, _OPENED = _OPENED, None
    assert result.num_labelled > 0
    assert any(p.endswith(rundir.LABELS_NPZ) for p in opened)  # the hook does see the reads
    private = [p for p in opened if any(s in p for s in (rundir.VOTES_NPZ, rundir.TEACHERS_DIR, "hidden"))]
    assert private == []


# --------------------------------------------------------------------------- training


@pytest.mark.parametrize("method", ["fixmatch", pytest.param("supervised", marks=pytest.mark.slow)])  # 8 s
def test_train_student_cli(labelled, method):
    result = invoke("train-student", "--workdir", labelled, "--method", method, "--steps", STEPS, "--no-progress")
    assert result.exit_code == 0, result.output
    assert "student accuracy" in result.output
    info = json.loads((labelled / "student.json").read_text())
    assert info["method"] == method and info["steps"] == STEPS
    assert info["num_labelled"] == int((np.load(labelled / "labels.npz")["labels"] >= 0).sum())
    assert info["accuracy"] >= 0.6  # 4 classes: chance is 0.25
    assert "label_accuracy" not in json.dumps(info)  # the student cannot know it
    assert info["meta"]["config_hash"]
    assert (info["num_unlabelled"] == 200) == (method == "fixmatch")
    from pate.programs.student_training import load_student
    from pate.config import load_config
    from pate.data import load_dataset, split

    student = load_student(labelled)
    splits = split(load_dataset(load_config(labelled / "config.toml").data), 200)
    acc = float(np.mean(student.predict(splits.eval_x) == splits.eval_y))
    assert acc == pytest.approx(info["accuracy"])
    # The resolved config records what was trained.
    assert load_config(labelled / "config.toml").student.method == method


def test_the_neighbour_student_is_averaged_in_and_published_as_scored(labelled):
    """`[student] neighbours`: student.json's accuracy is the network averaged with the neighbour
    student (the network alone beside it), and the loaded student (`with_neighbours`, as `pate.fit`
    returns it) predicts exactly what was scored."""
    from pate.config import load_config
    from pate.data import load_dataset, split
    from pate.programs.student_training import load_student
    from pate.steps.student import train_student, with_neighbours

    raw = config_to_dict(with_student(rundir.RunDir(labelled).read_config(), steps=STEPS, neighbours=5))
    raw["features"].update({"map": "pixels", "whiten": False})
    raw["fine_grained"]["pca"] = 16
    result = train_student(config_from_dict(raw), labelled, show_progress=False, echo=lambda *_: None)
    info = json.loads((labelled / "student.json").read_text())
    assert info["neighbours"] == 5 and info["accuracy_network"] == result.accuracy_network
    assert info["accuracy"] == result.accuracy and result.accuracy_network is not None
    assert "averaged with its 5-neighbour student" in result.summary()
    student = with_neighbours(load_student(labelled), labelled)
    assert student.neighbours is not None
    splits = split(load_dataset(load_config(labelled / "config.toml").data), 200)
    assert float(np.mean(student.predict(splits.eval_x) == splits.eval_y)) == pytest.approx(info["accuracy"])
    network = load_student(labelled)
    assert float(np.mean(network.predict(splits.eval_x) == splits.eval_y)) == pytest.approx(info["accuracy_network"])


def test_same_seed_same_student(labelled):
    from pate.steps.student import train_student

    config = with_student(rundir.RunDir(labelled).read_config(), steps=STEPS)
    a = train_student(config, labelled, show_progress=False, echo=lambda *_: None)
    b = train_student(config, labelled, overwrite=True, show_progress=False, echo=lambda *_: None)
    assert a.loss_history == b.loss_history and a.accuracy == b.accuracy


@pytest.mark.parametrize("threshold, low, high", [
    (0.0, 1.0, 1.0),
    pytest.param(1.0, 0.0, 0.05, marks=pytest.mark.slow),  # the other extreme; 8 s of the fast suite
])
def test_confidence_threshold_masks_pseudo_labels(labelled, threshold, low, high):
    from pate.steps.student import train_student

    config = with_student(rundir.RunDir(labelled).read_config(), steps=STEPS, threshold=threshold)
    result = train_student(config, labelled, show_progress=False, echo=lambda *_: None)
    assert low <= min(result.mask_history) and max(result.mask_history) <= high


# --------------------------------------------------------------------------- bad input


def write_labels(workdir, indices, labels):
    rundir.write_npz(workdir / "labels.npz", {"indices": np.asarray(indices, np.int64),
                                              "labels": np.asarray(labels, np.int32),
                                              "mechanism": np.array("gnmax"), "sigma": np.array(1.0)})


@pytest.mark.parametrize("case, needle", [
    ("unanswered", "answers none"),
    ("pool", "public pool of this config has 200 points"),
    ("classes", "4 classes"),
    ("missing", "pate label"),
    ("existing", "--overwrite"),
    ("other-key", "only [student] keys"),
    ("no-run", "not a run directory"),
])
def test_bad_input_one_line_nothing_lost(labelled, tmp_path, case, needle):
    args = ["train-student", "--workdir", labelled, "--no-progress", "--steps", STEPS]
    if case == "unanswered":
        write_labels(labelled, np.arange(50), -np.ones(50))
    elif case == "pool":
        write_labels(labelled, np.arange(9000), np.zeros(9000))
    elif case == "classes":
        write_labels(labelled, np.arange(10), np.full(10, 7))
    elif case == "missing":
        os.unlink(labelled / "labels.npz")
    elif case == "existing":
        assert invoke(*args).exit_code == 0
    elif case == "other-key":
        args += ["--set", "teachers.epochs=2"]
    elif case == "no-run":
        args[2] = tmp_path / "empty"
    before = snapshot(labelled)
    result = invoke(*args)
    assert result.exit_code != 0
    assert needle in result.output, result.output
    assert len(result.output.strip().splitlines()) == 1
    assert snapshot(labelled) == before


def test_config_of_another_data_set_is_refused(labelled):
    from pate.steps.student import train_student

    raw = config_to_dict(rundir.RunDir(labelled).read_config())
    raw["data"]["synthetic_classes"] = 3
    before = snapshot(labelled)
    with pytest.raises(PateError, match="different \\[data\\] section"):
        train_student(config_from_dict(raw), labelled, show_progress=False, echo=lambda *_: None)
    assert snapshot(labelled) == before


@pytest.mark.slow  # 7 s
def test_strong_affine_keeps_shape_range_and_mass():
    """The optional affine part of the strong augmentation (rotation, shear, scale)."""
    import jax

    from pate.programs import augment

    images = np.zeros((8, 28, 28, 1), np.float32)
    images[:, 8:20, 10:18] = 1.0
    a = np.asarray(augment._affine(images[0], jax.random.key(0), 20.0))
    b = np.asarray(augment._affine(images[0], jax.random.key(0), 20.0))
    assert a.shape == (28, 28, 1) and np.array_equal(a, b) and 0 <= a.min() and a.max() <= 1
    assert not np.array_equal(a, images[0])
    assert abs(a.sum() - images[0].sum()) / images[0].sum() < 0.3  # area changes by at most the scale
    out = np.asarray(augment.strong(jax.random.key(1), images, max_shift=0, cutout=0, degrees=20.0))
    assert out.shape == images.shape and out.min() >= 0 and out.max() <= 1


# --------------------------------------------------------------------------- --epochs


def test_steps_for_epochs_counts_passes():
    from pate.config import StudentConfig
    from pate.steps.student import steps_for_epochs

    fix = StudentConfig(method="fixmatch", batch_size=64, mu=3)
    assert steps_for_epochs(fix, 1, pool_size=9000, num_labelled=400) == 47  # ceil(9000 / 192)
    assert steps_for_epochs(fix, 0.001, pool_size=9000, num_labelled=400) == 1
    sup = StudentConfig(method="supervised", batch_size=64, mu=3)
    assert steps_for_epochs(sup, 10, pool_size=9000, num_labelled=400) == 63  # ceil(4000 / 64)
    with pytest.raises(PateError):
        steps_for_epochs(sup, 0, pool_size=9000, num_labelled=400)


def test_train_student_epochs_cli(labelled):
    cfg = rundir.RunDir(labelled).read_config()
    per_step = cfg.student.mu * cfg.student.batch_size
    epochs = STEPS * per_step / cfg.data.public_size  # exactly STEPS steps: reuses the compiled loop
    result = invoke("train-student", "--workdir", labelled, "--method", "fixmatch", "--epochs", epochs,
                    "--no-progress")
    assert result.exit_code == 0, result.output
    assert json.loads((labelled / "student.json").read_text())["steps"] == STEPS
    both = invoke("train-student", "--workdir", labelled, "--steps", 3, "--epochs", 1, "--overwrite")
    assert both.exit_code == 2 and "not both" in both.output


# --------------------------------------------------------------------------- class skew


@pytest.mark.parametrize("seed", range(5))
def test_label_weights_match_a_plain_loop(seed):
    from pate.programs.student_training import label_weights

    rng = np.random.default_rng(seed)
    k = int(rng.integers(2, 8))
    labels = rng.integers(0, k, size=int(rng.integers(1, 60)))
    w = label_weights(labels, k, balance=True)
    present = len(set(labels.tolist()))
    for i, y in enumerate(labels):
        assert w[i] == pytest.approx(1.0 / (present * sum(1 for z in labels if z == y)))
    assert w.sum() == pytest.approx(1.0)
    for c in set(labels.tolist()):  # every released class is drawn with probability 1/K
        assert w[labels == c].sum() == pytest.approx(1.0 / present)
    assert np.allclose(label_weights(labels, k, balance=False), 1.0 / labels.size)


def test_align_matches_a_plain_loop_and_undoes_a_skewed_prior():
    import jax.numpy as jnp

    from pate.programs.student_training import align

    rng = np.random.default_rng(0)
    probs = rng.dirichlet(np.ones(4), size=6).astype(np.float32)
    prior = np.array([0.55, 0.25, 0.15, 0.05], np.float32)
    got = np.asarray(align(jnp.asarray(probs), jnp.asarray(prior)))
    for i in range(6):
        row = [probs[i, c] / prior[c] for c in range(4)]
        assert got[i] == pytest.approx(np.array(row) / sum(row), rel=1e-5)
    uniform = np.full(4, 0.25, np.float32)
    assert np.allclose(np.asarray(align(jnp.asarray(probs), jnp.asarray(uniform))), probs, atol=1e-6)
    # A class the model under-predicts on the pool gains mass.
    assert (got[:, 3] >= probs[:, 3]).all() and (got[:, 0] <= probs[:, 0]).all()


@pytest.mark.slow  # a non-default option end to end (8 s); its parts have fast unit tests above
def test_balanced_labels_and_alignment_train(labelled):
    from pate.steps.student import train_student

    config = with_student(rundir.RunDir(labelled).read_config(), steps=STEPS, balance_labels=True,
                          distribution_alignment=True)
    result = train_student(config, labelled, overwrite=True, show_progress=False, echo=lambda *_: None)
    assert result.accuracy >= 0.6  # 4 classes: chance is 0.25
    assert rundir.RunDir(labelled).read_config().student.distribution_alignment


@pytest.mark.parametrize("seed", range(4))
def test_class_thresholds_match_a_plain_loop(seed):
    import jax.numpy as jnp

    from pate.programs.student_training import class_thresholds

    learned = np.random.default_rng(seed).uniform(0.0, 0.3, size=5).astype(np.float32)
    got = np.asarray(class_thresholds(0.95, jnp.asarray(learned)))
    top = max(learned)
    for c in range(5):
        beta = learned[c] / top
        assert got[c] == pytest.approx(0.95 * beta / (2 - beta), rel=1e-5)
    assert got.max() == pytest.approx(0.95)  # the best-learned class keeps the threshold
    # Equal learning status everywhere: FixMatch's single threshold.
    assert np.allclose(np.asarray(class_thresholds(0.95, jnp.full(5, 0.1))), 0.95)


@pytest.mark.slow  # a non-default option end to end (8 s); its parts have fast unit tests above
def test_adaptive_threshold_trains(labelled):
    from pate.steps.student import train_student

    config = with_student(rundir.RunDir(labelled).read_config(), steps=STEPS, adaptive_threshold=True)
    result = train_student(config, labelled, overwrite=True, show_progress=False, echo=lambda *_: None)
    assert result.accuracy >= 0.6
