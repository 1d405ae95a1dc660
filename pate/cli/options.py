"""The `pate` command line's options: their validators, shared option groups, the checks
that combine them, and the one-line error report; `cli.py` only parses and calls.

Defaults (δ, moments, conversion, release cost) are `PrivacyConfig`'s.
"""

from __future__ import annotations

import functools
import os
import sys

import click

from analysis.core.errors import OptionError, PateError
from analysis.mechanisms import registry
from pate.config import PrivacyConfig
from pate.config.checks import FEATURE_MAPS
from pate.config.silo_sections import MAX_SILOS

#: The library's defaults of the privacy settings an option leaves out.
DEFAULTS = PrivacyConfig()
SEED_HELP = ("Noise seed, 0 <= seed < 2**128, for reproducible research only: whoever knows it can remove "
             "the noise. Never written to any file. Default: fresh OS entropy.")


def short(x: float) -> str:
    """A default for help texts: 1e-05 as 1e-5, 0.2 as 0.2."""
    return f"{x:g}".replace("e-0", "e-")


def one_line(err: BaseException) -> str:
    return " ".join(str(err).split())


class Group(click.Group):
    """Errors as one line on stderr: usage errors exit 2, a `PateError` exits 1."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        from pate.store.door import forget_committed

        forget_committed()  # what this command commits, for the line of an interruption
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        try:
            code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click.exceptions.NoArgsIsHelpError as err:
            click.echo(err.ctx.get_help())  # `pate` alone: the normal help, not an error
            sys.exit(0)
        except click.ClickException as err:
            where = err.ctx.command_path if getattr(err, "ctx", None) is not None else "pate"
            hint = f" (see '{where} --help')" if isinstance(err, click.UsageError) else ""
            message = " ".join(err.format_message().split())
            click.echo(f"{where}: {message}{hint}", err=True)
            sys.exit(err.exit_code)
        except click.Abort:
            click.echo(f"pate: {interrupted_line()}", err=True)
            sys.exit(1)
        sys.exit(code if isinstance(code, int) else 0)

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except (click.ClickException, click.exceptions.Exit, click.Abort):
            raise
        except OptionError as err:  # a bad option value the library found: a usage error
            name = ctx.invoked_subcommand
            sub = click.Context(self.get_command(ctx, name), info_name=name, parent=ctx) if name else ctx
            raise click.BadParameter(str(err), ctx=sub, param_hint=err.option) from None
        except PateError as err:
            click.echo(f"pate: {one_line(err)}", err=True)
            ctx.exit(1)
        except OSError as err:  # a read-only or full disk, a file that vanished
            click.echo(f"pate: {one_line(os_error_line(err))}", err=True)
            ctx.exit(1)
        except MemoryError:
            click.echo("pate: out of memory; use smaller inputs (smaller images or data, fewer queries, "
                       "classes or moments)", err=True)
            ctx.exit(1)
        except Exception as err:  # noqa: BLE001 - a bug: still one line, the traceback on demand
            if os.environ.get("PATE_DEBUG"):
                raise
            click.echo(f"pate: internal error ({type(err).__name__}: {one_line(err)}); please "
                       "report it, with the traceback from PATE_DEBUG=1", err=True)
            ctx.exit(1)


def os_error_line(err: OSError) -> str:
    """The one line of an OSError no step turned into a `PateError`: what is wrong with which
    file, and what to do about that (a folder where a file goes is no full disk)."""
    import errno

    where = err.filename or "a file"
    what = err.strerror or type(err).__name__
    again = "then run the command again (finished steps are kept)"
    if err.errno == errno.ENOSPC:
        return f"cannot write {where}: {what}; free space on its disk, {again}"
    if err.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return f"cannot write or read {where}: {what}; make it (or its folder) writable, {again}"
    if err.errno == errno.EISDIR:
        return f"{where} is a folder where pate expects a file; move it aside, {again}"
    if err.errno == errno.ENOTDIR:
        return f"a file is in the way of {where} (pate expects a folder there); move it aside, {again}"
    if err.errno == errno.ENOENT:
        return f"{where} vanished while pate was using it: {what}; {again}"
    return f"cannot write or read {where}: {what}; {again}"


def interrupted_line() -> str:
    """The line of an interrupted command: what it had already committed (complete, kept),
    or that it was aborted before committing anything."""
    from pate.store.door import committed

    done = committed()
    if not done:
        return "aborted (nothing this command writes was committed; finished artifacts are kept)"
    return ("interrupted after committing " + "; ".join(done) + " (complete and kept; nothing after it "
            "was committed)")


# --------------------------------------------------------------------------- validators


def _check(ok, message):
    """A click callback: the value (None passes) must satisfy `ok`, else `message`."""

    def callback(ctx, param, value):
        if value is not None and not ok(value):
            raise click.BadParameter(message.format(value=value))
        return value

    return callback


positive = _check(lambda v: v > 0 and v != float("inf"), "must be a positive number, got {value}")
probability = _check(lambda v: 0.0 < v < 1.0, "must lie strictly between 0 and 1, got {value}")
#: An eps a command releases at or plans for: as `pate.config.checks.MAX_EPS` bounds the config's keys.
eps_value = _check(lambda v: 0 < v <= 1000.0, "must be a positive eps of at most 1000 (an eps above it leaves no "
                   "guarantee), got {value:g}")
#: A number of degrees of a view's rotation (`pate features --degrees`): NaN passes click's range.
degrees = _check(lambda v: 0 <= v <= 90, "must be a number of degrees in [0, 90], got {value}")
release_order = _check(lambda v: 1 < v <= 1e4, "must be a Renyi order above 1 and at most 10000, got {value}")
#: A research seed: all 128 bits are used, so any integer 0 <= seed < 2**128.
seed = _check(lambda v: 0 <= v < 2**128, "must satisfy 0 <= seed < 2**128, got {value}")
at_least_one = _check(lambda v: v >= 1, "must be at least 1, got {value}")
threshold = _check(lambda v: 0 <= v < float("inf"), "must be a vote count >= 0, got {value}")


def _is_map(value: str) -> bool:
    names = value.split("+")
    return all(n in FEATURE_MAPS for n in names) and len(set(names)) == len(names)


#: A public feature map's name, as `pate.config.checks.check_map` takes it.
feature_map = _check(_is_map, f"must be one of {', '.join(FEATURE_MAPS)} or several joined by \"+\" (each once), "
                     "got {value!r}")


def map_list(ctx, param, value):
    """Feature maps separated by commas or spaces ("scattering,hog scattering+hog") as a list; None
    when not given."""
    if value is None:
        return None
    names = [v for v in value.replace(",", " ").split() if v]
    bad = [v for v in names if not _is_map(v)]
    if bad or not names:
        raise click.BadParameter(f"{bad[0] if bad else value!r} is not a map: each must be one of "
                                 f"{', '.join(FEATURE_MAPS)} or several joined by \"+\" (each once)")
    return list(dict.fromkeys(names))


def int_list(ctx, param, value):
    """A comma-separated list of positive integers ("32,64,64") as a tuple; None when not given."""
    if value is None:
        return None
    try:
        items = tuple(int(v) for v in value.split(","))
    except ValueError:
        items = ()
    if not items or min(items) < 1 or max(items) > 4096:
        raise click.BadParameter(f"expected positive integers up to 4096 joined by commas, e.g. 32,64,64; got {value!r}")
    return items


def moments(ctx, param, value):
    from analysis.bounds.lnmax import MAX_MOMENTS

    if value is not None and not 1 <= value <= MAX_MOMENTS:
        raise click.BadParameter(f"must be between 1 and {MAX_MOMENTS}, got {value}")
    return value


# --------------------------------------------------------------------------- option groups


def options(*decorators):
    """Several click options as one decorator (applied in the order listed)."""

    def apply(fn):
        for decorate in reversed(decorators):
            fn = decorate(fn)
        return fn

    return apply


def _nonempty_path(ctx, param, value):
    """An empty path would mean the current directory: refused as a usage error."""
    if value is not None and not str(value).strip():
        raise click.BadParameter("must name a directory, got an empty path")
    return value


def _overrides(ctx, param, values):
    """`--set` values checked at parse time (a malformed one is a usage error, exit 2)."""
    from pate.config import parse_override

    for text in values:
        try:
            parse_override(text)
        except PateError as err:
            raise click.BadParameter(str(err)) from None
    return values


def workdir(help: str, required: bool = True):
    return click.option("--workdir", required=required, type=click.Path(file_okay=False), callback=_nonempty_path,
                        help=help)


def config(help: str = "TOML run config, e.g. configs/fashion_mnist.toml."):
    return click.option("--config", "config_path", required=True, type=click.Path(dir_okay=False), help=help)


def settings(metavar: str = "SECTION.KEY=VALUE", help: str = "Override any config key (TOML value syntax); "
             "repeatable."):
    return click.option("--set", "settings", multiple=True, metavar=metavar, callback=_overrides, help=help)


def no_progress(help: str = "Do not draw the progress bar."):
    return click.option("--no-progress", is_flag=True, help=help)


def cluster():
    """`--distributed` and the options that place this process in the cluster and bound its join
    (every command that runs on several processes takes these; root cli.py's `start_cluster`
    reads them). The coordinator's address is checked here, where it enters."""
    return options(
        click.option("--distributed", is_flag=True, help="Call jax.distributed.initialize() first (several "
                     "processes or hosts; the same command on every one, one run directory they all see)."),
        click.option("--coordinator", metavar="HOST:PORT", callback=_coordinator,
                     help="With --distributed: process 0's address, where it alone listens (default: "
                     "detected by JAX)."),
        click.option("--num-processes", type=click.IntRange(min=1),
                     help="With --distributed: how many processes (default: detected by JAX)."),
        click.option("--process-id", type=click.IntRange(min=0),
                     help="With --distributed: this process's id, 0 to --num-processes - 1 (default: detected by "
                     "JAX)."),
        click.option("--join-timeout", type=click.IntRange(min=1, max=3600), metavar="SECONDS",
                     help="With --distributed: how long a process waits for the others to join before it stops "
                     "with one line (default: 60)."))


