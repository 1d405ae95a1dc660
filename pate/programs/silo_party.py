"""What every command across silos on Flower shares (`pate silos run`, `pate.steps.label_silos`;
`pate silos fedavg`, `pate.baselines.fedavg_silos`): a silo's own records from its SuperNode's node
config, the coordinator's ledger, the Grid that keeps the silos' error replies, the ServerApp's
body that writes its outcome for the submitting command, and the submission itself (a local
SuperLink and N SuperNodes, or the SuperLink at `[silos] address`, `pate.programs.flower_deploy`).

Nothing private is decided here: the plan, its agreement and each silo's ledger are the steps'.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable

from analysis.core.errors import PateError
from pate.config import Config


# --------------------------------------------------------------------------- the coordinator's ledger


def ledger_name(config: Config) -> str:
    """The ledger the coordinator charges: `[silos] ledger`, else ``silos:`` and the data set's
    name (the coordinator holds no record: it cannot know the data set by its records)."""
    from pate.data import dataset_name

    return config.silos.ledger or f"silos:{dataset_name(config.data)}"


def coordinator_ledger(config: Config):
    """The coordinator's ledger (`ledger_name`) in its ledger folder."""
    from pate.store import ledger as ledger_mod
    from pate.store.identity import directory_for

    return ledger_mod.Ledger(ledger_name(config), directory_for(config.privacy))


# --------------------------------------------------------------------------- a silo


def node_value(node: dict, key: str, kind: type):
    """The SuperNode's node-config value `key`, of type `kind` (str or int; a bool is no int)."""
    value = node.get(key)
    if isinstance(value, kind) and not isinstance(value, bool):
        return value
    raise PateError(f"this SuperNode's --node-config lacks {key} (a {kind.__name__}): start it with "
                    "--node-config 'pate_config=\"/path/silo.toml\" silo=0' (docs/silos.md)")


def own_records(node: dict):
    """A silo's config, index and records from its SuperNode's node config `node`: ``(config,
    silo, rows, block)``, `rows` its records' numbers in its config's train split, `block` the
    same when it holds a slice of that split (``slice``), else None (the whole split is its own)."""
    from pate.config import load_config
    from pate.data import train_count
    from pate.programs.cluster import block
    from pate.programs.data_facts import with_data_defaults

    config = with_data_defaults(load_config(node_value(node, "pate_config", str)))
    silo = node_value(node, "silo", int)
    sliced = bool(node.get("slice", False))
    if not 0 <= silo < config.silos.silos:
        raise PateError(f"silo {silo} is not one of the {config.silos.silos} silos of its config ([silos] silos)")
    if not sliced and not config.silos.records:
        raise PateError(f"silo {silo}: set [silos] records, a public bound on all silos' records together (0 means "
                        "the [data] train split's count, which is this silo's alone)")
    total = train_count(config.data)
    rows = block(total, config.silos.silos, silo) if sliced else range(total)
    return config, silo, rows, rows if sliced else None


def own_splits(config: Config, rows: range):
    """The silo's records `rows` of its train split, with the public pool and evaluation split
    (`pate.data.split_rows`: no other record is read)."""
    import numpy as np

    from pate.data import split_rows

    return split_rows(config.data, config.data.public_size, np.arange(rows.start, rows.stop))


# --------------------------------------------------------------------------- the coordinator


class Watched:
    """The Grid with every silo's error reply kept (Flower's reason: the ClientApp's exception),
    so that a round that stops names why."""

    def __init__(self, grid):
        self.grid, self.errors = grid, []

    def __getattr__(self, name):
        return getattr(self.grid, name)

    def send_and_receive(self, messages, *, timeout=None):
        replies = list(self.grid.send_and_receive(messages, timeout=timeout))
        for reply in replies:
            if reply.has_error():
                self.errors.append(reason(str(reply.error.reason)))
        return replies


def reason(text: str) -> str:
    """A ClientApp's exception as Flower words it (``<class '...'>:<'message'>``): its message."""
    start, end = text.find(":<'"), text.rfind("'>")
    text = text[start + 3:end] if start >= 0 and end > start else text
    return " ".join(text.split())[:400]


def with_silo_errors(line: str, errors: list[str]) -> str:
    """`line`, with the first silo's own line when one said why."""
    if not errors:
        return line
    return f"{line}; a silo said: {errors[0]}"


