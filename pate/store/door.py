"""The one door into a run directory: every command that writes one goes through `step`.

`step` refuses a run directory inside a ledger folder (`pate.store.ledger_home.ledger_folder_of`),
holds the run's lock (`pate.store.runlock.hold`), checks that the config's data is the
run's, asks "may I write these artifacts?" once for every command, hands the block the
folder to write them in (a staging folder when they replace finished ones), and on
commit writes ``config.toml``, swaps the new artifacts in and moves the later steps'
artifacts aside with the one stale message (what each writer writes, refuses and moves aside is
the store's table of steps, `pate.store.stages`). A block that fails leaves the run as it was.

A release is charged to its data set's ledger in one order, whoever writes it (`publish`):
everything it publishes is written first (staged), then it is charged, then renamed into
place; a commit that fails and puts everything back withdraws the charge. A block asks for
its charge with `Door.charge`; `_commit` makes it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import os
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from analysis.core import files
from analysis.core.errors import CommitFailed, PateError
from pate.store import rundir, stages
from pate.store.ledger_home import ledger_folder_of
from pate.config import Config
from pate.store.runlock import depth, hold, secondary_process

STAGING_PREFIX = ".new-"
OLD_PREFIX = ".old-"  # the old artifacts during `Staging.commit`
STALE_PREFIX = "stale-"


class Staging:
    """Where a step writes the artifacts that will replace finished ones.

    A command asked to ``--overwrite`` writes its new artifacts into
    ``RUN/.new-<step>/`` and calls `commit` once every one is complete: only then are
    the old artifacts replaced (a rename each), and the later steps' artifacts, made from
    the old ones, moved aside into ``RUN/stale-<step>-<time>/`` — never deleted: a
    release moved aside is still a release the user may need. If the command fails or is
    killed first, the old artifacts are untouched; the staging folder is cleared by the
    next attempt.
    """

    def __init__(self, run: rundir.RunDir, step: str, artifacts: Iterable[str], later: Iterable[str] = ()):
        self.run = run
        self.step = step
        self.artifacts = tuple(artifacts)
        self.later = tuple(later)
        self.path = run.path / f"{STAGING_PREFIX}{step}"
        self.kept: list[str] = []  # the replaced release files `commit` kept aside
        rundir.remove(self.path)
        # Owner-only: what is staged is not released yet (a release is charged only when its
        # commit is about to put it in place, and withdrawn when the commit puts nothing there).
        self.path.mkdir(parents=True, mode=0o700)
        os.chmod(self.path, 0o700)

    def __truediv__(self, name: str) -> Path:
        return self.path / name

    def commit(self, extra: Iterable[str] = ()) -> list[str]:
        """Swaps the staged artifacts (and `extra` files, e.g. config.toml) in.

        All or nothing, in two phases: first every old artifact goes into
        ``RUN/.old-<step>/`` (a replaced release file, `rundir.RELEASE_FILES`, into the
        ``stale-`` folder, kept: `kept`) and every later one aside, then the new ones come in. A failure
        part-way (an immutable or vanished file) puts every old artifact and every later
        one back and removes the staging folder; it raises `CommitFailed` when no new
        released artifact (one not in `rundir.PRIVATE_ARTIFACTS`, not config.toml) had
        reached its place (the release was never out: its charge is withdrawn), else a plain
        `PateError`. A rollback that meets an error of its own goes on with the other
        renames and is named in the same line; what decides is what reached its place, never
        whether the rollback succeeded. A kill part-way leaves ``.old-<step>/``
        beside ``.new-<step>/``: the staged set was complete, so the next command finishes
        the swap (`sweep`).

        Returns:
          The later artifacts moved aside (relative to the run directory), for a message.
        """
        names = [n for n in (*self.artifacts, *extra) if os.path.lexists(self.path / n)]
        missing = [n for n in self.artifacts if n not in names]
        if missing:
            raise PateError(f"internal error: {self.step} left {', '.join(missing)} unwritten in "
                            f"{self.path}")
        later = [n for n in self.later if os.path.lexists(self.run / n)]
        # A release file replaced here is kept aside, not deleted (`rundir.RELEASE_FILES`):
        # `pate ledger --import` still counts it.
        replaced = [n for n in names if n in rundir.RELEASE_FILES and os.path.lexists(self.run / n)]
        aside = _aside_folder(self.run, self.step) if later or replaced else None
        old = self.run.path / f"{OLD_PREFIX}{self.step}"
        done: list[tuple[Path, Path]] = []  # renames made, undone in reverse on failure
        placed = False  # whether a new released artifact reached its place (then it may have been read)
        try:
            rundir.remove(old)
            old.mkdir()
            for n in later:
                aside.mkdir(exist_ok=True)
                _rename(self.run / n, aside / n, done)
            for n in names:
                if n in replaced:
                    aside.mkdir(exist_ok=True)
                    _rename(self.run / n, aside / n, done)
                elif os.path.lexists(self.run / n):
                    _rename(self.run / n, old / n, done)
            for n in names:
                _rename(self.path / n, self.run / n, done)
                placed = placed or _released(n)
        except OSError as err:
            stuck = self._undo(done, old, aside)
            placed = placed or any(Path(dst) == self.run / n for _, dst, _ in stuck for n in names if _released(n))
            why = (f"cannot swap the new {self.step} artifacts into {self.run.path}: {err.strerror or err} "
                   f"({err.filename}); " + ("nothing was changed, the old artifacts are in place" if not stuck else
                                            f"putting them back failed too ({files.stuck_line(stuck)}), the rest "
                                            "was put back"))
            if placed:
                raise PateError(why + " (a new artifact was in place for a moment, so its release stays "
                                "charged)") from None
            raise CommitFailed(why) from None
        rundir.remove(old)
        rundir.remove(self.path)
        self.kept = [f"{aside.name}/{n}" for n in replaced]
        return [f"{aside.name}/{n}" for n in later]

    def _undo(self, done: list, old: Path, aside: Path | None) -> list:
        """Puts back every rename of a failed `commit` it can (`analysis.core.files.undo_renames`)
        and removes the staging folder and the empty helper folders; a folder that cannot go is
        left (the next command's `sweep` clears it). Returns the renames that could not be undone."""
        stuck = files.undo_renames(done)
        with contextlib.suppress(OSError):
            for folder in (old, aside):
                if folder is not None and folder.is_dir() and not os.listdir(folder):
                    folder.rmdir()
        with contextlib.suppress(OSError):  # never left for `sweep` to finish: its charge is decided now
            self.discard()
        if old.is_dir():  # an old artifact that could not go back: kept aside, never swept away
            with contextlib.suppress(OSError):
                kept = _aside_folder(self.run, self.step)
                os.replace(old, kept)
                stuck = [(src, str(kept / Path(dst).name) if Path(dst).parent == old else dst, err)
                         for src, dst, err in stuck]
        return stuck

    def discard(self) -> None:
        rundir.remove(self.path)


def _released(name: str) -> bool:
    """Whether an artifact is something a release makes public (not a private file, not config.toml)."""
    return name not in rundir.PRIVATE_ARTIFACTS and name != rundir.CONFIG_TOML


def _rename(src: Path, dst: Path, done: list) -> None:
    os.replace(src, dst)
    done.append((src, dst))


def _aside_folder(run: rundir.RunDir, step: str) -> Path:
    """A new ``RUN/stale-<step>-<time>[-k]/`` name (not created)."""
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    aside = run.path / f"{STALE_PREFIX}{step}-{stamp}"
    k = 1
    while os.path.lexists(aside):
        k += 1
        aside = run.path / f"{STALE_PREFIX}{step}-{stamp}-{k}"
    return aside


def sweep(run: rundir.RunDir) -> list[str]:
    """Cleans what a killed pate process left in a run directory; `step` calls it once
    it holds the lock (no live process owns any of it then).

    - ``.old-<step>/`` beside ``.new-<step>/``: a commit was killed part-way; its staged
      set was complete, so the swap is finished (`Staging.commit`).
    - ``.new-<step>/`` alone: a step killed before its commit; its unfinished (and maybe
      private) files are deleted, the finished artifacts were never touched.
    - temporary files of atomic writes (``.NAME.*.tmp``) in the run directory and its
      artifact folders, and orbax's ``*.orbax-checkpoint-tmp*`` folders.

    Returns:
      One phrase per thing cleaned, for the message.
    """
    done = []
    for entry in sorted(os.listdir(run.path)):
        if entry.startswith(OLD_PREFIX):
            name = entry[len(OLD_PREFIX):]
            staged = run.path / f"{STAGING_PREFIX}{name}"
            if staged.is_dir() and not staged.is_symlink():
                for n in sorted(os.listdir(staged)):
                    if os.path.lexists(run / n) and not os.path.lexists(run.path / entry / n):
                        os.replace(run / n, run.path / entry / n)
                    os.replace(staged / n, run / n)
                done.append(f"finished swapping in the new {name} artifacts ({entry}/)")
            rundir.remove(run.path / entry)
            rundir.remove(staged)
    for entry in sorted(os.listdir(run.path)):
        if entry.startswith(STAGING_PREFIX):
            rundir.remove(run.path / entry)
            done.append(f"deleted the unfinished {entry}/")
    for folder in (run.path, *(run.path / n for n in rundir.ARTIFACT_DIRS)):
        if not folder.is_dir() or folder.is_symlink():
            continue
        for entry in sorted(os.listdir(folder)):
            if (entry.startswith(".") and entry.endswith(".tmp")) or "orbax-checkpoint-tmp" in entry:
                rundir.remove(folder / entry)
                done.append(f"deleted the temporary {(folder / entry).relative_to(run.path)}")
    return done


def stale_message(moved: list[str], noun: str) -> str:
    """The line a command prints after `Staging.commit` moved later artifacts aside."""
    folders = sorted({m.split("/", 1)[0] for m in moved})
    names = ", ".join(m.split("/", 1)[1] for m in moved)
    return (f"the new {noun} replace the ones {names} were made from: moved those to "
            f"{', '.join(folders)} (kept, not deleted); run the later steps again")


@dataclasses.dataclass(frozen=True)
class Charge:
    """A release's charge to its data set's ledger, made by `publish` once everything the
    release publishes is staged: ``book.charge(kind, cost, **options)``
    (`pate.store.ledger.Ledger.charge`)."""

    book: Any
    kind: str
    cost: Any
    options: dict

    def make(self) -> dict:
        return self.book.charge(self.kind, self.cost, **self.options)


def publish(charges: Sequence[Charge], commit: Callable[[], Any], what: str = "") -> Any:
    """THE order of every release, one for every writer (`_commit`, `pate analyze`).

    1. Before this, everything the release publishes is written where no one reads it yet
       (a staging folder, owner-only temporaries): a full disk or a bad folder fails there,
       with nothing charged and nothing in place.
    2. Each of `charges` is made (`Charge.make`): a refusal (budget, a repeated sanitised
       draw) withdraws the ones made before it and commits nothing.
    3. ``commit()`` renames the staged files into place. A commit that fails and puts every
       file back (`CommitFailed`) withdraws the charges: nothing was released, so nothing
       is spent (whether a rename fails depends on the file system, never on a private
       value) — whatever the rollback met: the commit decides by what reached its place,
       and says so in one line. Any other failure keeps them (one line saying so): a charge
       without its release over-counts, never under-counts.

    SIGINT and SIGTERM are held from the first charge to the end of the commit
    (`_deferred_signals`), so an interruption lands before the charge or after the commit.
    On success ``what`` (a few words) is recorded for `committed`.

    Returns:
      What ``commit()`` returned.
    """
    made: list[tuple[Any, dict]] = []
    with _deferred_signals():
        try:
            for charge in charges:
                made.append((charge.book, charge.make()))
        except BaseException as err:
            _withdraw(made, err)
            raise
        try:
            result = commit()
        except CommitFailed as err:
            _withdraw(made, err)
            if not made:
                raise
            raise CommitFailed(f"{err}; its charge was withdrawn: nothing was released") from None
        except PateError:
            raise
        except Exception as err:  # noqa: BLE001 - a commit's own errors are classified; any other keeps the charge
            if not made:
                raise
            raise PateError(f"{_one_line(err)}; the release may have reached its place, so it stays charged "
                            "(the ledger over-counts, never under-counts)") from None
        if what:
            _COMMITTED.append(what)
    return result


def _one_line(err: BaseException) -> str:
    text = " ".join(str(err).split()) or type(err).__name__
    return f"{type(err).__name__}: {text}" if not isinstance(err, (PateError, OSError)) else text


def _withdraw(made: list, err: BaseException) -> None:
    """Withdraws the charges of a release that was never put in place (newest first)."""
    for book, entry in reversed(made):
        try:
            book.withdraw(entry)
        except PateError as failed:
            raise PateError(f"{err}; its charge could not be withdrawn ({failed}): the ledger counts this "
                            "release although it was not made") from None


@contextlib.contextmanager
def _deferred_signals():
    """Holds SIGINT and SIGTERM for the block (main thread only) and delivers them, once
    each, when it ends."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    held = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    held = {s: h for s, h in held.items() if h is not None}  # a handler set outside Python: left alone
    for s in held:
        signal.signal(s, lambda signum, frame: caught.append(signum))
    try:
        yield
    finally:
        for s, handler in held.items():
            signal.signal(s, handler)
        for s in dict.fromkeys(caught):
            signal.raise_signal(s)


#: What this process has committed (`publish`), for the line of an interrupted command.
_COMMITTED: list[str] = []


def committed() -> list[str]:
    """What this process has committed so far, oldest first (`forget_committed` resets)."""
    return list(_COMMITTED)


def forget_committed() -> None:
    _COMMITTED.clear()


@dataclasses.dataclass
class Door:
    """What a `step` block writes through.

    Attributes:
      run: the run directory.
      out: where the block writes its artifacts: the staging folder, or the run itself.
      staged: whether `out` is a staging folder.
      resuming: the block continues from artifacts already there (`resume`).
      config: what goes into config.toml on commit (None: nothing); the block may
        replace it (e.g. with the steps an ``--epochs`` resolved to).
      charges: the releases to charge on commit (`charge`).
    """

    run: rundir.RunDir
    out: rundir.RunDir
    staged: bool
    resuming: bool
    config: Config | None
    charges: list = dataclasses.field(default_factory=list)

    def charge(self, book, kind: str, cost, **options) -> None:
        """Charges a release of the block's artifacts to ``book`` (`pate.store.ledger.Ledger.charge`'s
        arguments) when they are committed, not now (`publish`): after they are all written,
        right before they are renamed into place. Only a staged door releases.

        Raises:
          PateError: the door writes in place (an internal error).
        """
        if not self.staged:
            raise PateError(f"internal error: a {kind} release is charged only through a staged door")
        self.charges.append(Charge(book, kind, cost, options))

    def write_config(self) -> None:
        """In place, writes config.toml now, not on commit: first, so that a killed run
        can be resumed (teachers), or before the last reads (`pate run`). Staged, nothing:
        it is swapped in with the artifacts on commit."""
        if not self.staged and self.config is not None:
            if not secondary_process():
                self.run.write_config(self.config)
            self.config = None


def check_same_data(run: rundir.RunDir, config: Config, *, required: str | None = None,
                    unreadable: str | None = None, held: str | None = None, remedy: str | None = None) -> None:
    """Refuses a config whose ``[data]`` is not the run's (`rundir.RunDir.check_same_data`,
    worded by `held` and `remedy`). With ``required`` (the commands to run first), a
    directory without config.toml is no run directory; without it, such a directory has
    nothing to compare. With ``unreadable`` (what to do), an unreadable config.toml is
    refused in those words, else in the config loader's."""
    if not run.exists(rundir.CONFIG_TOML):
        if required is not None:
            raise PateError(f"{run.path} is not a run directory (no {rundir.CONFIG_TOML}); run {required} first")
        return
    stored = None
    if unreadable is not None:
        stored = run.stored_config()
        if stored is None:
            raise PateError(f"{run / rundir.CONFIG_TOML} is not a readable config; {unreadable}")
    wording = {k: v for k, v in (("held", held), ("remedy", remedy)) if v is not None}
    run.check_same_data(config, stored, **wording)