def _coordinator(_ctx, _param, value):
    """`--coordinator HOST:PORT`, checked where it enters (`pate.config.coordinator`)."""
    if value is None:
        return None
    from pate.config.coordinator import coordinator_address

    try:
        coordinator_address(value)
    except ValueError as err:
        raise click.BadParameter(str(err)) from None
    return value


def check_cluster(distributed: bool, coordinator=None, num_processes=None, process_id=None,
                  join_timeout=None) -> None:
    """Refuses a `cluster` option without --distributed, and a --process-id outside
    0..--num-processes - 1 (usage errors)."""
    if not distributed and any(v is not None for v in (coordinator, num_processes, process_id, join_timeout)):
        raise click.UsageError("--coordinator, --num-processes, --process-id and --join-timeout need --distributed")
    if num_processes is not None and process_id is not None and process_id >= num_processes:
        raise click.UsageError(f"--process-id {process_id} is not one of the {num_processes} processes "
                               f"(0 to {num_processes - 1})")


def overwrite(help: str):
    return click.option("--overwrite", is_flag=True, help=help)


def local_silos(what: str):
    """`pate silos …`'s ``--silos N``: a local deployment, or ``what`` submitted to ``[silos] address``."""
    return click.option("--silos", type=click.IntRange(2, MAX_SILOS), help="Run N silos here: a SuperLink and N "
                        "SuperNodes on 127.0.0.1, silo i holding the i-th slice of the [data] train split (sets "
                        f"silos.silos). Without it the {what} is submitted to the SuperLink at [silos] address, whose "
                        "SuperNodes are the silos; run it on that SuperLink's host.")


