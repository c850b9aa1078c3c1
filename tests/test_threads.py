import os

import pytest
from typer.testing import CliRunner

from trainsentry.cli import app


@pytest.mark.parametrize("args", [["eval", "--data", "{missing}", "--splits", "1"],
                                  ["flops-eval", "--data", "{missing}", "--splits", "1"],
                                  ["redteam", "rounds", "--adversarial", "{missing}"]])
def test_analysis_commands_ask_for_one_native_thread_unless_the_user_chose(args, monkeypatch, tmp_path):
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("MKL_NUM_THREADS", "4")
    res = CliRunner().invoke(app, [a.format(missing=tmp_path / "missing") for a in args])
    assert res.exit_code != 0                      # nothing to read: it stops, after setting the threads
    assert os.environ["OMP_NUM_THREADS"] == "1" and os.environ["OPENBLAS_NUM_THREADS"] == "1"
    assert os.environ["MKL_NUM_THREADS"] == "4"
