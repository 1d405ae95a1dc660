"""The ledger under damage and odd environments (issue 32's closing sweep): a ledger folder or
file reached through a link, a ledger folder that is a file, costs that are not numbers, names
that are not one line, a tampered votes file, a poisoned identity cache. Each gets one line
and the right exit code, and nothing is charged or lost."""

from __future__ import annotations

import errno
import json

import numpy as np
import pytest

from analysis.mechanisms import composition
from pate.store import identity
from pate.store.ledger import Ledger

from conftest import ROOT, TINY, invoke, one_line_error

VOTES = ROOT / "examples" / "votes_simulated_250.npz"


def _book(folder) -> Ledger:
    book = Ledger("ext", folder)
    book.charge("labels", composition.Cost("pure", {"eps0": 1.0, "count": 1}))
    return book


@pytest.mark.parametrize("value", ["true", '"3"'])
def test_a_cost_of_true_or_a_string_is_damage(ledger_dir, value):
    """``"mu2": true`` read as 1 and ``"3"`` as 3: a cost pate never writes, now refused with
    file and line like any other damage."""
    book = _book(ledger_dir)
    lines = book.path.read_text().splitlines()
    entry = json.loads(lines[1])
    entry["cost"] = {"kind": "gaussian", "mu2": json.loads(value)}
    book.path.write_text("\n".join([lines[0], json.dumps(entry)]) + "\n")
    line = one_line_error(invoke("ledger", "--name", "ext"), 1)
    assert "damaged at line 2" in line and "mu2" in line
    with pytest.raises(Exception, match="needs a number"):
        composition.Cost("gaussian", {"mu2": True})


def test_a_link_in_place_of_the_lock_in_a_linked_ledger_folder_is_one_line(tmp_path, monkeypatch):
    """A ledger folder that is a link is the user's choice and works; a link in place of the
    ledger's lock file was reported as "cannot write or read ...; run the command again"
    (filelock names the lock by its real path), and one in place of the ledger as "Too many
    levels of symbolic links". Now both say what it is and what to do; the file the link
    points to is untouched and nothing is charged."""
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    monkeypatch.setenv("PATE_LEDGER_DIR", str(tmp_path / "link"))
    book = _book(tmp_path / "link")
    before = book.path.read_bytes()
    precious = tmp_path / "precious"
    precious.write_text("keep")
    lock = real / (book.path.name + ".lock")
    lock.unlink()
    lock.symlink_to(precious)
    args = ["analyze", "--votes", VOTES, "--mechanism", "gnmax", "--sigma", 40, "--queries", 100, "--ledger", "ext",
            "--release-json", tmp_path / "r.json"]
    line = one_line_error(invoke(*args), 1)
    assert "symbolic link" in line and "move it aside" in line, line
    assert precious.read_text() == "keep" and book.path.read_bytes() == before and not (tmp_path / "r.json").exists()
    lock.unlink()
    elsewhere = tmp_path / "elsewhere.jsonl"
    book.path.rename(elsewhere)
    book.path.symlink_to(elsewhere)
    line = one_line_error(invoke("ledger", "--name", "ext"), 1)
    assert "symbolic link" in line and "move it aside" in line, line


def test_a_ledger_folder_that_is_a_file_is_named_so(tmp_path, monkeypatch):
    """``PATE_LEDGER_DIR`` at a file said "File exists" or "Not a directory"."""
    afile = tmp_path / "afile"
    afile.write_text("x")
    for where in (afile, afile / "sub"):
        monkeypatch.setenv("PATE_LEDGER_DIR", str(where))
        for args in (["ledger", "--name", "ext"], ["ledger", "--config", TINY]):
            line = one_line_error(invoke(*args), 1)
            assert "is a file, not a folder" in line and "PATE_LEDGER_DIR" in line, line
    assert afile.read_text() == "x"


@pytest.mark.parametrize("args", [["ledger", "--name", "a\nb"],
                                  ["analyze", "--votes", VOTES, "--mechanism", "gnmax", "--sigma", 40, "--queries", 6,
                                   "--ledger", "x\ty"]])
def test_a_ledger_name_that_is_not_one_line_is_a_usage_error(args):
    """A name with a newline split every line that names the ledger, its charges included."""
    line = one_line_error(invoke(*args), 2)
    assert "printable" in line and ("--name" in line or "--ledger" in line), line