def seed_option(help: str):
    return click.option("--seed", type=int, callback=seed, help=help)


def noise(gamma: str, sigma_threshold: str):
    """--gamma, --sigma, --threshold, --sigma-threshold: a mechanism's noise."""
    return options(
        click.option("--gamma", type=float, callback=positive,
                     help=gamma + " Permute-and-flip and the exponential mechanism: the same gamma "
                                  "(each answer 2*gamma-DP, like LNMax)."),
        click.option("--sigma", type=float, callback=positive, help="GNMax noise (sigma_2 for Confident-GNMax)."),
        click.option("--threshold", type=float, callback=threshold,
                     help="Confident-GNMax threshold on the top vote count."),
        click.option("--sigma-threshold", type=float, callback=positive, help=sigma_threshold))


def ledger_name_check(ctx, param, value):
    """A ledger name (``--ledger``, ``pate ledger --name``): not blank, one line of printable text."""
    if value is None:
        return value
    if not value.strip():
        raise click.BadParameter("needs a non-empty ledger name")
    if not value.isprintable():
        raise click.BadParameter(f"a ledger name is one line of printable text, got {value!r}")
    return value


def ledger():
    return click.option("--ledger", "ledger_name", metavar="NAME", callback=ledger_name_check,
                        help="With --votes: the private data set the votes come from, whose ledger is charged "
                             "(default: the data set a votes.npz written by pate names; required otherwise).")


