"""Orbax checkpoints in a run directory, for the teachers, the student and DP-SGD.

Two shapes: numbered steps kept by a `CheckpointManager` (the teachers: stacked
parameters, optimizer state and a JSON progress record every few epochs, so a run can
resume), and one parameter tree in one folder (`save_params`: the student, the DP-SGD
model). A failed write leaves no ``*.orbax-checkpoint-tmp*`` folder and ends in one
`PateError`; a checkpoint is read back only after its sha256 matches the one its
producer recorded (`read_record`, `verified_restore`), and a damaged one ends in one
line, not a tensorstore traceback.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence, TypeVar

import jax

from analysis.core.errors import PateError
from analysis.core.logs import quiet_absl
from pate.store import digests, rundir
from pate.config import Config

T = TypeVar("T")


def short_error(err: BaseException) -> str:
    """The first line of an error (tensorstore's run to 100+ lines)."""
    text = str(err).strip().splitlines()
    return text[0][:300] if text else type(err).__name__


def remove_orbax_tmp(directory: Path) -> None:
    """Removes the temporary folders orbax leaves when a save fails part-way."""
    if not directory.is_dir():
        return
    for tmp in directory.glob("*orbax-checkpoint-tmp*"):
        shutil.rmtree(tmp, ignore_errors=True)


def _closed_loop_callback(unraisable) -> bool:
    """Whether an unraisable error is a late tensorstore callback into orbax's closed event
    loop (a save that failed on a full disk: the writes still in flight complete after
    orbax closed its loop, and each prints a traceback)."""
    err = unraisable.exc_value
    return (isinstance(err, RuntimeError) and str(err) == "Event loop is closed"
            and unraisable.object is None)


class _FailedWritesFilter:
    """Drops, once a save has failed (`failed`), asyncio's "exception was never retrieved" records:
    orbax gathers its tensorstore writes in futures, and when the disk fills up the ones nobody awaited
    any more are logged with their traceback when they are collected, after the save's one line
    (seen under load on a full tmpfs: 7 lines more). Every other record passes, and all of them
    before a save fails."""

    failed = False

    @classmethod
    def filter(cls, record) -> bool:
        return not (cls.failed and "exception was never retrieved" in record.getMessage())


def _failed_save() -> None:
    """What a failed save says before its one line: asyncio's late records of its writes are dropped."""
    _FailedWritesFilter.failed = True


def _drop_closed_loop_callbacks() -> None:
    """Installs, once, a `sys.unraisablehook` that drops `_closed_loop_callback` errors and
    passes every other one to the hook it replaces, and `_FailedWritesFilter` on asyncio's logger:
    the failed save already ends in its one line."""
    import logging
    import sys

    asyncio_log = logging.getLogger("asyncio")
    if _FailedWritesFilter not in asyncio_log.filters:
        asyncio_log.addFilter(_FailedWritesFilter)
    previous = sys.unraisablehook
    if getattr(previous, "drops_closed_loop_callbacks", False):
        return

    def hook(unraisable):
        if not _closed_loop_callback(unraisable):
            previous(unraisable)

    hook.drops_closed_loop_callbacks = True
    sys.unraisablehook = hook


def _probe(folder: Path, what: str, then: str) -> None:
    """Refuses a folder that cannot take a file before orbax is asked to write in it: when
    orbax fails to create its folder, its writer threads (not daemons) wait for ever for a
    signal that never comes, and the process never exits."""
    import tempfile

    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder) as f:
            f.write(b"0")
            f.flush()
            os.fsync(f.fileno())
    except OSError as err:
        why = "a file is in the way" if isinstance(err, FileExistsError) else err.strerror or err
        raise PateError(f"{what} in {folder}: {why}; free space or make it writable, then {then}") from None


def abstract(tree: Any) -> Any:
    """The shapes and dtypes of a tree: what a restore fills in."""
    return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), tree)


def _target(x: Any) -> jax.ShapeDtypeStruct:
    """What a restore fills in for one leaf: its shape and dtype, and its sharding if it has one."""
    return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=getattr(x, "sharding", None))


