"""`pate analyze` through click's runner: the report, its files, and every bad input."""

import json

import numpy as np
import pytest

from analysis.bounds import lnmax

from conftest import invoke


@pytest.fixture
def votes_file(tmp_path):
    rng = np.random.default_rng(0)
    votes = rng.multinomial(250, rng.dirichlet(np.full(10, 0.1)), size=300).astype(np.int32)
    path = tmp_path / "votes.npz"
    np.savez(path, votes=votes)
    return path, votes


def test_analyze_report_json_and_plot(tmp_path, votes_file):
    path, votes = votes_file
    out_json, out_png = tmp_path / "privacy.json", tmp_path / "privacy.png"
    result = invoke("analyze", "--votes", path, "--ledger", "ext", "--gamma", 0.05, "--delta", 1e-5, "--queries", 100,
                    "--json", out_json, "--plot", out_png, "--seed", 3)
    assert result.exit_code == 0, result.output
    assert "data-independent eps" in result.output and "NO (private)" in result.output
    doc = json.loads(out_json.read_text())
    assert doc["public"]["num_queries"] == 100
    assert doc["public"]["eps_data_independent"] == pytest.approx(5.3026, abs=1e-3)
    expected = lnmax.data_dependent_eps(votes[:100], 0.05, 1e-5)
    assert doc["private"]["eps_data_dependent"] == pytest.approx(expected.eps)
    assert doc["private"]["best_moment"] == expected.moment
    # Private values never sit in the public section.
    assert set(doc["public"]).isdisjoint(doc["private"])
    assert {"eps_data_dependent", "smooth_sensitivity", "noise_scale", "best_moment"} <= set(doc["private"])
    assert {"eps_sanitized", "eps_release_cost"} <= set(doc["public"])
    assert out_png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_analyze_indices_and_labels_input(tmp_path):
    rng = np.random.default_rng(1)
    preds = rng.integers(0, 10, size=(50, 40))  # teachers × queries, the paper's format
    preds[:, :20] = 3
    labels_path = tmp_path / "preds.npy"
    np.save(labels_path, preds)
    idx_path = tmp_path / "idx.npy"
    np.save(idx_path, np.arange(0, 40, 2))
    result = invoke("analyze", "--votes", labels_path, "--ledger", "ext", "--input-is-labels", "--num-classes", 10,
                    "--gamma", 0.1, "--indices", idx_path, "--json", tmp_path / "p.json")
    assert result.exit_code == 0, result.output
    doc = json.loads((tmp_path / "p.json").read_text())
    assert doc["public"]["num_queries"] == 20
    counts = np.zeros((40, 10), dtype=int)
    for t in range(50):
        counts[np.arange(40), preds[t]] += 1
    expected = lnmax.data_dependent_eps(counts[::2], 0.1, 1e-5)
    assert doc["private"]["eps_data_dependent"] == pytest.approx(expected.eps)


def test_analyze_warns_when_best_moment_is_largest(votes_file):
    path, _ = votes_file
    result = invoke("analyze", "--votes", path, "--ledger", "ext", "--gamma", 0.05, "--moments", 2, "--show-private")
    assert result.exit_code == 0
    # The best moment is a private value: its warning is marked so (and kept out of release.json).
    assert "warning (private, do not publish): the best moment is the largest" in result.output


def test_help_and_version():
    assert invoke("--version").exit_code == 0
    result = invoke("analyze", "--help")
    assert result.exit_code == 0 and "--gamma" in result.output


def _write(tmp_path, array, name="bad.npz"):
    path = tmp_path / name
    if name.endswith(".npz"):
        np.savez(path, votes=array)
    else:
        np.save(path, array)
    return path


BAD_VOTES = {
    "negative": (np.array([[5, -1, 6], [5, 3, 2]]), "negative"),
    "fractional": (np.array([[5.5, 2.5, 2.0], [5, 3, 2]]), "fractional"),
    "nan": (np.array([[np.nan, 5, 5], [5, 3, 2]]), "NaN"),
    "empty": (np.zeros((0, 10), dtype=int), "empty"),
    "unequal_rows": (np.array([[5, 3, 2], [5, 3, 1]]), "summing to 10"),
    "one_dim": (np.array([5, 3, 2]), "2-d"),
}


@pytest.mark.parametrize("case", sorted(BAD_VOTES))
def test_bad_votes_one_line_nothing_written(tmp_path, case):
    array, needle = BAD_VOTES[case]
    path = _write(tmp_path, array)
    out = tmp_path / "out.json"
    result = invoke("analyze", "--votes", path, "--ledger", "ext", "--gamma", 0.1, "--json", out)
    assert result.exit_code == 1
    assert needle in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert not out.exists()