def conversion(help: str, default: str | None = None):
    return click.option("--conversion", type=click.Choice(["classic", "improved"]), default=default,
                        show_default=default is not None, help=help)


def accountant(help: str):
    return click.option("--accountant", type=click.Choice(["rdp", "pld"]), default="rdp", show_default=True,
                        help=help)


def analyze_options():
    """The options of `pate analyze`."""
    return options(
        click.option("--votes", "votes_path", type=click.Path(dir_okay=False),
                     help="Vote histogram: .npz (key 'votes') or .npy, queries × classes."),
        workdir("A run directory labelled by `pate label` (reads votes.npz and labels.npz).", required=False),
        click.option("--mechanism", type=click.Choice(registry.TEACHER_NAMES), default="lnmax", show_default=True,
                     help="The aggregator that answered the queries (with --votes)."),
        noise("LNMax inverse noise scale: Laplace noise of scale 1/gamma per count.",
              "Confident-GNMax threshold noise sigma_1."),
        conversion("GNMax: RDP to (eps, delta) conversion (default: with --workdir the run's [privacy] "
                   f"setting, else {DEFAULTS.conversion})."),
        click.option("--release-order", type=float, callback=release_order, help="GNMax: Renyi order of the sanitised "
                     "release, fixed in advance without looking at the votes (default: the order of the data-independent "
                     "optimum, a public quantity; with --workdir, the run's [privacy] release_order when set)."),
        click.option("--release-cost", type=float, callback=positive, help="GNMax: RDP the sanitised release may spend "
                     "at its order (sets its noise; default: with --workdir the run's [privacy] setting, else "
                     f"{short(DEFAULTS.release_cost)})."),
        click.option("--delta", type=float, callback=probability, help="delta of the report (default: with --workdir "
                     f"the run's [privacy] delta, else {short(DEFAULTS.delta)})."),
        click.option("--queries", type=int, callback=at_least_one, help="Analyse the first N queries (after --indices)."),
        click.option("--indices", "indices_path", type=click.Path(dir_okay=False),
                     help="Indices of the answered queries (.npy, or .npz key 'indices')."),
        click.option("--moments", type=int, callback=moments, help="Moments accountant orders 1..M (default: with "
                     f"--workdir the run's [privacy] setting, else {DEFAULTS.moments})."),
        click.option("--beta", type=float, callback=positive,
                     help="Smoothness of the smooth-sensitivity release (LNMax default 0.09; GNMax 0.1/order)."),
        click.option("--input-is-labels", is_flag=True,
                     help="FILE is a teachers × queries matrix of predicted labels (the 2017 paper's format)."),
        click.option("--num-classes", type=int, callback=at_least_one, help="Number of classes (required with "
                     "--input-is-labels: classes no teacher predicted still count)."),
        seed_option("Seed of the release noise, 0 <= seed < 2**128 (research only: whoever knows it can remove the "
                    "noise). Default: fresh OS entropy."),
        click.option("--json", "json_path", type=click.Path(dir_okay=False),
                     help="Write the whole report as JSON (private: owner-only)."),
        click.option("--release-json", "release_path", type=click.Path(dir_okay=False), help="Write the publishable values "
                     "as JSON, the headline (the data set's eps) first (with --votes; --workdir writes "
                     "RUN/release.json)."),
        click.option("--plot", "plot_path", type=click.Path(dir_okay=False),
                     help="Write a PNG of cumulative eps against queries (private: owner-only)."),
        click.option("--show-private", is_flag=True,
                     help="With --votes: also print the private figures (data-dependent eps, smooth sensitivity, "
                          "their warnings) as research output, never to publish. Without it they are printed only "
                          "beside a private report file (--json, --plot)."),
        ledger())


