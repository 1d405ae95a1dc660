"""`pate.fit`: arrays in, results out — the same pipeline and ledger as `pate run`, a student that
predicts, bad arrays refused in one line, a flax module class named by its import path."""

from __future__ import annotations

import json
import stat

import flax.linen as nn
import numpy as np
import pytest

import pate
from analysis.core.errors import PateError
from pate import arrays

FEATURES, CLASSES = 64, 4

#: The tiny config on rows: linear teachers, a small MLP student, few steps.
SMALL = {"teachers.model": "linear", "teachers.conv_features": [], "teachers.conv_kernels": [],
         "teachers.conv_strides": [], "teachers.epochs": 2, "student.model": "mlp", "student.hidden": [32],
         "student.conv_features": [], "student.conv_kernels": [], "student.conv_strides": [],
         "student.cutout": 0, "student.augment_shift": 0, "student.steps": 40, "aggregation.queries": 60}


class Head(nn.Module):
    """A user's module, importable as ``test_arrays:Head``."""

    num_classes: int

    @nn.compact
    def __call__(self, x):
        return nn.Dense(self.num_classes)(x.reshape(x.shape[0], -1))


def digits_like(seed: int = 0, private: int = 480, pool: int = 200, evaluation: int = 100):
    """Rows of 64 features in four Gaussian classes (digits-shaped: 8x8 = 64)."""
    rng = np.random.default_rng(seed)
    centres = 3.0 * rng.normal(size=(CLASSES, FEATURES))

    def draw(n):
        y = rng.integers(0, CLASSES, n)
        y[:CLASSES] = np.arange(CLASSES)
        return (centres[y] + rng.normal(size=(n, FEATURES))).astype(np.float32), y

    (xp, yp), (xq, yq), (xe, ye) = draw(private), draw(pool), draw(evaluation)
    return xp, yp, xq, yq, xe, ye


def test_fit_releases_labels_and_a_student_charged_to_the_data_sets_ledger(tmp_path):
    xp, yp, xq, yq, xe, ye = digits_like()
    quiet = []
    result = pate.fit(xp, yp, xq, y_public=yq, x_eval=xe, y_eval=ye, config="tiny", overrides=SMALL,
                      workdir=tmp_path / "run", echo=quiet.append)
    # the release
    assert result.indices.shape == result.labels.shape == (60,)
    assert set(np.unique(result.labels)) <= {-1, *range(CLASSES)}
    assert 0.0 <= result.label_accuracy <= 1.0 and 0.0 <= result.student_accuracy <= 1.0
    # a student that predicts class ids
    pred = result.predict(xe)
    assert pred.shape == (xe.shape[0],) and pred.dtype == np.int64 and set(np.unique(pred)) <= set(range(CLASSES))
    assert np.mean(pred == ye) == pytest.approx(result.student_accuracy)
    # the report: release.json's, headline first
    on_disk = json.loads((tmp_path / "run" / "release.json").read_text())
    assert result.report == on_disk and result.eps == on_disk["eps"] and result.delta == on_disk["delta"]
    # the private arrays: owner-only, in an owner-only folder
    folder = tmp_path / "run" / arrays.PRIVATE_FOLDER
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert stat.S_IMODE((folder / arrays.RECORDS).stat().st_mode) == 0o600
    # the ledger recorded the release; the same arrays again (no workdir, a module class as the
    # student) are the same data set: the second release composes in the same ledger
    first = result.ledger.read_text().splitlines()
    assert first and result.report["data_set"]["releases"] >= 1
    again = pate.fit(xp, yp, xq, config="tiny", overrides=SMALL, student_module=Head, echo=quiet.append)
    assert again.ledger == result.ledger and again.workdir is None
    assert len(again.ledger.read_text().splitlines()) > len(first)
    assert again.report["data_set"]["releases"] > result.report["data_set"]["releases"]
    assert again.eps > result.eps  # the headline counts both releases
    assert again.label_accuracy is None and again.student_accuracy is None  # nothing to score against
    assert again.predict(xq[:7]).shape == (7,)


def _refusal(call) -> str:
    with pytest.raises(PateError) as err:
        call()
    line = str(err.value)
    assert "\n" not in line
    return line


@pytest.mark.parametrize("change, words", [
    (lambda a: {**a, "xp": a["xp"].reshape(-1, 8, 8)}, "add the channel axis"),
    (lambda a: {**a, "xq": a["xq"][:, :10]}, "private records'"),
    (lambda a: {**a, "xp": np.where(np.arange(FEATURES) == 3, np.nan, a["xp"])}, "NaN"),
    (lambda a: {**a, "xq": np.where(np.arange(FEATURES) == 3, 1e30, a["xq"])}, "past 1e+06"),
    (lambda a: {**a, "xp": np.where(np.arange(FEATURES) == 3, 1e300, a["xp"].astype(np.float64))}, "past 1e+06"),
    (lambda a: {**a, "yp": a["yp"][:-1]}, "one label per input"),
    (lambda a: {**a, "yp": a["yp"] + 1}, "class(es) 0 occur in no record"),
    (lambda a: {**a, "yp": a["yp"] - 1}, "holds the label -1"),
    (lambda a: {**a, "yp": a["yp"] + 0.5}, "integer labels"),
    (lambda a: {**a, "yp": np.zeros_like(a["yp"])}, "only 1 class"),
    (lambda a: {**a, "xq": a["xq"][:5]}, "too few"),
    (lambda a: {**a, "ye": None}, "together"),
    (lambda a: {**a, "ye": a["ye"] + CLASSES}, "a class no private record has"),
    (lambda a: {**a, "xp": np.ones((20, 4, 4, 1)) * 3.0, "xq": np.ones((20, 4, 4, 1)), "xe": None, "ye": None},
     "[0, 1]"),
])
def test_bad_arrays_are_refused_in_one_line_before_anything_is_written(tmp_path, change, words):
    """Each refusal is its one line alone: no RuntimeWarning before it (1e300 rows were cast to
    float32 to be checked, which warned of an overflow first: issue 52)."""
    import warnings

    xp, yp, xq, _, xe, ye = digits_like(private=60, pool=30, evaluation=10)
    a = change(dict(xp=xp, yp=yp, xq=xq, xe=xe, ye=ye))
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        line = _refusal(lambda: pate.fit(a["xp"], a["yp"], a["xq"], x_eval=a["xe"], y_eval=a["ye"],
                                         workdir=tmp_path / "run"))
    assert words in line, line
    assert not (tmp_path / "run").exists()


def test_a_module_class_is_named_by_its_import_path():
    assert arrays.import_path(Head) == f"{__name__}:Head"

    class Local(nn.Module):
        num_classes: int

    assert "cannot be named by import path" in _refusal(lambda: arrays.import_path(Local, "student.module"))
    assert "flax.linen.Module class" in _refusal(lambda: arrays.import_path(dict))
    cfg = arrays._config("tiny", {}, Head, None)
    assert (cfg.teachers.model, cfg.teachers.module) == ("module", f"{__name__}:Head")


def test_a_workdir_of_other_arrays_is_refused(tmp_path):
    xp, yp, xq, yq, xe, ye = digits_like(private=60, pool=30, evaluation=10)
    arrays._write_records(tmp_path, arrays._checked(xp, yp, xq, yq, xe, ye), overwrite=False)
    other = arrays._checked(xp[::-1], yp[::-1], xq, yq, xe, ye)
    assert "holds a run of other arrays" in _refusal(lambda: arrays._write_records(tmp_path, other, overwrite=False))
    assert arrays._write_records(tmp_path, arrays._checked(xp, yp, xq, yq, xe, ye), overwrite=False).exists()
