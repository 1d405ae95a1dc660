"""Finished work is never lost (issue 12): one process per run directory, --overwrite
that keeps the old artifacts until the new ones are complete, checkpoints checked
against the record of the step that wrote them, reports never written over an input,
checks before the release, read-only and full disks."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from analysis.core.errors import PateError
from pate.store import door, rundir, runlock

from conftest import ROOT, TINY, failing_replace, invoke, one_line, own_copy, small_tmpfs, snapshot, unpublished_copy


@pytest.fixture
def finished(finished_tiny, tmp_path):
    """A copy of the finished tiny run with its ledger (`own_copy`)."""
    return own_copy(finished_tiny, tmp_path / "run")


# --------------------------------------------------------------------------- lock


def test_second_process_is_refused_naming_the_holder(finished):
    holder = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import sys, time
            sys.path.insert(0, {str(ROOT)!r})
            from pate.store import runlock
            with runlock.lock({str(finished)!r}, "label"):
                print("locked", flush=True)
                time.sleep(60)
        """)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        before = snapshot(finished)
        for args in (["label", "--workdir", finished, "--overwrite"],
                     ["analyze", "--workdir", finished],
                     ["train-student", "--workdir", finished, "--overwrite", "--no-progress"],
                     ["run", "--config", TINY, "--workdir", finished, "--no-progress"]):
            result = invoke(*args)
            assert result.exit_code == 1, result.output
            line = one_line(result)
            assert f"pid {holder.pid}" in line and "in use" in line, line
        assert snapshot(finished) == before
    finally:
        holder.kill()
        holder.wait()
    # The kernel drops the lock with its holder (even kill -9): the next command gets past
    # the lock (and stops at the next check: these labels' release.json is final).
    result = invoke("analyze", "--workdir", finished)
    assert "in use" not in result.output and "already publishes" in result.output
    os.unlink(finished / "release.json")  # its ledger still records the draw: never a second one
    result = invoke("analyze", "--workdir", finished)
    assert "in use" not in result.output and "already records" in one_line(result), result.output


def test_lock_is_released_and_leaves_nothing(finished):
    before = sorted(os.listdir(finished))
    with runlock.lock(finished, "test"):
        owner = json.loads((finished / runlock.LOCK_OWNER).read_text())
        assert owner["pid"] == os.getpid()
    assert sorted(os.listdir(finished)) == before


# --------------------------------------------------------------------------- overwrite


def test_failed_overwrite_keeps_the_old_teachers(finished):
    before = snapshot(finished)
    # A learning rate that diverges: training fails part-way (after checkpoints).
    result = invoke("train-teachers", "--config", TINY, "--workdir", finished, "--overwrite",
                    "--no-progress", "--set", "teachers.learning_rate=1e30")
    assert result.exit_code == 1, result.output
    assert "NaN" in one_line(result)
    assert snapshot(finished) == before  # teachers, labels, student, report: all as they were
    assert not any(n.startswith(door.STAGING_PREFIX) for n in os.listdir(finished))


def test_overwrite_swaps_in_and_moves_later_steps_aside(finished):
    old_labels = (finished / "labels.npz").read_bytes()
    result = invoke("train-teachers", "--config", TINY, "--workdir", finished, "--overwrite",
                    "--no-progress", "--set", "teachers.epochs=2")
    assert result.exit_code == 0, result.output
    assert json.loads((finished / "teachers.json").read_text())["epochs"] == 2
    stale = [n for n in os.listdir(finished) if n.startswith(door.STALE_PREFIX)]
    assert len(stale) == 1 and "moved" in result.output
    aside = finished / stale[0]
    assert (aside / "labels.npz").read_bytes() == old_labels  # the release is kept
    for name in ("votes.npz", "labels.npz", "student.json", "privacy.json"):
        assert not (finished / name).exists() and (aside / name).exists()
    # The new teachers are what label now uses.
    assert invoke("label", "--workdir", finished).exit_code == 0