def label_options():
    """The options of `pate label`."""
    return options(
        workdir("A run directory with trained teachers (with --votes: any directory, created if missing)."),
        click.option("--votes", "votes_path", type=click.Path(dir_okay=False), help="Release labels from this vote "
                     "histogram (.npz key 'votes', or .npy; points × classes) computed elsewhere, instead of from pate "
                     "teachers. Needs --num-classes."),
        click.option("--num-classes", type=int, callback=at_least_one, help="With --votes: the number of classes."),
        click.option("--input-is-labels", is_flag=True,
                     help="With --votes: FILE is a teachers × points matrix of predicted labels."),
        click.option("--indices", "indices_path", type=click.Path(dir_okay=False),
                     help="With --votes: rows of FILE to query, in order (.npy, or .npz key 'indices')."),
        click.option("--delta", type=float, callback=probability,
                     help=f"With --votes: delta of --budget and of the printed eps (default {short(DEFAULTS.delta)})."),
        conversion(f"With --votes: RDP conversion for GNMax (default {DEFAULTS.conversion})."),
        accountant("How --budget is measured: RDP (moments accountant for LNMax) or dp-accounting's "
                   "privacy loss distributions (tighter: more queries for the same budget)."),
        click.option("--mechanism", type=click.Choice(registry.NAMES),
                     help="Noisy aggregator (default: the run config's aggregation.mechanism); "
                          + "; ".join(f"{name}: {record.summary}" for name, record in registry.RECORDS.items()) + "."),
        click.option("--config", "config_path", type=click.Path(dir_okay=False),
                     help="The run config (default: the run directory's config.toml); what a fine-grained release "
                          "in a new run directory starts from."),
        noise("LNMax: Laplace noise of scale 1/gamma.", "Confident-GNMax threshold noise."),
        click.option("--queries", type=int, callback=at_least_one, help="Query the first N pool points (with "
                     "--round 2: N points not queried in round 1; default rounds.queries at most, as many as "
                     "round 1 left)."),
        click.option("--round", "round_", type=click.IntRange(1, 2), default=1, show_default=True,
                     help="2: the interactive round on a finished round 1 (labels.npz and its student): "
                     "teachers as ridge heads on the student's features, queries chosen by its uncertainty."),
        click.option("--select", type=click.Choice(["uncertain", "margin", "next"]),
                     help="With --round 2: how the student picks the queries (default rounds.select)."),
        click.option("--check", type=click.Choice(["none", "interactive"]),
                     help="With --round 2: 'interactive' = the teachers answer where they outvote the round-1 "
                          "student (Interactive-GNMax; default rounds.check)."),
        click.option("--budget", type=float, callback=positive,
                     help="Stop answering where the data-independent eps would exceed this budget."),
        click.option("--target-eps", type=float, callback=positive,
                     help="Choose the queries and the release order, beta and cost so that the published headline "
                          "eps is at most this with probability [privacy] target_probability, on simulated votes "
                          "(sets privacy.target_eps; `pate plan --config` shows the choice)."),
        click.option("--allow-near-chance", is_flag=True,
                     help="Release even when the labels are expected near chance on simulated public votes "
                          "(sets aggregation.allow_near_chance; release.json's warnings say so)."),
        seed_option(SEED_HELP),
        overwrite("Replace an existing release in --workdir."),
        ledger(),
        cluster())


