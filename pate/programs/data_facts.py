"""The data's public facts, read once a command knows its config, and the defaults they decide
before anything trains, votes or is charged: the keys the config did not write
(`pate.config.data_defaults`). The models' fit to the same facts is
`pate.programs.models.check_models`. Here (beside the public maps, whose readiness comes first)
so that every command's entry (root `cli.py`) and the library's (`pate.run`, ...) share it.

Facts are public: one input's shape and the pool's size and classes from the public pool, the
training split's record count from a file header (`pate.data.load_public`); no private record
is read.
"""

from __future__ import annotations

import dataclasses

from typing import Callable

from analysis.core.errors import PateError
from pate.config import Config
from pate.config.data_defaults import DataFacts, describe, resolve


def facts(config: Config) -> DataFacts:
    """The public facts of ``config``'s `[data]`."""
    from pate.data import load_public

    pool = load_public(config.data)
    return DataFacts(tuple(int(d) for d in pool.pool_x.shape[1:]), int(pool.pool_x.shape[0]), int(pool.train_size),
                     int(pool.num_classes))


def _maps_ready(config: Config) -> bool:
    """Whether every public map the config names has its inputs (a learned map's weights): when
    one has not, no data is read here, so that the command refuses it in one line before any data
    is read (`pate.programs.public_features.check_ready`), with the config as written."""
    from pate.programs.public_features import MapSettings, check_ready

    try:
        for name in (config.features.map, config.teachers.features, config.dpsgd.features):
            if name:
                check_ready(name, MapSettings.of(config))
    except PateError:
        return False
    return True


def check_maps_ready(config: Config, *, teachers: bool) -> None:
    """Refuses, in one line and before any data is read, the public map a run uses whose inputs
    are missing (a learned map's weights): the teachers' `[teachers] features` (``teachers``), else
    fine-grained PATE's `[features] map`. `pate run` and `pate plan --config` call it before `facts`."""
    from pate.programs.public_features import MapSettings, check_ready

    name = config.teachers.features if teachers else config.features.map
    if name:
        check_ready(name, MapSettings.of(config))


def with_data_defaults(config: Config) -> Config:
    """``config`` with the keys its file did not set resolved from the data's public facts, the
    line saying which values were chosen (`pate.config.data_defaults`) kept as ``config.data_note``
    for the step that does the work to print once its checks have passed (`say_data_note`): a
    refusal stays one line. Unchanged, and no data read, when it has none left to resolve (a run's
    config.toml, written whole; a config the command line resolved)."""
    config = with_fitted_filters(config)
    if not config.defaulted or not _maps_ready(config):
        return config
    found = facts(config)
    resolved, chosen = resolve(config, found)
    return dataclasses.replace(resolved, data_note=describe(found, chosen) or "")


def with_fitted_filters(config: Config) -> Config:
    """``config`` with `[features] filters` named when a map it uses is "coates-ng" and the file
    left the key empty: the filters fitted on the public pool with the default recipe, kept by
    digest (`pate.programs.coates_ng.fitted_on_pool`; the pool is read, never a private record).
    The run's config.toml then names that folder, and the release its filters' sha256."""
    if config.features.filters or not any(
            "coates-ng" in name.split("+") for name in (config.features.map, config.teachers.features,
                                                       config.dpsgd.features) if name):
        return config
    from pate.data import load_public
    from pate.programs import coates_ng

    folder = coates_ng.fitted_on_pool(load_public(config.data).pool_x, config=config)
    return dataclasses.replace(config, features=dataclasses.replace(config.features, filters=folder))


def say_data_note(config: Config, echo: Callable[[str], None]) -> Config:
    """Prints which values the data chose (``config.data_note``), once: the config without it."""
    if not config.data_note:
        return config
    echo(config.data_note)
    return dataclasses.replace(config, data_note="")