@contextlib.contextmanager
def step(name: str, workdir, *, config: Config | None = None, overwrite: bool = False,
         resume: bool = False, staged: bool | str = True, data: dict | None = None,
         keep_config: bool = False, echo: Callable[[str], None] = print):
    """The door every writer of a run directory goes through (see the module docstring).

    Args:
      name: the step (`pate.store.stages.STAGES`: what it writes, refuses and moves aside).
      workdir: the run directory.
      config: what config.toml gets on commit (None: left as it is). Staged, it is
        swapped in with the artifacts; in place, `Door.write_config` may write it earlier.
      overwrite, resume: what to do with artifacts already there (`rundir.RunDir.prepare`);
        replaced in place (``staged=False``) they are deleted up front.
      staged: True: write into ``RUN/.new-<name>/`` and swap in on commit; False: write
        in place; "when-replacing": staged only when overwriting artifacts already there.
      data: keywords of `check_same_data` (None: no data check).
      keep_config: leave an existing config.toml alone (a DP-SGD baseline beside a run).
      echo: where the stale message goes.

    Yields:
      A `Door`.
    """
    writer = stages.STAGES[name]
    if workdir is None or not str(workdir).strip():  # '' would be the current directory
        raise PateError(f"{writer.command} needs a run directory (workdir), got {workdir!r}")
    ledgers = ledger_folder_of(workdir, config)
    if ledgers is not None:
        raise PateError(f"{workdir} is inside the ledger folder {ledgers}: no command writes there but the ledger "
                        "itself; give a run directory elsewhere")
    with hold(workdir, writer.command, create=writer.create) as lock:
        run = rundir.RunDir(workdir)
        if lock is not None and depth(workdir) == 1:  # first holder: clean what a killed one left
            _report_sweep(run, lock, echo)
        if resume and run.exists(rundir.CONFIG_TOML):
            run.check_same_config(config)
        if data is not None:
            check_same_data(run, config, **data)
        run.prepare(writer.writes, overwrite=overwrite, resume=resume, command=writer.command,
                    again=writer.again, guard=writer.made if writer.writes else None, clear=staged is False)
        if resume and not run.exists(rundir.CONFIG_TOML):
            raise PateError(f"cannot resume: {run / rundir.CONFIG_TOML} is missing; start again "
                            "with --overwrite")
        if keep_config and run.exists(rundir.CONFIG_TOML):
            config = None
        if staged == "when-replacing":
            staged = overwrite and any(run.exists(a) for a in writer.writes)
        staging = Staging(run, name, writer.writes, stages.later(writer)) if staged and writer.writes else None
        door = Door(run, run if staging is None else rundir.RunDir(staging.path), staging is not None,
                    resume, config)
        try:
            yield door
            _commit(door, staging, writer, echo)
        except BaseException:
            if staging is not None:
                staging.discard()
            raise


