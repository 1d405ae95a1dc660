"""What every baseline release (`pate dpsgd`, `pate fedavg`, `pate synth`) does around its
training, in one place: the step through the run directory's door (the outputs staged and
swapped in together once the release is charged, so an interruption leaves the old result),
ε and δ checked before any work, the private splits, the ledger's refusal of a release over
the data set's total budget before any training, and the public head of the result file."""

from __future__ import annotations

import contextlib
import time
from typing import Callable, Iterator, TypeVar

import jax
import numpy as np

from analysis.core.errors import PateError
from analysis.mechanisms import composition, events
from analysis.reporting.report_io import figure_head
from analysis.core.validation import check_delta, check_positive
from pate.config import Config
from pate.data import Splits, load_dataset, split
from pate.programs.progress import Progress
from pate.release.labels import check_run_ledger
from pate.store import ledger as ledger_mod, rundir
from pate.store.door import Door, step


@contextlib.contextmanager
def release_step(name: str, workdir, config: Config, eps: float, *, overwrite: bool, echo) -> Iterator[Door]:
    """`pate.store.door.step` for a baseline named ``name`` (its files and config, no
    teachers needed), with ``eps`` and ``[privacy] delta`` checked first."""
    with step(name, workdir, config=config, overwrite=overwrite, data={}, keep_config=True, echo=echo) as door:
        check_positive("eps", eps)
        check_delta(config.privacy.delta)
        if any(door.run.exists(n) for n in (rundir.LABELS_NPZ, rundir.LABELS_ROUND2_NPZ, rundir.VOTES_NPZ)):
            # beside a PATE run: its releases' ledger, or a refusal before any training
            check_run_ledger(ledger_mod.Ledger.for_config(config), door.run.path)
        yield door


def private_splits(config: Config) -> Splits:
    """The data set cut as every command cuts it: private train split, public pool, evaluation."""
    return split(load_dataset(config.data), config.data.public_size)


def budgeted_ledger(config: Config, cost, what: str) -> ledger_mod.Ledger:
    """The data set's ledger, after refusing ``what`` (one release of ``cost``) when it would take
    the cumulative ε over ``[privacy] total_budget``."""
    book = ledger_mod.Ledger.for_config(config)
    book.check_budget([cost], config.privacy.total_budget, config.privacy.delta, what)
    return book


def accuracy_fields(accuracy: float, eval_points: int, accuracy_test: float, test_points: int) -> dict:
    """The accuracy keys of a trained baseline's result file (what `bench/compare.py` reads):
    on the evaluation split (the figure to compare) and on the whole test split."""
    return {"accuracy": accuracy, "eval_points": eval_points, "accuracy_test": accuracy_test,
            "test_points": test_points}


def result_head(data_set: dict, eps: float, target_eps: float, delta: float, relation: str,
                cost: composition.Cost) -> dict:
    """The first keys of a baseline's result file, as release.json's
    (`analysis.reporting.report_io.figure_head`): ``eps`` at ``delta``, what the data set has spent in all
    (``data_set``: `pate.store.ledger.Ledger.summary` with this release counted), then
    ``release_eps`` at ``release_delta``, this release's own ε (at ``delta``); the ε asked
    for, the neighbouring relation of both, the ledger's summary, and this release's own
    dp-accounting event (``cost``'s: `analysis.mechanisms.events.release_doc`)."""
    own_is = (f"this release's own figure ({relation} neighbours): NOT what the data set has spent when it has "
              "other releases")
    return {**figure_head(eps, delta, data_set, own_is), "target_eps": target_eps,
            "neighbouring_relation": relation, "data_set": data_set, "dp_event": events.release_doc([cost])}


def publish_lines(data_set: dict | None, file: str) -> list[str]:
    """The first line of a baseline's summary: the data set's figure, ``file``'s first (none
    without a ledger summary)."""
    return [ledger_mod.publish_line(data_set, file, "on the lines below")] if data_set else []


State = TypeVar("State")


def training_loop(label: str, steps: int, step: Callable[[int, State], State], state: State, *,
                  show_progress: bool, every: int = 1, diverged: str) -> tuple[State, float]:
    """``state = step(t, state)`` for t < ``steps`` under a progress bar named ``label``
    (updated every ``every`` steps and at the end); a state with a non-finite value raises
    ``PateError(diverged)``. Returns the host state and the training time."""
    start = time.time()
    with Progress(label, steps, show=show_progress) as bar:
        for t in range(steps):
            state = step(t, state)
            if (t + 1) % every == 0 or t + 1 == steps:
                bar.update(t + 1)
    state = jax.tree.map(np.asarray, state)
    if not all(np.isfinite(leaf).all() for leaf in jax.tree.leaves(state)):
        raise PateError(diverged)
    return state, time.time() - start
