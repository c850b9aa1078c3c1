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
    src = CounterSource(devices=("eth0", "eth1"))
    rec = Recorder([src], hz=50, node="lab-1", out_dir=tmp_path / "run", labels=LABELS).start()
    deadline = time.monotonic() + 30
    while src.count < 25 and time.monotonic() < deadline:     # half a second of ticks, however long it takes
        time.sleep(0.02)
    readings = rec.stop()
    assert src.count >= 25 and len(readings) == 2 * src.count  # every read kept, the partial batch included
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
    batches = [json.loads(ln) for ln in lines if ln.endswith("]")]    # a line cut by the kill is not one
    kept = sum(len(b) for b in batches)
    refused = subprocess.run([sys.executable, FAKE_NODE, "record", str(out), "--label", "workload=x",
                              "--label", "class=other", "--duration", "1"], capture_output=True, text=True, env=env())
    assert refused.returncode == 2 and "--recover" in refused.stderr
    recover(out)
    table, manifest = read_trace(out)
    # Every complete 1 s batch is kept: both GPUs read at each of its ticks (at most 20 at 20 Hz; fewer
    # where a loaded machine skipped ticks), the ticks in order across batches.
    assert len(batches) >= 2 and table.num_rows == kept
    ticks = []
    for b in batches:
        per_gpu = {d: [x["t"] for x in b if x["dev"] == d] for d in ("gpu0", "gpu1")}
        assert per_gpu["gpu0"] and len(per_gpu["gpu0"]) == len(per_gpu["gpu1"]) <= 20 and len(b) == 2 * len(per_gpu["gpu0"])
        ticks += per_gpu["gpu0"]
    assert ticks == sorted(ticks) and len(set(ticks)) == len(ticks)
    assert manifest["recovered"] is True and manifest["devices"] == ["gpu0", "gpu1"]
