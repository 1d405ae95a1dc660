"""The whole CLI under hostile numbers: every command x every numeric option x
{0, -1, nan, inf, -inf, 1e308, 5e-324, a 30-digit integer}. Each invocation must end
without a traceback, with exit code 0, 1 or 2, and, when it fails, leave the run
directory exactly as it was (no half-written artifact, nothing deleted)."""

from __future__ import annotations


import numpy as np
import pytest
from click.testing import CliRunner

from cli import main

from analysis.core.errors import PateError
from conftest import TINY, invoke, own_copy, snapshot

VALUES = ("0", "-1", "nan", "inf", "-inf", "1e308", "5e-324", "1" + "0" * 29)

# command -> (base arguments, {option: extra base arguments it needs}); RUN and VOTES
# are filled in per case.
VOTES_BASE = ["analyze", "--votes", "VOTES"]
CASES = {
    "analyze-votes": (VOTES_BASE, {
        "--gamma": ["--mechanism", "lnmax"],
        "--sigma": ["--mechanism", "gnmax"],
        "--threshold": ["--mechanism", "confident-gnmax", "--sigma", "2", "--sigma-threshold", "4"],
        "--sigma-threshold": ["--mechanism", "confident-gnmax", "--sigma", "2", "--threshold", "3"],
        "--release-order": ["--mechanism", "gnmax", "--sigma", "2"],
        "--release-cost": ["--mechanism", "gnmax", "--sigma", "2"],
        "--delta": ["--gamma", "0.5"],
        "--queries": ["--gamma", "0.5"],
        "--moments": ["--gamma", "0.5"],
        "--beta": ["--gamma", "0.5"],
        "--num-classes": ["--gamma", "0.5", "--input-is-labels", "--votes", "PREDS"],
        "--seed": ["--gamma", "0.5"],
    }),
    "analyze-workdir": (["analyze", "--workdir", "RUN"], {
        opt: [] for opt in ("--delta", "--moments", "--beta", "--seed", "--release-order",
                            "--release-cost", "--queries", "--num-classes")}),
    "plan": (["plan", "--queries", "100"], {
        "--queries": ["--mechanism", "lnmax", "--eps", "3"],
        "--eps": ["--mechanism", "lnmax"],
        "--delta": ["--mechanism", "gnmax", "--eps", "3"],
        "--teachers": ["--mechanism", "confident-gnmax", "--eps", "3", "--threshold", "3"],
        "--threshold": ["--mechanism", "confident-gnmax", "--eps", "3"],
        "--sigma-ratio": ["--mechanism", "confident-gnmax", "--eps", "3", "--threshold", "3"],
        "--answered": ["--mechanism", "confident-gnmax", "--eps", "3", "--threshold", "3"],
        "--moments": ["--mechanism", "lnmax", "--eps", "3"],
    }),
    "train-teachers": (["train-teachers", "--config", str(TINY), "--workdir", "RUN", "--overwrite",
                        "--no-progress"], {
        opt: [] for opt in ("--teachers", "--epochs", "--num-processes", "--process-id")}),
    "train-teachers-set": (["train-teachers", "--config", str(TINY), "--workdir", "RUN",
                            "--overwrite", "--no-progress"], {
        f"--set teachers.{key}": [] for key in ("seed", "epochs", "batch_size", "checkpoint_every")}),
    "label": (["label", "--workdir", "RUN", "--overwrite"], {
        "--gamma": [], "--sigma": ["--mechanism", "gnmax"],
        "--threshold": ["--mechanism", "confident-gnmax", "--sigma", "2", "--sigma-threshold", "4"],
        "--sigma-threshold": ["--mechanism", "confident-gnmax", "--sigma", "2", "--threshold", "3"],
        "--queries": [], "--budget": [], "--seed": []}),
    "train-student": (["train-student", "--workdir", "RUN", "--overwrite", "--no-progress"], {
        "--steps": [], "--epochs": [], "--set student.mu": []}),
    "run": (["run", "--config", str(TINY), "--workdir", "RUN", "--no-progress"], {
        "--seed": [], "--set aggregation.gamma": [], "--set privacy.delta": [],
        "--set privacy.moments": []}),
}


def _cases():
    for command, (base, options) in CASES.items():
        for option, extra in options.items():
            for value in VALUES:
                yield pytest.param(command, base, option, extra, value,
                                   id=f"{command}:{option.replace(' ', '=')}={value}")


