"""A sanitised draw charged but never put in place is not lost (issue 51): an `analyze` whose
commit fails after its charge (a public file was readable for a moment, so the charge stays)
keeps the draw, and the next `analyze` publishes that very draw -- no new draw, no new charge --
where every later `analyze` used to be refused for ever ("Publish the first one")."""

from __future__ import annotations

import errno
import hashlib
import os

from conftest import invoke, one_line_error, run_entries, unpublished_copy
from pate.store import rundir


def test_a_draw_charged_but_not_put_in_place_is_published_by_the_next_analyze(labelled_tiny, tmp_path, monkeypatch):
    run = unpublished_copy(labelled_tiny, tmp_path)
    real = os.chmod

    def chmod(path, mode, *args, **kwargs):  # release.json cannot be opened to others
        if os.fspath(path).endswith(rundir.RELEASE_JSON) and mode & 0o044:
            raise PermissionError(errno.EPERM, "Operation not permitted", os.fspath(path))
        return real(path, mode, *args, **kwargs)

    monkeypatch.setattr(os, "chmod", chmod)
    line = one_line_error(invoke("analyze", "--workdir", run), 1)
    assert f"pate analyze --workdir {run}" in line and "no new draw" in line, line
    assert not (run / rundir.RELEASE_JSON).exists()
    entries = run_entries(run)
    assert [e["kind"] for e in entries] == ["labels", "sanitised-eps"]  # readable for a moment: charged
    monkeypatch.setattr(os, "chmod", real)
    result = invoke("analyze", "--workdir", run)
    assert result.exit_code == 0, result.output
    assert "no new draw, no new charge" in result.output
    published = hashlib.sha256((run / rundir.RELEASE_JSON).read_bytes()).hexdigest()
    assert entries[-1]["release"] == f"sanitised:{published}" and run_entries(run) == entries
    assert (run / rundir.PRIVACY_JSON).exists() and not (run / rundir.UNPUBLISHED_DIR).exists()
    line = one_line_error(invoke("analyze", "--workdir", run), 1)
    assert "already publishes" in line and run_entries(run) == entries


def test_a_kept_draw_the_ledger_does_not_record_is_never_published(labelled_tiny, tmp_path):
    """A kept draw whose charge is not in the ledger (withdrawn, or planted) is deleted
    unpublished, and `analyze` draws and charges as usual."""
    run = unpublished_copy(labelled_tiny, tmp_path)
    kept = run / rundir.UNPUBLISHED_DIR
    kept.mkdir()
    (kept / "0.out").write_text('{"eps": 0}')
    (kept / "kept.json").write_text('{"release": "sanitised:0", "subject": "x", "files": '
                                    f'[{{"file": "0.out", "target": "{run / rundir.RELEASE_JSON}", "private": false}}]}}')
    result = invoke("analyze", "--workdir", run)
    assert result.exit_code == 0, result.output
    assert '"eps": 0}' != (run / rundir.RELEASE_JSON).read_text() and not kept.exists()
    assert [e["kind"] for e in run_entries(run)] == ["labels", "sanitised-eps"]
