"""One headline (issue 44): the terminal, release.json and `pate run`'s summary call one figure
"headline" -- the data set's cumulative eps, which leads -- and name the release's own figure as
such ("this release's eps") everywhere."""

from __future__ import annotations

import json
import re
import numpy as np

from analysis.core.noise import NoiseSource
from analysis.reporting import report, report_io
from pate.release import run_summary

from conftest import charged, invoke


def _labelled(folder, votes, answered: int):
    folder.mkdir()
    np.savez(folder / "votes.npz", votes=votes, meta=np.array(json.dumps({"data_set": "one-data-set"})))
    np.savez(folder / "labels.npz", indices=np.arange(answered), labels=votes[:answered].argmax(axis=1),
             mechanism=np.array("lnmax"), gamma=np.array(0.1))
    charged(folder)


def _two_releases(tmp_path):
    """Two runs on the same votes (one data set): the second's figure composes both."""
    rng = np.random.default_rng(5)
    votes = rng.multinomial(50, rng.dirichlet(np.full(4, 0.3)), size=100)
    _labelled(tmp_path / "a", votes, 60)
    first = invoke("analyze", "--workdir", tmp_path / "a")
    assert first.exit_code == 0, first.output
    _labelled(tmp_path / "b", votes, 40)
    second = invoke("analyze", "--workdir", tmp_path / "b")
    assert second.exit_code == 0, second.output
    return second.output, json.loads((tmp_path / "b" / "release.json").read_text())


def test_analyze_calls_one_figure_the_headline_the_data_sets(tmp_path):
    output, release = _two_releases(tmp_path)
    assert release["eps"] > release["release_eps"]  # two figures: the data set's and this release's
    headline_lines = [line for line in output.splitlines() if "headline" in line.lower()]
    # every line that says "headline" gives the data set's figure
    assert headline_lines and all(f"eps {release['eps']:.4g} at delta" in line for line in headline_lines), headline_lines
    assert output.startswith(f"PUBLISH: eps {release['eps']:.4g}")
    assert "Publish the HEADLINE eps (it counts everything released)" not in output
    own = [line for line in output.splitlines() if line.startswith("this release's eps")]
    assert len(own) == 1 and f"{release['release_eps']:.3f}" in own[0]


def test_release_json_names_the_headline_once_and_the_release_by_its_own_name(tmp_path):
    _, release = _two_releases(tmp_path)
    assert list(release)[:2] == ["eps", "delta"]  # the keys stay
    assert "HEADLINE" in release["eps_is"]
    assert "headline" not in release["release_eps_is"].lower().replace("not the headline", "")
    assert release["release_eps_is"].startswith("this release's eps")
    assert "headline" not in release["notes"].lower().replace("the headline", "", 1).replace("not the headline", "")


def test_every_report_kind_names_its_own_figure_as_the_releases():
    rng = np.random.default_rng(0)
    votes = rng.multinomial(50, rng.dirichlet(np.full(4, 0.3)), size=50)
    for rep in (report.lnmax_report(votes, 0.1, 1e-5, noise=NoiseSource(1)),
                report.gnmax_report(votes, 20.0, 1e-5, noise=NoiseSource(1))):
        labels = {i.key: i.label for i in rep.items}
        assert labels["eps"].startswith("this release's eps") and "headline" not in labels["eps"].lower()
        assert "headline" not in labels["delta_total"].lower()
        table = report_io.render_table(rep)  # no ledger: no headline at all
        assert "there is no HEADLINE here" in table and "this release alone" in table


def test_run_summary_has_one_headline_and_names_the_releases_own_eps():
    common = dict(steps=(), dataset="synthetic", mechanism="lnmax", num_queries=100, num_answered=100,
                  teacher_ensemble_accuracy=0.9, label_accuracy=0.9, student_method="fixmatch",
                  student_accuracy=0.8, eps_data_independent=5.0, eps_data_dependent=2.0, eps_sanitized=2.1,
                  eps=4.3, delta_total=2e-5, delta=1e-5, wall_time_s=1.0)
    text = run_summary.RunSummary(**common, release_eps=3.1, release_delta=2e-5).summary()
    assert len(re.findall("headline", text, flags=re.I)) == 1
    assert "this release's eps:    3.100" in text
