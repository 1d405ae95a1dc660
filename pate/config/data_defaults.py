"""The data decides the defaults: the settings a config file did not write (`Config.defaulted`)
resolved from the data's public facts (`DataFacts`: one input's shape, the public pool's size,
the training split's record count), so rows of features get row models and a 150-point pool gets
a smoothing that fits it, without a round trip per key. Every value the file (or `--set`) wrote
wins, and an impossible one is still refused where it is today.

The rule (docs/configuration.md, "Defaults that follow the data"):

- rows of F features (embeddings, inputs of shape (F,)): `teachers.model = "linear"`,
  `student.model = "mlp"` with `student.hidden = [256]`, `dpsgd.model = "linear"`,
  `features.map = "none"`, no image augmentation (`student.augment_shift = 0`,
  `student.cutout = 0`), and `fine_grained.pca` at most F;
- any data: `fine_grained.pca` at most the pool's size; `fine_grained.smoothing` at most
  ``pool // POOL_PER_NEIGHBOUR`` (at least 1) and `fine_grained.votes_per_record` at most the
  smoothing;
- the number of teachers: `teachers.num_teachers` is ``train // (RECORDS_PER_CLASS * classes)``,
  between `MIN_TEACHERS` and the default 250, so that each teacher's shard holds about
  `RECORDS_PER_CLASS` records of each class (a teacher that has seen a class a handful of times
  votes near chance on it; the vote of a few such teachers buys nothing, whatever the noise) while
  a large split keeps the default job's 250 (60000 records: 240-record shards);
- the teachers: with shards of ``train // num_teachers`` records, `teachers.batch_size` at most
  the shard, and `teachers.epochs` enough for `MIN_TEACHER_STEPS` optimiser steps a teacher
  (``epochs * (shard // batch_size)``), never fewer than the default; `teachers.checkpoint_every`
  keeps about as many checkpoints as the default does.

Facts are public values only (shapes and counts read from headers and the public pool; under
replace-one the training split's size is public), never a private record.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from pate.config.sections import Config

#: Each teacher takes at least this many optimiser steps when `teachers.epochs` is not written
#: (the default job: 60 epochs of 10 batches of 24 from 240-record shards, 600 steps).
MIN_TEACHER_STEPS = 500
#: `fine_grained.smoothing` is at most one pool point in this many (Fashion-MNIST's 9000-point
#: pool keeps the proxy's 40; a 150-point pool gets 15, not a quarter of itself).
POOL_PER_NEIGHBOUR = 10
#: `teachers.num_teachers`, when not written, leaves each teacher's shard about this many records of
#: each class (10 classes: 100-record shards; 2 classes: 20), the default 250 teachers at most.
RECORDS_PER_CLASS = 10
#: ... and at least this many teachers (a vote needs two).
MIN_TEACHERS = 2
#: The student's hidden layer on rows of features (`student.model = "mlp"`).
ROW_STUDENT_HIDDEN = (256,)


@dataclasses.dataclass(frozen=True)
class DataFacts:
    """What the defaults may read of a data set: public facts only.

    `input_shape`: one input's shape ((F,): rows of F features; (H, W, C): images);
    `pool_size`: the public pool's points; `train_size`: the training split's records (a file
    header's count); `num_classes`: the classes the pool shows."""

    input_shape: tuple[int, ...]
    pool_size: int
    train_size: int
    num_classes: int

    @property
    def rows(self) -> bool:
        return len(self.input_shape) == 1

    def describe(self) -> str:
        kind = (f"rows of {self.input_shape[0]} features" if self.rows
                else "images of " + "x".join(str(d) for d in self.input_shape))
        return f"{kind}, a pool of {self.pool_size}, {self.train_size} training records"


def _default(config: Config, name: str) -> Any:
    section, key = name.split(".")
    return {f.name: f.default for f in dataclasses.fields(type(getattr(config, section)))}[key]


def resolve(config: Config, facts: DataFacts) -> tuple[Config, dict[str, Any]]:
    """``(config, chosen)``: the config with every key it did not set (`Config.defaulted`, and
    still at its default) resolved from ``facts`` by the rule above, and the values chosen
    (``{"section.key": value}``, only those that differ from the default). The config returned
    has no `defaulted` left: resolving it again changes nothing."""
    chosen: dict[str, Any] = {}

    def value(name: str) -> Any:
        section, key = name.split(".")
        return chosen.get(name, getattr(getattr(config, section), key))

    def pick(name: str, new: Any) -> None:
        section, key = name.split(".")
        free = name in config.defaulted and getattr(getattr(config, section), key) == _default(config, name)
        if free and new != value(name):
            chosen[name] = new

    if facts.rows:
        width = facts.input_shape[0]
        pick("teachers.model", "linear")
        pick("student.model", "mlp")
        if value("student.model") == "mlp":
            pick("student.hidden", ROW_STUDENT_HIDDEN)
        pick("student.augment_shift", 0)
        pick("student.cutout", 0)
        pick("dpsgd.model", "linear")
        pick("features.map", "none")
        pick("fine_grained.pca", min(value("fine_grained.pca"), width))
    pick("fine_grained.pca", max(1, min(value("fine_grained.pca"), facts.pool_size)))
    pick("fine_grained.smoothing", max(1, min(value("fine_grained.smoothing"), facts.pool_size // POOL_PER_NEIGHBOUR)))
    pick("fine_grained.votes_per_record", max(1, min(value("fine_grained.votes_per_record"),
                                                     value("fine_grained.smoothing"))))
    most = _default(config, "teachers.num_teachers")
    by_shard = facts.train_size // (RECORDS_PER_CLASS * max(1, facts.num_classes))
    pick("teachers.num_teachers", max(MIN_TEACHERS, min(most, by_shard)))
    shard = facts.train_size // max(1, value("teachers.num_teachers"))
    if shard >= 1:
        pick("teachers.batch_size", min(value("teachers.batch_size"), shard))
        per_epoch = shard // value("teachers.batch_size")
        if per_epoch >= 1:
            pick("teachers.epochs", max(value("teachers.epochs"), math.ceil(MIN_TEACHER_STEPS / per_epoch)))
            default_epochs = _default(config, "teachers.epochs")
            every = _default(config, "teachers.checkpoint_every")
            pick("teachers.checkpoint_every", max(every, math.ceil(value("teachers.epochs") * every / default_epochs)))
    sections = {}
    for name, new in chosen.items():
        section, key = name.split(".")
        sections.setdefault(section, {})[key] = new
    replaced = {s: dataclasses.replace(getattr(config, s), **keys) for s, keys in sections.items()}
    for section in replaced.values():
        section.validate()
    return dataclasses.replace(config, **replaced, defaulted=frozenset()), chosen


def describe(facts: DataFacts, chosen: dict[str, Any]) -> str:
    """The one line a command prints for the values `resolve` chose ("" when none)."""
    if not chosen:
        return ""

    def shown(v: Any) -> str:
        if isinstance(v, str):
            return f'"{v}"'
        if isinstance(v, tuple):
            return "[" + ", ".join(str(x) for x in v) + "]"
        return str(v).lower() if isinstance(v, bool) else str(v)

    return (f"defaults for {facts.describe()}: " + ", ".join(f"{k} = {shown(v)}" for k, v in chosen.items())
            + " (set a key in the config to choose it yourself)")
