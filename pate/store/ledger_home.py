"""Where ledgers live, and whether a path lies among them: the variable and the default folder
`pate.store.identity.directory_for` picks from, the name of a ledger folder's key, and
`ledger_folder_of`, which every writer asks before it writes a report, an export, a run
directory or an encoder (`pate.store.rundir.output_problem`, `pate.store.door.step`, `pate
features`): no command writes into a ledger folder but the ledger itself."""

from __future__ import annotations

import os
from pathlib import Path

#: The environment variable naming the ledger folder (after a config's ``[privacy] ledger``).
LEDGER_ENV = "PATE_LEDGER_DIR"
#: The ledger folder's 32-byte secret key (`pate.store.identity`).
KEY_FILE = ".key"
#: What besides the key marks a folder pate keeps ledgers in: a ledger (``*.jsonl``) or the
#: records and links of its data sets (`pate.store.identity`).
_LEDGER_MARKS = (".records", ".links.json", ".aliases.json", ".identities.json")


def state_directory() -> Path:
    """The default ledger folder without ``$PATE_LEDGER_DIR``: ``$XDG_STATE_HOME/pate/ledgers``
    when that is absolute (a relative one is ignored, as the XDG Base Directory specification
    says), else ``~/.local/state/pate/ledgers``."""
    state = os.environ.get("XDG_STATE_HOME") or ""
    if not os.path.isabs(state):
        state = os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(state) / "pate" / "ledgers"


def named_directories(config=None) -> list[Path]:
    """The ledger folders pate would use, made or not: the config's ``[privacy] ledger``,
    ``$PATE_LEDGER_DIR`` and `state_directory`; one that is not absolute is left out (the
    command that uses it refuses it)."""
    privacy = getattr(config, "privacy", None)
    named = []
    for where in (getattr(privacy, "ledger", "") or "", os.environ.get(LEDGER_ENV) or ""):
        path = Path(where.strip()).expanduser() if isinstance(where, str) and where.strip() else None
        if path is not None and path.is_absolute():
            named.append(path)
    return [*named, state_directory()]


def holds_ledgers(folder: Path) -> bool:
    """A folder pate keeps ledgers in, whatever names it: its 32-byte key beside a ledger or
    the records of its data sets."""
    try:
        key = folder / KEY_FILE
        if key.is_symlink() or not key.is_file() or key.stat().st_size != 32:
            return False
        return any(os.path.lexists(folder / mark) for mark in _LEDGER_MARKS) or any(folder.glob("*.jsonl"))
    except OSError:
        return False


def ledger_folder_of(path, config=None) -> Path | None:
    """The ledger folder `path` is or lies inside (links resolved), or None: one pate names
    (`named_directories`) or one that holds ledgers (`holds_ledgers`)."""
    try:
        target = Path(os.path.realpath(os.path.expanduser(os.fspath(path))))
        named = {Path(os.path.realpath(p)) for p in named_directories(config)}
    except (TypeError, ValueError, OSError):
        return None
    for folder in (target, *target.parents):
        if folder in named or holds_ledgers(folder):
            return folder
    return None
