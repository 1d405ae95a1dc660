"""Shared fixtures: the repository's configs and one trained tiny (synthetic) run; the helpers
the test files share (`invoke`, `one_line`, `one_line_error`, `snapshot`), imported as
``from conftest import invoke`` (tests/ is on sys.path under pytest, with or without xdist)."""

from __future__ import annotations

import pathlib
import shutil

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "configs"
TINY = CONFIGS / "tiny.toml"


@pytest.fixture(scope="session", autouse=True)
def _session_ledgers(tmp_path_factory):
    """Privacy ledgers of the session's shared runs go to a temporary folder, never to the
    user's state folder (`pate.ledger`)."""
    import os

    old = os.environ.get("PATE_LEDGER_DIR")
    os.environ["PATE_LEDGER_DIR"] = str(tmp_path_factory.mktemp("ledgers"))
    yield
    if old is None:
        os.environ.pop("PATE_LEDGER_DIR", None)
    else:
        os.environ["PATE_LEDGER_DIR"] = old


@pytest.fixture(autouse=True)
def ledger_dir(tmp_path_factory, monkeypatch):
    """Each test charges its releases to ledgers of its own (a fresh folder)."""
    path = tmp_path_factory.mktemp("ledger")
    monkeypatch.setenv("PATE_LEDGER_DIR", str(path))
    return path


@pytest.fixture(scope="session")
def tiny_config():
    """configs/tiny.toml: synthetic data, 6 teachers, trains in seconds."""
    from pate.config import load_config

    return load_config(TINY)


@pytest.fixture(scope="session")
def _trained_tiny(tmp_path_factory, tiny_config):
    from pate.steps.teachers import train_teachers

    workdir = tmp_path_factory.mktemp("tiny-run")
    result = train_teachers(tiny_config, workdir, show_progress=False)
    return workdir, result


@pytest.fixture
def trained_run(_trained_tiny, tmp_path):
    """A fresh copy of a finished tiny train-teachers run: (workdir, TrainResult)."""
    workdir, result = _trained_tiny
    copy = tmp_path / "run"
    shutil.copytree(workdir, copy)
    return copy, result


@pytest.fixture(scope="session")
def finished_tiny(_trained_tiny, tmp_path_factory, tiny_config):
    """A complete tiny run (teachers, labels, student, privacy report), made once."""
    from pate.steps.pipeline import run

    workdir = tmp_path_factory.mktemp("tiny-finished") / "run"
    shutil.copytree(_trained_tiny[0], workdir)
    run(tiny_config, workdir, seed=0, show_progress=False, echo=lambda *_: None)
    return workdir


def snapshot(directory) -> dict:
    """Every file under `directory` (relative path -> bytes digest), lock files aside."""
    import hashlib

    directory = pathlib.Path(directory)
    out = {}
    for p in sorted(directory.rglob("*")):
        rel = p.relative_to(directory).as_posix()
        if p.name.startswith(".pate.lock"):
            continue
        out[rel] = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
    return out


def invoke(*args):
    """``pate ARGS...`` through click's test runner (arguments turned into strings)."""
    from click.testing import CliRunner

    from cli import main

    return CliRunner().invoke(main, [str(a) for a in args])


def one_line(result) -> str:
    """The one line a failed command wrote to stderr (and no traceback anywhere)."""
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.output
    return lines[0]


def one_line_error(result, code: int) -> str:
    """The one line of a command's output, after checking it exited with ``code``."""
    assert result.exit_code == code, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, result.output
    return lines[0]
