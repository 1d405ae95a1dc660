"""Files as pate reads and writes them: only plain files are read (never through a link,
a FIFO or a device), and every file is written atomically (a synced temp file beside it,
then a rename), owner-only when private. The one reader and writer every layer uses."""

from __future__ import annotations

import os
import tempfile

from analysis.core.errors import PateError


def open_plain(path: str | os.PathLike, *, remedy: str = "give a plain file"):
    """Opens a file for reading (binary) only when it is a plain file: the one reader of
    files that must be plain (run artifacts, vote files).

    A FIFO in its place would block the reader for ever (holding a run's lock), a device
    would stream without end, a link may point anywhere: the file is opened non-blocking
    and without following a final link, and refused unless ``fstat`` says it is a
    regular file, so no check can be raced.

    Raises:
      FileNotFoundError: it is missing.
      PateError: it is a link, a folder, a FIFO, a device or a socket (ending with `remedy`).
    """
    import stat

    path = os.fspath(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
    except FileNotFoundError:
        raise
    except OSError as err:
        what = ("a symbolic link (pate never reads or writes through a link)" if os.path.islink(path)
                else f"unreadable ({err.strerror or err})")
        raise PateError(f"{path} is {what}; {remedy}") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        kind = ("a folder" if stat.S_ISDIR(mode) else "a FIFO (named pipe)" if stat.S_ISFIFO(mode)
                else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "a socket")
        raise PateError(f"{path} is {kind}, not a plain file; {remedy}")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def write_atomic(path: str | os.PathLike, data: bytes, private: bool = False) -> None:
    """Writes ``data`` to ``path`` through a synced temp file in the same folder and a
    rename, so ``path`` holds its old content or all of ``data``, never a part.
    ``private`` files are owner-only (0600); others get the mode a plain open() would.
    The one atomic writer of the project (``pate.store.rundir`` writes through it)."""
    tmp = write_temp(path, data, private)
    try:
        os.replace(tmp, path)
    except BaseException:
        unlink_quietly(tmp)
        raise


def write_temp(path, data: bytes, private: bool) -> str:
    """``data`` in a synced temp file ``.NAME.*.tmp`` beside ``path``; returns its name."""
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise PateError(f"cannot write {path}: folder {folder} does not exist")
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{os.path.basename(path)}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            if not private:
                mask = os.umask(0)
                os.umask(mask)
                os.fchmod(fh.fileno(), 0o666 & ~mask)  # mkstemp makes 0600
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
    except BaseException:
        unlink_quietly(tmp)
        raise
    return tmp


def unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def public_mode() -> int:
    """The mode a plain open() gives a new file (0666 less the umask)."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def undo_renames(done: list) -> list[tuple[str, str, OSError]]:
    """Puts back the renames ``done`` (``(src, dst)`` pairs, oldest first) newest first, going
    on past a rename that fails (a permission, a vanished file) so that every other one is
    still undone. Returns the ones that failed, ``(src, dst, error)``: for each, what was
    renamed to ``dst`` is still there."""
    stuck = []
    for src, dst in reversed(done):
        try:
            os.replace(dst, src)
        except OSError as err:
            stuck.append((str(src), str(dst), err))
    return stuck


def stuck_line(stuck: list[tuple[str, str, OSError]]) -> str:
    """The words of `undo_renames`'s failures, for a one-line error."""
    return "; ".join(f"{dst} could not go back to {src}: {err.strerror or err}" for src, dst, err in stuck)
