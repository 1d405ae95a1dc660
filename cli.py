"""The `pate` command line: each command parses, loads its inputs and calls one library
function. Usage errors exit with status 2 (click), failures with status 1, each as one
line on stderr (`pate.cli.options.Group`); options, their checks and defaults live in
`pate.cli.options`."""

from __future__ import annotations

import functools
import sys

import click

from analysis.mechanisms import registry
from pate.cli import baseline_options as baseline
from pate.cli import options as opt


def start_cluster(distributed: bool, coordinator, num_processes, process_id, join_timeout) -> None:
    """Joins the cluster the `opt.cluster` options name (`jax.distributed.initialize`, before
    any JAX computation, or one line within --join-timeout); nothing without --distributed."""
    opt.check_cluster(distributed, coordinator, num_processes, process_id, join_timeout)
    if distributed:
        from pate.programs import placement  # imports JAX: keep `pate --help` fast

        placement.initialize_distributed(coordinator, num_processes, process_id, join_timeout)


def config_with(config_path, settings, **named):
    """`opt.config_with`'s config with the keys its file left out decided by the data's public
    facts (`pate.programs.data_facts.with_data_defaults`)."""
    return resolved(opt.config_with(config_path, settings, **named))


def resolved(config):
    """``config`` with its left-out keys resolved; the line saying which values the data chose is
    kept (`Config.data_note`) for the step that does the work to print, after the checks: a
    refusal stays one line."""
    from pate.programs.data_facts import with_data_defaults

    return with_data_defaults(config)


