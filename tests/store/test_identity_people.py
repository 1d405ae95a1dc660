"""A data set is its people, not its file (issues 51 and 52 item 6): a release is charged to
every data set of the ledger folder whose records it used and held to each one's budget.
A superset with more new records than old, a split half of one data set and half of
another, a data set grown step by step, the same inputs with their classes renamed, and
(where content cannot tell) the same people under the same ids or the same declared
data-set name are each held to the budget of the data set they belong to."""

from __future__ import annotations

import os

import numpy as np
import pytest

from analysis.core.errors import PateError
from analysis.mechanisms import composition, noisy_max
from pate.store import identity
from pate.store import ledger as ledger_mod

COST = composition.labels_cost(noisy_max.GNMax(40.0), 300)  # eps ~2.5 alone; two compose over 3


def _records(seed: int, n: int, side: int = 8):
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, (n, side, side), dtype=np.uint8), rng.integers(0, 3, n)


def _save(path, x, y, **extra):
    xt, yt = _records(999, 30, x.shape[1] if x.ndim == 3 else 8)
    if x.ndim == 2:
        xt = np.random.default_rng(998).normal(size=(30, x.shape[1])).astype(np.float32)
    np.savez(path, x_train=x, y_train=y, x_test=xt, y_test=yt, **extra)
    return path


def _config(path, **extra):
    from conftest import TINY
    from pate.config import load_config

    return load_config(TINY, {"data.name": "npz", "data.path": str(path), **extra})


def _book(path, **extra) -> ledger_mod.Ledger:
    return ledger_mod.Ledger.for_config(_config(path, **extra))


def _join(*parts):
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])


def _budgeted(path) -> ledger_mod.Ledger:
    """The data set at ``path`` with one release charged under a budget of 3: a second
    release anywhere it is charged goes over."""
    book = _book(path)
    book.charge("labels", COST, budget=3.0, delta=1e-5)
    return book


def _refused_by_budget_of(book: ledger_mod.Ledger, other: ledger_mod.Ledger) -> None:
    with pytest.raises(PateError, match="recorded in its ledger"):
        other.charge("labels", COST)
    assert book.total(1e-5).count == 1


def test_a_superset_with_more_new_records_than_old_is_held_to_the_budget(tmp_path):
    """A + 481 new records (A has 480) shared under half of its own records with A, so it
    was a new data set with an empty ledger: A's people spent past A's budget."""
    a = _records(0, 480)
    book = _budgeted(_save(tmp_path / "a.npz", *a))
    bigger = _book(_save(tmp_path / "a-plus.npz", *_join(a, _records(1, 481))))
    _refused_by_budget_of(book, bigger)


@pytest.mark.parametrize("order", ["a-first", "n-first"])
def test_a_split_of_two_known_data_sets_is_charged_to_both_whatever_the_order(tmp_path, order):
    """A (480) and N (480 other people) known; A + N shares half its records with each and
    joined one of them (which one depended on the folder), escaping the other's budget."""
    a, n = _records(0, 480), _records(1, 480)
    paths = {"a": _save(tmp_path / "a.npz", *a), "n": _save(tmp_path / "n.npz", *n)}
    first, second = ("a", "n") if order == "a-first" else ("n", "a")
    books = {first: _book(paths[first])}
    books[second] = _book(paths[second])
    assert books["a"].name != books["n"].name  # two data sets
    both = _book(_save(tmp_path / "a-n.npz", *_join(a, n)))
    both.charge("labels", COST)
    assert books["a"].total(1e-5).count == 1 and books["n"].total(1e-5).count == 1
    for book in books.values():  # each one's budget counts the release
        with pytest.raises(PateError, match="total_budget"):
            book.charge("labels", COST, budget=3.0, delta=1e-5)