def test_a_votes_file_whose_data_set_was_edited_into_two_lines_is_refused(tmp_path, ledger_dir):
    """votes.npz's ``meta.data_set`` names the ledger its releases are charged to; one edited
    to hold a newline was charged to a ledger named after its second line. Now refused, with
    nothing written and nothing charged. (An edited one-line name moves the charge, as
    ``--ledger NAME`` does: the ledger guards against accidents, not against its own user.)"""
    with np.load(VOTES) as f:
        votes = f["votes"]
    edited = tmp_path / "votes.npz"
    np.savez(edited, votes=votes, meta=np.array(json.dumps({"data_set": "a\nb"})))
    line = one_line_error(invoke("label", "--votes", edited, "--mechanism", "gnmax", "--sigma", 40, "--queries", 6,
                                 "--workdir", tmp_path / "run", "--num-classes", 10), 1)
    assert "edited or damaged" in line
    assert not (tmp_path / "run").exists() and not list(ledger_dir.glob("*.jsonl"))


def test_a_budget_below_what_is_spent_says_the_least_it_may_be(ledger_dir):
    _book(ledger_dir)
    line = one_line_error(invoke("ledger", "--name", "ext", "--set-budget", "0.1"), 1)
    assert "would be below it" in line and "give at least" in line


def test_an_identity_cache_entry_of_another_data_set_is_computed_again(ledger_dir):
    """The identity cache (ledger folder) maps the training files' stat to the data's source;
    an entry naming another data set (damage, or a copy of another folder's cache) used to be
    taken as is, starting another data set's ledger. Now a source of another name is computed
    again."""
    from pate.config import load_config

    data = load_config(TINY).data
    identity._IDENTITIES.clear()
    right = identity.data_identity(data, ledger_dir)
    cache = ledger_dir / identity._IDENTITY_CACHE
    doc = json.loads(cache.read_text())
    doc = {key: "fashion_mnist:sha256:" + "0" * 64 for key in doc}
    cache.write_text(json.dumps(doc))
    identity._IDENTITIES.clear()
    assert identity.data_identity(data, ledger_dir) == right


def test_an_os_error_on_a_path_with_a_newline_is_one_line(monkeypatch):
    """A run folder or file named with a newline (legal on POSIX) broke the one-line error of
    an OSError that no step turned into a PateError."""
    from pate.store import ledger as ledger_mod

    def fail(*_args, **_kwargs):
        raise OSError(errno.EACCES, "Permission denied", "/tmp/a\nb")

    monkeypatch.setattr(ledger_mod, "render", fail)
    line = one_line_error(invoke("ledger", "--name", "ext"), 1)
    assert "/tmp/a b" in line and "writable" in line


def test_a_full_disk_while_making_the_key_leaves_no_empty_key(tmp_path, monkeypatch):
    """The ledger folder's key was created in place: a full disk left an empty .key, and once
    space was freed every command was refused as "damaged ... restore it from a backup" (there
    was none: nothing had been keyed with it). Now the key is linked into place whole."""
    from conftest import small_tmpfs

    with small_tmpfs(tmp_path / "small", "64k") as mnt:
        filler = mnt / "fill"
        with open(filler, "wb") as f:
            try:
                f.write(b"\0" * 200_000)
            except OSError:
                pass
        monkeypatch.setenv("PATE_LEDGER_DIR", str(mnt / "ledgers"))
        line = one_line_error(invoke("ledger", "--config", TINY), 1)
        assert "cannot make the ledger's key" in line and "free space" in line, line
        assert not (mnt / "ledgers" / ".key").exists() and not list((mnt / "ledgers").glob(".key.*"))
        filler.unlink()
        result = invoke("ledger", "--config", TINY)
        assert result.exit_code == 0, result.output
        assert len((mnt / "ledgers" / ".key").read_bytes()) == 32


def test_processes_making_the_key_at_once_agree_on_one(tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    folder = tmp_path / "ledgers"
    folder.mkdir()
    with ThreadPoolExecutor(8) as pool:
        keys = list(pool.map(lambda _i: identity._key(folder), range(16)))
    assert len(set(keys)) == 1 and len(keys[0]) == 32 and not list(folder.glob(".key.*"))


def test_another_data_sets_ledger_copied_over_this_one_is_refused_with_what_to_do(ledger_dir):
    book = _book(ledger_dir)
    other = Ledger("other", ledger_dir)
    other.charge("labels", composition.Cost("pure", {"eps0": 1.0, "count": 1}))
    book.path.write_bytes(other.path.read_bytes())
    line = one_line_error(invoke("ledger", "--name", "ext"), 1)
    assert "is the ledger of 'other'" in line and "put it back" in line, line
