"""The run directory: fixed artifact names, atomic writes, metadata, and the rules for
overwriting and resuming.

Every command reads and writes one directory (`--workdir`). Files are written to a
temporary file in the same directory and renamed into place, so a reader never sees a
half-written artifact. Every JSON artifact carries a `meta` object with the config
hash and the package version.
"""

from __future__ import annotations

import datetime
import io
import json
import os
import shutil
from pathlib import Path
from typing import Any, Iterable, Mapping

import numpy as np

from analysis.core.errors import PateError
from pate.config import Config, config_diff, config_file_text, config_hash, config_to_dict, load_config
from pate.store.ledger_home import ledger_folder_of

CONFIG_TOML = "config.toml"
TEACHERS_DIR = "teachers"
TEACHERS_JSON = "teachers.json"
VOTES_NPZ = "votes.npz"
LABELS_NPZ = "labels.npz"
STUDENT_DIR = "student"
STUDENT_JSON = "student.json"
PRIVACY_JSON = "privacy.json"
PRIVACY_PNG = "privacy.png"
DPSGD_DIR = "dpsgd"
DPSGD_JSON = "dpsgd.json"
FEDAVG_DIR = "fedavg"
FEDAVG_JSON = "fedavg.json"
SYNTH_DIR = "synth"  # the PATE-GAN's generator (released)
SYNTH_JSON = "synth.json"
SYNTHETIC_NPZ = "synthetic.npz"
SYNTH_PNG = "synth-samples.png"
#: Cached ScatterNet features of the private set (private, like the data).
DPSGD_FEATURES_DIR = "dpsgd-features"
RELEASE_JSON = "release.json"
#: Round 2 (`pate label --round 2`): its votes (private), its release, the round-1 student
#: its teachers stand on (public: trained on round 1's release only) and round 1's
#: release.json (public), kept beside round 2's.
VOTES_ROUND2_NPZ = "votes-round2.npz"
LABELS_ROUND2_NPZ = "labels-round2.npz"
STUDENT_ROUND1_DIR = "student-round1"
STUDENT_ROUND1_JSON = "student-round1.json"
RELEASE_ROUND1_JSON = "release-round1.json"
PIPELINE_JSON = "pipeline.json"  # `pate run`'s record of its finished steps
#: The secret key of pipeline.json's digests (`digest_key`): private, like what they cover.
PIPELINE_KEY = "pipeline.key"

#: The files a release publishes and `pate ledger --import` counts: one that a command replaces
#: is kept aside in the ``stale-<step>-<time>/`` folder (`pate.store.door.Staging.commit`), never
#: deleted, so that every release a run made can still be counted.
RELEASE_FILES = (LABELS_NPZ, LABELS_ROUND2_NPZ, RELEASE_JSON, RELEASE_ROUND1_JSON, DPSGD_JSON, FEDAVG_JSON,
                 SYNTH_JSON, SYNTHETIC_NPZ)

#: Files and folders that hold private values: created owner-only (0600 / 0700).
PRIVATE_ARTIFACTS = frozenset({"teachers", "teachers.json", "votes.npz", "privacy.json", "privacy.png",
                               "dpsgd-features", PIPELINE_KEY, VOTES_ROUND2_NPZ})

#: The artifacts each command produces (what `--overwrite` replaces).
TEACHER_ARTIFACTS = (TEACHERS_DIR, TEACHERS_JSON)
LABEL_ARTIFACTS = (VOTES_NPZ, LABELS_NPZ)
STUDENT_ARTIFACTS = (STUDENT_DIR, STUDENT_JSON)
ANALYSIS_ARTIFACTS = (PRIVACY_JSON, PRIVACY_PNG, RELEASE_JSON)
DPSGD_ARTIFACTS = (DPSGD_DIR, DPSGD_JSON)
FEDAVG_ARTIFACTS = (FEDAVG_DIR, FEDAVG_JSON)
SYNTH_ARTIFACTS = (SYNTH_DIR, SYNTH_JSON, SYNTHETIC_NPZ, SYNTH_PNG)
ROUND2_ARTIFACTS = (VOTES_ROUND2_NPZ, LABELS_ROUND2_NPZ, STUDENT_ROUND1_DIR, STUDENT_ROUND1_JSON,
                    RELEASE_ROUND1_JSON)
