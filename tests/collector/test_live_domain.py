"""The live out-of-domain fallback, end to end: the real server with the committed fused model.

``models/fused.joblib`` was fitted on H200 runs that always had four sensors (GPU activity, NVLink,
PCIe, network: ``sensors_always_seen`` in models/fused.json). A window lacking any of them is one
the trees never saw; ``Detector.out_of_domain`` sends it to comm-rules with its default thresholds,
and the evidence says so. Three nodes stream the same recorded 2-GPU DDP run (data/redteam-r1,
retimed, 1 s signed batches) into ``python -m trainsentry.collector.server``:

* ``h200``: as recorded, every sensor there: judged by the fused artifact;
* ``no-pcie``: the GPUs' PCIe (GPM) counters removed: judged by comm-rules, said in the evidence;
* ``cpu``: only the network interfaces, no GPU at all: the same.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import Agent, RealCollector, last_window_end, per_second, wait_judged

from test_live import GIB, IDLE_MEM_BYTES, T0, readings, with_network
from test_live_jobs import RUN, splice
from trainsentry.collector.auth import enroll_inspector_in
from trainsentry.collector.store import Store
from trainsentry.telemetry.replay import read_trace_readings

SECONDS = 50.0   # of each stream (training from 2.5 s in the recording, 4 s in the network-only one)
MODELS = Path(__file__).resolve().parents[2] / "models"
FALLBACK = re.compile(r"^this window lacks a sensor fused was always fitted with \((.*)\): judged by comm-rules "
                      r"with its documented default thresholds instead$")


def variants() -> dict[str, list]:
    rs = [r for r in splice([read_trace_readings(RUN)]) if r.t < T0 + SECONDS]
    no_pcie = [replace(r, values={k: v for k, v in r.values.items() if "pcie" not in k}) for r in rs]
    # a node without GPUs whose network carries DDP-shaped exchange (test_live's inter-node part of a
    # DDP job: a quarter of the probe's recorded NVLink bursts), the shape of the demo's gloo training
    net_ddp = [r for r in with_network(readings([("idle", 4.0, IDLE_MEM_BYTES), ("ddp", SECONDS - 4.0, 20 * GIB)], T0))
               if r.kind == "net"]
    return {"h200": rs, "no-pcie": no_pcie, "cpu": net_ddp}


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory) -> dict[str, list[dict]]:
    db = tmp_path_factory.mktemp("domain") / "collector.db"
    streams = {n: per_second(rs, T0) for n, rs in variants().items()}
    store = Store(db)
    keys = {n: store.enroll(n) for n in streams}
    store.close()
    token = enroll_inspector_in(db, "inspector-1")
    col = RealCollector(db, {"TRAINSENTRY_MODELS": str(MODELS)})
    try:
        live = col.get("/v1/live", token)
        # models/familiarity.joblib and models/single-device.joblib
        assert live["detector"] == "fused" and live["evidence_checks"] == ["familiarity", "single-device"]
        agents = {n: Agent(col.http, n, k) for n, k in keys.items()}
        for i in range(max(map(len, streams.values()))):
            for n, bs in streams.items():
                if i < len(bs):
                    r = agents[n].send(bs[i])
                    assert r.status_code == 200, r.text
        wait_judged(lambda n: col.get(f"/v1/nodes/{n}/verdict", token),
                    {n: last_window_end(bs) for n, bs in streams.items()}, timeout_s=180)
        return {n: col.get(f"/v1/nodes/{n}/verdicts", token, start=T0 - 10, end=T0 + 1000)["verdicts"]
                for n in streams}
    finally:
        col.kill()


def judged(tl: list[dict]) -> list[dict]:
    """Windows that had features (a detector scored them)."""
    return [v for v in tl if v["p_training"] is not None]


def test_a_window_with_every_sensor_the_model_knows_is_judged_by_it(verdicts):
    seen = json.loads((MODELS / "fused.json").read_text())["detector"]["sensors_always_seen"]
    assert seen == ["act", "comm.net", "comm.nvlink", "comm.pcie"]
    tl = judged(verdicts["h200"])
    assert len(tl) > 15
    for v in tl:
        assert v["detector"] == "fused" and v["artifact"].endswith("models/fused.joblib"), v
        assert not [e for e in v["evidence"] if FALLBACK.match(e)]
        assert any(e.startswith("P(training) = ") and "(fused: boosted trees" in e for e in v["evidence"])


@pytest.mark.parametrize("node", ["no-pcie", "cpu"])
def test_a_window_lacking_a_sensor_the_model_always_had_is_judged_by_comm_rules_and_says_so(verdicts, node):
    tl = judged(verdicts[node])
    assert len(tl) > 15
    # what the rules say of it: DDP over NVLink without the PCIe counters, and over the network of a
    # node without GPUs (the shape of the demo's gloo training, which fused called 'other')
    assert tl[-1]["state"] == "training", tl[-1]["evidence"]
    for v in tl:
        # comm-rules judges it; where the single-device check (the busiest GPU's activity, which the
        # PCIe-less node still reports) reads more training, its P is the verdict's (the CPU node has no GPU)
        assert v["detector"] in ("comm-rules", "comm-rules+single-device") and v["artifact"] is None, v
        assert node == "no-pcie" or v["detector"] == "comm-rules", v
        why = [m for e in v["evidence"] if (m := FALLBACK.match(e))]
        assert len(why) == 1 and why[0][1] == "act, comm.net, comm.nvlink, comm.pcie", v["evidence"]
        # the P(training) of the verdict is the one comm-rules' own explanation states, or the check's
        p_line = next(e for e in v["evidence"] if e.startswith("P(training) = ") and "channel" in e)
        if v["detector"] == "comm-rules":
            assert p_line.startswith(f"P(training) = {v['p_training']:.2f} from the "), (p_line, v["p_training"])
        else:
            lead = next(e for e in v["evidence"] if e.startswith("single-device check ("))
            assert f"reads P(training) = {v['p_training']:.2f}" in lead, (lead, v["p_training"])
            assert float(p_line.split()[2]) <= v["p_training"] + 0.005, (p_line, v["p_training"])   # 2 decimals
        assert not any("boosted trees" in e for e in v["evidence"])
        # the model in use is still named (what would have judged it), after the state's reason
        assert any(e.startswith("detector fused from ") for e in v["evidence"])




def test_every_judged_window_says_whether_its_workload_is_familiar(verdicts):
    """models/familiarity.joblib (scripts/familiarity.py) adds one line to each judged window: the
    recorded DDP run is a configuration of the fitting data, so its running windows are familiar."""
    for node, tl in verdicts.items():
        for v in judged(tl):
            lines = [e for e in v["evidence"]
                     if e.startswith(("familiar workload", "unfamiliar workload", "familiarity not judged"))]
            assert len(lines) == 1, (node, v["evidence"])
            # the nodes lacking a sensor every fitting window had are not set against them
            assert lines[0].startswith("familiarity not judged") == (node != "h200"), (node, lines)
    assert all(e.startswith("familiar workload") for v in judged(verdicts["h200"])[-10:] for e in v["evidence"]
               if "familiar workload" in e)


@pytest.mark.parametrize("name", ["familiarity", "single-device"])
def test_a_missing_or_broken_check_artifact_leaves_the_verdicts_alone(tmp_path, caplog, name):
    from trainsentry.collector.live import load_live_check
    assert load_live_check(tmp_path, name) is None                   # none there: no line, no error
    (tmp_path / f"{name}.joblib").write_bytes(b"not a pickle")
    assert load_live_check(tmp_path, name) is None and f"cannot use {name} artifact" in caplog.text


def test_familiarity_lines_follow_the_windows_that_have_features_and_a_failing_check_is_dropped(db, key):
    """judge_rows with a window that had too few samples between two that had features: the line goes
    to exactly the two; a check that raises is logged and dropped, the verdicts go on."""
    from trainsentry.collector.live import LiveConfig, LiveProcessor
    from trainsentry.detect.dataset import load_run
    every = load_run(RUN, None).windows["trainsentry"].to_dict("records")
    rows = [every[5], every[8]]
    ends = [every[5]["t_end"], every[6]["t_end"], every[8]["t_end"]]    # the middle end has no row
    proc = LiveProcessor(db, config=LiveConfig(models_dir=MODELS))
    try:
        assert proc.checks.get("familiarity") is not None
        out = proc.judge_rows("node", "node-a", rows, ends, lambda e: True, [], [])
        has = [any(e.startswith(("familiar workload", "unfamiliar workload")) for e in v["evidence"]) for v in out]
        assert has == [True, False, True] and out[1]["p_training"] is None

        def broken(frame):
            raise ValueError("an artifact this sklearn cannot run")
        proc.checks["familiarity"].lines = broken
        out = proc.judge_rows("node", "node-a", rows, ends, lambda e: True, [], [])
        assert [v["p_training"] is not None for v in out] == [True, False, True] and "familiarity" not in proc.checks
        assert not any("familiar" in e for v in out for e in v["evidence"])
    finally:
        proc.close()


def test_a_failing_single_device_check_is_dropped_alone(db, key):
    """The other way round: the single-device check raises, familiarity goes on."""
    from trainsentry.collector.live import LiveConfig, LiveProcessor
    from trainsentry.detect.dataset import load_run
    every = load_run(RUN, None).windows["trainsentry"].to_dict("records")
    rows, ends = [every[5], every[8]], [every[5]["t_end"], every[8]["t_end"]]
    proc = LiveProcessor(db, config=LiveConfig(models_dir=MODELS))
    try:
        def broken(frame, gpus=None):
            raise ValueError("an artifact this sklearn cannot run")
        proc.checks["single-device"].read = broken   # the one call the live path makes to the check
        out = proc.judge_rows("node", "node-a", rows, ends, lambda e: True, [], [])
        assert sorted(proc.checks) == ["familiarity"]
        assert all(any(e.startswith(("familiar workload", "unfamiliar workload")) for e in v["evidence"]) for v in out)
    finally:
        proc.close()
