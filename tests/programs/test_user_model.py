"""A user's own flax module, named in the config by import path (`model = "module"`, `module =
"package.module:Class"`), as the teachers (vmapped) and the student; one-line refusals of a path
that does not import or is no flax module."""

from __future__ import annotations

import json

import jax
import numpy as np
import pytest

from analysis.core.errors import PateError
from conftest import ROOT, TINY, invoke, one_line_error
from pate.config import StudentConfig, TeachersConfig, load_config
from pate.programs import models, user_model
from conftest import EMBEDDING_FEATURES as FEATURES, embedding_sets as sets_for, write_embeddings

BROKEN = '''
import flax.linen as nn

def not_a_class(x):
    return x

class NoClasses(nn.Module):
    width: int = 3

class NeedsWidth(nn.Module):
    num_classes: int
    width: int

raise_on_import = False
'''

NAN_AT_EVALUATION = '''
import flax.linen as nn
import jax.numpy as jnp

class NanAtEvaluation(nn.Module):
    num_classes: int

    @nn.compact
    def __call__(self, x, train=False):
        logits = nn.Dense(self.num_classes)(x)
        return logits if train else logits * jnp.inf
'''


#: Modules that build but fail on a batch (issue 53: the teachers trained, voted and spent eps on
#: the first; the student ended the first two in "internal error").
FAULTY = '''
import flax.linen as nn

class WrongShape(nn.Module):
    num_classes: int

    @nn.compact
    def __call__(self, x):
        return nn.Dense(self.num_classes + 1)(x.reshape(x.shape[0], -1))

class WithBatchNorm(nn.Module):
    num_classes: int

    @nn.compact
    def __call__(self, x, train: bool = False):
        h = nn.BatchNorm(use_running_average=not train)(x.reshape(x.shape[0], -1))
        return nn.Dense(self.num_classes)(h)

class Infinite(nn.Module):
    num_classes: int

    @nn.compact
    def __call__(self, x):
        return nn.Dense(self.num_classes)(x.reshape(x.shape[0], -1)) / 0.0 + 1.0

class Raises(nn.Module):
    num_classes: int

    @nn.compact
    def __call__(self, x, train: bool = False):
        if train:
            raise ValueError("my bug\\nsecond line")
        return nn.Dense(self.num_classes)(x.reshape(x.shape[0], -1))
'''

#: Modules of issue 52's hunt: a `sys.exit` ended `pate` with status 0 and no teachers; a tuple, int
#: logits, an output of one row, no parameter or a branch on a traced value ended in "internal error".
HOSTILE = '''
import sys

import flax.linen as nn
import jax.numpy as jnp


class Exits(nn.Module):
    num_classes: int

    @nn.compact
    def __call__(self, x):
        sys.exit(0)


class GivesTuple(nn.Module):
    num_classes: int

    @nn.compact
    def __call__(self, x):
        logits = nn.Dense(self.num_classes)(x)
        return logits, logits


class GivesInts(nn.Module):
    num_classes: int

    @nn.compact
    def __call__(self, x):
        return nn.Dense(self.num_classes)(x).astype(jnp.int32)


class OneRow(nn.Module):
    num_classes: int

    @nn.compact
    def __call__(self, x):
        logits = nn.Dense(self.num_classes)(x)
        return logits if x.shape[0] == 2 else logits[:1]


class NoParameters(nn.Module):
    num_classes: int

    @nn.compact
    def __call__(self, x):
        return jnp.zeros((x.shape[0], self.num_classes))


class Branches(nn.Module):
    num_classes: int

    @nn.compact
    def __call__(self, x):
        logits = nn.Dense(self.num_classes)(x)
        return logits if float(x.sum()) > 0 else -logits


class NanInTraining(nn.Module):
    """Finite on the sample batches, NaN on a training batch of more."""
    num_classes: int

    @nn.compact
    def __call__(self, x, train: bool = False):
        logits = nn.Dense(self.num_classes)(x)
        return logits * jnp.nan if train and x.shape[0] > 3 else logits
'''