# --------------------------------------------------------------------------- numbered steps


def open_manager(directory: Path, *, keep: int = 2, create: bool = True, private: bool = False):
    """A synchronous orbax `CheckpointManager` over `directory` keeping the last `keep`
    steps; with `create` the folder is made (owner-only when `private`) and the
    temporary folders of a save killed part-way are removed."""
    import orbax.checkpoint as ocp

    options = ocp.CheckpointManagerOptions(max_to_keep=keep, enable_async_checkpointing=False,
                                           create=create)
    if create and jax.process_index() == 0:
        if private:
            rundir.make_private_dir(directory)
        remove_orbax_tmp(directory)
    return ocp.CheckpointManager(directory.resolve(), options=options)


def save_step(manager, step: int, trees: Mapping[str, Any], records: Mapping[str, dict], *,
              then: str, unit: str = "step") -> None:
    """Saves step `step` (an epoch for the teachers: `unit` names it in messages): each
    of `trees` (arrays) and `records` (JSON) under its name.

    Raises:
      PateError: the write failed (full disk, read-only folder); no temporary folder is
        left, and the message ends with `then` (what to do once it is fixed).
    """
    import orbax.checkpoint as ocp

    _probe(Path(manager.directory), f"cannot write the checkpoint of {unit} {step}", then)
    _drop_closed_loop_callbacks()
    try:
        with quiet_absl():
            items = {name: ocp.args.StandardSave(tree) for name, tree in trees.items()}
            items.update({name: ocp.args.JsonSave(record) for name, record in records.items()})
            manager.save(step, args=ocp.args.Composite(**items), force=True)
            manager.wait_until_finished()
    except Exception as err:  # noqa: BLE001 - orbax/tensorstore wrap OSError in several types
        _failed_save()
        directory = Path(manager.directory)
        remove_orbax_tmp(directory)
        raise PateError(f"cannot write the checkpoint of {unit} {step} in {directory}: "
                        f"{short_error(err)}; free space or make it writable, then {then}") from None


def restore_step(manager, step: int, like: Mapping[str, Any], records: Sequence[str] = (), *,
                 strict: bool = True) -> dict:
    """Step `step`'s trees shaped like `like` (by name) and its JSON `records`.

    A leaf of `like` that carries a sharding is restored as a `jax.Array` of it: each process
    reads the rows of its own devices only. With ``strict=False`` a leaf longer than the
    stored array is padded with zeros (orbax's padding), for a sharding that needs it.
    """
    import orbax.checkpoint as ocp

    items = {name: ocp.args.StandardRestore(jax.tree.map(_target, tree), strict=strict)
             for name, tree in like.items()}
    items.update({name: ocp.args.JsonRestore() for name in records})
    return manager.restore(step, args=ocp.args.Composite(**items))


# --------------------------------------------------------------------------- one tree


#: What orbax's success marker says once the absolute path is dropped from it.
_MARKER_TEXT = "Checkpoint commit was successful\n"


def save_params(directory: Path, params: Any, *, then: str = "train again") -> None:
    """Writes one parameter tree to `directory` (replacing it).

    Orbax's success marker names the absolute path it was written to (a user name, a
    home folder); the student and the DP-SGD model are released, so the marker is kept
    without the path. This process writes it alone (`_alone`: in a cluster, process 0 trains
    the student while the others wait for its word, `pate run --distributed`).

    Raises:
      PateError: the write failed; the message ends with `then`.
    """
    import orbax.checkpoint as ocp

    _probe(directory.parent, f"cannot write the checkpoint {directory}", then)
    _drop_closed_loop_callbacks()
    try:
        with quiet_absl(), ocp.StandardCheckpointer(multiprocessing_options=_alone()) as ckptr:
            ckptr.save(directory.resolve(), params, force=True)
            ckptr.wait_until_finished()
    except Exception as err:  # noqa: BLE001 - orbax/tensorstore wrap OSError in several types
        _failed_save()
        remove_orbax_tmp(directory.parent)
        raise PateError(f"cannot write the checkpoint {directory}: {short_error(err)}; free space "
                        f"or make it writable, then {then}") from None
    marker = directory / "commit_success.txt"
    if marker.exists():
        rundir.atomic_write_text(marker, _MARKER_TEXT)


