"""Damaged run directories (issue 21): a generator of damage — truncated, zero-byte, wrong
dtype or shape, a release that breaks its own rules, a symbolic link, a folder, a FIFO in
place of a file — run against every command that reads the damaged file. Each must exit 1
with one line on stderr, no traceback, no hang (a FIFO read blocks for ever: an alarm
turns a hang into a failure), and leave the run directory as it was. A damaged
release.json is refused by the ledger's record of the draw, whatever the file says.
The module shares the session's finished tiny run and copies it per case."""

from __future__ import annotations

import os
import signal

import numpy as np
import pytest
from click.testing import CliRunner

from cli import main

from conftest import TINY, own_copy, snapshot

#: The commands that read a run directory, with the arguments that make them read it.
COMMANDS = {
    "analyze": ["analyze", "--workdir", "RUN"],
    "train-student": ["train-student", "--workdir", "RUN", "--overwrite", "--no-progress", "--steps", "2"],
    "label": ["label", "--workdir", "RUN", "--overwrite"],
    "run": ["run", "--config", str(TINY), "--workdir", "RUN", "--no-progress"],
    "ledger-import": ["ledger", "--import", "RUN"],
    "dpsgd": ["dpsgd", "--config", str(TINY), "--workdir", "RUN", "--no-progress", "--overwrite"],
    "fedavg": ["fedavg", "--config", str(TINY), "--workdir", "RUN", "--no-progress", "--overwrite"],
}

#: Which commands read each file of a finished run.
READERS = {
    "labels.npz": ("analyze", "train-student", "run", "ledger-import"),
    "votes.npz": ("analyze", "run"),
    "config.toml": ("analyze", "train-student", "label", "run", "ledger-import", "dpsgd", "fedavg"),
    "teachers.json": ("label", "run"),
    "release.json": ("analyze", "ledger-import"),
}

FILE_DAMAGE = ("truncated", "zero-byte", "symlink", "dangling-symlink", "folder", "fifo")
#: Damage only an array file can have.
ARRAY_DAMAGE = {
    "labels.npz": ("float-labels", "2-d-labels", "label-out-of-range", "repeated-index", "negative-index"),
    "votes.npz": ("fractional-votes", "too-few-columns"),
}


def _truncation(data: bytes, name: str) -> int:
    """Where a truncated copy ends: half way; for a TOML file, on the line boundary before half
    way — the hard case, where the rest still parses as a shorter config (defaults in place of
    the lost keys) and only config.toml's missing end line (`pate.config.CONFIG_END`) tells."""
    import tomllib

    cut = len(data) // 2
    if name.endswith(".toml"):
        cut = data.rfind(b"\n", 0, cut) + 1
        tomllib.loads(data[:cut].decode())  # the prefix is a valid TOML document
    return cut


def damage(run, name: str, kind: str, elsewhere) -> None:
    """Damages `run/name` in the way `kind` says (`elsewhere`: a folder outside the run)."""
    path = run / name
    data = path.read_bytes()
    if kind in FILE_DAMAGE:
        os.unlink(path)
    if kind == "truncated":
        path.write_bytes(data[: _truncation(data, name)])
    elif kind == "zero-byte":
        path.write_bytes(b"")
    elif kind == "symlink":  # a link to an intact copy: pate never reads through a link either
        (elsewhere / name).write_bytes(data)
        os.symlink(elsewhere / name, path)
    elif kind == "dangling-symlink":
        os.symlink(elsewhere / "nothing" / name, path)
    elif kind == "folder":
        path.mkdir()
    elif kind == "fifo":
        os.mkfifo(path)
    else:
        arrays = dict(np.load(path, allow_pickle=False))
        key = "labels" if "labels" in arrays else "votes"
        a = arrays[key]
        if kind == "float-labels":
            arrays[key] = a.astype(np.float64)
        elif kind == "fractional-votes":
            arrays[key] = a + 0.5
        elif kind == "2-d-labels":
            arrays[key] = a.reshape(-1, 1)
        elif kind == "too-few-columns":
            arrays[key] = a[:, :2]
        elif kind == "label-out-of-range":
            arrays[key] = np.where(np.arange(a.size) == 0, 7, a).astype(a.dtype)
        elif kind == "repeated-index":
            arrays["indices"] = np.concatenate([arrays["indices"][:1], arrays["indices"][:-1]])
        elif kind == "negative-index":
            arrays["indices"] = np.where(np.arange(a.size) == 0, -3, arrays["indices"])
        np.savez(path, **arrays)


def _cases():
    for name, commands in READERS.items():
        for kind in FILE_DAMAGE + ARRAY_DAMAGE.get(name, ()):
            for command in commands:
                yield pytest.param(name, kind, command, id=f"{name}:{kind}:{command}")


class Hung(BaseException):
    """Raised by the alarm: a BaseException, so that no handler of the command under test
    (which turns an OSError into one line and exit 1) can swallow it."""


@pytest.fixture
def alarm():
    """Turns a hang into a failure: SIGALRM after 60 s raises `Hung` in the main thread (a
    blocked open() of a FIFO is interrupted), out of CliRunner and the test."""

    def hung(*_):
        raise Hung("the command hung (a FIFO read?)")

    old = signal.signal(signal.SIGALRM, hung)
    signal.alarm(60)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


@pytest.mark.parametrize("name,kind,command", list(_cases()))
def test_damaged_file_is_refused_in_one_line(name, kind, command, finished_tiny, tmp_path, alarm):
    run = own_copy(finished_tiny, tmp_path / "run", symlinks=True)  # its releases in this test's ledger
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    damage(run, name, kind, elsewhere)
    before = snapshot(run)
    args = [str(run) if a == "RUN" else a for a in COMMANDS[command]]
    result = CliRunner().invoke(main, args)
    out = result.output + (result.stderr if result.stderr_bytes is not None else "")
    assert result.exit_code == 1, f"{' '.join(args)} exited {result.exit_code}:\n{out[-2000:]}"
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, f"expected one line on stderr, got:\n{result.stderr}"
    assert "Traceback" not in out and "internal error" not in out, out
    assert snapshot(run) == before, f"{' '.join(args)} changed the run directory: {lines}"