@pytest.mark.parametrize("args,needle", [
    (["--delta", 0], "--delta"), (["--delta", 1.5], "--delta"), (["--gamma", 0], "--gamma"),
    (["--gamma", -2], "--gamma"), (["--beta", 0], "--beta"), (["--moments", 0], "--moments"),
    (["--queries", 0], "--queries"),
])
def test_bad_parameters_exit_2(tmp_path, votes_file, args, needle):
    path, _ = votes_file
    full = ["analyze", "--votes", path, "--ledger", "ext", "--json", tmp_path / "o.json"]
    if "--gamma" not in args:
        full += ["--gamma", 0.1]
    result = invoke(*full, *args)
    assert result.exit_code == 2
    assert needle in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert not (tmp_path / "o.json").exists()


def test_bad_files(tmp_path, votes_file):
    path, _ = votes_file
    missing = invoke("analyze", "--votes", tmp_path / "nope.npz", "--ledger", "ext", "--gamma", 0.1)
    assert missing.exit_code == 1 and "does not exist" in missing.output
    corrupt = tmp_path / "corrupt.npz"
    corrupt.write_bytes(b"PK\x03\x04 not really a zip")
    result = invoke("analyze", "--votes", corrupt, "--ledger", "ext", "--gamma", 0.1)
    assert result.exit_code == 1 and "cannot read" in result.output
    wrong_key = tmp_path / "wrong.npz"
    np.savez(wrong_key, counts=np.ones((2, 2)))
    result = invoke("analyze", "--votes", wrong_key, "--ledger", "ext", "--gamma", 0.1)
    assert result.exit_code == 1 and "no array named 'votes'" in result.output
    idx = tmp_path / "idx.npy"
    np.save(idx, np.array([0, 5, 300]))
    result = invoke("analyze", "--votes", path, "--ledger", "ext", "--gamma", 0.1, "--indices", idx)
    assert result.exit_code == 1 and "index 300" in result.output
    too_many = invoke("analyze", "--votes", path, "--ledger", "ext", "--gamma", 0.1, "--queries", 301)
    assert too_many.exit_code == 1 and "at most 300" in too_many.output
    neither = invoke("analyze", "--gamma", 0.1)
    assert neither.exit_code == 2
    no_gamma = invoke("analyze", "--votes", path)
    assert no_gamma.exit_code == 2 and "--gamma" in no_gamma.output


def test_plot_to_missing_folder_writes_nothing(tmp_path, votes_file):
    path, _ = votes_file
    out_json = tmp_path / "ok.json"
    result = invoke("analyze", "--votes", path, "--ledger", "ext", "--gamma", 0.05, "--json", out_json,
                    "--plot", tmp_path / "missing" / "p.png")
    assert result.exit_code == 1
    assert "does not exist" in result.output
    assert not out_json.exists()


def test_known_value_through_cli(tmp_path):
    votes = np.zeros((100, 10), dtype=int)
    votes[:, 0] = 250
    path = _write(tmp_path, votes)
    result = invoke("analyze", "--votes", path, "--ledger", "ext", "--gamma", 0.05, "--json", tmp_path / "p.json")
    assert result.exit_code == 0
    doc = json.loads((tmp_path / "p.json").read_text())
    assert doc["public"]["eps_data_independent"] == pytest.approx(5.30, abs=0.005)
    # Unanimous votes: the data-dependent eps is far below the data-independent one.
    assert doc["private"]["eps_data_dependent"] < 1.5 < doc["public"]["eps_data_independent"]


def test_analyze_gnmax_votes_file(tmp_path, votes_file):
    from analysis.bounds import gnmax

    path, votes = votes_file
    out = tmp_path / "g.json"
    result = invoke("analyze", "--votes", path, "--ledger", "ext", "--mechanism", "gnmax", "--sigma", 40, "--queries", 200,
                    "--release-order", 10, "--json", out, "--conversion", "improved")
    assert result.exit_code == 0, result.output
    doc = json.loads(out.read_text())
    assert doc["mechanism"] == "gnmax"
    expected = gnmax.data_dependent_eps(votes[:200], 40.0, 1e-5, conversion="improved")
    assert doc["private"]["eps_data_dependent"] == pytest.approx(expected.eps)
    assert doc["public"]["eps_data_independent"] == pytest.approx(
        gnmax.data_independent_eps(200, 40.0, 1e-5, conversion="improved").eps)
    missing = invoke("analyze", "--votes", path, "--ledger", "ext", "--mechanism", "confident-gnmax", "--sigma", 40)
    assert missing.exit_code == 2 and "--threshold" in missing.output and "--sigma-threshold" in missing.output
