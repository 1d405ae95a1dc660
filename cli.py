"""The `pate` command line: each command parses, loads its inputs and calls one library
function. Usage errors exit with status 2 (click), failures with status 1, each as one
line on stderr."""

from __future__ import annotations

import os
import sys

import click

from analysis.errors import OptionError, PateError


def _version() -> str:
    from pate import __version__

    return __version__


class _Group(click.Group):
    """Errors as one line on stderr: usage errors exit 2, a `PateError` exits 1."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
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
            click.echo("pate: aborted", err=True)
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
            click.echo(f"pate: {_one_line(err)}", err=True)
            ctx.exit(1)
        except OSError as err:  # a read-only or full disk, a file that vanished
            where = err.filename or "a file"
            what = err.strerror or type(err).__name__
            click.echo(f"pate: cannot write or read {where}: {what}; free space or make it "
                       "writable, then run the command again (finished steps are kept)", err=True)
            ctx.exit(1)
        except MemoryError:
            click.echo("pate: out of memory; use smaller inputs (fewer queries, classes or "
                       "moments)", err=True)
            ctx.exit(1)
        except Exception as err:  # noqa: BLE001 - a bug: still one line, the traceback on demand
            if os.environ.get("PATE_DEBUG"):
                raise
            click.echo(f"pate: internal error ({type(err).__name__}: {_one_line(err)}); please "
                       "report it, with the traceback from PATE_DEBUG=1", err=True)
            ctx.exit(1)


def _one_line(err: BaseException) -> str:
    return " ".join(str(err).split())


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(version=_version(), prog_name="pate")
def main() -> None:
    """PATE: train teachers on private data, release noisy labels, train a student,
    and account for the privacy spent."""


# --------------------------------------------------------------------------- analyze


def _positive(ctx, param, value):
    if value is not None and not (value > 0 and value != float("inf")):
        raise click.BadParameter(f"must be a positive number, got {value}")
    return value


def _probability(ctx, param, value):
    if value is not None and not (0.0 < value < 1.0):
        raise click.BadParameter(f"must lie strictly between 0 and 1, got {value}")
    return value


def _release_order(ctx, param, value):
    if value is not None and not 1 < value <= 1e4:
        raise click.BadParameter(f"must be a Renyi order above 1 and at most 10000, got {value}")
    return value


def _seed(ctx, param, value):
    """A research seed: all 128 bits are used, so any integer 0 <= seed < 2**128."""
    if value is not None and not 0 <= value < 2**128:
        raise click.BadParameter(f"must satisfy 0 <= seed < 2**128, got {value}")
    return value


def _at_least_one(ctx, param, value):
    if value is not None and value < 1:
        raise click.BadParameter(f"must be at least 1, got {value}")
    return value


def _threshold(ctx, param, value):
    if value is not None and not (0 <= value < float("inf")):
        raise click.BadParameter(f"must be a vote count >= 0, got {value}")
    return value


def _moments(ctx, param, value):
    from analysis.lnmax import MAX_MOMENTS

    if value is not None and not 1 <= value <= MAX_MOMENTS:
        raise click.BadParameter(f"must be between 1 and {MAX_MOMENTS}, got {value}")
    return value


@main.command()
@click.option("--votes", "votes_path", type=click.Path(dir_okay=False),
              help="Vote histogram: .npz (key 'votes') or .npy, queries × classes.")
@click.option("--workdir", type=click.Path(file_okay=False),
              help="A run directory labelled by `pate label` (reads votes.npz and labels.npz).")
@click.option("--mechanism", type=click.Choice(["lnmax", "gnmax", "confident-gnmax"]), default="lnmax",
              show_default=True, help="The aggregator that answered the queries (with --votes).")
@click.option("--gamma", type=float, callback=_positive,
              help="LNMax inverse noise scale: Laplace noise of scale 1/gamma per count.")
@click.option("--sigma", type=float, callback=_positive, help="GNMax noise (sigma_2 for Confident-GNMax).")
@click.option("--threshold", type=float, callback=_threshold, help="Confident-GNMax threshold on the top vote count.")
@click.option("--sigma-threshold", type=float, callback=_positive, help="Confident-GNMax threshold noise sigma_1.")
@click.option("--conversion", type=click.Choice(["classic", "improved"]),
              help="GNMax: RDP to (eps, delta) conversion (default: with --workdir the run's [privacy] "
              "setting, else classic).")
@click.option("--release-order", type=float, callback=_release_order, help="GNMax: Renyi order of the sanitised release, fixed in "
              "advance without looking at the votes (default: the order of the data-independent optimum, "
              "a public quantity; with --workdir, the run's [privacy] release_order when set).")
@click.option("--release-cost", type=float, callback=_positive,
              help="GNMax: RDP the sanitised release may spend at its order (sets its noise; default: "
              "with --workdir the run's [privacy] setting, else 0.2).")
@click.option("--delta", type=float, callback=_probability,
              help="delta of the report (default: with --workdir the run's [privacy] delta, else 1e-5).")
@click.option("--queries", type=int, callback=_at_least_one,
              help="Analyse the first N queries (after --indices).")
@click.option("--indices", "indices_path", type=click.Path(dir_okay=False),
              help="Indices of the answered queries (.npy, or .npz key 'indices').")
@click.option("--moments", type=int, callback=_moments,
              help="Moments accountant orders 1..M (default: with --workdir the run's [privacy] "
              "setting, else 8).")
@click.option("--beta", type=float, callback=_positive,
              help="Smoothness of the smooth-sensitivity release (LNMax default 0.09; GNMax 0.1/order).")
@click.option("--input-is-labels", is_flag=True,
              help="FILE is a teachers × queries matrix of predicted labels (the 2017 paper's format).")
@click.option("--num-classes", type=int, callback=_at_least_one,
              help="Number of classes (required with --input-is-labels: classes no teacher "
              "predicted still count).")
@click.option("--seed", type=int, callback=_seed, help="Seed of the release noise, 0 <= seed < 2**128 "
              "(research only: whoever knows it can remove the noise). Default: fresh OS entropy.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False),
              help="Write the whole report as JSON (private: owner-only).")
@click.option("--release-json", "release_path", type=click.Path(dir_okay=False),
              help="Write the publishable values and the headline eps as JSON (with --votes; "
              "--workdir writes RUN/release.json).")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False),
              help="Write a PNG of cumulative eps against queries (private: owner-only).")
@click.option("--ledger", "ledger_name", metavar="NAME",
              help="With --votes: the private data set the votes come from, whose ledger is charged "
                   "(default: votes:<path of FILE>).")
def analyze(votes_path, workdir, mechanism, gamma, sigma, threshold, sigma_threshold, conversion,
            release_order, release_cost, delta, queries, indices_path, moments, beta,
            input_is_labels, num_classes, seed, json_path, release_path, plot_path, ledger_name):
    """Privacy report for noisy-argmax answers: data-independent, data-dependent
    (private) and sanitised eps."""
    from analysis import mechanisms
    from pate.steps.analyze import analyze_votes, analyze_workdir

    if (votes_path is None) == (workdir is None):
        raise click.UsageError("give exactly one of --votes FILE or --workdir RUN")
    outputs = dict(json_path=json_path, plot_path=plot_path, release_path=release_path, echo=click.echo)
    release = dict(delta=delta, moments=moments, beta=beta, seed=seed, conversion=conversion,
                   release_order=release_order, release_cost=release_cost)
    if workdir is not None:
        if any(v is not None for v in (gamma, sigma, threshold, sigma_threshold)) or mechanism != "lnmax":
            raise click.UsageError("with --workdir the mechanism and its noise come from the run's "
                                   "labels.npz; drop --mechanism/--gamma/--sigma/--threshold/--sigma-threshold")
        ignored = [name for name, v in (("--queries", queries), ("--indices", indices_path),
                                        ("--num-classes", num_classes)) if v is not None]
        ignored += ["--input-is-labels"] if input_is_labels else []
        ignored += ["--ledger"] if ledger_name else []
        if ignored:
            raise click.UsageError(f"{', '.join(ignored)} apply to --votes only: with --workdir the "
                                   "queries and classes come from the run's labels.npz and votes.npz")
        analyze_workdir(workdir, **release, **outputs)  # holds the run's lock (runlock.writes_run)
        return
    if num_classes is not None and not input_is_labels:
        raise click.UsageError("--num-classes applies with --input-is-labels only (a vote histogram "
                               "has its classes as columns)")
    if input_is_labels and num_classes is None:
        raise click.UsageError("--input-is-labels needs --num-classes: classes no teacher predicted "
                               "must still count, or the data-dependent eps is understated")
    try:
        mech = mechanisms.from_options(mechanism, gamma=gamma, sigma=sigma, threshold=threshold,
                                       sigma_threshold=sigma_threshold)
    except PateError as err:
        raise click.UsageError(str(err)) from None
    analyze_votes(votes_path, mech, queries=queries, indices_path=indices_path, ledger=ledger_name,
                  input_is_labels=input_is_labels, num_classes=num_classes, **release, **outputs)


# --------------------------------------------------------------------------- plan


@main.command()
@click.option("--mechanism", required=True, type=click.Choice(["lnmax", "gnmax", "confident-gnmax"]),
              help="The noisy aggregator to calibrate.")
@click.option("--queries", type=int, required=True, callback=_at_least_one,
              help="Number of queries the student will ask.")
@click.option("--eps", "eps", type=float, required=True, callback=_positive, help="Privacy budget epsilon.")
@click.option("--delta", type=float, default=1e-5, show_default=True, callback=_probability)
@click.option("--teachers", type=int, callback=_at_least_one,
              help="Number of teachers (checks --votes and --threshold against it).")
@click.option("--threshold", type=float, callback=_threshold, help="Confident-GNMax threshold on the top vote count.")
@click.option("--sigma-ratio", type=float, default=5.0, show_default=True, callback=_positive,
              help="Confident-GNMax: sigma_threshold / sigma.")
@click.option("--answered", type=int, callback=_at_least_one,
              help="Confident-GNMax: at most this many answers (the labeller must stop there).")
@click.option("--conversion", type=click.Choice(["classic", "improved"]), default="classic", show_default=True,
              help="RDP to (eps, delta) conversion for GNMax.")
@click.option("--accountant", type=click.Choice(["rdp", "pld"]), default="rdp", show_default=True,
              help="Data-independent accountant: RDP (moments accountant for LNMax) with --conversion, "
                   "or dp-accounting's privacy loss distributions (tighter).")
@click.option("--moments", type=int, default=8, show_default=True, callback=_moments,
              help="LNMax: moments accountant orders 1..M.")
@click.option("--votes", "votes_path", type=click.Path(dir_okay=False),
              help="Vote histogram (.npz key 'votes', or .npy): also print the data-dependent eps.")
def plan(mechanism, queries, eps, delta, teachers, threshold, sigma_ratio, answered, conversion, accountant,
         moments, votes_path):
    """Calibrate the noise so that the data-independent eps meets a budget."""
    from analysis import plan as plan_mod
    from analysis import votes as votes_mod

    if mechanism == "confident-gnmax" and threshold is None:
        raise click.UsageError("--threshold is required with --mechanism confident-gnmax")
    if mechanism != "confident-gnmax" and (threshold is not None or answered is not None):
        raise click.UsageError("--threshold and --answered apply to --mechanism confident-gnmax only")
    if answered is not None and answered > queries:
        raise click.BadParameter(f"must be at most --queries {queries}, got {answered}", param_hint="--answered")
    votes = None if votes_path is None else votes_mod.load_votes(votes_path)
    result = plan_mod.plan(
        mechanism, queries, eps, delta, num_teachers=teachers, threshold=threshold, sigma_ratio=sigma_ratio,
        num_answered=answered, votes=votes, moments=range(1, moments + 1), conversion=conversion,
        accountant=accountant,
    )
    click.echo(plan_mod.render(result))


@main.command("train-teachers")
@click.option("--config", "config_path", required=True, type=click.Path(dir_okay=False),
              help="TOML run config, e.g. configs/fashion_mnist.toml.")
@click.option("--workdir", required=True, type=click.Path(file_okay=False),
              help="Run directory (created if missing).")
@click.option("--teachers", "num_teachers", type=click.IntRange(min=1),
              help="Override teachers.num_teachers.")
@click.option("--epochs", type=click.IntRange(min=1), help="Override teachers.epochs.")
@click.option("--set", "settings", multiple=True, metavar="SECTION.KEY=VALUE",
              help="Override any config key (TOML value syntax); repeatable.")
@click.option("--resume", is_flag=True, help="Continue from the last checkpoint in --workdir.")
@click.option("--overwrite", is_flag=True, help="Replace teachers already in --workdir.")
@click.option("--distributed", is_flag=True,
              help="Call jax.distributed.initialize() first (multi-host; same command on "
                   "every host).")
@click.option("--coordinator", metavar="HOST:PORT",
              help="With --distributed: process 0's address (default: detected by JAX).")
@click.option("--num-processes", type=click.IntRange(min=1),
              help="With --distributed: how many processes (default: detected by JAX).")
@click.option("--process-id", type=click.IntRange(min=0),
              help="With --distributed: this process's id (default: detected by JAX).")
@click.option("--no-progress", is_flag=True, help="Do not draw the progress bar.")
def train_teachers_command(config_path, workdir, num_teachers, epochs, settings, resume,
                           overwrite, distributed, coordinator, num_processes, process_id,
                           no_progress):
    """Train the teacher ensemble (one vmapped JAX program) and write teachers/ and
    teachers.json into the run directory."""
    if resume and overwrite:
        raise click.UsageError("--resume and --overwrite exclude each other; pick one")
    cluster = (coordinator, num_processes, process_id)
    if not distributed and any(v is not None for v in cluster):
        raise click.UsageError("--coordinator, --num-processes and --process-id need --distributed")
    from pate.config import load_config, parse_override

    overrides = dict(parse_override(s) for s in settings)
    if num_teachers is not None:
        overrides["teachers.num_teachers"] = num_teachers
    if epochs is not None:
        overrides["teachers.epochs"] = epochs
    config = load_config(config_path, overrides)

    from pate import placement  # imports JAX: keep `pate --help` fast
    from pate.steps import teachers

    if distributed:
        placement.initialize_distributed(*cluster)
    # Multi-host: every host runs this command on the shared run directory; process 0
    # holds the lock for all of them (runlock.writes_run).
    result = teachers.train_teachers(config, workdir, resume=resume, overwrite=overwrite,
                                     show_progress=not no_progress, echo=click.echo)
    click.echo(result.summary())


# --------------------------------------------------------------------------- label


@main.command("label")
@click.option("--workdir", required=True, type=click.Path(file_okay=False),
              help="A run directory with trained teachers (with --votes: any directory, created if missing).")
@click.option("--votes", "votes_path", type=click.Path(dir_okay=False),
              help="Release labels from this vote histogram (.npz key 'votes', or .npy; points × classes) "
                   "computed elsewhere, instead of from pate teachers. Needs --num-classes.")
@click.option("--num-classes", type=int, callback=_at_least_one, help="With --votes: the number of classes.")
@click.option("--input-is-labels", is_flag=True,
              help="With --votes: FILE is a teachers × points matrix of predicted labels.")
@click.option("--indices", "indices_path", type=click.Path(dir_okay=False),
              help="With --votes: rows of FILE to query, in order (.npy, or .npz key 'indices').")
@click.option("--delta", type=float, callback=_probability,
              help="With --votes: delta of --budget and of the printed eps (default 1e-5).")
@click.option("--conversion", type=click.Choice(["classic", "improved"]),
              help="With --votes: RDP conversion for GNMax (default classic).")
@click.option("--accountant", type=click.Choice(["rdp", "pld"]), default="rdp", show_default=True,
              help="How --budget is measured: RDP (moments accountant for LNMax) or dp-accounting's "
                   "privacy loss distributions (tighter: more queries for the same budget).")
@click.option("--mechanism", type=click.Choice(["lnmax", "gnmax", "confident-gnmax"]),
              help="Noisy aggregator (default: the run config's aggregation.mechanism).")
@click.option("--gamma", type=float, callback=_positive, help="LNMax: Laplace noise of scale 1/gamma.")
@click.option("--sigma", type=float, callback=_positive, help="GNMax noise (sigma_2 for Confident-GNMax).")
@click.option("--threshold", type=float, callback=_threshold, help="Confident-GNMax threshold on the top vote count.")
@click.option("--sigma-threshold", type=float, callback=_positive, help="Confident-GNMax threshold noise.")
@click.option("--queries", type=int, callback=_at_least_one, help="Query the first N pool points.")
@click.option("--budget", type=float, callback=_positive,
              help="Stop answering where the data-independent eps would exceed this budget.")
@click.option("--seed", type=int, callback=_seed, help="Noise seed, 0 <= seed < 2**128, for "
              "reproducible research only: whoever knows it can remove the noise. Never written to any "
              "file. Default: fresh OS entropy.")
@click.option("--overwrite", is_flag=True, help="Replace an existing release in --workdir.")
@click.option("--ledger", "ledger_name", metavar="NAME",
              help="With --votes: the private data set the votes come from, whose ledger is charged "
                   "(default: votes:<path of FILE>).")
def label_command(workdir, votes_path, num_classes, input_is_labels, indices_path, delta, conversion,
                  accountant, mechanism, gamma, sigma, threshold, sigma_threshold, queries, budget, seed,
                  overwrite, ledger_name):
    """Let the teachers vote on the public pool and release noisy labels (labels.npz);
    the votes (votes.npz) stay private. With --votes, release labels from votes of
    teachers trained anywhere (no pate teachers, no config)."""
    import os

    from pate.config import load_config

    if votes_path is not None:
        if num_classes is None:
            raise click.UsageError("--votes needs --num-classes C (classes no teacher predicted still count)")
        from pate.steps.label import label_votes  # imports JAX

        label_votes(votes_path, workdir, num_classes=num_classes, mechanism=mechanism or "lnmax",
                    gamma=gamma, sigma=sigma, threshold=threshold, sigma_threshold=sigma_threshold,
                    queries=queries, indices=indices_path, budget=budget,
                    delta=1e-5 if delta is None else delta, conversion=conversion or "classic",
                    accountant=accountant, input_is_labels=input_is_labels, seed=seed,
                    overwrite=overwrite, ledger=ledger_name, echo=click.echo)
        return
    only_votes = {"--num-classes": num_classes, "--indices": indices_path, "--delta": delta,
                  "--conversion": conversion, "--input-is-labels": input_is_labels or None,
                  "--ledger": ledger_name}
    misplaced = [name for name, value in only_votes.items() if value is not None]
    if misplaced:
        raise click.UsageError(f"{', '.join(misplaced)} apply only with --votes (a run's own votes use "
                               "its config)")

    config_file = os.path.join(workdir, "config.toml")
    if not os.path.exists(config_file):
        raise PateError(f"{workdir} is not a run directory (no config.toml); run `pate train-teachers` first")
    overrides = {f"aggregation.{k}": v for k, v in dict(
        mechanism=mechanism, gamma=gamma, sigma=sigma, threshold=threshold,
        sigma_threshold=sigma_threshold, queries=queries).items() if v is not None}
    config = load_config(config_file, overrides)

    effective = config.aggregation.mechanism
    applies = {"--gamma": ("lnmax",), "--sigma": ("gnmax", "confident-gnmax"),
               "--threshold": ("confident-gnmax",), "--sigma-threshold": ("confident-gnmax",)}
    given = {"--gamma": gamma, "--sigma": sigma, "--threshold": threshold, "--sigma-threshold": sigma_threshold}
    stray = [name for name, v in given.items() if v is not None and effective not in applies[name]]
    if stray:
        raise click.UsageError(f"{', '.join(stray)} do not apply to the mechanism {effective} (from "
                               f"{'--mechanism' if mechanism else config_file}); drop them or pick "
                               "the mechanism they belong to")

    from pate.steps.label import label  # imports JAX

    label(config, workdir, seed=seed, overwrite=overwrite, budget=budget, accountant=accountant,
          echo=click.echo)


# --------------------------------------------------------------------------- train-student


@main.command("train-student")
@click.option("--workdir", required=True, type=click.Path(file_okay=False),
              help="A run directory labelled by `pate label`.")
@click.option("--method", type=click.Choice(["fixmatch", "supervised"]),
              help="FixMatch on labels + unlabelled pool, or the labels alone "
                   "(default: the run config's student.method).")
@click.option("--steps", type=click.IntRange(min=1), help="Override student.steps.")
@click.option("--epochs", type=click.FloatRange(min=0, min_open=True),
              help="Train for this many passes instead of --steps: over the unlabelled pool "
                   "(fixmatch) or the labelled queries (supervised).")
@click.option("--set", "settings", multiple=True, metavar="student.KEY=VALUE",
              help="Override a [student] key (TOML value syntax); repeatable.")
@click.option("--overwrite", is_flag=True, help="Replace a student already in --workdir.")
@click.option("--no-progress", is_flag=True, help="Do not draw the progress bar.")
def train_student_command(workdir, method, steps, epochs, settings, overwrite, no_progress):
    """Train the student on the released labels (labels.npz) and the unlabelled public
    pool; write student/ and student.json. Never reads votes.npz or the teachers."""
    import os

    from pate.config import load_config, parse_override

    overrides = dict(parse_override(s) for s in settings)
    others = [k for k in overrides if not k.startswith("student.")]
    if others:
        raise click.BadParameter(f"only [student] keys may change here, got {', '.join(others)}; "
                                 "the rest is fixed by the run (use `pate run` to change it)",
                                 param_hint="--set")
    if method is not None:
        overrides["student.method"] = method
    if steps is not None:
        overrides["student.steps"] = steps
    config_file = os.path.join(workdir, "config.toml")
    if not os.path.exists(config_file):
        raise PateError(f"{workdir} is not a run directory (no config.toml); run `pate train-teachers` "
                        "and `pate label` first")
    if steps is not None and epochs is not None:
        raise click.BadParameter("give --steps or --epochs, not both", param_hint="--epochs")
    config = load_config(config_file, overrides)

    from pate.steps.student import train_student  # imports JAX

    result = train_student(config, workdir, overwrite=overwrite, epochs=epochs,
                           show_progress=not no_progress, echo=click.echo)
    click.echo(result.summary())


# --------------------------------------------------------------------------- run


@main.command("run")
@click.option("--config", "config_path", required=True, type=click.Path(dir_okay=False),
              help="TOML run config, e.g. configs/fashion_mnist.toml.")
@click.option("--workdir", required=True, type=click.Path(file_okay=False),
              help="Run directory (created if missing).")
@click.option("--set", "settings", multiple=True, metavar="SECTION.KEY=VALUE",
              help="Override any config key (TOML value syntax); repeatable.")
@click.option("--seed", type=int, callback=_seed, help="Noise seed of the aggregator and the sanitised "
              "release, 0 <= seed < 2**128, for reproducible research only; never written. Default: "
              "fresh OS entropy.")
@click.option("--overwrite", is_flag=True, help="Run every step again from scratch.")
@click.option("--no-progress", is_flag=True, help="Do not draw progress bars.")
def run_command(config_path, workdir, settings, seed, overwrite, no_progress):
    """Run the whole job: train-teachers, label, train-student, analyze. Steps whose
    artifacts are complete and made from the same config sections are skipped."""
    from pate.config import load_config, parse_override

    config = load_config(config_path, dict(parse_override(s) for s in settings))

    from pate.steps.pipeline import preflight, run  # imports JAX

    preflight(config, seed)  # before the lock creates the run directory
    summary = run(config, workdir, overwrite=overwrite, seed=seed, show_progress=not no_progress,
                  echo=click.echo)
    click.echo(summary.summary())


# --------------------------------------------------------------------------- dpsgd


def _seed128(ctx, param, value):
    if value is not None and not 0 <= value < 2**128:
        raise click.BadParameter(f"must satisfy 0 <= seed < 2**128, got {value}")
    return value


@main.command("dpsgd")
@click.option("--config", "config_path", required=True, type=click.Path(dir_okay=False),
              help="TOML run config, e.g. configs/fashion_mnist.toml (its [dpsgd] section).")
@click.option("--workdir", required=True, type=click.Path(file_okay=False),
              help="Run directory (created if missing; a PATE run of the same data is fine).")
@click.option("--eps", "eps", type=float, callback=_positive, help="Target epsilon (overrides dpsgd.eps).")
@click.option("--model", type=click.Choice(["cnn", "scatternet"]),
              help="End-to-end tanh CNN, or ScatterNet features + linear (overrides dpsgd.model).")
@click.option("--set", "settings", multiple=True, metavar="SECTION.KEY=VALUE",
              help="Override any config key (TOML value syntax); repeatable.")
@click.option("--seed", type=int, callback=_seed128,
              help="Seed (0 <= seed < 2**128) of the noise, sampling and initialisation, for reproducible "
                   "research only: whoever knows it can remove the noise. Never written. Default: fresh OS entropy.")
@click.option("--overwrite", is_flag=True, help="Replace dpsgd.json and dpsgd/ already in --workdir.")
@click.option("--no-progress", is_flag=True, help="Do not draw the progress bar.")
def dpsgd_command(config_path, workdir, eps, model, settings, seed, overwrite, no_progress):
    """Train the DP-SGD baseline on the same private train split as the teachers,
    calibrated to eps at [privacy] delta; write dpsgd.json and dpsgd/."""
    from pate.config import load_config, parse_override

    overrides = dict(parse_override(s) for s in settings)
    if eps is not None:
        overrides["dpsgd.eps"] = eps
    if model is not None:
        overrides["dpsgd.model"] = model
    config = load_config(config_path, overrides)

    from pate.steps.dpsgd import train_dpsgd  # imports JAX

    result = train_dpsgd(config, workdir, seed=seed, overwrite=overwrite, show_progress=not no_progress,
                         echo=click.echo)
    click.echo(result.summary())


# --------------------------------------------------------------------------- ledger


@main.command("ledger")
@click.option("--config", "config_path", type=click.Path(dir_okay=False, exists=True),
              help="The ledger of this config's private data set.")
@click.option("--workdir", type=click.Path(file_okay=False), help="The ledger of this run's data set.")
@click.option("--name", help="A ledger by name (external votes: the --ledger NAME given to label/analyze).")
@click.option("--import", "import_path", type=click.Path(file_okay=False),
              help="Charge the releases of a run made before the ledger (once each), then list.")
@click.option("--delta", type=float, callback=_probability,
              help="delta of the cumulative eps (default: the config's privacy.delta, else 1e-5).")
def ledger_command(config_path, workdir, name, import_path, delta):
    """List every release charged to a private data set's ledger and the cumulative eps
    they spend together (composition of their data-independent costs)."""
    from pate import ledger as ledger_mod
    from pate.config import load_config
    from pate.rundir import RunDir

    given = [v for v in (config_path, workdir, name) if v is not None]
    if len(given) > 1 or not (given or import_path):
        raise click.UsageError("give one of --config FILE, --workdir RUN or --name NAME (or --import RUN)")
    config = None
    if import_path is not None:
        ledger_mod.import_run(import_path, name=name, echo=click.echo)
        workdir = workdir if given else import_path
    if config_path is not None:
        config = load_config(config_path)
        book = ledger_mod.Ledger.for_config(config)
    elif workdir is not None and name is None:
        if not os.path.isdir(workdir):
            raise PateError(f"run directory {workdir} does not exist")
        config = RunDir(workdir).stored_config()
        book = ledger_mod.for_run(workdir, config)
    else:
        book = ledger_mod.Ledger(name, ledger_mod.default_directory())
    if delta is None:
        delta = config.privacy.delta if config is not None else 1e-5
    click.echo(ledger_mod.render(book, delta))


# --------------------------------------------------------------------------- fedavg


def _fedavg_positive(ctx, param, value):
    if value is not None and not (value > 0 and value != float("inf")):
        raise click.BadParameter(f"must be a positive number, got {value}")
    return value


@main.command("fedavg")
@click.option("--config", "config_path", required=True, type=click.Path(dir_okay=False),
              help="TOML run config, e.g. configs/fashion_mnist.toml (its [fedavg] section).")
@click.option("--workdir", required=True, type=click.Path(file_okay=False),
              help="Run directory (created if missing; a PATE run of the same data is fine).")
@click.option("--algorithm", type=click.Choice(["fedavg", "iadmm"]), help="Overrides fedavg.algorithm.")
@click.option("--eps", type=float, callback=_fedavg_positive, help="Total eps of all rounds (overrides fedavg.eps).")
@click.option("--rounds", type=click.IntRange(min=1), help="Overrides fedavg.rounds.")
@click.option("--clients", type=click.IntRange(min=1), help="Overrides fedavg.clients (default: the teachers' shards).")
@click.option("--mechanism", type=click.Choice(["laplace", "gaussian"]), help="Overrides fedavg.mechanism.")
@click.option("--set", "settings", multiple=True, metavar="SECTION.KEY=VALUE",
              help="Override any config key (TOML value syntax); repeatable.")
@click.option("--seed", type=click.IntRange(min=0, max=2**128 - 1),
              help="Noise seed (0 <= seed < 2**128), research only; never written. Default: OS entropy.")
@click.option("--overwrite", is_flag=True, help="Replace fedavg.json and fedavg/ already in --workdir.")
@click.option("--no-progress", is_flag=True, help="Do not draw the progress bar.")
def fedavg_command(config_path, workdir, algorithm, eps, rounds, clients, mechanism, settings, seed, overwrite,
                   no_progress):
    """Federated learning on the teachers' shards with noise on every client message,
    eps accounted over all rounds at [privacy] delta; write fedavg.json and fedavg/."""
    from pate.config import load_config, parse_override

    overrides = dict(parse_override(s) for s in settings)
    given = {"algorithm": algorithm, "eps": eps, "rounds": rounds, "clients": clients, "mechanism": mechanism}
    overrides.update({f"fedavg.{k}": v for k, v in given.items() if v is not None})
    config = load_config(config_path, overrides)

    from pate.steps.fedavg import train_fedavg  # imports JAX

    result = train_fedavg(config, workdir, seed=seed, overwrite=overwrite, show_progress=not no_progress,
                          echo=click.echo)
    click.echo(result.summary())


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
