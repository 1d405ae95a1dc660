"""The Python API: what `pate` and `analysis` export, that `analysis` stays free of JAX
and `pate`, and the walkthrough example end to end."""

import json
import pathlib
import pydoc
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_analysis_exports_without_jax_or_pate():
    script = (
        "import sys, analysis\n"
        "for name in analysis.__all__: getattr(analysis, name)\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('jax', 'jaxlib', 'flax', 'pate'))\n"
        "print(bad)\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_exports_have_docstrings_and_help_reads_as_a_manual():
    import analysis
    import pate

    for module in (analysis, pate):
        for name in module.__all__:
            if name.startswith("__"):
                continue
            obj = getattr(module, name)
            assert (obj.__doc__ or "").strip(), f"{module.__name__}.{name} has no docstring"
    text = pydoc.render_doc(analysis, renderer=pydoc.plaintext)
    for word in ("Quick start", "lnmax", "gnmax", "pld", "plan_noise", "private"):
        assert word in text
    assert "label_votes" in (pate.__doc__ or "")


def test_pate_entry_points_are_callable_and_modules_stay_modules():
    import pate
    from pate.release import labels as release_labels
    from pate.steps import label_votes as label_votes_mod

    assert release_labels.RELEASED_KEYS and callable(pate.label) and callable(pate.analyze)
    assert pate.label_votes is label_votes_mod.label_votes and callable(pate.run)
    assert pate.analyze_workdir.__module__ == "pate.steps.analyze"


@pytest.mark.slow  # 7 s
def test_walkthrough_runs(tmp_path):
    out = tmp_path / "run"
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / "walkthrough.py"), str(out)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "headline: 2.0000 (pld)" in proc.stdout and "sanitised eps" in proc.stdout
    assert sorted(p.name for p in out.iterdir()) == ["labels.npz", "privacy.json", "privacy.png", "release.json", "votes.npz"]
    doc = json.loads((out / "privacy.json").read_text())
    assert doc["public"]["data_independent_headline"] == "pld"
    assert (out / "privacy.png").read_bytes()[:4] == b"\x89PNG"


def test_the_former_flat_module_names_still_reach_their_rooms():
    """`analysis.gnss`, `analysis.lnmax_release`, ... as attributes: scripts written before the
    rooms keep working (new code imports the room's module)."""
    import importlib

    import analysis

    for name, room in analysis._FORMER.items():
        assert getattr(analysis, name) is importlib.import_module(f"analysis.{room}")
    assert analysis.lnmax_release.sanitized_eps.__module__ == "analysis.sanitised.lnmax_release"
