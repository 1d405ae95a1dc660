"""A data set is the multiset of its records (issue 44): a permuted copy, a copy with one
record added and a copy with one record changed charge the ledger of the data set they
copy and are held to its budget; a user names a split new only on purpose; the ledger
folder keeps keyed per-record digests only; a relabelled run charges the data set its
teachers were trained on, whatever the data file has become."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from analysis.mechanisms import composition, noisy_max
from analysis.core.errors import PateError
from pate.store import ledger as ledger_mod


def _data(seed: int = 0, n: int = 40):
    rng = np.random.default_rng(seed)
    return (rng.integers(0, 256, (n, 8, 8), dtype=np.uint8), rng.integers(0, 3, n),
            rng.integers(0, 256, (30, 8, 8), dtype=np.uint8), rng.integers(0, 3, 30))


def _save(path, x, y, xt, yt):
    np.savez(path, x_train=x, y_train=y, x_test=xt, y_test=yt)
    return path


def _config(path, **extra):
    from conftest import TINY
    from pate.config import load_config

    return load_config(TINY, {"data.name": "npz", "data.path": str(path), **extra})


def _copies(tmp_path):
    """The original and its three disguises: permuted, one record added, one record changed."""
    x, y, xt, yt = _data()
    order = np.random.default_rng(1).permutation(len(y))
    extra_x, extra_y, _, _ = _data(seed=7, n=1)
    changed = x.copy()
    changed[3, 2, 2] ^= 1  # one pixel of one record
    return (_save(tmp_path / "orig.npz", x, y, xt, yt),
            {"permuted": _save(tmp_path / "perm.npz", x[order], y[order], xt, yt),
             "grown": _save(tmp_path / "grown.npz", np.concatenate([x, extra_x]), np.concatenate([y, extra_y]), xt, yt),
             "changed": _save(tmp_path / "changed.npz", changed, y, xt, yt)})


COST = composition.labels_cost(noisy_max.GNMax(40.0), 300)  # eps ~2.5 alone


@pytest.mark.parametrize("kind", ["permuted", "grown", "changed"])
def test_a_disguised_copy_charges_the_data_sets_ledger_and_meets_its_budget(tmp_path, kind):
    """Before: the ledger was keyed by the exact sha256 of the split, so each copy started an
    empty ledger with no budget (the same people spent twice the budget)."""
    original, copies = _copies(tmp_path)
    book = ledger_mod.Ledger.for_config(_config(original))
    book.charge("labels", COST, budget=3.0, delta=1e-5)
    other = ledger_mod.Ledger.for_config(_config(copies[kind]))
    assert other.name == book.name and other.path == book.path
    with pytest.raises(PateError, match="recorded in its ledger"):
        other.charge("labels", COST)
    assert book.total(1e-5).count == 1
    text = ledger_mod.render(book, 1e-5)
    if kind != "permuted":  # a permuted copy is the very same multiset: nothing to say
        assert "shares" in text and "of its records with this data set" in text


def test_the_identity_does_not_depend_on_the_order_of_the_records(tmp_path):
    original, copies = _copies(tmp_path)
    from pate.store.identity import data_identity

    a = data_identity(_config(original).data, tmp_path / "ledgers-a")
    b = data_identity(_config(copies["permuted"]).data, tmp_path / "ledgers-b")  # another folder: no alias
    assert a == b


def test_a_block_of_the_split_is_the_data_set_of_its_records_read_alone(tmp_path, monkeypatch):
    """A silo holding a slice of a split (`pate silos run`) charges the ledger of its own records:
    the identity a file holding those records alone gets, computed from the block alone."""
    from pate import data as data_mod
    from pate.data import loading
    from pate.store.identity import data_identity

    x, y, xt, yt = _data()
    whole = _config(_save(tmp_path / "whole.npz", x, y, xt, yt)).data
    alone = data_identity(_config(_save(tmp_path / "part.npz", x[10:25], y[10:25], xt, yt)).data, tmp_path / "a")
    read = []
    monkeypatch.setattr(loading, "on_rows_loaded", lambda x, y: read.append(len(x)))
    for module in (loading, data_mod):
        monkeypatch.setattr(module, "train_chunks", lambda *a, **k: pytest.fail("the whole split was read"))
    block = data_identity(whole, tmp_path / "b", rows=range(10, 25))
    assert block == alone and read == [15]
    assert data_identity(whole, tmp_path / "b", rows=range(10, 25)) == block and read == [15]  # cached
    assert data_identity(whole, tmp_path / "c", rows=range(0, 15)) != block


def test_a_split_named_new_on_purpose_gets_its_own_ledger_and_its_shared_people_still_count(tmp_path):
    """A name chosen on purpose does not make the records it shares new people (issue 51): its own
    ledger, linked to the data set it shares records with, so each release counts in both."""
    original, copies = _copies(tmp_path)
    book = ledger_mod.Ledger.for_config(_config(original))
    book.charge("labels", COST, budget=3.0, delta=1e-5)
    own = ledger_mod.Ledger.for_config(_config(copies["changed"], **{"privacy.new_data_set": True}))
    assert own.name != book.name
    with pytest.raises(PateError, match="total_budget"):  # the shared people's budget holds
        own.charge("labels", COST)
    book.set_budget(10.0, 1e-5)
    own.charge("labels", COST)
    assert own.total(1e-5).count == 2 and book.total(1e-5).count == 2


def test_an_unrelated_data_set_is_another_data_set(tmp_path):
    original, _ = _copies(tmp_path)
    book = ledger_mod.Ledger.for_config(_config(original))
    other = ledger_mod.Ledger.for_config(_config(_save(tmp_path / "other.npz", *_data(seed=3))))
    assert other.name != book.name


def test_the_ledger_folder_keeps_keyed_record_digests_only_owner_only(tmp_path):
    """What lets a disguised copy be recognised reveals no record: 8-byte keyed digests
    (blake2b under a key derived from the folder's secret key), in owner-only files."""
    import hashlib

    original, _ = _copies(tmp_path)
    cfg = _config(original)
    book = ledger_mod.Ledger.for_config(cfg)
    x, y, _, _ = _data()
    records = book.directory / ".records"
    files = list(records.iterdir())
    assert files and (os.stat(records).st_mode & 0o077) == 0
    blob = b"".join(f.read_bytes() for f in files)
    for i in range(len(y)):  # neither a record's bytes nor its plain digest
        row = np.ascontiguousarray(np.asarray(x[i], np.float32) / 255.0).tobytes()
        assert hashlib.sha256(row).digest()[:8] not in blob
        assert row[:32] not in blob
    for f in files:
        assert (os.stat(f).st_mode & 0o077) == 0


def test_relabelling_after_the_data_file_changed_charges_the_teachers_data_set(trained_run, tiny_config):
    """`pate label` on a trained run charged the ledger of the data file as it is now: edit
    one pixel after training and the release, made from the same teachers' votes, went to
    a new, empty ledger. It now goes to the data set teachers.json names. (The tiny run's
    data is synthetic, so "the file changed" is played the other way round: teachers.json
    names a data set other than the config's current one, as after an edit.)"""
    import hashlib

    from conftest import invoke
    from pate.store import rundir

    run, _ = trained_run
    doc = json.loads((run / rundir.TEACHERS_JSON).read_text())
    trained_on = "synthetic:sha256:" + hashlib.sha256(b"the split as the teachers saw it").hexdigest()
    doc["data_set"] = trained_on
    (run / rundir.TEACHERS_JSON).write_text(json.dumps(doc))
    now = ledger_mod.Ledger.for_config(tiny_config)
    teachers_book = ledger_mod.Ledger(trained_on, now.directory)
    result = invoke("label", "--workdir", run, "--seed", 1)
    assert result.exit_code == 0, result.output
    assert [e["kind"] for e in teachers_book.entries()] == ["labels"]
    assert now.releases() == []
    votes_named = json.loads(str(np.load(run / rundir.VOTES_NPZ)["meta"]))["data_set"]
    assert votes_named == trained_on