@pytest.fixture(scope="module")
def inputs(finished_tiny, tmp_path_factory):
    """Vote files outside the run: a histogram and a teachers x queries label matrix."""
    d = tmp_path_factory.mktemp("inputs")
    votes = np.load(finished_tiny / "votes.npz")["votes"]
    np.savez(d / "votes.npz", votes=votes)
    rng = np.random.default_rng(0)
    np.save(d / "preds.npy", rng.integers(0, 4, size=(6, 50)))
    return d


@pytest.mark.parametrize("command,base,option,extra,value", list(_cases()))
def test_hostile_number(command, base, option, extra, value, finished_tiny, inputs, tmp_path):
    run = own_copy(finished_tiny, tmp_path / "run")  # with its ledger
    subst = {"RUN": str(run), "VOTES": str(inputs / "votes.npz"), "PREDS": str(inputs / "preds.npy")}
    args = [subst.get(a, a) for a in base]
    extra = [subst.get(a, a) for a in extra]
    if "--votes" in extra:  # the option's own input replaces the base one
        i = args.index("--votes")
        args = args[:i] + args[i + 2:]
    if option.startswith("--set "):
        tail = ["--set", f"{option.split(' ', 1)[1]}={value}"]
    else:
        tail = [option, value]
    before = snapshot(run)
    result = CliRunner().invoke(main, args + extra + tail)
    out = result.output + (result.stderr if result.stderr_bytes is not None else "")
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        f"{' '.join(args + extra + tail)} raised {result.exception!r}\n{out[-2000:]}")
    assert "Traceback" not in out
    assert "internal error" not in out, out  # the CLI's last-resort handler: a bug
    assert result.exit_code in (0, 1, 2), out
    if result.exit_code != 0:
        lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
        assert len(lines) == 1, f"expected one line on stderr, got:\n{result.stderr}"
        assert snapshot(run) == before, f"failed but changed the run directory: {lines}"


# --------------------------------------------------------------------------- second hunt (issue 21)

@pytest.mark.parametrize("args", [["train-teachers", "--config", str(TINY), "--workdir", ""],
                                  ["dpsgd", "--config", str(TINY), "--workdir", " "],
                                  ["train-teachers", "--config", str(TINY), "--workdir", "w", "--set", "epochs=3"],
                                  ["dpsgd", "--config", str(TINY), "--workdir", "w", "--set", "dpsgd.eps"]])
def test_empty_workdir_and_malformed_set_are_usage_errors(args, tmp_path, monkeypatch):
    """`--workdir ''` would write into the current directory and a malformed `--set` is a
    usage error: both exit 2 in one line, before anything is created."""
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2, result.output
    assert list(tmp_path.iterdir()) == []


def test_api_refuses_an_empty_workdir_and_a_fractional_class_count(tmp_path, monkeypatch):
    import pate
    from analysis.core.errors import PateError

    monkeypatch.chdir(tmp_path)
    votes = np.array([[3, 1, 0, 0], [0, 4, 0, 0]])
    with pytest.raises(PateError, match="run directory"):
        pate.label_votes(votes, "", num_classes=4, gamma=0.5)
    with pytest.raises(PateError, match="whole number"):
        pate.label_votes(votes, tmp_path / "run", num_classes=4.9, gamma=0.5)
    assert list(tmp_path.iterdir()) == []


def test_a_fifo_as_config_is_refused_in_one_line_without_hanging(tmp_path):
    """Reading a FIFO blocks until a writer comes: `run`, `plan`, `audit` and `ledger` hung."""
    import os

    fifo = tmp_path / "config.toml"
    os.mkfifo(fifo)
    for args in (["run", "--config", fifo, "--workdir", tmp_path / "run"], ["plan", "--config", fifo],
                 ["ledger", "--config", fifo]):
        result = invoke(*args)
        assert result.exit_code == 1 and "is not a plain file" in result.output, (args, result.output)
    assert not (tmp_path / "run").exists()


def test_an_empty_ledger_name_is_a_usage_error_naming_its_option():
    result = invoke("ledger", "--name", "")
    assert result.exit_code == 2 and "--name" in result.output and "--ledger" not in result.output


@pytest.mark.parametrize("entry", ["run", "train_teachers", "label", "train_student", "analyze"])
def test_the_python_api_refuses_a_missing_config_in_one_line(tmp_path, entry):
    import pate

    with pytest.raises(PateError, match=f"pate.{entry} needs a pate config"):
        getattr(pate, entry)(None, tmp_path / "run")
    assert not (tmp_path / "run").exists()
