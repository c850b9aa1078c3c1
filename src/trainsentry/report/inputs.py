"""Every file the report reads, and the command that produces it.

A section names the inputs it needs; the builder checks them all before rendering so that a
missing file fails the build once, with every missing input and its command listed together.

An *optional* input is never required: no section lists it in its ``INPUTS`` (the builder requires
those), a section reads it only behind ``ctx.has`` and leaves its part out without it, and the
Limitations section does not list it as missing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Input:
    key: str        # short name sections use: "detector"
    rel_path: str   # under the results root ("detector.json") or the data root ("h200")
    root: str       # "results" | "data"
    command: str    # what produces it
    what: str       # one line for the missing-input message
    entry: str = ""  # a slash path inside the file when the input is one entry of a shared file
    optional: bool = False  # read only when present (``ctx.has``); its absence is no draft


# the single-device leads compared prospectively (scripts/compare_leads.py), newest first
EARLIER_LEADS = ("8e0680c", "8172e3e", "49bb577", "d183eb1")


def _compare_leads(revs: tuple[str, ...], name: str, runs_at: str = "") -> str:
    """scripts/compare_leads.py's command over the prospective results of ``revs`` on the one-GPU node's
    host-study and red-team data, written to results/<name>.json and docs/<name>.md; ``runs_at``: only the
    runs committed at that revision (the prospective files are re-run as runs are added)."""
    return ("python scripts/compare_leads.py "
            + " ".join(f"--prospective results/prospective-{r}-{d}.json" for r in revs for d in ("h200x1-host", "redteam-x1"))
            + f" --out results/{name}.json --docs docs/{name}.md" + (f" --runs-at {runs_at}" if runs_at else ""))


def _prospective(key: str, rev: str, data: str, what: str) -> Input:
    """An optional input: scripts/prospective.py's check of the lead committed at ``rev`` (with the
    single-device lead beside it) on the runs of data/<data> recorded after it."""
    name = f"prospective-{rev}-{data}"
    return Input(key, f"{name}.json", "results",
                 f"python scripts/prospective.py --model-rev {rev} --also single-device --data data/{data} "
                 f"--out results/{name}.json --docs docs/{name}.md", what, optional=True)


INPUTS: dict[str, Input] = {i.key: i for i in (
    Input("gpu_check", "gpu_check.json", "results",
          "trainsentry lab gpu-check RUN_DIR PHASES (scripts/gpu/backbone_check.sh on a 2-GPU machine)",
          "NVLink counters against the bytes handed to NCCL"),
    Input("ingest", "ingest.json", "results",
          "python benchmarks/bench_agent.py --duration 30 --repeats 3 --parts and python benchmarks/bench_ingest.py",
          "agent overhead and collector ingest"),
    Input("agent_real", "ingest.json", "results",
          "python3 benchmarks/bench_agent.py --real --duration 20 (on a GPU machine; it writes agent.real)",
          "agent overhead on a real GPU node", entry="agent/real"),
    Input("dataset", "dataset.json", "results",
          "trainsentry lab summary --data data/h200 --json results/dataset.json",
          "the benign dataset card"),
    Input("detector", "detector.json", "results",
          "trainsentry eval --data data/h200 --data data/h200x1 --data data/h200x1-host --data data/h200x1-fp8 "
          "--data data/h200x1-vision --data data/h200x1-decode --data data/h200x1-verdict --splits 200 --jobs 2 "
          "--detector comm-rules --detector comm-ml --detector fused --detector rt-baseline "
          "--detector fused+single-device-live-noconv --out results --docs docs/detector.md --cache .cache/features",
          "detector evaluation on configuration-grouped splits of every benign dataset, the live verdict among them"),
    Input("flops", "flops.json", "results", "trainsentry flops-eval --data data/h200",
          "every FLOP estimator on the same grouped splits"),
    Input("redteam", "redteam.json", "results",
          "trainsentry redteam rounds --benign data/h200 --adversarial data/redteam-r1",
          "red-team rounds: detection and cost per strategy"),
    Input("redteam_x1", "redteam-x1.json", "results",
          "trainsentry redteam rounds --benign data/h200 --benign data/h200x1 --adversarial data/redteam-x1 "
          "--detector fused+single-device --detector rt-baseline --primary fused+single-device "
          "--harden fused+single-device --campaign configs/campaigns/redteam-x1.yaml "
          "--campaign configs/campaigns/redteam-x1-fast.yaml --rounds 3 "
          "--out results/redteam-x1.json --docs docs/redteam-x1.md --figures results/figures/redteam-x1",
          "red-team rounds on a one-GPU node, scored by the single-device trees", optional=True),
    Input("simulator", "simulator.json", "results", "trainsentry simulate all",
          "the distributed-evasion simulator"),
    Input("state_rule", "state-rule.json", "results", "python scripts/state_rule.py --data data/h200",
          "how the live state names what is not training (inference or other)"),
    Input("familiarity", "familiarity.json", "results",
          "python scripts/familiarity.py --data data/h200 --adversarial data/redteam-r1 --save models/familiarity.joblib",
          "whether windows are like the detectors' fitting data"),
    Input("offload_gate", "offload-gate.json", "results",
          "python scripts/offload_gate.py --data data/h200x1 --family offload --family zero-offload "
          "--family kvswap --family stream --out results/offload-gate.json",
          "the exchange gate on the one-GPU node: host-offloaded training, the benign work that loads PCIe, "
          "and what offloading costs", optional=True),
    Input("host_study", "host-study.json", "results",
          "python scripts/host_study.py --data data/h200x1-host --data data/redteam-x1 --baseline-data data/h200x1 "
          "--prospective results/prospective-6784c23-h200x1-host.json "
          "--prospective results/prospective-6784c23-redteam-x1.json "
          "--prospective results/prospective-9a4dffd-h200x1-host.json --out results/host-study.json "
          "--docs docs/host.md --figure results/figures/host_cpu.png",
          "the host's CPU time beside PCIe: ZeRO-Offload, copy-only work, host computation, and the evader's "
          "answer (fewer host threads)", optional=True),
    Input("one_gpu", "one_gpu.json", "results",
          "trainsentry eval-transfer --base data/h200 --target data/h200x1 --splits 30 --detector comm-rules "
          "--detector comm-ml --detector fused --detector rt-baseline --detector fused+single-device "
          "--out results/one_gpu.json --docs docs/one-gpu.md",
          "the detectors fitted on the 2-GPU node, judged on a one-GPU node's runs"),
    Input("unseen_diffusion", "unseen-diffusion.json", "results",
          "python scripts/unseen_family.py --data data/h200 --data data/h200x1 --data data/h200x1-host "
          "--family diffusion --detector fused --detector fused+single-device --detector fused+single-device-tensor "
          "--detector fused+single-device-live --out results/unseen-diffusion.json --docs docs/unseen-diffusion.md "
          "--cache .cache/features",
          "a benign family added after the detectors were designed (image generation with a diffusion "
          "transformer), held out of every fit", optional=True),
    Input("unseen_video", "unseen-video.json", "results",
          "python scripts/unseen_family.py --data data/h200 --data data/h200x1 --data data/h200x1-host "
          "--family video --detector fused --detector fused+single-device --detector fused+single-device-tensor "
          "--detector fused+single-device-live --out results/unseen-video.json --docs docs/unseen-video.md "
          "--cache .cache/features",
          "a second benign family added after the detectors were designed (video generation with a diffusion "
          "transformer), held out of every fit", optional=True),
    Input("leads", "leads-s26.json", "results", _compare_leads(EARLIER_LEADS, "leads-s26", "5b40f3b"),
          "the committed single-device leads on the runs recorded after all of them (gapped services, "
          "throttled trainers)", optional=True),
    Input("leads_hardened", "leads-hardened.json", "results", _compare_leads(("ea3aed1", *EARLIER_LEADS), "leads-hardened", "c0f1ff1"),
          "the live single-device lead, hardened with the red team's trainers, on the runs recorded after it",
          optional=True),
    _prospective("fp8_first", "ea3aed1", "h200x1-fp8", "the single-device lead fitted before any FP8 run, on the FP8 runs"),
    _prospective("fp8_latest", "fb7d4da", "h200x1-fp8",
                 "the single-device lead refitted with the FP8 runs, on those recorded after it"),
    _prospective("vision_first", "fb7d4da", "h200x1-vision",
                 "the single-device lead fitted before any convolutional network, on the first convnet trainers and image services"),
    _prospective("vision_latest", "b341203", "h200x1-vision",
                 "the single-device lead refitted with the first two rounds of them, on the third round's new networks "
                 "(MobileNetV2, VGG) recorded after it"),
    _prospective("decode_first", "d53b2b0", "h200x1-decode",
                 "the live single-device lead, fitted before any of them, on decode configurations no run had and "
                 "small-batch single-GPU trainers"),
    _prospective("decode_second", "07f9c8e", "h200x1-decode",
                 "the single-device lead refitted with the first round of them, on the second round's services "
                 "(input attribution, offloaded and wide-batch decoding, a large embedding model) and trainers"),
    _prospective("decode_third", "d7c59e1", "h200x1-decode",
                 "the single-device lead refitted with the first two rounds, on the third round's long-context and "
                 "busy servers and long-sequence trainers"),
    Input("below_floor", "below-floor.json", "results",
          "python scripts/below_floor.py --data data/h200 --data data/h200x1 --data data/h200x1-host "
          "--data data/redteam-x1 --data data/redteam-r1 --out results/below-floor.json --docs docs/below-floor.md",
          "what the collector says about a GPU kept under the single-device lead's busy floor: a bound on its "
          "work, checked against the training runs' ledgers and FP8 and sparse matmul burns", optional=True),
    Input("fp8_training", "fp8-training.json", "results",
          "python scripts/fp8_training.py --data data/h200x1-fp8 --out results/fp8-training.json "
          "--docs docs/fp8-training.md",
          "training in FP8 beside the same models in BF16, against the FLOP estimators calibrated on BF16 "
          "training", optional=True),
    Input("pipes", "pipes.json", "results",
          "python scripts/pipes_study.py --data data/h200x1 --out results/pipes.json --docs docs/pipes.md "
          "--figure results/figures/pipes.png",
          "whether the GPU's FP32, FP16 and integer pipes tell one-GPU training from forward work", optional=True),
    Input("flops_vision", "flops-vision.json", "results",
          "python scripts/flops_one_gpu.py --calibrate data/h200 --data data/h200x1-vision "
          "--out results/flops-vision.json --docs docs/flops-vision.md --figure results/figures/flops_vision.png",
          "the FLOP estimators, calibrated on the 2-GPU node's transformers, on convolutional networks trained on "
          "one GPU", optional=True),
    Input("flops_one_gpu", "flops-one-gpu.json", "results",
          "python scripts/flops_one_gpu.py --calibrate data/h200 --data data/h200x1 --blind-after 550cd00 "
          "--out results/flops-one-gpu.json "
          "--docs docs/flops-one-gpu.md --figure results/figures/flops_one_gpu.png",
          "the FLOP estimators calibrated on the 2-GPU node, applied to a one-GPU node's training runs", optional=True),
    Input("traces", "h200", "data", "trainsentry lab run configs/campaigns/h200.yaml --data data",
          "recorded benign lab runs"),
    Input("redteam_traces", "redteam-r1", "data", "trainsentry lab run configs/campaigns/redteam-r1.yaml --data data",
          "recorded red-team runs and their benign baselines"),
)}


class MissingInputs(Exception):
    """Raised before rendering when inputs are absent; the message lists each with its command."""

    def __init__(self, missing: list[tuple[Input, Path]]):
        self.missing = missing
        lines = ["the report needs inputs that are not there:"]
        for inp, path in missing:
            lines.append(f"  - {where(inp, path)} ({inp.what}): run `{inp.command}`")
        lines.append("or build a draft with `trainsentry report --allow-missing`.")
        super().__init__("\n".join(lines))


def input_path(inp: Input, results: Path, data: Path) -> Path:
    return (results if inp.root == "results" else data) / inp.rel_path


def where(inp: Input, path: Path) -> str:
    """The file, and the entry inside it when the input is one entry of a shared file."""
    return f"{path} → {inp.entry}" if inp.entry else str(path)


def is_present(inp: Input, results: Path, data: Path) -> bool:
    p = input_path(inp, results, data)
    if inp.root == "data":  # a data root counts once it holds at least one recorded run
        return p.is_dir() and any(p.glob("*/manifest.json"))
    if not p.is_file():
        return False
    cur = json.loads(p.read_text()) if inp.entry else None
    for part in inp.entry.split("/") if inp.entry else ():
        if not isinstance(cur, dict) or part not in cur:
            return False
        cur = cur[part]
    return True