def test_half_of_one_data_set_and_half_of_another_counts_against_both(tmp_path):
    a, b = _records(0, 480), _records(1, 480)
    book_a, book_b = _budgeted(_save(tmp_path / "a.npz", *a)), _budgeted(_save(tmp_path / "b.npz", *b))
    half = _book(_save(tmp_path / "half.npz", *_join((a[0][:240], a[1][:240]), (b[0][240:], b[1][240:]))))
    with pytest.raises(PateError, match="recorded in its ledger"):
        half.charge("labels", COST)  # over whichever budget it is not named by, too
    book_b.set_budget(100.0, 1e-5)
    book_a.set_budget(100.0, 1e-5)
    half.charge("labels", COST, subject="half")
    for book in (book_a, book_b):  # counted by each (with the other's: they now share people)
        assert [e.get("subject") for e in book.releases()].count("half") == 1
    shown = ledger_mod.render(book_a, 1e-5) + ledger_mod.render(book_b, 1e-5)
    assert "shares 240 records" in shown
    assert "share records with this one" in ledger_mod.cumulative_line(book_a, 1e-5)  # every release's line warns


def test_a_data_set_grown_step_by_step_stays_one_data_set(tmp_path):
    """A (100), A + 100 new, A + 100 + 300 new: the third step shared a fifth of its records
    with A and started an empty ledger."""
    a, new, newer = _records(0, 100), _records(1, 100), _records(2, 300)
    book = _budgeted(_save(tmp_path / "jan.npz", *a))
    feb = _book(_save(tmp_path / "feb.npz", *_join(a, new)))
    mar = _book(_save(tmp_path / "mar.npz", *_join(a, new, newer)))
    assert feb.name == mar.name == book.name
    _refused_by_budget_of(book, mar)


def test_an_alias_keeps_its_records_so_a_rolling_window_stays_one_data_set(tmp_path):
    """A data set that drops its oldest records as it grows: the third window shares no
    record with the first, only with the second, which the folder knew as the first's alias."""
    old, mid, new = _records(0, 100), _records(1, 100), _records(2, 100)
    book = _budgeted(_save(tmp_path / "w1.npz", *_join(old, mid)))
    _book(_save(tmp_path / "w2.npz", *_join(mid, new)))  # shares mid with w1: an alias
    w3 = _book(_save(tmp_path / "w3.npz", *_join(new, _records(3, 100))))  # shares new with w2 only
    assert w3.name == book.name
    _refused_by_budget_of(book, w3)


def test_the_same_inputs_with_their_classes_renamed_are_the_same_people(tmp_path):
    x, y = _records(0, 200)
    book = _budgeted(_save(tmp_path / "a.npz", x, y))
    renamed = _book(_save(tmp_path / "renamed.npz", x, (y + 1) % 3))
    assert renamed.name == book.name
    _refused_by_budget_of(book, renamed)


def test_records_sharing_ids_are_the_same_people_whatever_their_content(tmp_path):
    """Pixels re-encoded by one unit, or the same people as rows of an embedding: content
    cannot tell, the ids in the npz (`ids`) can."""
    x, y = _records(0, 200)
    ids = np.array([f"patient-{i:04d}" for i in range(200)])
    book = _budgeted(_save(tmp_path / "a.npz", x, y, ids=ids))
    shifted = np.where(x < 255, x + 1, x - 1).astype(np.uint8)
    _refused_by_budget_of(book, _book(_save(tmp_path / "shifted.npz", shifted, y, ids=ids)))
    rows = np.random.default_rng(5).normal(size=(200, 16)).astype(np.float32)
    _refused_by_budget_of(book, _book(_save(tmp_path / "rows.npz", rows, y, ids=ids[::-1].copy())))
    # Without the ids, records re-encoded again are other records (another data set).
    again = np.where(x > 0, x - 1, x + 1).astype(np.uint8)
    assert _book(_save(tmp_path / "plain.npz", again, y)).name != book.name


def test_ids_are_kept_only_keyed_in_the_ledger_folder(tmp_path):
    x, y = _records(0, 50)
    ids = np.array([f"patient-{i:04d}" for i in range(50)])
    book = _book(_save(tmp_path / "a.npz", x, y, ids=ids))
    blob = b"".join(p.read_bytes() for p in book.directory.rglob("*") if p.is_file())
    for i in (0, 7, 49):
        assert f"patient-{i:04d}".encode() not in blob and f"patient-{i:04d}".encode("utf-32-le") not in blob
    for p in (book.directory / ".records").rglob("*"):
        assert (os.stat(p).st_mode & 0o077) == 0


