"""The ``trainsentry simulate`` commands."""

import json

from typer.testing import CliRunner

from trainsentry.simulate.commands import app

runner = CliRunner()


def test_table_json():
    r = runner.invoke(app, ["table", "--json"])
    assert r.exit_code == 0, r.output
    rows = json.loads(r.output)
    assert all(row["within_2pct"] for row in rows)


def test_forward_and_bad_input():
    r = runner.invoke(app, ["forward", "--node", "16x H100 SXM FP8", "--nodes", "2", "--mode",
                            "flat", "--params-b", "91"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["h"] == 18 and "traffic" in out
    assert runner.invoke(app, ["forward", "--node", "16x B300"]).exit_code != 0
    bad = runner.invoke(app, ["forward", "--node", "16x H100 SXM FP8", "--mode", "flat",
                              "--params-b", "500"])
    assert bad.exit_code == 2 and "invalid" in bad.output
    assert runner.invoke(app, ["forward", "--bw-mbps", "0"]).exit_code != 0


def test_search_command():
    r = runner.invoke(app, ["search", "--target", "1e24"])
    assert r.exit_code == 0, r.output
    assert "cheapest: 16x H100 SXM FP8 x2 Flat 91B" in r.output


def test_module_imports_only_light_packages():
    import subprocess
    import sys
    code = ("import sys, trainsentry.simulate.commands; "
            "print(any(m in sys.modules for m in ('numpy', 'matplotlib')))")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True,
                          text=True).stdout.strip() == "False"