def _report_sweep(run: rundir.RunDir, lock, echo) -> None:
    """`sweep`, and one line saying what a killed pate process left and what became of it."""
    cleaned = sweep(run)
    if lock.took_over is not None:
        cleaned.insert(0, f"took over the lock of {lock.took_over}")
    if cleaned:
        echo(f"a killed pate process left {run.path} unfinished: " + "; ".join(cleaned)
             + " (finished artifacts are kept)")


def _commit(door: Door, staging: Staging | None, writer: stages.Stage, echo) -> None:
    """Writes config.toml and swaps the staged artifacts in (`publish`: charged first), with
    the stale message."""
    what = f"{writer.command} ({', '.join(writer.writes)} in {door.run.path})" if writer.writes else ""
    if staging is None:
        if door.config is not None and not secondary_process():
            door.run.write_config(door.config)
        if what:
            _COMMITTED.append(what)
        return
    if door.config is not None:
        door.out.write_config(door.config)
    moved = publish(door.charges, lambda: staging.commit(extra=(rundir.CONFIG_TOML,)), what)
    if moved:
        echo(stale_message(moved, writer.noun))
    if staging.kept:
        echo(f"the replaced {', '.join(k.split('/', 1)[1] for k in staging.kept)} (a release already made, still "
             f"counted by `pate ledger --import`) kept in {staging.kept[0].split('/', 1)[0]}")
