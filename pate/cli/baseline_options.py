"""The options of the commands that train a baseline model on the same private data
(`pate dpsgd`, `pate fedavg`, `pate synth`): one group each, built from the shared option
pieces of `pate.cli.options`."""

from __future__ import annotations

import importlib

import click
from analysis.baselines.fedavg_privacy import NORMS

from pate.cli.options import (cluster, config, eps_value, feature_map, no_progress, options, overwrite, seed_option,
                              settings, workdir)


def dpsgd_options():
    """The options of `pate dpsgd`."""
    return options(
        config("TOML run config, e.g. configs/fashion_mnist.toml (its [dpsgd] section)."),
        workdir("Run directory (created if missing; a PATE run of the same data is fine)."),
        click.option("--eps", "eps", type=float, callback=eps_value, help="Target epsilon (overrides dpsgd.eps)."),
        click.option("--model", type=click.Choice(["cnn", "scatternet", "linear"]),
                     help="End-to-end tanh CNN, ScatterNet features + linear, or linear on the inputs as given "
                          "(embeddings) or on --features MAP (overrides dpsgd.model)."),
        click.option("--features", metavar="MAP", callback=feature_map,
                     help="With --model linear: train on each input's row under this public map, as [features] map "
                          "names them (scattering, learned, learned+scattering, ...; overrides dpsgd.features)."),
        settings(),
        seed_option("Seed (0 <= seed < 2**128) of the noise, sampling and initialisation, for reproducible "
                    "research only: whoever knows it can remove the noise. Never written. Default: fresh OS entropy."),
        overwrite("Replace dpsgd.json and dpsgd/ already in --workdir."),
        cluster(),
        no_progress())


def fedavg_options():
    """The options of `pate fedavg`."""
    return options(
        config("TOML run config, e.g. configs/fashion_mnist.toml (its [fedavg] section)."),
        workdir("Run directory (created if missing; a PATE run of the same data is fine)."),
        click.option("--algorithm", type=click.Choice(["fedavg", "iadmm"]), help="Overrides fedavg.algorithm."),
        click.option("--eps", type=float, callback=eps_value, help="Total eps of all rounds (overrides fedavg.eps)."),
        click.option("--rounds", type=click.IntRange(min=1), help="Overrides fedavg.rounds."),
        click.option("--clients", type=click.IntRange(min=1),
                     help="Overrides fedavg.clients (default: the teachers' shards)."),
        click.option("--mechanism", type=click.Choice(list(NORMS)), help="Overrides fedavg.mechanism."),
        settings(),
        seed_option("Noise seed (0 <= seed < 2**128), research only; never written. Default: OS entropy."),
        overwrite("Replace fedavg.json and fedavg/ already in --workdir."),
        no_progress())


def synth_options():
    """The options of `pate synth`."""
    return options(
        config("TOML run config, e.g. configs/fashion_mnist.toml (its [synth] section)."),
        workdir("Run directory (created if missing; a PATE run of the same data is fine)."),
        click.option("--method", type=click.Choice(["merf", "gan"]),
                     help="DP-MERF (one noisy mean-embedding release) or the PATE-GAN (overrides synth.method)."),
        click.option("--eps", type=float, callback=eps_value, help="Total eps of the release (overrides synth.eps)."),
        click.option("--steps", type=click.IntRange(min=1), help="PATE-GAN steps (overrides synth.steps)."),
        click.option("--teachers", type=click.IntRange(min=1), help="PATE-GAN teachers (overrides synth.teachers)."),
        settings(),
        seed_option("Noise seed (0 <= seed < 2**128), research only; never written. Default: OS entropy."),
        overwrite("Replace synth.json, synthetic.npz, synth-samples.png and synth/ already in --workdir."),
        no_progress())


_TRAINERS = {"dpsgd": ("pate.baselines.dpsgd", "train_dpsgd"), "fedavg": ("pate.baselines.fedavg", "train_fedavg"),
             "synth": ("pate.baselines.synth", "train_synth")}


def train_and_print(name: str, config, workdir, seed, overwrite: bool, no_progress: bool) -> None:
    """Trains the baseline ``name`` of ``config`` in ``workdir`` and prints its summary; the
    trainer's module (JAX) is imported only now, so that `pate --help` stays fast."""
    module, function = _TRAINERS[name]
    train = getattr(importlib.import_module(module), function)
    result = train(config, workdir, seed=seed, overwrite=overwrite, show_progress=not no_progress, echo=click.echo)
    if result is not None:  # None: a process other than 0 of a distributed run (it printed its line)
        click.echo(result.summary())
