"""What every process of a `--distributed` command must share, and agrees on before anything is
read or drawn (`Cluster.agree_on`): every setting of the config (`[dpsgd] clip_norm`, `[privacy]`,
`[aggregation]`'s noise, `[fine_grained]`'s eps, randomized response and votes per record, ...,
each by its name), the map's weights by their digest, the private data set by its digest, and the
teachers' checkpoint by its recorded digest. One function for every command (`facts`), one
agreement (`agree`): a process on another data set, with other teachers or another privacy setting
stops every process with one line naming what differs, where before it released, charged to
process 0's data set and settings alone.

Where a file lies is not what it holds: `[data] path` and `[features] weights` (a folder) may
differ between hosts; the files' content is compared instead.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from pate.config import Config, section_fields

#: Settings that say where a file lies, not what it holds (compared by content instead).
PLACES = {("data", "path"), ("features", "weights"), ("features", "filters")}

#: The names of the facts that are not config settings.
DATA_SET = "training data set (its records' digest)"
MAP_WEIGHTS = "map's weights ([features] weights, their digest)"
MAP_FILTERS = "map's filters ([features] filters, their digest)"
TEACHERS = "teachers' checkpoint (teachers.json's digest)"


def facts(config: Config, *, data: bool = False, teachers: str | Path | None = None) -> dict[str, str]:
    """Name -> value of what every process must share: each config setting (``section.key``;
    ``PLACES`` aside), the map's weights' digest when `[features] weights` is set; with `data`, the
    training split's digest (`pate.data.training_digest`, read as a stream: no record is held);
    with `teachers` (a run directory), the teachers' checkpoint digest its teachers.json records.

    Raises:
      PateError: the weights, the data or the teachers cannot be read (this process's line).
    """
    from pate.programs.data_facts import with_data_defaults

    config = with_data_defaults(config)  # the values every process runs: the ones the data chose included
    out: dict[str, str] = {}
    for section in section_fields():  # the TOML sections (not what the data chose to say, `Config.data_note`)
        for key, value in dataclasses.asdict(getattr(config, section.name)).items():
            if (section.name, key) not in PLACES:
                out[f"{section.name}.{key}"] = repr(value)
    if config.features.weights:
        from pate.programs.learned_map import check_weights

        out[MAP_WEIGHTS] = check_weights(config.features.weights)
    if getattr(config.features, "filters", ""):
        from pate.programs.coates_ng import check_weights as check_filters

        out[MAP_FILTERS] = check_filters(config.features.filters)
    if data:
        from pate.data import training_digest

        out[DATA_SET] = training_digest(config.data)
    if teachers is not None:
        from pate.programs.teacher_training import read_ensemble

        ensemble = read_ensemble(teachers)
        out[TEACHERS] = f"{ensemble.step}:{ensemble.digest}"
    # What a process holds first: a setting the data chose (`Config.defaulted`) differs because the
    # data do, and the line names the cause.
    first = [k for k in (DATA_SET, TEACHERS, MAP_WEIGHTS, MAP_FILTERS) if k in out]
    return {**{k: out[k] for k in first}, **{k: v for k, v in out.items() if k not in first}}


def agree(cluster, config: Config, *, data: bool = False, teachers: str | Path | None = None) -> None:
    """Every process of `cluster` has process 0's `facts` (nothing to do for one process): one that
    differs stops them all with its line (`Cluster.agree_on`).

    Raises:
      PateError: this process's facts differ from process 0's, or cannot be read.
      Stopped: another process's differ, or it failed.
    """
    if cluster.count > 1:
        cluster.agree_on(facts(config, data=data, teachers=teachers))