# --------------------------------------------------------------------------- checks


def check_analyze(votes_path, workdir, mechanism, noise: dict, votes_only: dict, input_is_labels: bool,
                  num_classes) -> None:
    """`pate analyze`: exactly one input, and only the options that apply to it."""
    if (votes_path is None) == (workdir is None):
        raise click.UsageError("give exactly one of --votes FILE or --workdir RUN")
    if workdir is not None:
        if any(v is not None for v in noise.values()) or mechanism != "lnmax":
            raise click.UsageError("with --workdir the mechanism and its noise come from the run's "
                                   "labels.npz; drop --mechanism/--gamma/--sigma/--threshold/--sigma-threshold")
        ignored = [name for name, v in votes_only.items() if v is not None and v is not False]
        if ignored:
            raise click.UsageError(f"{', '.join(ignored)} apply to --votes only: with --workdir the "
                                   "queries and classes come from the run's labels.npz and votes.npz")
        return
    if num_classes is not None and not input_is_labels:
        raise click.UsageError("--num-classes applies with --input-is-labels only (a vote histogram "
                               "has its classes as columns)")
    if input_is_labels and num_classes is None:
        raise click.UsageError("--input-is-labels needs --num-classes: classes no teacher predicted "
                               "must still count, or the data-dependent eps is understated")


def mechanism_record(mechanism: str, noise: dict):
    """The `analysis.mechanisms.registry` record of --mechanism and its noise options (a usage error if not)."""
    try:
        return registry.from_options(mechanism, **noise)
    except PateError as err:
        raise click.UsageError(str(err)) from None


def check_plan_config(config_path, *given) -> None:
    """`pate plan --config`: the mechanism, noise and budget come from the config."""
    if config_path is None:
        raise click.UsageError("--target-eps and --set need --config (a run config to plan)")
    if any(v is not None for v in given):
        raise click.UsageError("with --config the mechanism and noise come from the config; drop --mechanism/"
                               "--eps/--threshold/--answered/--votes/--teachers (use --set to change them)")


def check_plan(mechanism: str, queries: int, eps, threshold, answered) -> None:
    if mechanism is None or queries is None or eps is None:
        raise click.UsageError("give --mechanism, --queries and --eps (or --config to plan a target headline)")
    threshold_step = registry.record_type(mechanism).threshold_step
    if threshold_step and threshold is None:
        raise click.UsageError(f"--threshold is required with --mechanism {mechanism}")
    if not threshold_step and (threshold is not None or answered is not None):
        steps = ", ".join(n for n, r in registry.RECORDS.items() if r.threshold_step)
        raise click.UsageError(f"--threshold and --answered apply to a threshold step: --mechanism {steps} only")
    if answered is not None and answered > queries:
        raise click.BadParameter(f"must be at most --queries {queries}, got {answered}", param_hint="--answered")


def run_config(workdir, overrides, *, first: str):
    """The config.toml of an existing run directory with `overrides` (read only as a plain
    file: `pate.store.rundir.RunDir.read_config`); `first`: the commands that make one."""
    from pate.store.rundir import CONFIG_TOML, RunDir

    if not os.path.lexists(os.path.join(workdir, CONFIG_TOML)):
        raise PateError(f"{workdir} is not a run directory (no config.toml); run {first} first")
    return RunDir(workdir).read_config(overrides)


