"""Does the published headline meet its target? The release plan of a config
(`analysis.planning.headline_target.choose_release`: queries, release order, β and cost chosen on
votes simulated from a public model) measured over fresh draws, next to the config's own
fixed release settings.

    python bench/headline_target.py [--config configs/fashion_mnist.toml] [--target 2.0]
        [--draws 20] [--classes 10] [--workdir RUN]

Simulated (always): each draw is a *fresh* simulated ensemble of the config's shape
(seeds 10000 + i, never the chooser's 0..3), labelled by the config's aggregator with OS
noise and released by the product's report (`analysis.reporting.report.gnmax_report`, an exact
GNSS draw): the fraction of draws whose headline is within the target, and the exact
P[headline <= target] over the release noise on each draw's votes (their mean is what the
plan predicts). The same for the config's fixed `[privacy]` release settings.

``--workdir RUN`` (research: reads the run's PRIVATE votes, writes nothing): the plan made
from RUN's config (public), the exact probability over the release noise on RUN's real
votes, and one release drawn there — what the chosen settings would publish on that run.
Never run it on a run directory you publish from as if it were a second release: nothing
is published, but the figures it prints depend on the votes.

One JSON object per part.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _settings(config, choice=None) -> dict:
    """The release settings of the plan, or of the config's `[privacy]` section."""
    p = config.privacy
    if choice is not None:
        return dict(release_order=choice.order, beta=choice.beta, release_cost=choice.release_cost)
    return dict(release_order=p.release_order or None, beta=p.gnss_beta or None, release_cost=p.release_cost)


def _draw(votes, record, config, settings, target, seed):
    """(published headline, exact P[headline <= target] on these votes) of one release."""
    from analysis.sanitised import gnss
    from analysis.planning import headline_target
    from analysis.reporting import report
    from analysis.sanitised.gnmax_sensitivity import total_profile
    from pate.release import aggregation

    p = config.privacy
    labels = aggregation.confident_gnmax(votes, record.threshold, record.sigma_threshold, record.sigma,
                                         aggregation.noise_source(None))
    rep = report.gnmax_report(votes, record.sigma, p.delta, threshold=record.threshold,
                              sigma_threshold=record.sigma_threshold, answered=labels >= 0,
                              num_teachers=int(votes[0].sum()), conversion=p.conversion,
                              publishable=True, **settings)  # simulated public votes: the product's headline
    order, beta = rep.value("release_order"), rep.value("beta")
    release = headline_target.release_parameters(order, beta, settings["release_cost"])
    F, f = total_profile(votes, record.sigma, order, int(votes[0].sum()), threshold=record.threshold,
                         sigma_threshold=record.sigma_threshold, answered_mask=None, accounting="joint")
    ss = float(np.max(F * np.exp(-beta * np.arange(F.size))))
    di = rep.value("eps_data_independent_with_release")
    prob, _ = headline_target.release_outcome(f, ss, release, di, target, p.delta, p.conversion, gnss.RELEASE_GRID)
    return float(rep.value("eps")), prob, int((labels >= 0).sum())


def simulated(config, record, choice, target: float, draws: int, classes: int) -> dict:
    from analysis.planning.simulated_votes import VoteModel

    model = VoteModel(config.teachers.num_teachers, classes, accuracy=config.privacy.target_accuracy)
    out = {"part": "simulated", "target_eps": target, "draws": draws, "plan": choice.meta()}
    for name, settings, n in (("planned", _settings(config, choice), choice.num_queries),
                              ("config", _settings(config), config.aggregation.queries)):
        rows = [_draw(model.draw(10_000 + i, n), record, config, settings, target, None) for i in range(draws)]
        eps = np.array([r[0] for r in rows])
        out[name] = {"queries": n, **settings, "fraction_within_target": float(np.mean(eps <= target)),
                     "mean_exact_probability": float(np.mean([r[1] for r in rows])),
                     "headline_mean": float(eps.mean()), "headline_max": float(eps.max()),
                     "answered_mean": float(np.mean([r[2] for r in rows])),
                     "headlines": [round(float(e), 4) for e in eps]}
    return out


def real_run(workdir: str, target: float, config_path: str | None) -> dict:
    """The plan of the run's config on its real (private) votes: research only."""
    from analysis.planning import headline_target
    from analysis.mechanisms import registry
    from pate.store import rundir
    from pate.config import load_config
    from pate.release.outcome import vote_model

    run = rundir.RunDir(workdir)
    config = load_config(config_path) if config_path else run.read_config()
    votes = run.read_npz(rundir.VOTES_NPZ, required=("votes",))["votes"]
    record = registry.from_config(config.aggregation)
    queries = min(config.aggregation.queries, votes.shape[0])
    p = config.privacy
    choice = headline_target.choose_release(record, queries, target, p.delta, conversion=p.conversion,
                                            probability=p.target_probability,
                                            model=vote_model(config, int(votes[0].sum()), votes.shape[1]))
    planned = _draw(votes[:choice.num_queries], record, config, _settings(config, choice), target, None)
    fixed = _draw(votes[:queries], record, config, _settings(config), target, None)
    released = json.loads((Path(workdir) / rundir.RELEASE_JSON).read_text()) if run.exists(rundir.RELEASE_JSON) else {}
    return {"part": "real run (PRIVATE votes: research figures)", "workdir": str(workdir), "target_eps": target,
            "plan": choice.meta(),
            "planned": {"queries": choice.num_queries, "headline_drawn": planned[0],
                        "exact_probability_on_real_votes": planned[1], "answered": planned[2]},
            "config": {"queries": queries, "headline_drawn": fixed[0],
                       "exact_probability_on_real_votes": fixed[1], "answered": fixed[2]},
            "published_release_json_eps": released.get("eps")}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default=str(ROOT / "configs" / "fashion_mnist.toml"))
    parser.add_argument("--target", type=float, default=None, help="target eps (default: [privacy] target_eps, else 2)")
    parser.add_argument("--draws", type=int, default=20, help="fresh simulated ensembles, one release each")
    parser.add_argument("--classes", type=int, default=10, help="classes of the simulated ensemble")
    parser.add_argument("--workdir", default=None, help="also measure on this finished run's real votes (research)")
    parser.add_argument("--run-config", default=None, help="with --workdir: plan from this config instead of the run's")
    args = parser.parse_args(argv)

    from analysis.planning import headline_target
    from analysis.mechanisms import registry
    from pate.config import load_config
    from pate.release.outcome import vote_model

    config = load_config(args.config)
    target = args.target or config.privacy.target_eps or 2.0
    record = registry.from_config(config.aggregation)
    p = config.privacy
    start = time.perf_counter()
    choice = headline_target.choose_release(record, config.aggregation.queries, target, p.delta,
                                            conversion=p.conversion, probability=p.target_probability,
                                            model=vote_model(config, config.teachers.num_teachers, args.classes))
    chosen_s = time.perf_counter() - start
    print(json.dumps({"part": "plan", "seconds": round(chosen_s, 1), **choice.meta()}), flush=True)
    print(json.dumps(simulated(config, record, choice, target, args.draws, args.classes)), flush=True)
    if args.workdir:
        print(json.dumps(real_run(args.workdir, target, args.run_config)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
