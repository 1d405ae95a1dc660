"""What every baseline release (`pate dpsgd`, `pate fedavg`, `pate synth`) does around its
training, in one place: the step through the run directory's door (the outputs staged and
swapped in together once the release is charged, so an interruption leaves the old result),
ε and δ checked before any work, the private splits, the ledger's refusal of a release over
the data set's total budget before any training, and the public head of the result file."""

from __future__ import annotations

import contextlib
from typing import Iterator

from analysis.validation import check_delta, check_positive
from pate.config import Config
from pate.data import Splits, load_dataset, split
from pate.store import ledger as ledger_mod
from pate.store.door import Door, step


@contextlib.contextmanager
def release_step(name: str, workdir, config: Config, eps: float, *, overwrite: bool, echo) -> Iterator[Door]:
    """`pate.store.door.step` for a baseline named ``name`` (its files and config, no
    teachers needed), with ``eps`` and ``[privacy] delta`` checked first."""
    with step(name, workdir, config=config, overwrite=overwrite, data={}, keep_config=True, echo=echo) as door:
        check_positive("eps", eps)
        check_delta(config.privacy.delta)
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


def result_head(eps: float, target_eps: float, delta: float, relation: str) -> dict:
    """The first keys of a baseline's result file: the ε it spent, the ε asked for, δ and the
    neighbouring relation of both."""
    return {"eps": eps, "target_eps": target_eps, "delta": delta, "neighbouring_relation": relation}