def label_config(workdir, mechanism, noise: dict, queries, votes_only: dict, target_eps=None, config_path=None,
                 allow_near_chance: bool = False):
    """`pate label` from a run's teachers: the run's config (or ``config_path``'s) with the
    mechanism and noise given; refuses options that apply only with --votes or to another
    mechanism, and a fine-grained release's config that does not match the run's data."""
    misplaced = [name for name, value in votes_only.items() if value is not None]
    if misplaced:
        raise click.UsageError(f"{', '.join(misplaced)} apply only with --votes (a run's own votes use "
                               "its config)")
    overrides = {f"aggregation.{k}": v for k, v in dict(mechanism=mechanism, **noise, queries=queries).items()
                 if v is not None}
    if target_eps is not None:
        overrides["privacy.target_eps"] = target_eps
    if allow_near_chance:
        overrides["aggregation.allow_near_chance"] = True
    if config_path is not None:
        from pate.config import load_config

        config = load_config(config_path, overrides)
        if os.path.lexists(os.path.join(workdir, "config.toml")):
            from pate.store.rundir import RunDir

            RunDir(workdir).check_same_data(config)
    else:
        config = run_config(workdir, overrides, first="`pate train-teachers` (or, for a fine-grained release, "
                                                      "give --config)")
    effective = config.aggregation.mechanism
    record = registry.record_type(effective)
    if queries is not None and not record.needs_teachers:  # it would be ignored, and a new release charged
        raise click.UsageError(f"--queries does not apply to {effective}: its one release labels every pool point")
    takes = record.option_names()
    stray = ["--" + k.replace("_", "-") for k, v in noise.items() if v is not None and k not in takes]
    if stray:
        source = "--mechanism" if mechanism else os.path.join(workdir, "config.toml")
        raise click.UsageError(f"{', '.join(stray)} do not apply to the mechanism {effective} (from {source}); "
                               "drop them or pick the mechanism they belong to")
    return config


def round2_config(workdir, queries, select, check, others: dict):
    """`pate label --round 2`: the run's config with ``[rounds]`` from the options; refuses
    the options of a round-1 release (round 2 uses round 1's mechanism)."""
    given = [name for name, value in others.items() if value is not None and value is not False]
    if given:
        raise click.UsageError(f"{', '.join(given)} do not apply with --round 2: it answers with round 1's "
                               "mechanism (labels.npz) and asks --queries points chosen by --select")
    overrides = {"rounds.rounds": 2, **{f"rounds.{k}": v for k, v in (("queries", queries), ("select", select),
                                                                      ("check", check)) if v is not None}}
    return run_config(workdir, overrides, first="`pate train-teachers`, `pate label` and `pate train-student`")


def student_config(workdir, method, steps, epochs, settings):
    """`pate train-student`: the run's config with [student] overrides only."""
    from pate.config import parse_override

    overrides = dict(parse_override(s) for s in settings)
    others = [k for k in overrides if not k.startswith("student.")]
    if others:
        raise click.BadParameter(f"only [student] keys may change here, got {', '.join(others)}; "
                                 "the rest is fixed by the run (use `pate run` to change it)",
                                 param_hint="--set")
    overrides.update({k: v for k, v in (("student.method", method), ("student.steps", steps)) if v is not None})
    if steps is not None and epochs is not None:
        raise click.BadParameter("give --steps or --epochs, not both", param_hint="--epochs")
    return run_config(workdir, overrides, first="`pate train-teachers` and `pate label`")


def config_with(config_path, settings, **named):
    """A config file with ``--set`` overrides and named ones (``teachers.epochs=...``; None: not given)."""
    from pate.config import load_config, parse_override

    overrides = dict(parse_override(s) for s in settings)
    overrides.update({k.replace("__", "."): v for k, v in named.items() if v is not None})
    return load_config(config_path, overrides)