def test_bad_ids_are_refused_in_one_line(tmp_path):
    x, y = _records(0, 20)
    for bad, words in ((np.arange(19), "one id per record"), (np.zeros((20, 2), np.int64), "one id per record"),
                       (np.linspace(0, 1, 20), "integers or strings")):
        with pytest.raises(PateError, match=words) as err:
            _book(_save(tmp_path / "bad.npz", x, y, ids=bad))
        assert "\n" not in str(err.value)


def test_releases_declaring_the_same_data_set_name_are_one_data_set(tmp_path):
    """Two files with no record in common (the same people re-encoded, say) are one data
    set when their configs declare it: `[data] dataset = "clinic"`."""
    book = _book(_save(tmp_path / "a.npz", *_records(0, 100)), **{"data.dataset": "clinic"})
    book.charge("labels", COST, budget=3.0, delta=1e-5)
    other = _book(_save(tmp_path / "b.npz", *_records(1, 100)), **{"data.dataset": "clinic"})
    assert other.name == book.name
    _refused_by_budget_of(book, other)
    assert "declaring this data set's [data] dataset name" in ledger_mod.render(book, 1e-5)
    assert _book(tmp_path / "b.npz").name == book.name  # the same file, undeclared: still that data set
    # Another name is another data set; the name is never kept in plain words.
    assert _book(_save(tmp_path / "c.npz", *_records(2, 100)), **{"data.dataset": "other"}).name != book.name
    blob = b"".join(p.read_bytes() for p in book.directory.rglob("*") if p.is_file())
    assert b"clinic" not in blob


def test_a_declared_name_after_the_fact_joins_two_known_data_sets(tmp_path):
    a, b = _save(tmp_path / "a.npz", *_records(0, 100)), _save(tmp_path / "b.npz", *_records(1, 100))
    book_a, book_b = _budgeted(a), _book(b)
    assert book_a.name != book_b.name
    _book(a, **{"data.dataset": "clinic"})
    _refused_by_budget_of(book_a, _book(b, **{"data.dataset": "clinic"}))


def test_a_declared_name_and_new_data_set_contradict(tmp_path):
    with pytest.raises(PateError, match="new_data_set"):
        _book(_save(tmp_path / "a.npz", *_records(0, 20)), **{"data.dataset": "clinic", "privacy.new_data_set": True})


@pytest.mark.parametrize("bad", ["two\nlines", " padded", "x" * 201])
def test_a_declared_name_must_be_one_short_line(tmp_path, bad):
    with pytest.raises(PateError, match="data.dataset"):
        _config(tmp_path / "a.npz", **{"data.dataset": bad})


def test_unrelated_data_sets_stay_apart_and_charge_nothing_of_each_other(tmp_path):
    book_a = _budgeted(_save(tmp_path / "a.npz", *_records(0, 100)))
    other = _book(_save(tmp_path / "b.npz", *_records(1, 100)))
    assert other.name != book_a.name
    other.charge("labels", COST)
    other.charge("labels", COST)
    assert book_a.total(1e-5).count == 1


def test_an_older_folder_without_input_digests_still_recognises_renamed_labels(tmp_path):
    """A data set placed by an older pate has record digests of input and label only; the
    first command that reads it again keeps its inputs' digests too."""
    import zipfile

    x, y = _records(0, 100)
    path = _save(tmp_path / "a.npz", x, y)
    book = _budgeted(path)
    (records,) = (book.directory / ".records").glob("*.npz")
    with np.load(records) as f:
        kept = {k: f[k] for k in ("records", "source")}
    np.savez(records, **kept)  # as an older pate wrote it
    assert "inputs.npy" not in zipfile.ZipFile(records).namelist()
    identity._IDENTITIES.clear()
    (book.directory / ".identities.json").unlink()
    assert _book(path).name == book.name
    _refused_by_budget_of(book, _book(_save(tmp_path / "renamed.npz", x, (y + 1) % 3)))