def serve(body: Callable, grid, context) -> None:
    """A ServerApp's body: ``body(config, workdir, grid, context, overwrite=, echo=)`` with the
    run config `deploy` submitted, its lines and outcome written to the outcome file (`deploy`
    prints them); a PateError is an outcome, not a crash of the ServerApp."""
    from pate.config import load_config
    from pate.programs.data_facts import with_data_defaults

    given = dict(context.run_config)
    lines: list[str] = []
    outcome = {"ok": False, "lines": lines}
    try:
        config = with_data_defaults(load_config(str(given["pate_config"])))
        body(config, str(given["workdir"]), grid, context, overwrite=bool(given.get("overwrite", False)),
             echo=lines.append)
        outcome["ok"] = True
    except PateError as err:
        outcome["error"] = str(err)
    except Exception as err:
        outcome["error"] = f"internal error in the coordinator: {type(err).__name__}: {err}"
        raise
    finally:
        if given.get("outcome"):
            _write_outcome(Path(str(given["outcome"])), outcome)


def _write_outcome(path: Path, outcome: dict) -> None:
    temp = path.with_name(path.name + ".tmp")
    temp.write_text(json.dumps(outcome), encoding="utf-8")
    os.replace(temp, path)


def server_app(body: Callable):
    """Flower's ServerApp whose main is `serve` of `body`."""
    from flwr.serverapp import ServerApp

    server = ServerApp()
    server.main()(lambda grid, context: serve(body, grid, context))
    return server


# --------------------------------------------------------------------------- the submission


def absolute_paths(config: Config) -> Config:
    """`config` with its relative file paths (`[data] path`, `[features] weights` and `filters`) made
    absolute from this working directory, as this process reads them."""
    def absolute(path: str) -> str:
        return str(Path(path).expanduser().resolve()) if path else path

    return dataclasses.replace(
        config, data=dataclasses.replace(config.data, path=absolute(config.data.path)),
        features=dataclasses.replace(config.features, weights=absolute(config.features.weights),
                                     filters=absolute(config.features.filters)))


def with_silos(config: Config, silos: int | None) -> Config:
    """`config` with ``[silos] silos`` set to `silos` (a local deployment's count), checked."""
    if silos is None:
        return config
    config = dataclasses.replace(config, silos=dataclasses.replace(config.silos, silos=int(silos)))
    config.silos.validate()
    return config


def deploy(config: Config, workdir, *, components: tuple[str, str], what: str, silos: int | None = None,
           overwrite: bool = False, rounds: int = 1, echo=print) -> None:
    """Submits the Flower App of `components` (its ServerApp and ClientApp,
    `pate.programs.flower_deploy.write_app`) with `config` (resolved, written to a private
    temporary folder) and `workdir`: to a local deployment of `silos` SuperNodes, each the slice of
    `config`'s train split of its index, or (None) to the SuperLink at `[silos] address`. Prints the
    coordinator's lines; `what` names the run in the refusals, `rounds` scales the time limit.
    Flower's logs stay in that folder when the run fails.

    Raises:
      PateError: the coordinator's refusal or failure, in its one line; no outcome.
    """
    from pate.config import config_to_toml
    from pate.programs import flower_deploy

    workdir = Path(workdir).expanduser().resolve()
    folder = Path(tempfile.mkdtemp(prefix="pate-silos-"))
    keep = True
    try:
        config_path = folder / "config.toml"
        config_path.write_text(config_to_toml(config), encoding="utf-8")
        app = flower_deploy.write_app(folder / "app", *components)
        outcome_path = folder / "outcome.json"
        run_config = {"pate_config": str(config_path), "workdir": str(workdir), "outcome": str(outcome_path),
                      "overwrite": bool(overwrite)}
        limit = (6 * int(rounds)) * config.silos.timeout + 600
        home = folder / "flwr-home"
        if silos is not None:
            echo(f"silos: a SuperLink and {silos} SuperNodes on 127.0.0.1, each silo a slice of the [data] train split "
                 f"(Flower's logs: {folder})")
            with flower_deploy.LocalDeployment(folder, config_path, int(silos)) as local:
                flower_deploy.write_connection(local.home, local.address)
                flower_deploy.submit(app, local.home, run_config, folder / "flwr-run.log", limit, what)
        else:
            echo(f"silos: submitting {what} to the SuperLink at {config.silos.address}")
            flower_deploy.write_connection(home, config.silos.address, config.silos.root_certificates)
            flower_deploy.submit(app, home, run_config, folder / "flwr-run.log", limit, what)
        if not outcome_path.is_file():
            raise PateError(f"the coordinator (the ServerApp) ended without an outcome: nothing was released "
                            f"(Flower's logs: {folder})")
        outcome = json.loads(outcome_path.read_text(encoding="utf-8"))
        for line in outcome.get("lines", []):
            echo(line)
        if not outcome.get("ok"):
            raise PateError(str(outcome.get("error") or "the coordinator failed"))
        keep = False
    finally:
        if not keep:
            shutil.rmtree(folder, ignore_errors=True)
