"""bench/compare.py's PATE side: rows released from one trained ensemble through `pate run`,
read from public files only, and the accuracy-against-ε plot."""

from __future__ import annotations

import json
import os
import pathlib

import pytest

from conftest import TINY, bench_module


def _compare():
    return bench_module("compare")


@pytest.mark.slow  # a research harness end to end; its parts have fast tests
def test_pate_rows_from_one_ensemble(trained_run, tmp_path, capsys):
    run, _ = trained_run
    root, png = tmp_path / "compare", tmp_path / "compare.png"
    compare = _compare()
    before = {p.name: p.stat().st_mtime_ns for p in (run / "teachers").rglob("*") if p.is_file()}
    assert compare.main(["--config", str(TINY), "--root", str(root), "--models",
                         "--pate-teachers", str(run), "--pate-queries", "20", "60", "--plot", str(png)]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    pate = [r for r in rows if r.get("method", "").startswith("pate")]
    assert [r["queries"] for r in pate] == [20, 60]
    for r, q in zip(pate, (20, 60)):
        release = json.loads((root / f"pate-q{q}" / "release.json").read_text())
        student = json.loads((root / f"pate-q{q}" / "student.json").read_text())
        assert r["eps"] == release["release_eps"] and r["eps_source"] == "release.json:release_eps"
        assert r["accuracy"] == student["accuracy"]
        assert r["relation"] == "replace-one" and r["eps_replace_one"] == r["eps"] and r["eps_add_remove"] is None
        assert r["wall_time_parts"]["teachers"] is not None
    assert pate[0]["eps"] > 0 and pate[0]["delta"] > 0
    # The teachers were linked, not retrained: same inodes, untouched files.
    linked = root / "pate-q20" / "teachers"
    for p in (run / "teachers").rglob("*"):
        if p.is_file():
            q = linked / p.relative_to(run / "teachers")
            assert os.stat(q).st_ino == os.stat(p).st_ino
    assert before == {p.name: p.stat().st_mtime_ns for p in (run / "teachers").rglob("*") if p.is_file()}
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # A second call reads the rows instead of training again.
    mtime = (root / "pate-q20" / "student.json").stat().st_mtime_ns
    assert compare.main(["--config", str(TINY), "--root", str(root), "--models", "--no-train",
                         "--pate-teachers", str(run), "--pate-queries", "20"]) == 0
    assert (root / "pate-q20" / "student.json").stat().st_mtime_ns == mtime


def test_dpsgd_rows_give_the_replace_one_eps(tmp_path):
    """A DP-SGD row's eps is its replace-one eps (PATE's relation), whatever relation its
    target was set under; the add/remove eps is the second column."""
    compare = _compare()
    run = tmp_path / "dpsgd-scatternet-eps2-replace-one"
    run.mkdir()
    info = {"model": "scatternet", "eps": 0.9, "eps_replace_one": 2.0, "target_eps": 2.0,
            "target_relation": "replace-one", "delta": 1e-5, "accuracy": 0.88, "noise_multiplier": 9.0,
            "epochs": 60.0, "batch_size": 8192, "accountant": "rdp"}
    (run / "dpsgd.json").write_text(json.dumps(info))
    row = compare.dpsgd_row(run)
    assert (row["eps"], row["eps_replace_one"], row["eps_add_remove"]) == (2.0, 2.0, 0.9)
    assert row["relation"] == "replace-one" and row["target_relation"] == "replace-one"
    assert "| dpsgd-scatternet | 2.00 | 0.90 | 0.8800 |" in compare.table([row])


def test_federated_rows_through_pate_fedavg(tmp_path, capsys):
    """`--fedavg` trains `pate fedavg` at each total eps and reads its public fedavg.json:
    the row's eps is the total over all rounds (replace-one), the per-round eps beside it."""
    compare = _compare()
    root = tmp_path / "compare"
    assert compare.main(["--config", str(TINY), "--root", str(root), "--models", "--fedavg", "fedavg",
                         "--eps", "2"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    row = [r for r in rows if r.get("method", "").startswith("fedavg")][0]
    info = json.loads((root / "fedavg-fedavg-eps2" / "fedavg.json").read_text())
    assert row["eps"] == info["release_eps"] <= 2.0 + 1e-9 and row["relation"] == "replace-one"
    assert row["per_round_eps"] == info["per_round_eps"] < row["eps"]
    assert row["accuracy"] == info["accuracy"]


def test_a_two_round_run_is_one_row_with_both_students_time(tmp_path):
    """A run with round 2: the headline of both rounds, the student of both rounds, and the
    wall time of the teachers and both students."""
    pate_row = _compare().pate_row
    for name, doc in (("student.json", {"method": "fixmatch", "rounds": 2, "accuracy": 0.845, "wall_time_s": 40.0}),
                      ("student-round1.json", {"method": "fixmatch", "accuracy": 0.827, "wall_time_s": 30.0}),
                      ("teachers.json", {"wall_time_s": 100.0}),
                      ("release.json", {"eps": 1.854, "neighbouring_relation": "replace-one"})):
        (tmp_path / name).write_text(json.dumps(doc))
    row = pate_row(tmp_path)
    assert row["method"] == "pate-fixmatch-2rounds" and row["eps"] == 1.854 and row["accuracy"] == 0.845
    assert row["wall_time_s"] == 170.0 and row["wall_time_parts"]["student_round1"] == 30.0
    (tmp_path / "student.json").write_text(json.dumps({"method": "fixmatch", "accuracy": 0.8, "wall_time_s": 40.0}))
    one = pate_row(tmp_path)  # round 1 alone: round 1's kept student is not counted
    assert one["method"] == "pate-fixmatch" and one["wall_time_s"] == 140.0


def test_the_summary_gives_each_method_its_mean_and_spread_over_draws():
    """`summary`: one group per (method, target eps) with the mean, sample std, min and max of
    its draws (DP-SGD by its target, fine-grained by its eps)."""
    compare = _compare()
    rows = [{"method": "dpsgd-scatternet", "target_eps": 1.0, "eps": 3.1, "eps_replace_one": 1.0, "accuracy": a,
             "wall_time_s": 10.0} for a in (0.84, 0.85, 0.86)]
    rows += [{"method": "pate-fine-grained", "eps": 1.0, "eps_replace_one": 1.0, "accuracy": a, "wall_time_s": None}
             for a in (0.86, 0.88)]
    groups = {g["method"]: g for g in compare.summary(rows)}
    dpsgd, fine = groups["dpsgd-scatternet"], groups["pate-fine-grained"]
    assert dpsgd["draws"] == 3 and abs(dpsgd["mean"] - 0.85) < 1e-12 and abs(dpsgd["std"] - 0.01) < 1e-12
    assert (dpsgd["min"], dpsgd["max"], dpsgd["target_eps"]) == (0.84, 0.86, 1.0)
    assert fine["draws"] == 2 and abs(fine["mean"] - 0.87) < 1e-12 and fine["wall_time_s"] is None
    assert "pate-fine-grained | 1 | 1.00 | 2 | 0.8700 ± 0.0141" in compare.summary_table(list(groups.values()))


def test_fine_grained_rows_are_read_from_public_files(tmp_path):
    compare = _compare()
    assert compare.fine_row(tmp_path) is None
    (tmp_path / "student.json").write_text(json.dumps({"accuracy": 0.87, "eval_points": 1000}))
    (tmp_path / "release.json").write_text(json.dumps({"eps": 1.0, "delta": 0.0, "neighbouring_relation": "replace-one",
                                                       "details": {"labelled_points": 9000, "votes_per_record": 1,
                                                                   "smoothing": 10}}))
    row = compare.fine_row(tmp_path)
    assert row["accuracy"] == 0.87 and row["eps_replace_one"] == 1.0 and row["labelled"] == 9000
    assert not (tmp_path / "privacy.json").exists()  # nothing private was needed
    # A release.json that leads with its data set's cumulative eps (other releases in the same
    # ledger): the row is the release's own figure, grouped at its own eps.
    (tmp_path / "release.json").write_text(json.dumps({"eps": 24.97, "delta": 1e-5, "release_eps": 1.0,
                                                       "release_delta": 0.0, "neighbouring_relation": "replace-one"}))
    row = compare.fine_row(tmp_path)
    assert (row["eps"], row["delta"], row["data_set_eps"]) == (1.0, 0.0, 24.97)
    assert compare.summary([row])[0]["target_eps"] == 1.0
    (tmp_path / "student.json").write_text(json.dumps({"method": "fixmatch", "accuracy": 0.8}))
    pate = compare.pate_row(tmp_path)
    assert (pate["eps"], pate["eps_source"], pate["data_set_eps"]) == (1.0, "release.json:release_eps", 24.97)


def test_federated_rows_for_each_config_and_draw(tmp_path, capsys, monkeypatch):
    """`--fedavg-config A B --draws 2`: one row per config, algorithm, eps and draw, each in its
    own run directory, and the summary keeps the client counts apart."""
    compare = _compare()
    root = tmp_path / "compare"
    silos = tmp_path / "silos.toml"
    silos.write_text(TINY.read_text())
    made = []

    def fake_train(config_path, workdir, algorithm, eps, clients):
        made.append((pathlib.Path(config_path).name, workdir.name))
        workdir.mkdir(parents=True)
        n = 10 if config_path == str(silos) else 500
        (workdir / "fedavg.json").write_text(json.dumps({
            "algorithm": algorithm, "mechanism": "gaussian", "model": "linear", "eps": eps, "target_eps": eps,
            "neighbouring_relation": "replace-one", "per_round_eps": eps / 10, "delta": 1e-5,
            "accuracy": 0.5 + len(made) / 100, "eval_points": 10, "rounds": 10, "clients": n}))

    monkeypatch.setattr(compare, "train_fedavg", fake_train)
    assert compare.main(["--config", str(TINY), "--root", str(root), "--models", "--fedavg", "fedavg",
                         "--fedavg-config", str(TINY), str(silos), "--eps", "3", "--draws", "2"]) == 0
    assert [d for _, d in made] == ["fedavg-fedavg-eps3", "fedavg-fedavg-eps3-d2", "fedavg-silos-fedavg-eps3",
                                    "fedavg-silos-fedavg-eps3-d2"]
    out = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    groups = {g["method"]: g for g in out if "summary_of" in g}
    assert set(groups) == {"fedavg-gaussian-linear-500-clients", "fedavg-gaussian-linear-10-clients"}
    assert all(g["draws"] == 2 for g in groups.values())


@pytest.mark.parametrize("argv,message", [
    (["--eps", "nan"], "--eps must be finite"),
    (["--eps", "1", "1e300"], "--eps must be finite"),
    (["--draws", "0"], "--draws must be at least 1"),
    (["--fedavg-clients", "0"], "--fedavg-clients"),
    (["--pate", "MISSING"], "no release.json"),
])
def test_bad_arguments_get_one_line_and_exit_2(argv, message, tmp_path, capsys):
    argv = [a.replace("MISSING", str(tmp_path / "nowhere")) for a in argv]
    with pytest.raises(SystemExit) as stop:
        _compare().main(["--root", str(tmp_path), "--no-train", *argv])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and message in err and err.count("\n") == 1


def test_a_run_named_twice_is_refused(tmp_path):
    import argparse

    runs = [tmp_path / "a", tmp_path / "b"]
    for run in runs:
        run.mkdir()
        (run / "release.json").write_text("{}")
    parsed = argparse.Namespace(eps=[1.0], draws=1, fedavg_clients=None, pate_queries=[300],
                                pate=[str(runs[0]), str(runs[1])])
    assert _compare().check_args(parsed) is None
    parsed.pate = [str(runs[0]), str(tmp_path / "." / "a")]
    assert "given twice" in _compare().check_args(parsed)
    parsed.pate, parsed.pate_target_eps, parsed.pate_teachers = [], True, None
    assert "--pate-target-eps needs --pate-teachers" in _compare().check_args(parsed)


def test_rows_per_map_train_dpsgd_on_the_map_and_fine_grained_on_it(tmp_path, capsys, monkeypatch):
    """`--maps pixels --map-set ...`: for each eps, DP-SGD on the map through `pate dpsgd` (a linear
    model, dpsgd.features = the map; its row named by the map) and a fine-grained run with
    features.map = the map (stood in for here: its own tests run it), both given the --map-set
    overrides; a second call reads the rows instead of training again."""
    compare = _compare()
    root = tmp_path / "compare"
    fine_calls = []

    def fake_fine(workdir, eps, config_path, settings):
        fine_calls.append((workdir.name, eps, settings))
        workdir.mkdir(parents=True)
        (workdir / "student.json").write_text(json.dumps({"accuracy": 0.7, "eval_points": 100}))
        (workdir / "release.json").write_text(json.dumps({"eps": eps, "release_eps": eps, "release_delta": 0.0,
                                                          "neighbouring_relation": "replace-one"}))

    monkeypatch.setattr(compare, "train_fine", fake_fine)
    argv = ["--config", str(TINY), "--root", str(root), "--models", "--maps", "pixels", "--eps", "3",
            "--map-set", "dpsgd.linear_epochs=2.0", "--fine-set", "fine_grained.pca=8"]
    assert compare.main(argv) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert fine_calls == [("fine-pixels-eps3", 3.0, {"fine_grained.pca": 8, "features.map": "pixels",
                                                     "dpsgd.linear_epochs": 2.0})]
    methods = {r["method"]: r for r in rows if "method" in r and "summary_of" not in r}
    assert set(methods) == {"pate-fine-grained-on-pixels", "dpsgd-linear-on-pixels"}
    dpsgd = methods["dpsgd-linear-on-pixels"]
    info = json.loads((root / "dpsgd-linear-pixels-eps3-replace-one" / "dpsgd.json").read_text())
    assert info["features_map"] == "pixels" and info["epochs"] == pytest.approx(2.0, rel=0.05)
    assert dpsgd["eps"] == info["release_eps"] <= 3.0 + 1e-9 and dpsgd["accuracy"] == info["accuracy"]
    assert dpsgd["features_map"] == "pixels" and methods["pate-fine-grained-on-pixels"]["features_map"] == "pixels"
    groups = {r["summary_of"] for r in rows if "summary_of" in r}
    assert groups == set(methods)
    mtime = (root / "dpsgd-linear-pixels-eps3-replace-one" / "dpsgd.json").stat().st_mtime_ns
    assert compare.main(argv + ["--no-train"]) == 0 and len(fine_calls) == 1
    assert (root / "dpsgd-linear-pixels-eps3-replace-one" / "dpsgd.json").stat().st_mtime_ns == mtime


@pytest.mark.parametrize("maps, message", [(["wavelets"], "--maps wavelets: a map is one of scattering"),
                                           (["pixels", "pixels"], "--maps names a map twice"),
                                           (["learned+learned"], "--maps learned+learned")])
def test_a_bad_map_is_refused_in_one_line(maps, message, tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        _compare().main(["--root", str(tmp_path), "--no-train", "--maps", *maps])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and message in err and err.count("\n") == 1