def ledger_book(config_path, workdir, name, import_path, import_run):
    """`pate ledger`: the ledger asked for (importing a run first, with ``import_run``:
    `pate.steps.ledger_import.import_run`) and the config it came with."""
    from pate.store import ledger as ledger_mod
    from pate.store.identity import default_directory
    from pate.config import load_config
    from pate.store.rundir import RunDir

    given = [v for v in (config_path, workdir, name) if v is not None]
    if len(given) > 1 or not (given or import_path):
        raise click.UsageError("give one of --config FILE, --workdir RUN or --name NAME (or --import RUN)")
    if import_path is not None:
        import_run(import_path, name=name)
        workdir = workdir if given else import_path
    if config_path is not None:
        config = load_config(config_path)
        return ledger_mod.Ledger.for_config(config), config
    if workdir is not None and name is None:
        if not os.path.isdir(workdir):
            raise PateError(f"run directory {workdir} does not exist")
        config = RunDir(workdir).own_config()  # a damaged config.toml is refused, not defaulted
        return ledger_mod.Ledger.for_run(workdir, config), config
    return ledger_mod.Ledger(name, default_directory()), None


def check_export(path) -> None:
    """`pate ledger --export`: refuses, before anything is read, imported or printed, a path over
    a run directory's own files, inside a ledger folder or through a link
    (`pate.store.rundir.output_problem`)."""
    from pate.store.rundir import output_problem

    problem = None if path is None else output_problem(path)
    if problem is not None:
        raise OptionError("--export", f"{problem}; write the export elsewhere")


def check_named(book, name, export_path, set_budget) -> None:
    """`pate ledger --name NAME --export FILE` or ``--set-budget EPS``: refuses, before anything is
    written, a name no ledger in the folder has (a typo would export an eps-0 event for a data set
    that spent nothing it knows of, or write a new ledger holding a budget no data set's releases
    ever meet)."""
    if name is None or book.exists() or (export_path is None and set_budget is None):
        return
    what = "nothing to export" if set_budget is None else "no budget set (nothing written)"
    raise PateError(f"no ledger named {name!r} in {book.directory}: {what}; give the name a `label --votes "
                    "--ledger NAME` charged, or --config / --workdir")


def write_export(path, doc: dict, echo) -> None:
    """`pate ledger --export`: ``doc`` as JSON at ``path`` (atomic; checked again by
    `check_export`), and one line saying what dp-accounting reads."""
    import json

    from analysis.core.files import write_atomic

    check_export(path)
    write_atomic(path, (json.dumps(doc, indent=2, allow_nan=False) + "\n").encode())
    got = doc["dp_accounting_eps"]
    read = ", ".join(f"{k} {v:.4g}" for k, v in got.items() if v is not None) or "neither accountant reads it"
    echo(f"wrote {path}: {doc['releases']} release(s) as one dp-accounting event; ledger eps {doc['ledger_eps']:.4g} "
         f"at delta {doc['delta']:g}; dp-accounting: {read}")


def mark_private_tuning(votes_path, on_private_votes: bool, ledger_name, note: str) -> None:
    """`pate plan --votes`: release parameters tuned on votes are chosen on private data,
    which no ε covers (the threat model assumes every parameter is public). Refused unless
    ``--on-private-votes`` says so on purpose; then the choice is recorded in the votes'
    data set's ledger (`pate.store.ledger.Ledger.mark`), where `pate ledger` and every
    later release.json show it."""
    if votes_path is None:
        if on_private_votes or ledger_name is not None:
            raise click.UsageError("--on-private-votes and --ledger go with --votes")
        return
    if not on_private_votes:
        raise click.UsageError("--votes tunes release parameters on private votes, which no eps covers: plan on "
                               "a public proxy's votes (simulated or public teachers, e.g. bench/teacher_proxy.py; "
                               "`pate plan --config` plans on simulated votes), or pass --on-private-votes to "
                               "record in the data set's ledger that the parameters were chosen on private data")
    from pate.store import ledger as ledger_mod

    ledger_mod.Ledger.for_votes(votes_path, ledger_name).mark("private-tuning", note=note)


@functools.lru_cache(maxsize=None)
def version() -> str:
    from pate import __version__

    return __version__
