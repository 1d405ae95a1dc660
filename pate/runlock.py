"""One `pate` process per run directory: an OS file lock on ``RUN/.pate.lock``.

Re-exported by `pate.rundir` (``rundir.lock``, ``rundir.RunLock``), the import to use.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from analysis.errors import PateError

LOCK_FILE = ".pate.lock"
LOCK_OWNER = ".pate.lock.owner"  # who holds the lock: pid, host, command (informational)


class RunLock:
    """An exclusive lock on a run directory: one `pate` process writes it at a time.

    An OS file lock (`filelock`, `flock` on POSIX) on ``RUN/.pate.lock``; the kernel
    drops it when the holder exits, even after ``kill -9``, so a stale lock never
    blocks a run. The holder's pid, host and command line go to ``RUN/.pate.lock.owner``
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

    def __enter__(self) -> "RunLock":
        import socket
        import sys

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
        owner = {"pid": os.getpid(), "host": socket.gethostname(),
                 "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]) or self.command}
        try:
            (self.path / LOCK_OWNER).write_text(json.dumps(owner) + "\n", encoding="utf-8")
        except OSError as err:
            self._release()
            raise PateError(f"cannot write in {self.path}: {err.strerror or err}; make it writable "
                            "(or free space) and try again, or use another --workdir") from None
        return self

    def _holder(self) -> str:
        try:
            owner = json.loads((self.path / LOCK_OWNER).read_text(encoding="utf-8"))
            return f"pid {owner['pid']} on {owner['host']} ({owner['command']})"
        except (OSError, ValueError, KeyError, TypeError):
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
    """`RunLock(workdir, command, create=create)`: use as ``with rundir.lock(workdir, "label"): ...``."""
    return RunLock(workdir, command, create=create)