#: The folders among them (checkpoints, cached features; round 1's student kept by round 2).
ARTIFACT_DIRS = (TEACHERS_DIR, STUDENT_DIR, DPSGD_DIR, FEDAVG_DIR, SYNTH_DIR, DPSGD_FEATURES_DIR, STUDENT_ROUND1_DIR)
#: Every file and folder a run directory may hold (what no report may be written over).
RUN_ARTIFACTS = ((CONFIG_TOML, PIPELINE_JSON, PIPELINE_KEY) + TEACHER_ARTIFACTS + LABEL_ARTIFACTS
                 + STUDENT_ARTIFACTS + ANALYSIS_ARTIFACTS + DPSGD_ARTIFACTS + FEDAVG_ARTIFACTS + SYNTH_ARTIFACTS
                 + ROUND2_ARTIFACTS + (DPSGD_FEATURES_DIR,))

#: Files that mark a folder as a run directory (any one of them).
RUN_MARKERS = (CONFIG_TOML, TEACHERS_JSON, VOTES_NPZ, LABELS_NPZ, STUDENT_JSON, PIPELINE_JSON, DPSGD_JSON,
               FEDAVG_JSON, SYNTH_JSON)
#: Prefixes of the names pate's machinery uses in a run directory (lock, staging, moved aside).
RESERVED_PREFIXES = (".pate.lock", ".new-", ".old-", "stale-")

_META_KEY = "meta"


def _version() -> str:
    from pate import __version__

    return __version__


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Writes `data` to `path` atomically (`analysis.core.files.write_atomic`: temp file in the
    same directory, flushed, synced, renamed), creating the directory first. Files named
    in `PRIVATE_ARTIFACTS` are owner-only (0600); others get the usual umask mode.
    """
    from analysis.core.files import write_atomic

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, data, private=path.name in PRIVATE_ARTIFACTS)


def make_private_dir(path: str | Path) -> Path:
    """Creates (or restricts) a folder of private artifacts to its owner (0700)."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    os.chmod(path, 0o700)
    return path


class NonFiniteRows(PateError):
    """A public map gave NaN or inf rows (`cached_rows` keeps none): ``bad`` of ``total`` inputs.
    The map's caller names the map (`pate.programs.public_features`)."""

    def __init__(self, bad: int, total: int):
        super().__init__(f"a public map gives NaN or inf for {bad} of {total} inputs; nothing was cached")
        self.bad, self.total = bad, total


def cached_rows(path: Path | None, rows: int, compute) -> np.ndarray:
    """The array `compute()` makes, kept at `path` (an .npy named by its inputs' content: a public
    map's rows of private inputs, so written owner-only in an owner-only folder, made only when the
    first file is written): read from there when it holds `rows` finite rows, else made (a missing
    or damaged file is made again) and written atomically. `path` None: made, not kept.

    Raises:
      NonFiniteRows: `compute()` gave a NaN or inf; nothing is written (no folder made either).
    """
    if path is not None and path.exists():
        try:
            cached = np.load(path, allow_pickle=False)
            if cached.shape[0] == rows and np.isfinite(cached).all():
                return cached
        except (OSError, ValueError):
            pass  # damaged cache: compute again
    out = compute()
    finite = np.isfinite(np.asarray(out).reshape(len(out), -1)).all(axis=1) if np.ndim(out) else np.array([True])
    if not finite.all():
        raise NonFiniteRows(int((~finite).sum()), int(finite.size))
    if path is not None:
        from analysis.core.files import write_atomic

        buf = io.BytesIO()
        np.save(buf, out, allow_pickle=False)
        make_private_dir(path.parent)
        write_atomic(path, buf.getvalue(), private=True)
    return out


def atomic_write_text(path: str | Path, text: str) -> None:
    """`atomic_write_bytes` for UTF-8 text."""
    atomic_write_bytes(path, text.encode("utf-8"))


