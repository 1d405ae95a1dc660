"""A walkthrough of pate from Python: the same steps as the CLI, on simulated votes.

Run it with ``python examples/walkthrough.py [OUTPUT_DIR]`` (default: ./walkthrough-run).
It takes a few seconds on a laptop CPU and writes a run directory with the released
labels, the private votes, the privacy report (privacy.json) and its plot (privacy.png).

The votes stand in for *your* teachers: any framework can produce them. A vote histogram
is an integer array (points × classes); row i counts how many teachers predicted each
class for public point i. It is PRIVATE: it is computed from the private data.
"""

import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a source checkout without installing

import analysis  # noqa: E402  the privacy analysis: numpy/scipy/dp-accounting, no JAX
import pate  # noqa: E402  the pipeline; JAX loads only when an entry point is used

VOTES = ROOT / "examples" / "votes_simulated_250.npz"  # 250 teachers, 10 classes, 1000 points
QUERIES, BUDGET, DELTA = 1000, 2.0, 1e-5


def main(out: pathlib.Path) -> dict:
    # 1. Load and validate the votes (same checks as `pate analyze --votes`).
    votes = analysis.load_votes(VOTES)
    num_teachers, num_classes = int(votes[0].sum()), votes.shape[1]
    print(f"votes: {votes.shape[0]} points, {num_classes} classes, {num_teachers} teachers")

    # 2. Plan the noise before looking at the votes' content: the least GNMax noise whose
    #    data-independent eps over QUERIES answers meets the budget. `pate plan`.
    #    The PLD accountant (dp-accounting) is tighter than RDP, so it needs less noise.
    by_rdp = analysis.plan_noise("gnmax", QUERIES, BUDGET, DELTA, num_teachers=num_teachers)
    by_pld = analysis.plan_noise("gnmax", QUERIES, BUDGET, DELTA, num_teachers=num_teachers, accountant="pld")
    sigma = by_pld.noise["sigma"]
    print(f"sigma for eps {BUDGET} over {QUERIES} queries: RDP {by_rdp.noise['sigma']:.2f}, PLD {sigma:.2f}")

    # 3. Release noisy labels from these external votes. `pate label --votes`.
    #    Writes out/votes.npz (PRIVATE) and out/labels.npz (the release). A seed is for
    #    reproducible research only; leave it out (fresh OS entropy) for a real release.
    #    `ledger` names the private data set the votes come from: every release from it is
    #    charged to that one ledger (an array cannot say which data set it is).
    release = pate.label_votes(votes, out, num_classes=num_classes, mechanism="gnmax", sigma=sigma,
                               queries=QUERIES, overwrite=True, ledger="walkthrough-simulated-250",
                               echo=lambda *_: None)
    agree = (release.labels == votes[release.indices].argmax(axis=1)).mean()
    print(f"released {release.num_answered} labels; {agree:.1%} agree with the plurality vote")

    # 4a. Data-independent eps (public): RDP with both conversions, and the PLD. The
    #     smallest is the headline: every one is a valid bound on the same mechanism.
    items = {i.key: i.value for i in analysis.data_independent_items("gnmax", QUERIES, DELTA, sigma=sigma)}
    for key in ("classic", "improved", "pld"):
        print(f"data-independent eps ({key}): {items['eps_data_independent_' + key]:.4f}")
    print(f"headline: {items['eps_data_independent_headline']:.4f} ({items['data_independent_headline']})")

    # 4b. Data-dependent eps: smaller when the teachers agree, but it depends on the
    #     votes and is PRIVATE — never publish it as is.
    dependent = analysis.bounds.gnmax.data_dependent_eps(votes[release.indices], sigma, DELTA)
    print(f"data-dependent eps (PRIVATE): {dependent.eps:.4f}")

    # 4c. The full report of the run directory, with the sanitised (publishable)
    #     data-dependent eps and the plot. `pate analyze --workdir`. The release order
    #     is fixed in advance so that no choice depends on the private votes.
    report = pate.analyze_workdir(out, delta=DELTA, release_order=20.0, echo=lambda *_: None)
    print(f"sanitised eps (publishable): {report.value('eps_sanitized'):.4f}")
    # 4d. The one number to publish, the headline, is what the data set has spent in all:
    #     release.json's first figure ("eps"), composed by the ledger over every release of
    #     the data set. This release's own eps (the labels and the sanitised eps, whose
    #     release has its own cost) is release.json's "release_eps" and the report's "eps".
    #     privacy.json and privacy.png stay private.
    import json

    published = json.loads((out / "release.json").read_text())
    print(f"HEADLINE eps (publish this): {published['eps']:.4f} at delta {published['delta']:g}")
    print(f"this release's eps: {report.value('eps'):.4f} at delta {report.value('delta_total'):g}")
    print(f"wrote {out / 'release.json'} (publishable), {out / 'privacy.json'} and {out / 'privacy.png'} (private)")
    return {"sigma": sigma, "report": report, "release": release, **items}


if __name__ == "__main__":
    main(pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "walkthrough-run"))