def test_failed_label_overwrite_keeps_the_release(finished, monkeypatch):
    before = snapshot(finished)

    def broken(*a, **k):
        raise OSError(28, "No space left on device", str(finished / "labels.npz"))

    monkeypatch.setattr(rundir, "write_npz", broken)
    result = invoke("label", "--workdir", finished, "--overwrite")
    assert result.exit_code == 1 and "No space left" in one_line(result)
    assert snapshot(finished) == before


# --------------------------------------------------------------------------- checkpoints


def test_label_refuses_a_missing_last_checkpoint(finished):
    shutil.rmtree(finished / "teachers" / "4")
    result = invoke("label", "--workdir", finished, "--overwrite")
    assert result.exit_code == 1
    line = one_line(result)
    assert "teachers/4" in line and "pate train-teachers" in line


def test_label_refuses_a_damaged_checkpoint(finished):
    files = sorted(p for p in (finished / "teachers" / "4").rglob("*") if p.is_file()
                   and p.stat().st_size > 64)
    target = max(files, key=lambda p: p.stat().st_size)
    data = bytearray(target.read_bytes())
    data[len(data) // 2] ^= 0xFF
    target.write_bytes(bytes(data))
    before = snapshot(finished)
    result = invoke("label", "--workdir", finished, "--overwrite")
    assert result.exit_code == 1
    line = one_line(result)
    assert "teachers/4" in line and "pate train-teachers" in line
    assert snapshot(finished) == before


def test_random_bytes_checkpoint_without_a_record(finished):
    """An old-style teachers.json (no recorded digest): a garbage checkpoint still ends
    in one line naming it, not a tensorstore traceback."""
    info = json.loads((finished / "teachers.json").read_text())
    del info["checkpoint"]
    (finished / "teachers.json").write_text(json.dumps(info))
    for p in (finished / "teachers" / "4").rglob("*"):
        if p.is_file():
            p.write_bytes(os.urandom(max(16, p.stat().st_size)))
    result = invoke("label", "--workdir", finished, "--overwrite")
    assert result.exit_code == 1
    line = one_line(result)
    assert "teachers/4" in line and "pate train-teachers" in line


def test_empty_teachers_json(finished):
    (finished / "teachers.json").write_text("{}")
    result = invoke("label", "--workdir", finished, "--overwrite")
    assert result.exit_code == 1
    line = one_line(result)
    assert "teachers.json" in line and "pate train-teachers" in line


def test_student_checkpoint_checked(finished):
    from analysis.core.errors import PateError
    from pate.programs.student_training import load_student

    load_student(finished)  # as recorded
    target = max((p for p in (finished / "student").rglob("*") if p.is_file()),
                 key=lambda p: p.stat().st_size)
    data = target.read_bytes()
    target.write_bytes(data[:-1] + bytes([data[-1] ^ 0xFF]))  # always a change (a last byte of 0 stayed 0)
    with pytest.raises(PateError, match="train-student"):
        load_student(finished)


def test_labels_with_invalid_meta(finished):
    data = dict(np.load(finished / "labels.npz"))
    data["meta"] = np.array("{not json")
    np.savez(finished / "labels.npz", **data)
    result = invoke("train-student", "--workdir", finished, "--overwrite", "--no-progress")
    assert result.exit_code == 1, result.output
    line = one_line(result)
    assert "labels.npz" in line and "pate label" in line, line
    # analyze reads no meta: it either ignores it or refuses in one line.
    result = invoke("analyze", "--workdir", finished)
    assert result.exit_code == 0 or "labels.npz" in one_line(result)


# --------------------------------------------------------------------------- outputs onto inputs


@pytest.mark.parametrize("option", ["--json", "--plot"])
@pytest.mark.parametrize("name", ["labels.npz", "votes.npz", "teachers.json", "config.toml"])
def test_analyze_never_writes_over_a_run_artifact(finished, option, name):
    before = snapshot(finished)
    result = invoke("analyze", "--workdir", finished, option, finished / name)
    assert result.exit_code == 2, result.output
    assert option in one_line(result)
    assert snapshot(finished) == before


@pytest.mark.parametrize("option", ["--json", "--plot"])
def test_analyze_never_writes_over_its_votes(tmp_path, option):
    votes = tmp_path / "x.npz"
    np.savez(votes, votes=np.array([[5, 1], [4, 2]]))
    before = votes.read_bytes()
    result = invoke("analyze", "--votes", votes, "--ledger", "ext", "--gamma", 0.1, option, votes)
    assert result.exit_code == 2 and option in one_line(result)
    assert votes.read_bytes() == before
    # The same file through another spelling of the path.
    result = invoke("analyze", "--votes", votes, "--ledger", "ext", "--gamma", 0.1, option,
                    tmp_path / "." / "sub" / ".." / "x.npz")
    assert result.exit_code == 2 and votes.read_bytes() == before


# --------------------------------------------------------------------------- before the release


def test_run_checks_the_seed_before_any_step(tmp_path):
    workdir = tmp_path / "new"
    result = invoke("run", "--config", TINY, "--workdir", workdir, "--seed", -1, "--no-progress")
    assert result.exit_code in (1, 2)
    assert "--seed" in one_line(result)
    assert not workdir.exists()


def test_planned_gamma_is_accepted_downstream(finished):
    """`pate plan` may recommend a large gamma: label and analyze run with it."""
    out = invoke("plan", "--mechanism", "lnmax", "--queries", 1, "--eps", 1000)  # the largest eps an option takes
    assert out.exit_code == 0, out.output
    gamma = float(next(ln.split()[1] for ln in out.output.splitlines() if ln.startswith("gamma")))
    assert gamma > 355  # past where math.exp overflowed
    result = invoke("label", "--workdir", finished, "--overwrite", "--gamma", gamma, "--queries", 1)
    assert result.exit_code == 0, result.output
    result = invoke("analyze", "--workdir", finished)
    assert result.exit_code == 0, result.output


# --------------------------------------------------------------------------- read-only, full disk


def _read_only(path):
    """Makes `path` read-only (chmod; as root, a read-only bind mount). Returns an undo."""
    os.chmod(path, 0o555)
    probe = path / ".probe"
    try:
        probe.write_text("x")
    except OSError:
        return lambda: os.chmod(path, 0o755)
    probe.unlink()
    os.chmod(path, 0o755)
    ok = subprocess.run(["mount", "--bind", str(path), str(path)], capture_output=True).returncode == 0
    if ok and subprocess.run(["mount", "-o", "remount,bind,ro", str(path)],
                             capture_output=True).returncode == 0:
        return lambda: subprocess.run(["umount", str(path)], check=True)
    if ok:
        subprocess.run(["umount", str(path)])
    pytest.skip("cannot make a read-only folder here (root without mount)")


def test_read_only_run_directory(finished):
    before = snapshot(finished)
    undo = _read_only(finished)
    try:
        for args in (["run", "--config", TINY, "--workdir", finished, "--no-progress"],
                     ["label", "--workdir", finished, "--overwrite"],
                     ["analyze", "--workdir", finished]):
            result = invoke(*args)
            assert result.exit_code == 1, result.output
            line = one_line(result)
            assert str(finished) in line, line
    finally:
        undo()
    assert snapshot(finished) == before


@pytest.mark.slow
def test_full_disk_then_resume(tmp_path, tiny_config):
    """A 200 KB tmpfs: training fails with one line, leaves no orbax temp folder, and
    --resume finishes once space is freed (needs root for the mount)."""
    with small_tmpfs(tmp_path / "small", "200k") as mnt:
        workdir = mnt / "run"
        result = invoke("train-teachers", "--config", TINY, "--workdir", workdir, "--no-progress")
        assert result.exit_code == 1
        line = one_line(result)
        assert str(workdir) in line or "space" in line, line
        assert not list(workdir.rglob("*orbax-checkpoint-tmp*"))
        subprocess.run(["mount", "-o", "remount,size=20m", str(mnt)], check=True)
        result = invoke("train-teachers", "--config", TINY, "--workdir", workdir, "--no-progress",
                        "--resume")
        assert result.exit_code == 0, result.output


def test_no_arguments_prints_the_help():
    result = invoke()
    assert result.exit_code == 0
    assert "Usage:" in result.output and "Commands:" in result.output
    assert len(result.output.splitlines()) > 5


# --------------------------------------------------------------------------- second hunt (issue 21)


def _leftovers(run):
    return sorted(n for n in os.listdir(run) if n.startswith((".new-", ".old-", ".pate.lock")) or n.endswith(".tmp"))


def test_the_next_command_cleans_what_a_killed_one_left(labelled_tiny, tmp_path):
    """SIGKILL leaves staging folders (with private votes), temp files, orbax temp folders
    and a lock owner file; the next command on the run (a first analyze) removes them and says so."""
    finished = unpublished_copy(labelled_tiny, tmp_path)
    (finished / ".new-label").mkdir()
    shutil.copy(finished / "votes.npz", finished / ".new-label" / "votes.npz")
    (finished / ".new-teachers" / "2").mkdir(parents=True)
    (finished / ".labels.npz.k2j3h4.tmp").write_bytes(b"half")
    (finished / "teachers" / "4.orbax-checkpoint-tmp-17").mkdir()
    (finished / ".pate.lock").write_text("")
    (finished / ".pate.lock.owner").write_text(json.dumps({"pid": 99999999, "host": "h", "command": "pate label"}))
    result = invoke("analyze", "--workdir", finished)
    assert result.exit_code == 0, result.output
    assert "killed pate process" in result.output and ".new-label" in result.output, result.output
    assert _leftovers(finished) == [] and not list((finished / "teachers").glob("*orbax-checkpoint-tmp*"))


@pytest.mark.parametrize("sig", ["SIGKILL", "SIGTERM"])
def test_killed_label_then_any_command(finished, sig):
    """A real kill while `label --overwrite` writes its staging folder: the finished
    release is untouched, and the next command leaves no trace of the killed one."""
    import signal
    import time

    labels = (finished / "labels.npz").read_bytes()
    proc = subprocess.Popen([sys.executable, str(ROOT / "cli.py"), "label", "--workdir", str(finished),
                             "--overwrite"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    deadline = time.time() + 120
    while proc.poll() is None and time.time() < deadline and not (finished / ".new-label").exists():
        time.sleep(0.005)
    proc.send_signal(getattr(signal, sig))
    proc.wait()
    if proc.returncode != 0:  # killed before the commit: the old release is whole
        assert (finished / "labels.npz").read_bytes() == labels
    result = invoke("analyze", "--workdir", finished)
    assert "Traceback" not in result.output
    assert _leftovers(finished) == []


def _staged_run(tmp_path):
    run = rundir.RunDir(tmp_path / "run")
    (run.path / "student").mkdir(parents=True)
    (run.path / "student" / "w").write_text("old weights")
    (run.path / "student.json").write_text("old record")
    return run


def test_staging_commit_is_all_or_nothing(tmp_path, monkeypatch):
    """A failure part-way through the swap (an immutable student.json) puts every old
    artifact back: never the new student/ beside the old student.json."""
    run = _staged_run(tmp_path)
    (run.path / "privacy.json").write_text("made from the old student")
    staging = door.Staging(run, "student", rundir.STUDENT_ARTIFACTS, ("privacy.json",))
    (staging / "student").mkdir()
    (staging / "student" / "w").write_text("new weights")
    (staging / "student.json").write_text("new record")
    before = {p: p.read_text() for p in run.path.rglob("*") if p.is_file() and ".new-" not in str(p)}
    failing_replace(monkeypatch, lambda src, dst: PermissionError(1, "Operation not permitted", src)
                    if src.endswith("/run/student.json") else None, module=door.os)
    with pytest.raises(PateError, match="nothing was changed"):
        staging.commit()
    assert {p: p.read_text() for p in run.path.rglob("*") if p.is_file()} == before
    assert sorted(os.listdir(run.path)) == ["privacy.json", "student", "student.json"]


def test_a_commit_killed_part_way_is_finished_by_the_next_command(tmp_path):
    """Killed between two renames of the swap: .old-student/ holds the old student/, the
    new one is in place, the new student.json still staged. The staged set was complete,
    so the next command finishes the swap."""
    run = _staged_run(tmp_path)
    (run.path / ".old-student").mkdir()
    os.replace(run.path / "student", run.path / ".old-student" / "student")
    (run.path / ".new-student").mkdir()
    (run.path / "student").mkdir()
    (run.path / "student" / "w").write_text("new weights")
    (run.path / ".new-student" / "student.json").write_text("new record")
    cleaned = door.sweep(run)
    assert cleaned and "student" in cleaned[0]
    assert (run.path / "student.json").read_text() == "new record"
    assert (run.path / "student" / "w").read_text() == "new weights"
    assert sorted(os.listdir(run.path)) == ["student", "student.json"]


def test_lock_owner_file_is_private_and_never_written_through_a_link(finished, tmp_path):
    with runlock.lock(finished, "label"):
        path = finished / runlock.LOCK_OWNER
        assert os.stat(path).st_mode & 0o777 == 0o600
        assert set(json.loads(path.read_text())) == {"pid", "host", "command"}
    victim = tmp_path / "victim"
    victim.write_text("precious")
    os.symlink(victim, finished / runlock.LOCK_OWNER)
    result = invoke("label", "--workdir", finished, "--overwrite", "--seed", 31337)
    assert victim.read_text() == "precious"
    assert "31337" not in result.output and not _leftovers(finished)


@pytest.mark.parametrize("where", ["teachers/x.json", "student/x.json", "stale-label-1/release.json",
                                   ".new-label/r.json", ".pate.lock", ".pate.lock.owner", "link.json", "DEVICE", "FIFO",
                                   "votes-run/labels.npz", "votes-run/votes.npz"])
@pytest.mark.parametrize("option", ["--json", "--release-json"])
def test_reports_are_never_written_into_a_run_or_through_odd_paths(finished, tmp_path, where, option):
    """--json/--release-json into teachers/, stale-*/, onto lock files, a `label --votes`
    run's files, a device or a link: refused as a usage error, nothing written."""
    os.unlink(finished / "release.json")
    (finished / "stale-label-1").mkdir()
    os.symlink(tmp_path / "target.json", finished / "link.json")
    votes_run = tmp_path / "votes-run"
    votes_run.mkdir()
    shutil.copy(finished / "labels.npz", votes_run / "labels.npz")
    shutil.copy(finished / "votes.npz", votes_run / "votes.npz")
    if where == "DEVICE":  # a copy of /dev/null (never the real one: a wrong rename would replace it)
        target = tmp_path / "null"
        try:
            os.mknod(target, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        except PermissionError:
            pytest.skip("cannot make a device node here (needs root)")
    elif where == "FIFO":
        target = tmp_path / "fifo"
        os.mkfifo(target)
    else:
        target = votes_run / where.split("/", 1)[1] if where.startswith("votes-run") else finished / where
    before, votes_before = snapshot(finished), snapshot(votes_run)
    result = invoke("analyze", "--workdir", finished, option, target)
    assert result.exit_code == 2, result.output
    assert option in one_line(result)
    assert snapshot(finished) == before and snapshot(votes_run) == votes_before
    assert not (tmp_path / "target.json").exists()
    if where in ("DEVICE", "FIFO"):
        assert not target.is_file()  # still the device / FIFO, not replaced by a report


def test_a_checkpoint_folder_that_cannot_be_made_neither_floods_nor_hangs(tmp_path):
    """orbax's writer threads (not daemons) waited for ever when it could not make its
    folder, after logging tracebacks: now one error, nothing logged, the process exits."""
    (tmp_path / "file").write_text("in the way")
    code = textwrap.dedent(f"""
        import sys, threading
        sys.path.insert(0, {str(ROOT)!r})
        import numpy as np
        from pathlib import Path
        from analysis.core.errors import PateError
        from pate.store import checkpoints
        try:
            checkpoints.save_params(Path({str(tmp_path / 'file' / 'student')!r}), {{"w": np.zeros(3)}})
        except PateError as err:
            print("refused:", err)
        print("threads:", [t.name for t in threading.enumerate() if not t.daemon])
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "refused:" in proc.stdout and "threads: ['MainThread']" in proc.stdout, proc.stdout
    assert proc.stderr.strip() == ""
