import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from agent_testkit import CounterSource, env

from trainsentry.agent.record import PARTIAL_SAMPLES, Recorder, check_labels, recover
from trainsentry.traces.io import read_trace

LABELS = {"workload": "idle", "class": "other"}
FAKE_NODE = str(Path(__file__).resolve().parents[1] / "e2e" / "fake_node.py")


def test_recorder_api_records_in_the_background_and_writes_a_trace(tmp_path):
    rec = Recorder([CounterSource(devices=("eth0", "eth1"))], hz=50, node="lab-1", out_dir=tmp_path / "run",
                   labels=LABELS).start()
    time.sleep(0.5)
    readings = rec.stop()
    assert 40 <= len(readings) <= 60 and len(readings) % 2 == 0
    assert (tmp_path / "run" / PARTIAL_SAMPLES).exists()
    rec.write()
    table, manifest = read_trace(tmp_path / "run")
    assert table.num_rows == len(readings)
    assert manifest["node"] == "lab-1" and manifest["labels"]["family"] == "unspecified"
    assert manifest["devices"] == ["eth0", "eth1"] and manifest["sample_hz"] == 50
    col = table.column("net_tx_Bps").to_pylist()
    assert any(v is not None and v > 0 for v in col)          # rates derived from the recorded counters
    assert not (tmp_path / "run" / PARTIAL_SAMPLES).exists()


def test_columns_without_a_directory(tmp_path):
    rec = Recorder([CounterSource(devices=("eth0",), end_after=5)], hz=100, node="n").start()
    assert rec.wait(5)
    rec.stop()
    assert rec.columns()["net_rx_bytes"] == [1000, 2000, 3000, 4000, 5000]


@pytest.mark.parametrize("labels,msg", [({}, "required"), ({"workload": "w", "class": "mining"}, "class")])
def test_bad_labels_are_refused(labels, msg):
    with pytest.raises(ValueError, match=msg):
        check_labels(labels)


def test_record_sigkilled_keeps_its_batches_and_recovers(tmp_path):
    out = tmp_path / "run"
    p = subprocess.Popen([sys.executable, FAKE_NODE, "--gpus", "2", "record", str(out), "--source", "nvml",
                          "--label", "workload=idle", "--label", "class=other", "--hz", "20"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env())
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        part = out / PARTIAL_SAMPLES
        if part.exists() and part.read_text().count("\n") >= 2:
            break
        time.sleep(0.1)
    p.kill()
    p.communicate()
    lines = (out / PARTIAL_SAMPLES).read_text().splitlines()
    kept = sum(len(json.loads(ln)) for ln in lines if ln.endswith("]"))
    refused = subprocess.run([sys.executable, FAKE_NODE, "record", str(out), "--label", "workload=x",
                              "--label", "class=other", "--duration", "1"], capture_output=True, text=True, env=env())
    assert refused.returncode == 2 and "--recover" in refused.stderr
    recover(out)
    table, manifest = read_trace(out)
    assert table.num_rows == kept >= 2 * 20 * 2 - 4
    assert manifest["recovered"] is True and manifest["devices"] == ["gpu0", "gpu1"]