def restore_params(directory: Path, like: Any) -> Any:
    """The parameter tree `save_params` wrote, shaped like `like`, on this process's first
    device. This process reads it alone: in a cluster (`--distributed`) orbax waits at no
    barrier for the others, so one process may read the tree while another does something
    else (`pate label --round 2 --distributed`: every process reads the round-1 student, and
    one that fails before reading it must not leave the others waiting in orbax's barrier)."""
    import orbax.checkpoint as ocp

    device = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
    target = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=device), like)
    with ocp.StandardCheckpointer(multiprocessing_options=_alone()) as ckptr:
        return ckptr.restore(directory.resolve(), target)


def _alone():
    """Orbax's options for this process alone: its own primary host, no barrier with the
    other processes of a cluster (none without one)."""
    import orbax.checkpoint as ocp

    me = jax.process_index()
    return ocp.options.MultiprocessingOptions(primary_host=me, active_processes={me})


# --------------------------------------------------------------------------- reading back


@dataclasses.dataclass(frozen=True)
class Record:
    """The JSON record a training command wrote beside its checkpoint, and the run's config.

    Attributes:
      run: the run directory.
      path: the JSON record's path.
      info: its content.
      config: the run's ``config.toml``.
      num_classes, image_shape: what the model was built for (checked).
      remake: the command that trains it again (ends every refusal).
      noun: what was trained ("teachers", "student").
      command: the command that wrote it ("train-teachers").
    """

    run: rundir.RunDir
    path: Path
    info: dict
    config: Config
    num_classes: int
    image_shape: tuple[int, ...]
    remake: str
    noun: str
    command: str

    def refuse(self, missing: str) -> PateError:
        """The error for a record that lacks (or holds an invalid) `missing`."""
        return PateError(f"{self.path} is not a {self.noun} record written by `pate {self.command}` "
                         f"(missing or invalid {missing}); {self.remake}")


def read_record(workdir: str | Path, *, record: str, directory: str, noun: str, command: str,
                pronoun: str) -> Record:
    """The record and config of a finished training command in a run directory.

    Raises:
      PateError: the record or the checkpoint folder is missing, or the record holds no
        valid ``num_classes`` / ``image_shape``.
    """
    run = rundir.RunDir(workdir)
    if not run.exists(record) or not run.exists(directory):
        raise PateError(f"{run.path} holds no trained {noun} ({record} and {directory}/); run "
                        f"`pate {command}` first")
    config = run.read_config()
    info = run.read_json(record)
    remake = f"run `pate {command} --workdir {run.path} --overwrite` to train {pronoun} again"
    try:
        num_classes, image_shape = int(info["num_classes"]), tuple(int(d) for d in info["image_shape"])
        if num_classes < 2 or len(image_shape) not in (1, 3) or min(image_shape) < 1:  # images or embeddings
            raise ValueError
    except (KeyError, TypeError, ValueError, AttributeError):
        num_classes, image_shape = 0, ()
    found = Record(run, run / record, info, config, num_classes, image_shape, remake, noun, command)
    if not num_classes:
        raise found.refuse("num_classes or image_shape")
    return found


def verified_restore(what: str, path: Path, digest: str | None, remake: str,
                     restore: Callable[[], T]) -> T:
    """`restore()` once the checkpoint at `path` is the one recorded (sha256 `digest`;
    None for an old run without one).

    Raises:
      PateError: the checkpoint is missing, changed or unreadable (one line, ending
        with `remake`).
    """
    digests.check_recorded(what, path, digest, remake)
    if not path.exists():
        raise PateError(f"{path} is missing: the run records the {what}; {remake}")
    try:
        return restore()
    except PateError:  # `restore` said what went wrong itself
        raise
    except Exception as err:  # noqa: BLE001 - tensorstore/orbax raise many types
        raise PateError(f"cannot read the {what} in {path} ({short_error(err)}); {remake}") from None
