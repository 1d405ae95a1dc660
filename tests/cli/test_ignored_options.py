"""Options a command would silently ignore are refused in one line (issue 44): `--queries` means
nothing to a fine-grained release (one release labels every pool point), and `pate label` used to
ignore it and draw and charge a new release; `pate audit` audited one query whatever it said."""

from __future__ import annotations

from conftest import TINY, invoke, one_line_error



def test_label_refuses_queries_for_a_fine_grained_release(tmp_path, ledger_dir):
    line = one_line_error(invoke("label", "--workdir", tmp_path / "run", "--config", TINY, "--mechanism",
                                 "fine-grained", "--queries", 5), 2)
    assert "--queries" in line and "fine-grained" in line
    assert not (tmp_path / "run").exists() and list(ledger_dir.iterdir()) == []


def test_audit_refuses_queries_for_a_fine_grained_config(tmp_path):
    config = tmp_path / "fine.toml"
    config.write_text(TINY.read_text().replace('mechanism = "lnmax"', 'mechanism = "fine-grained"'))
    assert 'mechanism = "fine-grained"' in config.read_text()
    line = one_line_error(invoke("audit", "--config", config, "--queries", 3, "--trials", 100), 2)
    assert "--queries" in line and "fine-grained" in line
