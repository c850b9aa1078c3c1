"""The GPM pipe signals: their window features (features.activity.pipe_activity) and the study that
decided they are not a detector input (scripts/pipes_study.py), on synthetic traces with a known answer."""

from __future__ import annotations

import json
import runpy
from pathlib import Path

import numpy as np

from trainsentry.features.activity import pipe_activity
from fakes.gpu_trace import gpu_trace

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "pipes_study.py"


def test_pipe_features_are_window_means_and_shares_of_sm_activity():
    n = 80
    f = pipe_activity({"gpm_fp32_util_pct": np.full(n, 6.0), "gpm_integer_util_pct": np.full(n, 9.0),
                       "gpm_fp16_util_pct": np.full(n, np.nan), "gpm_sm_util_pct": np.full(n, 60.0),
                       "gpm_tensor_util_pct": np.r_[np.full(n // 2, 40.0), np.full(n // 2, 60.0)]})
    assert f["gpm_fp32_util_pct"] == 6.0 and f["gpm_tensor_util_pct"] == 50.0
    assert f["gpm_fp32_util_pct.per_sm"] == 0.1 and f["gpm_integer_util_pct.per_sm"] == 0.15
    assert "gpm_fp16_util_pct" not in f and "gpm_fp16_util_pct.per_sm" not in f   # not recorded: absent
    idle = pipe_activity({"gpm_fp32_util_pct": np.zeros(n), "gpm_sm_util_pct": np.zeros(n)})
    assert idle["gpm_fp32_util_pct"] == 0.0 and "gpm_fp32_util_pct.per_sm" not in idle   # no SM activity to share


def _trace(root: Path, run_id: str, cls: str, fp32: float, precision: str | None, pipes: bool = True,
           fp16: float = 0.0, config: dict | None = None, family: str = "f", tensor: float = 50.0,
           dram: float = 30.0) -> None:
    values = {"power_mw": 650_000, "gpu_util_pct": 97.0, "gpm_sm_util_pct": 90.0, "gpm_tensor_util_pct": tensor,
              "gpm_dram_bw_util_pct": dram}
    if pipes:
        values.update(gpm_fp32_util_pct=lambda t: fp32 + 0.1 * np.sin(t), gpm_fp16_util_pct=fp16,
                      gpm_integer_util_pct=9.0)
    extra = {"param_dtype": precision} if cls == "training" else {"weights_dtype": f"torch.{precision}"}
    gpu_trace(root, run_id, cls, family, values, extra, config)


def test_the_study_finds_a_separating_pipe_and_says_when_counter_cases_erase_it(tmp_path):
    main = runpy.run_path(str(SCRIPT))["main"]
    data = tmp_path / "d"
    _trace(data, "train-a", "training", 20.0, "fp32")
    _trace(data, "train-b", "training", 21.0, "fp32")
    _trace(data, "embed-a", "inference", 3.0, "bfloat16")
    _trace(data, "old", "inference", 3.0, "bfloat16", pipes=False)   # recorded before the pipe signals
    args = ["--data", str(data), "--out", str(tmp_path / "p.json"), "--docs", str(tmp_path / "p.md"),
            "--figure", str(tmp_path / "p.png")]
    assert main(args) == 0
    res = json.loads((tmp_path / "p.json").read_text())
    assert res["runs"] == 3                                       # the old trace is left out
    sig = res["separation"]["without_counter_cases"]["signals"]["gpm_fp32_util_pct"]
    assert sig["window_auc"] == 1.0 and sig["run_auc"] == 1.0
    assert res["separation"]["without_counter_cases"]["signals"]["gpm_integer_util_pct"]["window_auc"] == 0.5
    assert "`gpm_fp32_util_pct`" in res["reading"] and "candidate" in res["reading"]
    assert res["separation"]["training_vs_inference"]["signals"]["gpm_fp32_util_pct"]["window_auc"] == 1.0
    assert "FP32 pipe is higher, as the hypothesis said" in res["reading"]
    # every group's integer pipe reads above 0, so none is singled out
    assert "`gpm_integer_util_pct` read above 0 only" not in res["reading"]
    assert (tmp_path / "p.png").stat().st_size > 0 and "| train-a | training | mixed |" in (tmp_path / "p.md").read_text()
    # pure bf16 training as quiet as the forward pass: with it the FP32 pipe no longer separates
    _trace(data, "train-bf16", "training", 3.0, "bf16", fp16=0.01)
    _trace(data, "train-bf16-b", "training", 2.9, "bf16", fp16=0.004)
    assert main(args) == 0
    res = json.loads((tmp_path / "p.json").read_text())
    assert res["separation"]["without_counter_cases"]["signals"]["gpm_fp32_util_pct"]["window_auc"] == 1.0
    assert res["separation"]["with_counter_cases"]["signals"]["gpm_fp32_util_pct"]["window_auc"] < 0.9
    assert "No signal separates" in res["reading"]
    # a pipe busy in one group's windows only is named, with its share and range
    assert res["groups"]["training (bf16)"]["above_zero"]["gpm_fp16_util_pct"] == 1.0
    assert res["groups"]["training (mixed)"]["above_zero"]["gpm_fp16_util_pct"] == 0.0
    assert "`gpm_fp16_util_pct` read above 0 only in training (bf16): in 100 % of its busy windows (2 runs" in res["reading"]
    # fp16 serving reads the FP16 pipe higher still: the lead is named as not specific to training
    _trace(data, "embed-fp16", "inference", 3.0, "float16", fp16=2.5)
    assert main(args) == 0
    res = json.loads((tmp_path / "p.json").read_text())
    assert "read above 0 only in" not in res["reading"]
    assert ("`gpm_fp16_util_pct` read above 0 in inference (fp16) (100 % of busy windows, run medians 2.5000–2.5000 % "
            "of cycles) and training (bf16)") in res["reading"]
    assert res["reading"].endswith("highest in inference (fp16): not specific to training.")


def test_a_pipe_read_highest_in_training_is_said_so_with_every_group_named(tmp_path):
    main = runpy.run_path(str(SCRIPT))["main"]
    data = tmp_path / "d"
    _trace(data, "train-mixed", "training", 5.0, "fp32")                    # reads 0
    _trace(data, "train-bf16", "training", 3.0, "bf16", fp16=0.02)
    _trace(data, "embed-bf16", "inference", 3.0, "bfloat16", fp16=0.001)
    _trace(data, "embed-fp16", "inference", 3.0, "float16", fp16=0.005)
    args = ["--data", str(data), "--out", str(tmp_path / "p.json"), "--docs", str(tmp_path / "p.md"),
            "--figure", str(tmp_path / "p.png")]
    assert main(args) == 0
    reading = json.loads((tmp_path / "p.json").read_text())["reading"]
    assert ("`gpm_fp16_util_pct` read above 0 in inference (bf16) (100 % of busy windows, run medians 0.0010–0.0010 % "
            "of cycles), inference (fp16) (100 %") in reading
    assert "and training (bf16) (100 % of busy windows" in reading
    assert reading.endswith("highest in training (bf16).")


def test_matched_shapes_put_training_beside_other_work_of_its_shape(tmp_path):
    """LoRA at an attribution configuration's exact shape (a preset's width and depth, ``text_len``
    tokens) is paired with it; a shape without both classes is not listed; LoRA on query and value only
    is its own group; each comparison counts the shared shapes where training is above and says whether
    the ranges overlap across shapes."""
    main = runpy.run_path(str(SCRIPT))["main"]
    data = tmp_path / "d"
    gpt1b = {"model": "gpt1b", "seq_len": 1025, "text_len": 1024, "batch": 16}            # 2048 x 20
    lora1b = {"d_model": 2048, "n_layers": 20, "batch": 16, "seq_len": 1024, "lora_rank": 8}
    _trace(data, "attr-1b", "inference", 4.0, "bfloat16", config=gpt1b, family="attribute", tensor=60.0, dram=27.0)
    _trace(data, "lora-1b", "training", 4.0, "bf16", family="lora", tensor=45.0, dram=40.0, config=lora1b)
    _trace(data, "lora-qv-1b", "training", 4.0, "bf16", family="lora", tensor=58.0, dram=26.0,
           config={**lora1b, "lora_targets": ["attn.q", "attn.v"]})
    _trace(data, "lora-top-1b", "training", 4.0, "bf16", family="lora", tensor=61.0, dram=26.0,
           config={**lora1b, "lora_targets": ["attn.q", "attn.v"], "lora_layers": 4})
    _trace(data, "full-1b", "training", 4.0, "bf16", family="single-gpu", tensor=66.0, dram=26.0,
           config={"d_model": 2048, "n_layers": 20, "batch": 16, "seq_len": 1024})
    small = {"model": "gpt125m", "seq_len": 513, "text_len": 512, "batch": 64}          # 768 x 12
    _trace(data, "attr-125m", "inference", 4.0, "bfloat16", config=small, family="attribute", tensor=42.0, dram=40.0)
    _trace(data, "lora-125m", "training", 4.0, "bf16", family="lora", tensor=25.0, dram=53.0,
           config={"d_model": 768, "n_layers": 12, "batch": 64, "seq_len": 512, "lora_rank": 8})
    _trace(data, "lora-alone", "training", 4.0, "bf16", family="lora",        # no other run of this shape
           config={"d_model": 1024, "n_layers": 4, "batch": 8, "seq_len": 256, "lora_rank": 8})
    args = ["--data", str(data), "--out", str(tmp_path / "p.json"), "--docs", str(tmp_path / "p.md"),
            "--figure", str(tmp_path / "p.png")]
    assert main(args) == 0
    res = json.loads((tmp_path / "p.json").read_text())
    shapes = [(g["shape"]["width"], g["shape"]["layers"], g["shape"]["batch"], g["shape"]["tokens"]) for g in res["matched"]]
    assert shapes == [(768, 12, 64, 512), (2048, 20, 16, 1024)]
    big = {r["run"]: r for r in res["matched"][1]["runs"]}
    assert set(big) == {"attr-1b", "lora-1b", "lora-qv-1b", "lora-top-1b", "full-1b"}
    assert abs(big["attr-1b"]["dram_per_tensor"] - 27.0 / 60.0) < 1e-9
    assert big["lora-qv-1b"]["group"] == "lora (q, v)" and big["lora-1b"]["group"] == "lora"
    assert big["lora-top-1b"]["group"] == "lora (q, v; last 4 of 20 blocks)"
    comps = {(c["training"], c["other"]): c for c in res["matched_summary"]["comparisons"]}
    assert set(comps) == {("lora", "inference attribute"), ("lora (q, v)", "inference attribute"),
                          ("lora (q, v; last 4 of 20 blocks)", "inference attribute"), ("single-gpu", "inference attribute")}
    lora = comps[("lora", "inference attribute")]
    assert (lora["shapes"], lora["above"], lora["overlap"]) == (2, 2, True)   # 0.89–2.12 against 0.45–0.95
    assert lora["training_ratio"] == [40.0 / 45.0, 53.0 / 25.0]
    assert (comps[("lora (q, v)", "inference attribute")]["above"], comps[("single-gpu", "inference attribute")]["above"]) == (0, 0)
    reading = res["matched_reading"]
    assert "lora training read a higher DRAM ÷ tensor ratio than inference attribute in 2 of the 2 shape(s)" in reading
    assert "only beside a run of the same shape" in reading
    text = (tmp_path / "p.md").read_text()
    assert "| 2048 × 20, 16 × 1024 | lora-1b | training | lora-1b rank 8 | bf16 | 97 | 45.00 | 40.00 | 0.89 |" in text
    assert "| lora-qv-1b | training | lora-qv-1b rank 8 on q, v |" in text


def test_matched_shapes_say_when_the_ratio_parts_them_even_across_shapes(tmp_path):
    main = runpy.run_path(str(SCRIPT))["main"]
    data = tmp_path / "d"
    gpt1b = {"model": "gpt1b", "seq_len": 1025, "text_len": 1024, "batch": 16}
    _trace(data, "attr-1b", "inference", 4.0, "bfloat16", config=gpt1b, family="attribute", tensor=60.0, dram=27.0)
    _trace(data, "lora-1b", "training", 4.0, "bf16", family="lora", tensor=45.0, dram=40.0,
           config={"d_model": 2048, "n_layers": 20, "batch": 16, "seq_len": 1024, "lora_rank": 8})
    args = ["--data", str(data), "--out", str(tmp_path / "p.json"), "--docs", str(tmp_path / "p.md"),
            "--figure", str(tmp_path / "p.png")]
    assert main(args) == 0
    res = json.loads((tmp_path / "p.json").read_text())
    (c,) = res["matched_summary"]["comparisons"]
    assert (c["shapes"], c["above"], c["overlap"]) == (1, 1, False)
    assert "apart even across shapes" in res["matched_reading"] and "only beside" not in res["matched_reading"]
