"""The campaign runner end to end on CPU: toy workloads under torchrun (2 gloo ranks), the recorder
on this machine's real network counters, runs cut into traces, manifests validated, resume."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml

from trainsentry.lab.campaign import Campaign, plan_runs, run_campaign
from trainsentry.lab.summary import summarize
from trainsentry.traces.io import iter_runs, read_trace

WORKLOADS = ["train.single.w640-l12-seq4k", "train.ddp.w1024-l16", "infer.generate.s50m_b32", "other.idle.bare"]


def _campaign(tmp_path: Path) -> Path:
    # min_steps: a toy step on a loaded 2-core CI machine can take longer than the 2.5 s run; every
    # workload but idle counts steps and goes on until it has one (idle counts none: it would never stop)
    spec = {"name": "toy", "node": "cpu-test", "hz": 10, "seconds": 2.5, "gap_s": 1.0, "pre_s": 0.5,
            "post_s": 0.3, "toy": True,
            "runs": [{"workload": w, **({} if w.startswith("other.idle") else {"min_steps": 1}),
                      **({"overrides": {"gen_len": 3}} if w.startswith("infer.generate") else {})} for w in WORKLOADS]}
    path = tmp_path / "toy.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


@pytest.mark.slow
def test_campaign_records_labeled_runs_and_resumes(tmp_path):
    path = _campaign(tmp_path)
    written = run_campaign(path, tmp_path / "data", sources=["net"], progress=lambda *_: None)
    assert sorted(p.name.rsplit("-", 2)[0] for p in written) == sorted(WORKLOADS)
    for run_dir in iter_runs(tmp_path / "data" / "toy"):
        table, manifest = read_trace(run_dir)
        assert manifest["labels"]["class"] in ("training", "inference", "other")
        # the campaign's overrides as written, beside the resolved config (red-team settings are named by them)
        generate = manifest["labels"]["workload"].startswith("infer.generate")
        assert manifest["labels"]["overrides"] == ({"gen_len": 3} if generate else {})
        assert not generate or manifest["labels"]["config"]["gen_len"] == 3
        assert manifest["record_start"] < manifest["start"] < manifest["end"] < manifest["record_end"]
        t = table.column("t").to_numpy()
        assert t.min() >= manifest["record_start"] and t.max() <= manifest["record_end"]
        assert len(table) > 0 and set(table.column("kind").to_pylist()) <= {"net", "ib"}
        gt = manifest["ground_truth"]
        if manifest["labels"]["class"] == "training":
            assert gt["flops"] > 0 and gt["steps"] > 0 and gt["loss_curve"]
    # resume: everything is on disk, nothing is planned again
    assert plan_runs(Campaign.load(path), tmp_path / "data" / "toy", None) == []
    card = summarize(tmp_path / "data" / "toy")
    assert card["runs"] == len(WORKLOADS)
    assert card["by_class"] == {"training": 2, "inference": 1, "other": 1}
    log = [json.loads(l) for l in (tmp_path / "data" / "toy" / "campaign_log.jsonl").read_text().splitlines()]
    assert log[-1]["worker_rcs"] == [0] and not log[-1]["failed"]


def test_budget_keeps_only_runs_that_fit(tmp_path):
    c = Campaign.load(_campaign(tmp_path))
    from trainsentry.lab.campaign import PER_RUN_OVERHEAD_S, STARTUP_S
    assert plan_runs(c, tmp_path / "none", budget_s=STARTUP_S - 1) == []   # not even the start-up fits
    all_runs = plan_runs(c, tmp_path / "none", budget_s=None)
    assert len(all_runs) == len(WORKLOADS)
    per_run = 2.5 + 1.0 + PER_RUN_OVERHEAD_S
    assert len(plan_runs(c, tmp_path / "none", budget_s=STARTUP_S + 2.5 * per_run)) == 2


def test_min_steps_keeps_a_run_going_past_its_deadline_until_it_has_its_steps():
    import time

    from trainsentry.workloads.base import Context, Ledger
    ctx = Context(rank=0, world_size=1, device=torch.device("cpu"), dtype=torch.float32,
                  deadline=time.time() - 1, ledger=Ledger(), min_steps=2)
    assert ctx.keep_going()                       # past the deadline, no step yet
    ctx.ledger.step(0.1, 10, 1.0)
    assert ctx.keep_going()
    ctx.ledger.step(0.1, 10, 1.0)
    assert not ctx.keep_going()                   # two steps: the deadline decides again
    ctx.max_steps = 1
    ctx.min_steps = 5
    assert not ctx.keep_going()                   # max_steps still ends the run


def test_unknown_keys_and_workloads_are_refused(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"name": "x", "runs": [], "speed": 3}))
    with pytest.raises(ValueError, match="unknown campaign keys"):
        Campaign.load(bad)
    bad.write_text(yaml.safe_dump({"name": "x", "runs": [{"workload": "no.such"}]}))
    with pytest.raises(ValueError, match="unknown workload"):
        Campaign.load(bad).expand()


def test_a_hung_run_is_found_dumped_ended_and_recorded_as_failed(tmp_path):
    """The runner's watchdog: a run past deadline + grace has hung; its launch's workers dump their
    Python stacks (SIGUSR1, faulthandler) and the launch is killed; the run is recorded as failed."""
    import subprocess
    import sys
    import time

    from trainsentry.lab import campaign as cmod

    work = tmp_path / "work"
    work.mkdir()
    now = time.time()
    (work / "events.jsonl").write_text(
        json.dumps({"t": now - 500, "run_id": "a", "phase": "start"}) + "\n"
        + json.dumps({"t": now - 450, "run_id": "a", "phase": "end", "ok": True}) + "\n"
        + json.dumps({"t": now - 10, "run_id": "b", "phase": "start"}) + "\n")
    runs = {"a": {"seconds": 40}, "b": {"seconds": 40}}
    assert cmod.hung_run(work, runs, now) is None                       # b is within its time
    assert cmod.hung_run(work, runs, now + 40 + cmod.RUN_GRACE_S) == "b"
    log = tmp_path / "stderr.txt"
    child = ("import faulthandler, os, signal, sys, time; faulthandler.register(signal.SIGUSR1, all_threads=True); "
             "print(os.getpid(), flush=True); time.sleep(120)")
    with log.open("w") as err:
        # a leader (like torchrun) whose worker runs in a session of its own (as torchrun starts them)
        proc = subprocess.Popen(["bash", "-c", f'setsid {sys.executable} -c "{child}"; true'], stdout=subprocess.PIPE,
                                stderr=err, start_new_session=True, text=True)
        worker = int(proc.stdout.readline())
        cmod.end_hung_launch(proc, work, "b")
    assert proc.poll() is not None
    time.sleep(0.2)
    assert not Path(f"/proc/{worker}").exists() or "Z" in Path(f"/proc/{worker}/stat").read_text().split()[2]
    assert "line 1 in <module>" in log.read_text()                      # the worker's stack
    truth = json.loads((work / "b.truth.json").read_text())
    assert truth["ok"] is False and "hung" in truth["errors"][0]
    assert cmod.hung_run(work, runs, now + 1000) is None                # b has its end event now
    assert cmod._attempted(work) == 2


def test_runs_that_failed_before_are_not_planned_again(tmp_path):
    path = _campaign(tmp_path)
    c = Campaign.load(path)
    root = tmp_path / "data" / "toy"
    root.mkdir(parents=True)
    first = plan_runs(c, root, None)[0]["run_id"]
    (root / "campaign_log.jsonl").write_text(json.dumps({"planned": [first], "written": [], "failed": [first]}) + "\n")
    assert first not in [r["run_id"] for r in plan_runs(c, root, None)]
    assert first in [r["run_id"] for r in plan_runs(c, root, None, retry_failed=True)]
    with (root / "campaign_log.jsonl").open("a") as f:
        f.write(json.dumps({"retry": [first], "note": "cause fixed"}) + "\n")
    assert first in [r["run_id"] for r in plan_runs(c, root, None)]
    from trainsentry.lab.summary import campaign_failures
    assert [(f["retry"], f["written_later"]) for f in campaign_failures(root)] == [(True, False)]
    with (root / "campaign_log.jsonl").open("a") as f:
        f.write(json.dumps({"planned": [first], "written": [first], "failed": []}) + "\n")
    assert [(f["failures"], f["written_later"]) for f in campaign_failures(root)] == [(1, True)]


def test_runs_are_ordered_repeat_by_repeat_with_long_runs_last():
    c = Campaign(name="x", seconds=38, runs=[{"workload": w, "repeats": 2} for w in WORKLOADS]
                 + [{"workload": WORKLOADS[0], "seconds": 100}])
    order = c.expand()
    assert [r["run_id"].rsplit("-r", 1)[1] for r in order] == ["0"] * 4 + ["1"] * 4 + ["0"]
    assert order[-1]["seconds"] == 100 and {r["workload"] for r in order[:4]} == set(WORKLOADS)
    assert order == c.expand()                       # seeded: the same order every time


def test_every_committed_campaign_loads_and_names_registered_workloads():
    """The campaign files under configs/campaigns plan only registered workloads that fit their
    launch; the hard-negative file writes into the benign dataset (same name, node, rate)."""
    root = Path(__file__).resolve().parents[2] / "configs" / "campaigns"
    loaded = {p.stem: Campaign.load(p) for p in sorted(root.glob("*.yaml"))}
    for name, c in loaded.items():
        assert c.expand(), name
    hard, base = loaded["h200-hardneg"], loaded["h200"]
    assert (hard.name, hard.node, hard.hz, hard.nproc) == (base.name, base.node, base.hz, base.nproc)
    families = {r["workload"].split(".")[1] for r in hard.expand()}
    assert families == {"ep", "cp", "stencil"}
    assert not {r["run_id"] for r in hard.expand()} & {r["run_id"] for r in base.expand()}
    second = loaded["h200-hardneg2"]
    assert (second.name, second.node, second.hz, second.nproc) == (base.name, base.node, base.hz, base.nproc)
    ids = [{r["run_id"] for r in c.expand()} for c in (base, hard, second)]
    assert not ids[2] & (ids[0] | ids[1])


@pytest.mark.parametrize("workload", ["train.ddp.w1024-l16", "train.lora.ddp-r16-w2048", "adv.flops.heads2",
                                      "adv.accum.k8", "adv.pp.gpipe-mb2"])
def test_a_one_rank_campaign_refuses_workloads_built_on_ddp_or_pipelining(tmp_path, workload):
    """They fail on one rank (parallel.world_ok); the registry says so, so planning refuses them before any
    GPU time is spent (a CPU dry run of redteam-x1.yaml found adv.flops.heads2 failing at launch)."""
    path = tmp_path / "one.yaml"
    path.write_text(yaml.safe_dump({"name": "one", "nproc": 1, "runs": [{"workload": workload}]}))
    with pytest.raises(ValueError, match=f"workload '{workload}' needs 2 ranks"):
        Campaign.load(path).expand()


def test_the_one_gpu_campaigns_plan_only_one_rank_workloads():
    root = Path(__file__).resolve().parents[2] / "configs" / "campaigns"
    for name in ("h200x1.yaml", "h200x1-hardneg.yaml", "redteam-x1.yaml"):
        c = Campaign.load(root / name)
        assert c.nproc == 1 and len(c.expand()) >= 10


def test_lora_targets_are_checked_when_the_campaign_is_planned(tmp_path):
    """An adapter set the workload would refuse at launch (query without value) is refused at planning,
    before any GPU time is spent; the committed query-and-value campaign plans."""
    path = tmp_path / "qv.yaml"
    path.write_text(yaml.safe_dump({"name": "qv", "nproc": 1, "runs": [
        {"workload": "train.lora.single-r8-w1536", "overrides": {"lora_targets": ["attn.q"]}}]}))
    with pytest.raises(ValueError, match="lora_targets"):
        Campaign.load(path).expand()
    for workload, over, match in (("train.single.w1024-l16", {"lora_targets": ["attn.q", "attn.v"]}, "without lora_rank"),
                                  ("train.lora.single-r8-w1536", {"lora_targets": None}, "must be a list")):
        path.write_text(yaml.safe_dump({"name": "qv", "nproc": 1, "runs": [{"workload": workload, "overrides": over}]}))
        with pytest.raises(ValueError, match=match):
            Campaign.load(path).expand()
    # the file's order does not make a second configuration
    orders = []
    for targets in (["attn.v", "attn.q"], ["attn.q", "attn.v"]):
        path.write_text(yaml.safe_dump({"name": "qv", "nproc": 1, "runs": [
            {"workload": "train.lora.single-r8-w1536", "overrides": {"lora_targets": targets}}]}))
        (run,) = Campaign.load(path).expand()
        orders.append((run["run_id"], run["overrides"]["lora_targets"]))
    assert orders[0] == orders[1] and orders[0][1] == ["attn.q", "attn.v"]
    root = Path(__file__).resolve().parents[2] / "configs" / "campaigns"
    runs = Campaign.load(root / "h200x1-lora-qv.yaml").expand()
    assert len(runs) == 5 and all(r["overrides"]["lora_targets"] == ["attn.q", "attn.v"] for r in runs)


def test_lora_layers_are_checked_when_the_campaign_is_planned(tmp_path):
    """``lora_layers`` outside 1..n_layers, or without adapters, is refused before any GPU time; the
    committed top-blocks campaign plans."""
    path = tmp_path / "top.yaml"
    for workload, over, match in (("train.lora.single-r8-w1536", {"lora_layers": 0}, "lora_layers"),
                                  ("train.lora.single-r8-w1536", {"lora_layers": 25}, "lora_layers"),
                                  ("train.lora.single-r8-w1536", {"n_layers": 4, "lora_layers": 5}, "lora_layers"),
                                  ("train.single.w1024-l16", {"lora_layers": 2}, "without lora_rank")):
        path.write_text(yaml.safe_dump({"name": "top", "nproc": 1, "runs": [{"workload": workload, "overrides": over}]}))
        with pytest.raises(ValueError, match=match):
            Campaign.load(path).expand()
    # a toy campaign is checked against the toy model it will launch (fewer blocks than the full one)
    path.write_text(yaml.safe_dump({"name": "top", "nproc": 1, "toy": True, "runs": [
        {"workload": "train.lora.single-r8-w1536", "overrides": {"lora_layers": 4}}]}))
    with pytest.raises(ValueError, match="lora_layers"):
        Campaign.load(path).expand()
    root = Path(__file__).resolve().parents[2] / "configs" / "campaigns"
    runs = Campaign.load(root / "h200x1-lora-top.yaml").expand()
    assert len(runs) == 5 and sorted({r["overrides"]["lora_layers"] for r in runs}) == [1, 4]


def test_the_launch_asks_for_a_free_rendezvous_port(tmp_path):
    """--standalone: torchrun's rendezvous on a free local port, not the fixed 29500 a second campaign on
    the node would hold (torch 2.13's torchrun moves by itself; the launch must not depend on that)."""
    from trainsentry.lab.campaign import launch_command
    cmd = launch_command(2, tmp_path / "plan.json", tmp_path)
    assert cmd[1:4] == ["-m", "torch.distributed.run", "--standalone"] and "--nproc_per_node=2" in cmd
    assert not any(a.startswith(("--master_port", "--master-port", "--rdzv")) for a in cmd)