@pytest.fixture
def user_modules(tmp_path, monkeypatch):
    (tmp_path / "mine.py").write_text(BROKEN)
    (tmp_path / "faulty.py").write_text(FAULTY)
    (tmp_path / "explodes.py").write_text("raise RuntimeError('boom')\n")
    (tmp_path / "nan_at_eval.py").write_text(NAN_AT_EVALUATION)
    (tmp_path / "hostile.py").write_text(HOSTILE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.syspath_prepend(str(ROOT / "examples"))
    return tmp_path


@pytest.mark.parametrize("path, message", [
    ("nowhere_at_all:Net", "cannot import nowhere_at_all"),
    ("explodes:Net", "importing explodes raised RuntimeError: boom"),
    ("mine:Missing", "mine has no Missing"),
    ("mine:not_a_function", "mine has no not_a_function"),
    ("mine:not_a_class", "is not a flax module"),
    ("mine:raise_on_import", "is not a flax module"),
    ("mine:NoClasses", "has no num_classes field"),
    ("mine:NeedsWidth", r"NeedsWidth\(num_classes=3\) failed"),
])
def test_a_bad_module_is_refused_in_one_line(user_modules, path, message):
    with pytest.raises(PateError, match=message) as err:
        models.make_model(TeachersConfig(model="module", module=path), 3)
    assert "\n" not in str(err.value) and str(err.value).startswith("teachers.module")


@pytest.mark.parametrize("sets, message", [
    ({"teachers.model": "module"}, "teachers.module must name the flax module"),
    ({"student.module": "own_model:ResidualHead"}, "student.module is set"),
    ({"teachers.model": "module", "teachers.module": "own model.py"}, "must be an import path"),
    ({"teachers.model": "linear", "teachers.hidden": [8]}, "must be empty for model = \"linear\""),
])
def test_the_config_checks_the_module_keys(sets, message):
    with pytest.raises(PateError, match=message):
        load_config(TINY, sets)


def test_the_user_module_is_built_and_called_as_the_built_in_ones(user_modules):
    model = models.make_model(StudentConfig(model="module", module="own_model:ResidualHead"), 5)
    x = np.ones((3, FEATURES), np.float32)
    params = model.init(jax.random.key(0), x)
    assert "inner" in params["params"]
    eval_a, eval_b = model.apply(params, x), model.apply(params, x)
    np.testing.assert_array_equal(eval_a, eval_b)
    trained = [model.apply(params, x, train=True, rngs={"dropout": jax.random.key(k)}) for k in (1, 2)]
    assert eval_a.shape == (3, 5) and not np.array_equal(*trained)  # its dropout runs in training only
    with pytest.raises(PateError, match="gives no penultimate features"):
        models.penultimate(model, params, x)


@pytest.mark.slow  # 17 s; the build checks above and tests/test_arrays.py's module class stay fast
def test_a_user_module_trains_the_teachers_and_the_student_end_to_end(user_modules, tmp_path):
    """The end-to-end check: `pate run` with the example module for the teachers (one vmapped
    program: every parameter stacked over the 6 teachers) and the student, on embeddings."""
    from pate.programs.teacher_training import load_teachers

    path = write_embeddings(tmp_path / "e.npz")
    run = tmp_path / "run"
    own = ["--set", "teachers.model=\"module\"", "--set", "teachers.module=\"own_model:ResidualHead\"",
           "--set", "student.model=\"module\"", "--set", "student.module=\"own_model:ResidualHead\"",
           "--set", "student.hidden=[]"]
    result = invoke("run", "--config", TINY, "--workdir", run, "--no-progress", "--seed", 0, *sets_for(path), *own)
    assert result.exit_code == 0, result.output
    teachers = load_teachers(run)
    assert all(leaf.shape[0] == 6 for leaf in jax.tree.leaves(teachers.params))
    assert "inner" in teachers.params["params"]
    assert json.loads((run / "teachers.json").read_text())["ensemble_accuracy"] > 0.8
    assert json.loads((run / "student.json").read_text())["accuracy"] > 0.8


def test_non_finite_logits_at_evaluation_stop_before_any_vote_is_released(user_modules, tmp_path):
    """A module that trains fine but gives NaN/inf logits at evaluation (train=False) voted class 0
    for every input: labels released and charged (issue 52). Now `pate label` stops before any
    vote leaves the devices, in one line naming the module and what to check: no votes, no
    labels, no charge."""
    from conftest import one_line, run_entries, snapshot
    from pate.programs import voting

    model = models.make_model(TeachersConfig(model="module", module="nan_at_eval:NanAtEvaluation"), 3)
    x = np.ones((5, FEATURES), np.float32)
    params = jax.tree.map(lambda a: np.stack([a, a]), model.init(jax.random.key(0), x))
    with pytest.raises(PateError, match=r"nan_at_eval:NanAtEvaluation gave NaN/inf logits for 5 of 5 inputs"):
        voting.predict_votes(params, model, x, 3)
    assert (voting.teacher_predictions(params, model, x) == -1).all()  # scored as no prediction, never class 0

    # A module already non-finite on a sample batch is refused when it is built (issue 53), before the
    # teachers train; the vote guard above stops what only training makes non-finite.
    path = write_embeddings(tmp_path / "e.npz")
    run = tmp_path / "run"
    own = ["--set", "teachers.model=\"module\"", "--set", "teachers.module=\"nan_at_eval:NanAtEvaluation\""]
    trained = invoke("train-teachers", "--config", TINY, "--workdir", run, "--no-progress", *sets_for(path), *own)
    line = one_line_error(trained, 1)
    assert "nan_at_eval:NanAtEvaluation" in line and "non-finite" in line, line
    assert not (run / "teachers").exists() and run_entries(run) == []


@pytest.mark.parametrize("name, message", [
    ("WrongShape", r"gives outputs of shape \(2, 4\) on a batch of 2 inputs of shape \(16,\); it must give "
                   r"\(batch, num_classes\) = \(2, 3\)"),
    ("WithBatchNorm", "keeps mutable state .*'batch_stats'.*use nn.LayerNorm or nn.GroupNorm instead"),
    ("Infinite", "gives non-finite outputs"),
    ("Raises", "fails on a sample batch of inputs of shape \\(16,\\) in training: ValueError: my bug$"),
])
def test_a_module_that_fails_on_a_sample_batch_is_refused_at_build(user_modules, name, message):
    with pytest.raises(PateError, match=message) as err:
        models.check_module(StudentConfig(model="module", module=f"faulty:{name}"), 3, (FEATURES,))
    assert "\n" not in str(err.value) and str(err.value).startswith(f"module faulty:{name} (student.module)")
    models.check_module(StudentConfig(model="module", module="own_model:ResidualHead"), 3, (FEATURES,))
    models.check_module(StudentConfig(), 3, (8, 8, 1))  # a built-in model: nothing to try


def test_a_wrong_output_shape_is_refused_before_the_teachers_train(user_modules, tmp_path):
    """Issue 53: it trained, voted and spent eps; now one line naming the module, nothing written."""
    path = write_embeddings(tmp_path / "e.npz", train=120, test=60)
    run = tmp_path / "run"
    result = invoke("train-teachers", "--config", TINY, "--workdir", run, "--no-progress", *sets_for(path),
                    "--set", "data.public_size=30", "--set", "teachers.model=\"module\"",
                    "--set", "teachers.module=\"faulty:WrongShape\"", "--set", "teachers.hidden=[]")
    line = one_line_error(result, 1)
    assert line.startswith("pate: module faulty:WrongShape (teachers.module) gives outputs of shape (2, 5)"), line
    assert not (run / "teachers.json").exists() and not (run / "teachers").exists()


@pytest.mark.parametrize("name", ["WithBatchNorm", "WrongShape"])
def test_a_faulty_student_module_is_refused_before_anything_trains_or_is_charged(user_modules, tmp_path, ledger_dir,
                                                                                 name):
    """Issue 53: the student's faulty module ended `pate run` in "internal error" after the teachers
    trained and the labels were charged; now `pate run` refuses it first, in one line."""
    path = write_embeddings(tmp_path / "e.npz", train=120, test=60)
    run = tmp_path / "run"
    result = invoke("run", "--config", TINY, "--workdir", run, "--no-progress", *sets_for(path),
                    "--set", "data.public_size=30", "--set", "student.model=\"module\"",
                    "--set", f"student.module=\"faulty:{name}\"", "--set", "student.hidden=[]")
    line = one_line_error(result, 1)
    assert line.startswith(f"pate: module faulty:{name} (student.module) "), line
    assert "internal error" not in line
    assert not (run / "teachers.json").exists() and not (run / "labels.npz").exists()
    assert not any(ledger_dir.iterdir())  # nothing charged


@pytest.mark.parametrize("name, message", [
    ("Exits", r"fails on a sample batch of inputs of shape \(16,\): it called sys.exit\(0\)"),
    ("GivesTuple", r"gives a tuple on a sample batch of inputs of shape \(16,\), not an array of logits"),
    ("GivesInts", r"gives int32 outputs on a sample batch of inputs of shape \(16,\); its logits must be floating"),
    ("OneRow", r"gives outputs of shape \(1, 3\) on a batch of 3 inputs of shape \(16,\)"),
    ("NoParameters", "has no parameters: there is nothing to train"),
    ("Branches", "fails on a sample batch of inputs of shape \\(16,\\): ConcretizationTypeError"),
])
def test_a_hostile_module_is_refused_in_one_line_naming_it(user_modules, name, message):
    """Issue 52: `sys.exit` in `__call__` ended `pate train-teachers` with status 0 and no teachers;
    the others ended in "internal error" once the teachers' jitted program ran them."""
    with pytest.raises(PateError, match=message) as err:
        models.check_module(TeachersConfig(model="module", module=f"hostile:{name}"), 3, (FEATURES,))
    assert "\n" not in str(err.value) and str(err.value).startswith(f"module hostile:{name} (teachers.module) ")


def test_sys_exit_in_a_module_is_exit_1_and_nothing_written(user_modules, tmp_path):
    path = write_embeddings(tmp_path / "e.npz", train=120, test=60)
    run = tmp_path / "run"
    result = invoke("train-teachers", "--config", TINY, "--workdir", run, "--no-progress", *sets_for(path),
                    "--set", "data.public_size=30", "--set", "teachers.model=\"module\"",
                    "--set", "teachers.module=\"hostile:Exits\"", "--set", "teachers.hidden=[]")
    assert "module hostile:Exits (teachers.module) fails" in one_line_error(result, 1)
    assert not (run / "teachers").exists() and not (run / "teachers.json").exists()


def test_nan_in_training_names_the_module_not_the_learning_rate(user_modules, tmp_path):
    """A module finite on the sample batches but NaN in training was blamed on the learning rate
    ("Lower teachers.learning_rate"), which would only hide its own arithmetic (issue 52)."""
    path = write_embeddings(tmp_path / "e.npz", train=120, test=60)
    result = invoke("train-teachers", "--config", TINY, "--workdir", tmp_path / "run", "--no-progress",
                    *sets_for(path), "--set", "data.public_size=30", "--set", "teachers.model=\"module\"",
                    "--set", "teachers.module=\"hostile:NanInTraining\"", "--set", "teachers.hidden=[]")
    line = one_line_error(result, 1)
    assert "became NaN/inf in epoch 1" in line and "hostile:NanInTraining (teachers.module) made them" in line, line
    assert "learning_rate" not in line
    assert "lower student.learning_rate" in models.non_finite_advice(StudentConfig(), "train again")