@click.group(cls=opt.Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(version=opt.version(), prog_name="pate")
def main() -> None:
    """PATE: train teachers on private data, release noisy labels, train a student,
    and account for the privacy spent."""


@main.command()
@opt.analyze_options()
def analyze(votes_path, workdir, mechanism, gamma, sigma, threshold, sigma_threshold, conversion,
            release_order, release_cost, delta, queries, indices_path, moments, beta,
            input_is_labels, num_classes, seed, json_path, release_path, plot_path, show_private, ledger_name):
    """Privacy report for noisy-argmax answers: data-independent, data-dependent
    (private) and sanitised eps."""
    from pate.steps.analyze import analyze_votes, analyze_workdir

    noise = dict(gamma=gamma, sigma=sigma, threshold=threshold, sigma_threshold=sigma_threshold)
    opt.check_analyze(votes_path, workdir, mechanism, noise, {
        "--queries": queries, "--indices": indices_path, "--num-classes": num_classes,
        "--input-is-labels": input_is_labels, "--ledger": ledger_name, "--show-private": show_private},
        input_is_labels, num_classes)
    outputs = dict(json_path=json_path, plot_path=plot_path, release_path=release_path, echo=click.echo)
    release = dict(delta=delta, moments=moments, beta=beta, seed=seed, conversion=conversion,
                   release_order=release_order, release_cost=release_cost)
    if workdir is not None:
        analyze_workdir(workdir, **release, **outputs)  # holds the run's lock (pate.store.door.step)
        return
    analyze_votes(votes_path, opt.mechanism_record(mechanism, noise), queries=queries, indices_path=indices_path,
                  ledger=ledger_name, input_is_labels=input_is_labels, num_classes=num_classes, show_private=show_private,
                  **release, **outputs)


@main.command()
@click.option("--mechanism", type=click.Choice(registry.TEACHER_NAMES), help="The noisy aggregator to calibrate.")
@click.option("--queries", type=int, callback=opt.at_least_one,
              help="Number of queries the student will ask (with --config: at most this many).")
@click.option("--eps", "eps", type=float, callback=opt.eps_value, help="Privacy budget epsilon.")
@click.option("--config", "config_path", type=click.Path(dir_okay=False),
              help="Instead of --mechanism/--eps: plan the release of this run config for a target headline "
                   "([privacy] target_eps, or --target-eps): the queries and the release order, beta and cost.")
@click.option("--target-eps", type=float, callback=opt.eps_value,
              help="With --config: the headline eps to stay within (overrides [privacy] target_eps).")
@opt.settings()
@click.option("--delta", type=float, default=opt.DEFAULTS.delta, show_default=True, callback=opt.probability)
@click.option("--teachers", type=int, callback=opt.at_least_one,
              help="Number of teachers (checks --votes and --threshold against it).")
@click.option("--threshold", type=float, callback=opt.threshold, help="Confident-GNMax threshold on the top vote count.")
@click.option("--sigma-ratio", type=float, default=5.0, show_default=True, callback=opt.positive,
              help="Confident-GNMax: sigma_threshold / sigma.")
@click.option("--answered", type=int, callback=opt.at_least_one,
              help="Confident-GNMax: at most this many answers (the labeller must stop there).")
@opt.conversion("RDP to (eps, delta) conversion for GNMax.", default=opt.DEFAULTS.conversion)
@opt.accountant("Data-independent accountant: RDP (moments accountant for LNMax) with --conversion, "
                "or dp-accounting's privacy loss distributions (tighter).")
@click.option("--moments", type=int, default=opt.DEFAULTS.moments, show_default=True, callback=opt.moments,
              help="LNMax: moments accountant orders 1..M.")
@click.option("--votes", "votes_path", type=click.Path(dir_okay=False),
              help="Vote histogram (.npz key 'votes', or .npy): also print the data-dependent eps. Private votes "
                   "are refused unless --on-private-votes: plan on a public proxy's votes instead.")
@click.option("--on-private-votes", is_flag=True,
              help="With --votes: these are the private votes, and the parameters chosen here are recorded in "
                   "their data set's ledger as chosen on private data (no eps covers that choice).")
@opt.ledger()
def plan(mechanism, queries, eps, config_path, target_eps, settings, delta, teachers, threshold, sigma_ratio,
         answered, conversion, accountant, moments, votes_path, on_private_votes, ledger_name):
    """Calibrate the noise so that the data-independent eps meets a budget; with --config,
    choose the queries and release settings so that the published headline meets a target
    with probability [privacy] target_probability."""
    from analysis.planning import plan as plan_mod
    from analysis.core import votes as votes_mod

    if config_path is not None or target_eps is not None or settings:
        opt.check_plan_config(config_path, mechanism, eps, threshold, answered, votes_path, teachers)
        from pate.release import target as release_target

        config = config_with(config_path, settings, aggregation__queries=queries,
                                 privacy__target_eps=target_eps)  # δ, conversion: the config's
        release_target.plan_config(config, echo=click.echo)
        return
    opt.check_plan(mechanism, queries, eps, threshold, answered)
    votes = None if votes_path is None else votes_mod.load_votes(votes_path)
    opt.mark_private_tuning(votes_path, on_private_votes, ledger_name,
                            f"pate plan --votes: {mechanism}, {queries} queries, eps {eps:g} at delta {delta:g}")
    result = plan_mod.plan(
        mechanism, queries, eps, delta, num_teachers=teachers, threshold=threshold, sigma_ratio=sigma_ratio,
        num_answered=answered, votes=votes, moments=range(1, moments + 1), conversion=conversion,
        accountant=accountant)
    click.echo(plan_mod.render(result))


@main.command("ceiling")
@opt.config()
@opt.settings()
@click.option("--heads", type=click.IntRange(1, 64), default=5, show_default=True,
              help="Heads to train, each on its own shard of the public proxy (fewer when the proxy holds fewer).")
@click.option("--maps", callback=opt.map_list, help="Rank these candidate maps (commas or spaces between them, "
              "e.g. 'scattering,hog,scattering+hog') by their noiseless fine-grained labels and forward 10-NN on the "
              "public proxy, in one table (no heads).")
@click.option("--whiten", type=click.Choice(["config", "yes", "no", "both"]), default="config", show_default=True,
              help="With --maps: try each map whitened, unwhitened, or both (config: [features] whiten).")
@click.option("--tune", is_flag=True,
              help="Choose fine_grained votes_per_record (k), smoothing (m) and smoothing_weights on the public proxy "
                   "with the release's own noise at the config's eps: every candidate (k 1, 2, 4; m 10, 20, 40; "
                   "uniform, harmonic), with --maps every map x candidate, in one table, best first, and the --set "
                   "line that uses the winner (no heads).")
@click.option("--draws", type=click.IntRange(1, 100), default=5, show_default=True,
              help="With --tune: seeded noise draws per candidate.")
@click.option("--json", "as_json", is_flag=True,
              help="Print the report as one JSON document; progress lines go to stderr.")
def ceiling_command(config_path, settings, heads, maps, whiten, tune, draws, as_json):
    """What the config's [features] map can give, before any private record is read: on the
    public proxy (the labelled public pool cut in two), the noiseless fine-grained labels, the
    forward 10-NN and a head at the teachers' shard size; with --maps, candidate maps ranked;
    with --tune, the release's settings chosen there with its noise.
    Benchmark output on public data: spends no eps, charges nothing, writes nothing."""
    import json

    if whiten != "config" and maps is None:
        raise click.UsageError("--whiten applies with --maps; set [features] whiten for one map")
    if draws != 5 and not tune:
        raise click.UsageError("--draws applies with --tune")
    config = config_with(config_path, settings)

    from pate.release.ceiling import ceiling, rank, tune_maps  # imports JAX

    echo = functools.partial(click.echo, err=True)
    tries = {"config": (), "yes": (True,), "no": (False,), "both": (False, True)}[whiten]
    if tune:
        report = tune_maps(config, maps, tries, draws=draws, echo=echo)
    elif maps is not None:
        report = rank(config, maps, tries, echo=echo)
    else:
        report = ceiling(config, heads=heads, echo=echo)
    click.echo(json.dumps(report.to_json(), indent=2, allow_nan=False) if as_json else report.render())


@main.command("features")
@opt.config()
@opt.settings()
@click.option("--out", "out", required=True, type=click.Path(file_okay=False),
              help="Folder to write the weights into (encoder.npz or filters.npz, and recipe.json).")
@click.option("--kind", type=click.Choice(["learned", "coates-ng"]), default="learned", show_default=True,
              help="learned: a SimCLR encoder ([features] weights); coates-ng: k-means filters of pool patches "
              "([features] filters).")
@click.option("--epochs", type=click.IntRange(1, 10000), help="learned: training epochs (default: the recipe's, 30).")
@click.option("--seed", type=click.IntRange(0, 2**31 - 1), help="Training or sampling seed (default 0).")
@click.option("--widths", callback=opt.int_list, help="learned: the convolutions' widths, e.g. 32,64,64 (the default).")
@click.option("--strides", callback=opt.int_list,
              help="learned: their strides, one per width, e.g. 1,2,2 (the default).")
@click.option("--degrees", type=float, callback=opt.degrees, help="learned: the views' random rotation (and half as "
              "much shear) in degrees (default 10; 0: no affine map).")
@click.option("--filters", "num_filters", type=click.IntRange(2, 4096),
              help="coates-ng: k-means filters (default 256).")
@click.option("--size", type=click.IntRange(2, 32), help="coates-ng: the patches' side in pixels (default 5).")
@click.option("--patches", type=click.IntRange(2, 10_000_000), help="coates-ng: pool patches k-means sees "
              "(default 100000).")
@click.option("--iterations", type=click.IntRange(1, 1000), help="coates-ng: k-means steps (default 30).")
@opt.overwrite("Replace weights already in --out.")
@opt.no_progress()
def features_command(config_path, settings, out, kind, epochs, seed, widths, strides, degrees, num_filters, size,
                     patches, iterations, overwrite, no_progress):
    """Fit a public feature map on the config's public pool alone (no private record, no label):
    a small SimCLR encoder on the pool's images (--kind learned, for [features] map = "learned",
    weights = "OUT"), or Coates-Ng k-means filters on the pool's patches (--kind coates-ng, for
    map = "coates-ng", filters = "OUT"); written with its recipe and digest into --out."""
    learned_only = {"--epochs": epochs, "--widths": widths, "--strides": strides, "--degrees": degrees}
    coates_only = {"--filters": num_filters, "--size": size, "--patches": patches, "--iterations": iterations}
    wrong = [k for k, v in (coates_only if kind == "learned" else learned_only).items() if v is not None]
    if wrong:
        raise click.UsageError(f"{', '.join(wrong)} do(es) not apply to --kind {kind}")
    config = config_with(config_path, settings)
    if kind == "coates-ng":
        from pate.programs.coates_ng import make as make_filters

        make_filters(config, out, overwrite=overwrite, echo=click.echo, filters=num_filters, size=size,
                     patches=patches, iterations=iterations, seed=seed)
        return

    from pate.programs.learned_map import make  # imports JAX

    make(config, out, overwrite=overwrite, show_progress=not no_progress, echo=click.echo, epochs=epochs,
         seed=seed, widths=widths, strides=strides, degrees=degrees)


@main.command("train-teachers")
@opt.config()
@opt.workdir("Run directory (created if missing).")
@click.option("--teachers", "num_teachers", type=click.IntRange(min=1), help="Override teachers.num_teachers.")
@click.option("--epochs", type=click.IntRange(min=1), help="Override teachers.epochs.")
@opt.settings()
@click.option("--resume", is_flag=True, help="Continue from the last checkpoint in --workdir.")
@opt.overwrite("Replace teachers already in --workdir.")
@opt.cluster()
@opt.no_progress()
def train_teachers_command(config_path, workdir, num_teachers, epochs, settings, resume,
                           overwrite, distributed, coordinator, num_processes, process_id, join_timeout, no_progress):
    """Train the teacher ensemble (one vmapped JAX program) and write teachers/ and
    teachers.json into the run directory."""
    if resume and overwrite:
        raise click.UsageError("--resume and --overwrite exclude each other; pick one")
    config = config_with(config_path, settings, teachers__num_teachers=num_teachers, teachers__epochs=epochs)
    start_cluster(distributed, coordinator, num_processes, process_id, join_timeout)
    from pate.steps import teachers  # imports JAX: keep `pate --help` fast

    # Multi-host: every host runs this command on the shared run directory; process 0
    # holds the lock for all of them (pate.store.door.step).
    result = teachers.train_teachers(config, workdir, resume=resume, overwrite=overwrite,
                                     show_progress=not no_progress, echo=click.echo)
    click.echo(result.summary())


@main.command("label")
@opt.label_options()
def label_command(workdir, votes_path, num_classes, input_is_labels, indices_path, delta, conversion,
                  accountant, mechanism, config_path, gamma, sigma, threshold, sigma_threshold, queries, round_, select,
                  check, budget, target_eps, allow_near_chance, seed, overwrite, ledger_name, distributed, coordinator,
                  num_processes, process_id, join_timeout):
    """Let the teachers vote on the public pool and release noisy labels (labels.npz);
    the votes (votes.npz) stay private. With --votes, release labels from votes of
    teachers trained anywhere (no pate teachers, no config). With --round 2, a second
    release (labels-round2.npz) on a finished round 1. With --distributed, every process votes
    with its own block of teachers (round 2: fits and runs their heads; a fine-grained release:
    counts its own slice of the private records) and process 0 releases (docs/scale.md)."""
    opt.check_cluster(distributed, coordinator, num_processes, process_id, join_timeout)
    if distributed and votes_path is not None:
        raise click.UsageError("--distributed votes with the run's teachers; drop it with --votes")
    noise = dict(gamma=gamma, sigma=sigma, threshold=threshold, sigma_threshold=sigma_threshold)
    if round_ == 2:
        config = opt.round2_config(workdir, queries, select, check, {
            "--votes": votes_path, "--mechanism": mechanism, "--budget": budget, "--num-classes": num_classes,
            "--input-is-labels": input_is_labels, "--indices": indices_path, "--delta": delta,
            "--conversion": conversion, "--ledger": ledger_name, "--target-eps": target_eps, "--config": config_path,
            "--allow-near-chance": allow_near_chance, **{"--" + k.replace("_", "-"): v for k, v in noise.items()}})
        start_cluster(distributed, coordinator, num_processes, process_id, join_timeout)
        from pate.steps.label_round2 import label_round2  # imports JAX

        label_round2(config, workdir, queries=queries, seed=seed, overwrite=overwrite, echo=click.echo)
        return
    if select is not None or check is not None:
        raise click.UsageError("--select and --check apply with --round 2 only")
    if votes_path is not None:
        if (mechanism is not None and not registry.record_type(mechanism).needs_teachers) or config_path is not None:
            raise click.UsageError("--votes releases teachers' votes; a fine-grained release reads the private data "
                                   "itself: drop --votes and give --config")
        if num_classes is None:
            raise click.UsageError("--votes needs --num-classes C (classes no teacher predicted still count)")
        if target_eps is not None:
            raise click.UsageError("--target-eps plans a run's own release (its config); with --votes use --budget")
        from pate.steps.label_votes import label_votes  # imports JAX

        label_votes(votes_path, workdir, num_classes=num_classes, mechanism=mechanism or "lnmax", **noise,
                    queries=queries, indices=indices_path, budget=budget,
                    delta=opt.DEFAULTS.delta if delta is None else delta,
                    conversion=conversion or opt.DEFAULTS.conversion,
                    accountant=accountant, input_is_labels=input_is_labels, seed=seed,
                    overwrite=overwrite, ledger=ledger_name, allow_near_chance=allow_near_chance, echo=click.echo)
        return
    config = resolved(opt.label_config(workdir, mechanism, noise, queries, {
        "--num-classes": num_classes, "--indices": indices_path, "--delta": delta, "--conversion": conversion,
        "--input-is-labels": input_is_labels or None, "--ledger": ledger_name}, target_eps, config_path,
        allow_near_chance))

    start_cluster(distributed, coordinator, num_processes, process_id, join_timeout)
    from pate.steps.label import label  # imports JAX

    label(config, workdir, seed=seed, overwrite=overwrite, budget=budget, accountant=accountant, echo=click.echo)


@main.command("train-student")
@opt.workdir("A run directory labelled by `pate label`.")
@click.option("--method", type=click.Choice(["fixmatch", "supervised"]), help="FixMatch on labels + unlabelled "
              "pool, or the labels alone (default: the run config's student.method).")
@click.option("--steps", type=click.IntRange(min=1), help="Override student.steps.")
@click.option("--epochs", type=click.FloatRange(min=0, min_open=True), help="Train for this many passes instead of "
              "--steps: over the unlabelled pool (fixmatch) or the labelled queries (supervised).")
@opt.settings("student.KEY=VALUE", "Override a [student] key (TOML value syntax); repeatable.")
@opt.overwrite("Replace a student already in --workdir.")
@opt.no_progress()
def train_student_command(workdir, method, steps, epochs, settings, overwrite, no_progress):
    """Train the student on the released labels (labels.npz) and the unlabelled public
    pool; write student/ and student.json. Never reads votes.npz or the teachers."""
    config = opt.student_config(workdir, method, steps, epochs, settings)

    from pate.steps.student import train_student  # imports JAX

    result = train_student(config, workdir, overwrite=overwrite, epochs=epochs,
                           show_progress=not no_progress, echo=click.echo)
    click.echo(result.summary())


@main.command("run")
@opt.config()
@opt.workdir("Run directory (created if missing).")
@opt.settings()
@opt.seed_option("Noise seed of the aggregator and the sanitised release, 0 <= seed < 2**128, for reproducible "
                 "research only; never written. Default: fresh OS entropy.")
@opt.overwrite("Run every step again from scratch.")
@opt.cluster()
@opt.no_progress("Do not draw progress bars.")
def run_command(config_path, workdir, settings, seed, overwrite, distributed, coordinator, num_processes,
                process_id, join_timeout, no_progress):
    """Run the whole job: train-teachers, label, train-student, analyze. Steps whose
    artifacts are complete and made from the same config sections are skipped. With
    --distributed, every process trains its part of the teachers and votes with its block (a
    fine-grained run: counts the votes of its slice of the records); process 0 alone releases,
    then trains the student and writes the report (docs/scale.md)."""
    opt.check_cluster(distributed, coordinator, num_processes, process_id, join_timeout)
    config = config_with(config_path, settings)

    from pate.steps.pipeline import preflight, run  # imports JAX

    preflight(config, seed)  # before the lock creates the run directory
    start_cluster(distributed, coordinator, num_processes, process_id, join_timeout)
    summary = run(config, workdir, overwrite=overwrite, seed=seed, show_progress=not no_progress, echo=click.echo)
    if summary is not None:  # None: a process other than 0 of a distributed run (it printed its line)
        click.echo(summary.summary())


@main.command("dpsgd")
@baseline.dpsgd_options()
def dpsgd_command(config_path, workdir, eps, model, features, settings, seed, overwrite, distributed, coordinator,
                  num_processes, process_id, join_timeout, no_progress):
    """Train the DP-SGD baseline on the same private train split as the teachers,
    calibrated to eps at [privacy] delta; write dpsgd.json and dpsgd/. With --distributed,
    every process adds the clipped gradients of its own slice of the records and process 0
    alone draws the noise and writes."""
    opt.check_cluster(distributed, coordinator, num_processes, process_id, join_timeout)
    config = config_with(config_path, settings, dpsgd__eps=eps, dpsgd__model=model, dpsgd__features=features)
    start_cluster(distributed, coordinator, num_processes, process_id, join_timeout)
    baseline.train_and_print("dpsgd", config, workdir, seed, overwrite, no_progress)


@main.command("ledger")
@click.option("--config", "config_path", type=click.Path(dir_okay=False),
              help="The ledger of this config's private data set.")
@click.option("--workdir", type=click.Path(file_okay=False), help="The ledger of this run's data set.")
@click.option("--name", callback=opt.ledger_name_check,
              help="A ledger by name (external votes: the --ledger NAME given to label/analyze).")
@click.option("--import", "import_path", type=click.Path(file_okay=False),
              help="Charge the releases of a run made before the ledger (once each), then list.")
@click.option("--delta", type=float, callback=opt.probability, help="delta of the cumulative eps (default: "
              f"the config's privacy.delta, else {opt.short(opt.DEFAULTS.delta)}).")
@click.option("--set-budget", type=float, callback=opt.positive,
              help="Record EPS (at --delta) as the data set's total budget, raising or lowering it on purpose "
                   "(never below what is spent); every later command holds to it.")
@click.option("--export", "export_path", type=click.Path(dir_okay=False),
              help="Also write the data set's composed dp-accounting event (JSON, public) to FILE, with the "
                   "ledger's cumulative eps and dp-accounting's own figures beside it.")
@click.option("--json", "as_json", is_flag=True,
              help="Print what the table shows as one JSON document (entries with their own eps, the cumulative "
                   "eps, delta and route, the budget), for scripts; other messages go to stderr.")
def ledger_command(config_path, workdir, name, import_path, delta, set_budget, export_path, as_json):
    """List every release charged to a private data set's ledger and the cumulative eps
    they spend together (composition of their data-independent costs)."""
    import json

    from pate.steps.ledger_import import import_run
    from pate.store import ledger as ledger_mod

    say = functools.partial(click.echo, err=as_json)  # with --json, stdout is the document alone
    opt.check_export(export_path)
    book, config = opt.ledger_book(config_path, workdir, name, import_path, functools.partial(import_run, echo=say))
    opt.check_named(book, name, export_path, set_budget)
    delta = delta or (config.privacy if config is not None else opt.DEFAULTS).delta
    if set_budget is not None:
        book.set_budget(set_budget, delta)
    if as_json:
        click.echo(json.dumps(ledger_mod.describe(book, delta, finite=True), indent=2, allow_nan=False))
    else:
        click.echo(ledger_mod.render(book, delta))
    if export_path is not None:
        opt.write_export(export_path, book.export(delta), say)


@main.command("fedavg")
@baseline.fedavg_options()
def fedavg_command(config_path, workdir, algorithm, eps, rounds, clients, mechanism, settings, seed, overwrite,
                   no_progress):
    """Federated learning on the teachers' shards with noise on every client message,
    eps accounted over all rounds at [privacy] delta; write fedavg.json and fedavg/."""
    config = config_with(config_path, settings, fedavg__algorithm=algorithm, fedavg__eps=eps,
                             fedavg__rounds=rounds, fedavg__clients=clients, fedavg__mechanism=mechanism)
    baseline.train_and_print("fedavg", config, workdir, seed, overwrite, no_progress)


@main.command("audit")
@click.option("--config", "config_path", type=click.Path(dir_okay=False),
              help="Audit this config's [aggregation] mechanism (teachers and classes from it too).")
@opt.workdir("Audit the mechanism a run directory's labels.npz was released with (read only).", required=False)
@click.option("--mechanism", type=click.Choice(registry.TEACHER_NAMES),
              help="The noisy aggregator (overrides the config's aggregation.mechanism).")
@opt.noise("LNMax: Laplace noise of scale 1/gamma.", "Confident-GNMax threshold noise.")
@click.option("--teachers", type=click.IntRange(1, 10**9), help="Number of teachers (default: the config's).")
@click.option("--num-classes", type=click.IntRange(2, 10**4), help="Number of classes (default: the config's data).")
@click.option("--queries", type=click.IntRange(min=1), default=1, show_default=True,
              help="Each trial asks the same query this many times; the claim is for as many queries.")
@click.option("--trials", type=click.IntRange(min=100), default=100_000, show_default=True,
              help="Runs of the aggregator on each side of every neighbouring pair.")
@click.option("--confidence", type=float, default=0.95, show_default=True, callback=opt.probability,
              help="Probability that the lower bound holds (simultaneously over every event tested).")
@click.option("--delta", type=float, callback=opt.probability,
              help=f"delta of the claim and of the bound (default: the config's privacy.delta, else "
                   f"{opt.short(opt.DEFAULTS.delta)}).")
@opt.seed_option("Seed of the audit's noise, 0 <= seed < 2**128, for reproducible research only. "
                 "Default: fresh OS entropy, as in a release.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False),
              help="Also write the result as JSON (publishable: nothing private goes in).")
def audit_command(config_path, workdir, mechanism, gamma, sigma, threshold, sigma_threshold, teachers, num_classes,
                  queries, trials, confidence, delta, seed, json_path):
    """Empirical lower bound on eps: run the aggregator many times on neighbouring vote
    histograms (one teacher's vote moved), bound the rates of output events with
    Clopper-Pearson intervals, and print the bound beside the claimed eps. Reads no
    private data: not a release, charged to no ledger."""
    from pate.steps.audit import audit_command as run  # imports the aggregator

    noise = dict(gamma=gamma, sigma=sigma, threshold=threshold, sigma_threshold=sigma_threshold)
    result = run(config_path=config_path, workdir=workdir, mechanism=mechanism, noise=noise, teachers=teachers,
                 num_classes=num_classes, delta=delta, queries=queries, trials=trials, confidence=confidence,
                 seed=seed, json_path=json_path)
    click.echo(result.render())


@main.command("synth")
@baseline.synth_options()
def synth_command(config_path, workdir, method, eps, steps, teachers, settings, seed, overwrite, no_progress):
    """Synthetic data: DP-MERF (one noisy release of the class-conditional mean embedding) or
    PATE-GAN (a generator trained through teacher discriminators' noisy votes); write synthetic.npz."""
    config = config_with(config_path, settings, synth__method=method, synth__eps=eps, synth__steps=steps,
                             synth__teachers=teachers)
    baseline.train_and_print("synth", config, workdir, seed, overwrite, no_progress)


@main.group("silos")
def silos_group() -> None:
    """Releases across silos on Flower: each silo adds a share of the noise to what it computes from its
    own records (fine-grained votes: `run`; DP-FedSGD gradients: `fedavg`), Flower's SecAgg+ shows the
    coordinator the sum alone (docs/silos.md)."""


@silos_group.command("run")
@opt.config()
@opt.workdir("Run directory of the coordinator (created if missing): labels.npz, config.toml.")
@opt.settings()
@opt.local_silos("release")
@opt.overwrite("Replace an existing release of the run directory.")
def silos_run_command(config_path, workdir, settings, silos, overwrite):
    """Release fine-grained labels of every pool point from the silos' secure sum, as the
    central release does, charging the ledger once ([silos] ledger)."""
    from pate.steps.label_silos import run

    run(config_with(config_path, settings, silos__silos=silos), workdir, silos=silos, overwrite=overwrite,
        echo=click.echo)


@silos_group.command("fedavg")
@opt.config()
@opt.workdir("Run directory of the coordinator (created if missing): fedavg.json, fedavg/, config.toml.")
@opt.settings()
@opt.local_silos("training")
@opt.overwrite("Replace an existing federated model of the run directory.")
def silos_fedavg_command(config_path, workdir, settings, silos, overwrite):
    """Train DP-FedSGD across silos: [fedavg] rounds of Flower's SecAgg+, each silo adding its share
    of the distributed noise ([fedavg] mechanism = "ddg", exact, or "skellam"); the coordinator writes fedavg.json
    once every round has ended and charges the ledger once ([silos] ledger)."""
    from pate.baselines.fedavg_silos import run

    run(config_with(config_path, settings, silos__silos=silos), workdir, silos=silos, overwrite=overwrite,
        echo=click.echo)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