def metadata(config: Config | None) -> dict[str, Any]:
    """The `meta` object of an artifact: config hash, package version, time written."""
    return {
        "config_hash": config_hash(config) if config is not None else None,
        "pate_version": _version(),
        "written_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


def write_json(path: str | Path, payload: Mapping[str, Any], config: Config | None) -> None:
    """Writes `payload` plus a `meta` object (see `metadata`) after it as JSON, atomically
    (a published file's first key is its figure: dpsgd.json's ``eps``).

    numpy arrays and scalars become lists and numbers; NaN and infinities become null.
    """
    from analysis.reporting.report_io import jsonable

    doc = dict(jsonable(payload))
    doc.setdefault(_META_KEY, metadata(config))
    atomic_write_text(path, json.dumps(doc, indent=2, allow_nan=False) + "\n")


def open_artifact(path: str | Path):
    """Opens a run artifact for reading, only when it is a plain file
    (`analysis.core.files.open_plain`: never a link, a folder, a FIFO or a device)."""
    from analysis.core.files import open_plain

    return open_plain(path, remedy=f"move it aside, then {remake_hint(path)}")


def read_artifact(path: str | Path) -> bytes:
    """The bytes of a plain-file run artifact (`open_artifact`)."""
    with open_artifact(path) as f:
        return f.read()


def read_json(path: str | Path) -> dict[str, Any]:
    """Reads a JSON artifact (an object). Raises PateError when missing, not a plain
    file, unreadable or not a JSON object."""
    path = Path(path)
    try:
        doc = json.loads(read_artifact(path).decode("utf-8"))
    except FileNotFoundError:
        raise PateError(f"{path} not found") from None
    except (OSError, ValueError) as err:
        raise PateError(f"{path} is not readable JSON ({err}); {remake_hint(path)}") from None
    if not isinstance(doc, dict):
        raise PateError(f"{path} is not a JSON object (it was not written by pate or is damaged); "
                        f"{remake_hint(path)}")
    return doc


def write_npz(path: str | Path, arrays: Mapping[str, np.ndarray],
              config: Config | None = None, *, meta: Mapping[str, Any] | None = None) -> None:
    """Writes arrays to an .npz atomically; with a config or `meta` entries, adds a `meta`
    JSON string (`metadata(config)` and those entries).

    The `meta` entry is a 0-d unicode array, readable with `allow_pickle=False`.
    """
    if _META_KEY in arrays:
        raise ValueError(f"array name {_META_KEY!r} is reserved for metadata")
    buf = io.BytesIO()
    extra = ({} if config is None and not meta
             else {_META_KEY: np.array(json.dumps({**metadata(config), **(meta or {})}))})
    np.savez(buf, **{k: np.asarray(v) for k, v in arrays.items()}, **extra)
    atomic_write_bytes(path, buf.getvalue())


def read_npz(path: str | Path, required: Iterable[str] = ()) -> dict[str, np.ndarray]:
    """Reads an .npz (no pickles) into a dict; `meta`, if present, is decoded to a dict.

    Raises:
      PateError: the file is missing, unreadable, or lacks a `required` array.
    """
    path = Path(path)
    try:
        with open_artifact(path) as fh, np.load(fh, allow_pickle=False) as f:
            out: dict[str, Any] = {k: f[k] for k in f.files}
    except PateError:
        raise
    except FileNotFoundError:
        raise PateError(f"{path} not found") from None
    except Exception as err:  # zipfile/ValueError/OSError for a damaged file
        raise PateError(f"{path} is not a readable .npz ({err}); {remake_hint(path)}") from None
    missing = [k for k in required if k not in out]
    if missing:
        raise PateError(f"{path} lacks {', '.join(missing)}; {remake_hint(path)}")
    if _META_KEY in out:
        try:
            meta = json.loads(str(out[_META_KEY]))
            if not isinstance(meta, dict):
                raise ValueError
        except ValueError:
            raise PateError(f"{path} has an invalid 'meta' entry: it was not written by pate or is "
                            f"damaged; {remake_hint(path)}") from None
        out[_META_KEY] = meta
    return out


#: Where `pate analyze` keeps a sanitised draw it charged but could not put in place (owner-only;
#: the next `pate analyze` of the same labels publishes it: `pate.steps.analyze`).
UNPUBLISHED_DIR = ".unpublished-analyze"


def remove(path: str | Path) -> None:
    """Deletes a file, link or folder of artifacts (nothing when it is missing)."""
    path = Path(path)
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


def remake_hint(path: str | Path) -> str:
    """The command that writes a run artifact again, for messages."""
    path = Path(path)
    command = {VOTES_NPZ: "label", LABELS_NPZ: "label", VOTES_ROUND2_NPZ: "label --round 2",
               LABELS_ROUND2_NPZ: "label --round 2", TEACHERS_JSON: "train-teachers",
               TEACHERS_DIR: "train-teachers", STUDENT_JSON: "train-student",
               STUDENT_DIR: "train-student", PRIVACY_JSON: "analyze"}.get(path.name)
    if command is None:
        return "write it again"
    flag = "" if command == "analyze" else " --overwrite"
    return f"run `pate {command} --workdir {path.parent}{flag}` to write it again"


class RunDir:
    """One run directory and its artifacts.

    Args:
      path: the directory (created on the first write).
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)

    def __truediv__(self, name: str) -> Path:
        return self.path / name

    def exists(self, name: str) -> bool:
        """Whether anything is at `name`: a dangling link or a FIFO counts (damage is not absence)."""
        return os.path.lexists(self.path / name)

    def write_config(self, config: Config) -> None:
        """Writes the resolved config as `config.toml`, whole (`pate.config.config_file_text`)."""
        atomic_write_text(self.path / CONFIG_TOML, config_file_text(config))

    def read_config(self, overrides: Mapping[str, Any] | None = None) -> Config:
        """Reads `config.toml` back (only a plain file: `open_artifact`), with `overrides`."""
        path = self.path / CONFIG_TOML
        try:
            raw = read_artifact(path)
        except FileNotFoundError:
            raise PateError(f"{path} not found: is {self.path} a run directory?") from None
        except OSError as err:
            raise PateError(f"cannot read {path}: {err.strerror or err}") from None
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise PateError(f"{path} is not UTF-8 text: the run directory's config is damaged") from None
        return load_config(path, overrides, text=text)

    def own_config(self) -> Config | None:
        """`config.toml` read back, or None where the directory has none; one that is
        there but unreadable (damaged, a FIFO, a link) is refused, never replaced by
        defaults."""
        if not os.path.lexists(self.path / CONFIG_TOML):
            return None
        return self.read_config()

    def stored_config(self) -> Config | None:
        """`config.toml` read back, or None where the directory has no readable one."""
        if not self.exists(CONFIG_TOML):
            return None
        try:
            return self.read_config()
        except PateError:
            return None

    def write_json(self, name: str, payload: Mapping[str, Any], config: Config | None) -> None:
        write_json(self.path / name, payload, config)

    def read_json(self, name: str) -> dict[str, Any]:
        return read_json(self.path / name)

    def write_npz(self, name: str, arrays: Mapping[str, np.ndarray],
                  config: Config | None = None, *, meta: Mapping[str, Any] | None = None) -> None:
        write_npz(self.path / name, arrays, config, meta=meta)

    def read_npz(self, name: str, required: Iterable[str] = ()) -> dict[str, np.ndarray]:
        return read_npz(self.path / name, required)

    def prepare(self, artifacts: Iterable[str], *, overwrite: bool = False,
                resume: bool = False, command: str = "this command",
                again: str = "replace them or --resume to continue",
                guard: Iterable[str] | None = None, clear: bool = True) -> bool:
        """May a command write `artifacts` here? The one answer (`pate.store.door.step` asks it
        for every writer); clears the artifacts if told to overwrite them.

        Args:
          artifacts: the names the command writes.
          overwrite: replace existing artifacts (deleted here when `clear`).
          resume: keep them (the command continues from them).
          command: the command's name, for messages.
          again: what ``--overwrite`` does, for the message ("pass --overwrite to {again}").
          guard: the artifacts whose presence refuses a write (default: `artifacts`).
          clear: delete the artifacts to be overwritten now (False: a staged writer swaps
            them out when its new ones are complete).

        Returns:
          True when existing artifacts are kept for resuming, False for a fresh start.

        Raises:
          PateError: artifacts exist and neither flag is given; both flags are given;
            `resume` is asked but there is nothing to resume from.
        """
        if overwrite and resume:
            raise PateError("--overwrite and --resume exclude each other; pick one")
        artifacts = tuple(artifacts)
        present = [a for a in artifacts if self.exists(a)]
        if resume:
            if not present:
                raise PateError(f"nothing to resume: {self.path} holds none of "
                                f"{', '.join(artifacts)}; run {command} without --resume")
            return True
        guarded = [a for a in (artifacts if guard is None else tuple(guard)) if self.exists(a)]
        if guarded and not overwrite:
            raise PateError(f"{self.path} already holds {', '.join(guarded)}; pass --overwrite to {again}")
        for name in present if clear else ():
            remove(self.path / name)
        self.path.mkdir(parents=True, exist_ok=True)
        return False

    def check_same_config(self, config: Config) -> None:
        """Raises PateError when `config.toml` here differs from `config` (resume)."""
        stored = self.read_config()
        diff = config_diff(stored, config)
        if diff:
            raise PateError(f"cannot resume: {self.path / CONFIG_TOML} differs from this config "
                            f"in {', '.join(diff)}; use the same config or --overwrite")

    def check_same_data(self, config: Config, stored: Config | None = None, *,
                        held: str = "holds a run on data set {name!r} with another",
                        remedy: str = "use that run's config or another --workdir") -> None:
        """Raises PateError when `config`'s ``[data]`` differs from the run's (`stored`, by
        default this directory's `config.toml`): what the run holds (teachers, labels)
        belongs to another data set or another pool. The message is ``PATH {held} [data]
        section (data.KEY, ... differ); {remedy}``, ``{name}`` in `held` being the run's
        data set."""
        stored = self.read_config() if stored is None else stored
        a, b = config_to_dict(stored)["data"], config_to_dict(config)["data"]
        diff = [f"data.{k}" for k in b if a[k] != b[k]]
        if diff:
            raise PateError(f"{self.path} {held.format(name=a['name'])} [data] section "
                            f"({', '.join(diff)} differ); {remedy}")


def output_problem(path: str | Path, *, own_run: str | Path | None = None, own_name: str | None = None) -> str | None:
    """Why a report may not be written at `path`, or None: a link, a folder, a device or
    a FIFO there; a place inside a ledger folder (`pate.store.ledger_home.ledger_folder_of`);
    a place inside a run directory (one with config.toml, or `own_run`) but
    at its top; a run artifact's name there, or one of pate's own (lock, staging,
    stale-*) — except `own_name` in `own_run`, the report's own file. In a folder that
    only holds some of a run's files (`RUN_MARKERS`: a `label --votes` run), the files
    and folders of a run that are there, and pate's own names."""
    import stat

    path = Path(path)
    if path.is_symlink():
        return f"{path} is a symbolic link (pate never writes through a link)"
    try:
        mode = os.stat(path).st_mode
        if stat.S_ISDIR(mode):
            return f"{path} is a folder; give a file name"
        if not stat.S_ISREG(mode):
            return f"{path} is not a plain file (a device, FIFO or socket)"
    except FileNotFoundError:
        pass
    except OSError as err:
        return f"cannot use {path}: {err.strerror or err}"
    target = Path(os.path.realpath(path.parent)) / path.name
    ledgers = ledger_folder_of(target)
    if ledgers is not None:
        return f"{path} is inside the ledger folder {ledgers} (no command writes there but the ledger itself)"
    own = None if own_run is None else Path(os.path.realpath(own_run))
    for folder in target.parents:
        # A run directory (config.toml, or the one analysed), or a folder holding some of
        # a run's files (a `label --votes` run): there only what is there is protected.
        full = folder == own or os.path.lexists(folder / CONFIG_TOML)
        if not full and not any(os.path.lexists(folder / m) for m in RUN_MARKERS):
            continue
        rel = target.relative_to(folder).parts
        ours = rel[0].startswith(RESERVED_PREFIXES) or (
            rel[0] in RUN_ARTIFACTS and (full or os.path.lexists(folder / rel[0])))
        if len(rel) > 1 and (full or ours):
            return f"{path} is inside {rel[0]}/ of the run directory {folder}"
        if len(rel) == 1 and ours and not (folder == own and rel[0] == own_name):
            return f"{path} is an artifact of the run directory {folder}"
    return None
