"""One `pate` process per run directory: an OS file lock on ``RUN/.pate.lock``.

Writers take it through `hold` (re-entrant within a process), which `pate.store.door.step` calls for
every writer of a run directory.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
from pathlib import Path

from analysis.core.errors import PateError

LOCK_FILE = ".pate.lock"
LOCK_OWNER = ".pate.lock.owner"  # who holds the lock: pid, host, command (informational)


class RunLock:
    """An exclusive lock on a run directory: one `pate` process writes it at a time.

    An OS file lock (`filelock`, `flock` on POSIX) on ``RUN/.pate.lock``; the kernel
    drops it when the holder exits, even after ``kill -9``, so a stale lock never
    blocks a run. The holder's pid, host and command name go to ``RUN/.pate.lock.owner``
    so the refused process can say who holds it. Both files are removed on release, so
    a command leaves no trace of the lock.

    The directory is created if missing, unless ``create`` is False (a command that reads
    an existing run: a mistyped ``--workdir`` must not leave an empty directory behind).

    Raises (on entry):
      PateError: another process holds the lock, the directory cannot be written
        (read-only, full, or not a directory), or it is missing and ``create`` is False.
    """

    def __init__(self, workdir: str | Path, command: str, *, create: bool = True):
        self.path = Path(workdir)
        self.command = command
        self.create = create
        self._lock = None
        self.took_over: str | None = None  # who held it last when a killed holder left its owner file

    def __enter__(self) -> "RunLock":
        import socket

        import filelock

        if not self.create and not self.path.is_dir():
            raise PateError(f"run directory {self.path} does not exist")
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except FileExistsError:
            raise PateError(f"{self.path} exists and is not a directory; give a run directory "
                            "as --workdir") from None
        except OSError as err:
            raise PateError(f"cannot create the run directory {self.path}: "
                            f"{err.strerror or err}") from None
        if (self.path / LOCK_FILE).is_symlink():
            raise PateError(f"{self.path / LOCK_FILE} is a symbolic link; remove it (pate never "
                            "writes through a link)")
        if (self.path / LOCK_FILE).is_dir():
            raise PateError(f"{self.path / LOCK_FILE} is a folder, not pate's lock file; move it aside")
        lock = filelock.FileLock(self.path / LOCK_FILE, timeout=0, thread_local=False)
        try:
            lock.acquire()
        except filelock.Timeout:
            raise PateError(f"{self.path} is in use by {self._holder()}; wait for it to finish "
                            "(one pate process per run directory)") from None
        except OSError as err:
            raise PateError(f"cannot write in {self.path}: {err.strerror or err}; make it writable "
                            "(or free space) and try again, or use another --workdir") from None
        self._lock = lock
        # The command's name only, never its arguments (a research --seed is private).
        owner = {"pid": os.getpid(), "host": socket.gethostname(),
                 "command": f"pate {self.command}"}
        target = self.path / LOCK_OWNER
        try:
            # An owner file under a free lock: its process was killed before it could clean up.
            self.took_over = self._holder() if os.path.lexists(target) else None
            if os.path.lexists(target):
                target.unlink()  # a link is removed, never written through
            # Owner-only: the holder's pid and command are nobody else's business.
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(json.dumps(owner) + "\n")
        except OSError as err:
            self._release()
            raise PateError(f"cannot write in {self.path}: {err.strerror or err}; make it writable "
                            "(or free space) and try again, or use another --workdir") from None
        return self

    def _holder(self) -> str:
        """Who holds (or held) the lock, from the owner file: read only when it is a small
        plain file (never through a link or from a FIFO, which would block)."""
        try:
            fd = os.open(self.path / LOCK_OWNER, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
            with os.fdopen(fd, "rb") as f:
                if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                    raise ValueError
                owner = json.loads(f.read(4096).decode("utf-8"))
            return f"pid {int(owner['pid'])} on {owner['host']} ({owner['command']})"
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return "another pate process"

    def _release(self) -> None:
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def __exit__(self, *exc) -> None:
        # Both files go while the lock is still held: a process that opened the old lock
        # file meanwhile finds it unlinked after its flock and starts over (filelock
        # checks st_nlink), so removing it is safe and the run directory is left as it was.
        for name in (LOCK_OWNER, LOCK_FILE):
            try:
                (self.path / name).unlink()
            except OSError:
                pass
        self._release()


def lock(workdir: str | Path, command: str, *, create: bool = True) -> RunLock:
    """`RunLock(workdir, command, create=create)`: use as ``with runlock.lock(workdir, "label"): ...``."""
    return RunLock(workdir, command, create=create)


#: Run directories this process holds, by resolved path: (lock, depth).
_HELD: dict[str, list] = {}


@contextlib.contextmanager
def hold(workdir: str | Path, command: str, *, create: bool = True):
    """Holds the run's lock for the block (every writer takes it through `pate.store.door.step`),
    re-entrantly within one process (`pate run` holds it and calls the steps,
    which take it again). A second process is refused in one line (`RunLock`)."""
    key = os.path.realpath(os.fspath(workdir)) if os.fspath(workdir) else ""
    if not key:
        raise PateError("--workdir is empty; give a run directory")
    if secondary_process():
        yield None  # multi-host training: process 0 holds the lock for all
        return
    held = _HELD.get(key)
    if held is not None:
        held[1] += 1
        try:
            yield held[0]
        finally:
            held[1] -= 1
        return
    new = not os.path.lexists(key)
    try:
        with RunLock(workdir, command, create=create) as run_lock:
            _HELD[key] = [run_lock, 1]
            try:
                yield run_lock
            finally:
                _HELD.pop(key, None)
    finally:
        if new:  # a command that made the folder and wrote nothing leaves nothing behind
            try:
                os.rmdir(key)
            except OSError:
                pass


def depth(workdir: str | Path) -> int:
    """How many nested `hold` blocks of this process hold `workdir` (0: none)."""
    held = _HELD.get(os.path.realpath(os.fspath(workdir)))
    return 0 if held is None else held[1]


def secondary_process() -> bool:
    """True in a multi-process JAX run on every process but the first."""
    import sys

    jax = sys.modules.get("jax")
    if jax is None:
        return False
    try:
        return jax.process_count() > 1 and jax.process_index() != 0
    except Exception:  # noqa: BLE001 - no backend: a single process
        return False
