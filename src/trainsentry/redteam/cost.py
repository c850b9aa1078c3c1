"""The adversary's cost, from the ground truth the workloads record (truth files or trace manifests).

- GPU-hours: ranks × wall time of the run (start → end), gaps and pauses included: the GPUs are
  held by the run for all of it.
- Where a loss point sits: the loss logged at step i is computed before step i's update, so it is
  placed at the tokens and GPU-hours of the first i − 1 steps (what the model had been trained on);
  this matters for runs with large steps (gradient accumulation: 8 micro-batches per step).
- Loss curves against tokens and against GPU-hours: tokens per step are the run's tokens over
  its steps (all ranks together); the GPU-hours at step i prorate the run's GPU-hours by the
  lead rank's cumulative step time, so time outside steps (split gaps, start-up) is spread evenly.
  Training losses are noisy per step, so curves are smoothed with a trailing mean. Two runs are
  compared over the same token span: the trailing window is SMOOTH_STEPS logged steps of whichever
  run has more tokens per step (a run with 8x the batch would otherwise be averaged over 8x the
  tokens, which on a falling curve lags, and reads as a higher loss).
- Loss penalty at equal tokens / equal GPU-hours: the adversary's smoothed training loss minus the
  baseline's, both interpolated linearly at the same tokens (GPU-hours): the adversary's end point,
  or the baseline's when the baseline run is the shorter one (the point is returned beside the
  penalty); never extrapolated. Training loss, not validation loss: the workloads record the loss
  of every step on the batch it trains on (random windows of the training split) but the loss on
  held-out text only once, at the end of the run, so a validation loss at equal tokens would need a
  baseline validation curve that no run records.
- GPU-hour multiplier: the GPU-hours the baseline needed to reach the adversary's final loss,
  against what the adversary spent (> 1: the baseline was cheaper).
- Validation loss: each run's held-out loss at its end, reported with the tokens and GPU-hours at
  which it was measured (no difference is taken: the two runs end at different points).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

SMOOTH_STEPS = 10
LOSS_BASIS = (f"smoothed training loss (trailing mean over the same token span in both runs: {SMOOTH_STEPS} logged "
              "steps of the run with more tokens per step) of both runs at the same "
              "tokens (GPU-hours): the adversary's end point, or the baseline's end when the baseline run is shorter; "
              "validation loss is recorded only at each run's end, so it is reported beside, not differenced")


@dataclass
class RunCost:
    run_id: str
    workload: str
    baseline: str | None
    ranks: int
    wall_s: float
    tokens: np.ndarray            # cumulative, per logged loss point
    gpu_hours: np.ndarray         # cumulative, per logged loss point
    loss: np.ndarray              # smoothed training loss per logged point
    raw_loss: np.ndarray          # training loss per logged point as recorded
    smooth_steps: int
    run_tokens: float             # tokens of the whole run (the curve's last point is before the last update)
    val_loss: float | None = None
    config: dict | None = None            # the run's resolved configuration (None: not recorded)
    baseline_config: dict | None = None   # what the named baseline's configuration must hold (extra["baseline_config"])

    @property
    def total_gpu_hours(self) -> float:
        return self.ranks * self.wall_s / 3600.0

    @property
    def total_tokens(self) -> float:
        return self.run_tokens


def load_truth(path: str | Path) -> dict:
    """A run's truth: ``<run>.truth.json`` from the worker, or a trace directory's manifest."""
    p = Path(path)
    f = p / "manifest.json" if p.is_dir() else p
    if not f.exists():
        raise FileNotFoundError(f"{path}: no truth file or manifest.json")
    raw = json.loads(f.read_text())
    if "ground_truth" not in raw:
        raise ValueError(f"{f}: no ground_truth (not a workload run)")
    labels = raw.get("labels", {})
    return {"run_id": raw["run_id"], "workload": raw.get("workload", labels.get("workload")),
            "ranks": raw.get("ranks", labels.get("ranks")), "start": raw["start"], "end": raw["end"],
            "config": raw.get("config", labels.get("config")), "ground_truth": raw["ground_truth"]}


def smooth(x: np.ndarray, n: int = SMOOTH_STEPS) -> np.ndarray:
    if x.size == 0:
        return x
    c = np.cumsum(np.insert(x.astype(np.float64), 0, 0.0))
    idx = np.arange(1, x.size + 1)
    lo = np.maximum(0, idx - n)
    return (c[idx] - c[lo]) / (idx - lo)


def smooth_span(x: np.ndarray, loss: np.ndarray, span: float) -> np.ndarray:
    """Trailing mean of the points with x in (x_i − span, x_i] (x increasing); at least the point itself."""
    if x.size == 0:
        return loss
    c = np.cumsum(np.insert(loss.astype(np.float64), 0, 0.0))
    lo = np.searchsorted(x, x - span, side="right")
    hi = np.arange(1, x.size + 1)
    lo = np.minimum(lo, hi - 1)
    return (c[hi] - c[lo]) / (hi - lo)


def _per_point(x: np.ndarray) -> float:
    return float(np.median(np.diff(x))) if x.size > 1 else float(x[0]) if x.size else 0.0


def common_span(adv: "RunCost", base: "RunCost") -> float:
    """Tokens the trailing mean covers in both runs: smooth_steps points of the coarser run."""
    return max(adv.smooth_steps, base.smooth_steps) * max(_per_point(adv.tokens), _per_point(base.tokens))


def run_cost(truth: dict, smooth_steps: int = SMOOTH_STEPS) -> RunCost:
    g = truth["ground_truth"]
    steps = int(g.get("steps") or 0)
    curve = g.get("loss_curve") or []
    if steps <= 0 or not curve:
        raise ValueError(f"{truth['run_id']}: no steps or no loss curve to score")
    ranks = len(truth.get("ranks") or []) or 1
    wall = float(truth["end"]) - float(truth["start"])
    if wall <= 0:
        raise ValueError(f"{truth['run_id']}: end is not after start")
    at = np.array([s for s, _ in curve], dtype=np.float64)
    loss = np.array([l for _, l in curve], dtype=np.float64)
    # the loss of step i is taken before its update: the model had trained on i - 1 steps
    tokens = (at - 1) * float(g["tokens"]) / steps
    times = np.cumsum(np.asarray(g.get("step_times_s") or np.ones(steps), dtype=np.float64))
    frac = np.insert(times / times[-1], 0, 0.0)
    gpu_h = ranks * wall / 3600.0 * np.interp(at - 1, np.arange(0, times.size + 1), frac)
    extra = g.get("extra") or {}
    vals = [e.get("val_loss") for e in extra.values() if isinstance(e, dict) and e.get("val_loss") is not None]
    first = lambda k: next((e.get(k) for e in extra.values() if isinstance(e, dict) and e.get(k)), None)  # noqa: E731
    return RunCost(truth["run_id"], truth.get("workload") or "", first("baseline"), ranks, wall, tokens, gpu_h,
                   smooth(loss, smooth_steps), loss, smooth_steps, float(g["tokens"]),
                   float(np.mean(vals)) if vals else None, truth.get("config"), first("baseline_config"))


def loss_at(x: np.ndarray, loss: np.ndarray, at: float) -> float | None:
    """Loss interpolated at ``at`` on the curve (x increasing); None outside its range."""
    if x.size == 0 or at < x[0] or at > x[-1]:
        return None
    return float(np.interp(at, x, loss))


def x_to_reach(x: np.ndarray, loss: np.ndarray, target: float) -> float | None:
    """First x at which the (smoothed) curve is at or below ``target``, interpolated; None if never."""
    below = np.nonzero(loss <= target)[0]
    if below.size == 0:
        return None
    i = int(below[0])
    if i == 0:
        return float(x[0])
    x0, x1, l0, l1 = x[i - 1], x[i], loss[i - 1], loss[i]
    return float(x0 + (x1 - x0) * (l0 - target) / (l0 - l1)) if l0 != l1 else float(x1)


def penalty_at_common_point(adv_x: np.ndarray, adv_loss: np.ndarray, base_x: np.ndarray,
                            base_loss: np.ndarray) -> tuple[float | None, float | None]:
    """(adversary's loss − baseline's, where) at the furthest x both curves reach; (None, None) when
    the curves do not overlap, or meet only at a curve's first point (a run that logged one loss, before
    its first update: comparing there compares two untrained models and says nothing of the cost)."""
    if adv_x.size == 0 or base_x.size == 0:
        return None, None
    at = float(min(adv_x[-1], base_x[-1]))
    if at <= max(adv_x[0], base_x[0]):
        return None, None
    a, b = loss_at(adv_x, adv_loss, at), loss_at(base_x, base_loss, at)
    return (None, None) if a is None or b is None else (a - b, at)


def compare(adv: RunCost, base: RunCost) -> dict:
    """The adversary's cost against the baseline DDP run of the same model."""
    span = common_span(adv, base)
    a_loss, b_loss = smooth_span(adv.tokens, adv.raw_loss, span), smooth_span(base.tokens, base.raw_loss, span)
    final = float(a_loss[-1])
    pen_tokens, at_tokens = penalty_at_common_point(adv.tokens, a_loss, base.tokens, b_loss)
    pen_hours, at_hours = penalty_at_common_point(adv.gpu_hours, a_loss, base.gpu_hours, b_loss)
    base_hours = x_to_reach(base.gpu_hours, b_loss, final)
    return {
        "run_id": adv.run_id, "workload": adv.workload, "baseline_run": base.run_id,
        "gpu_hours": adv.total_gpu_hours, "baseline_gpu_hours": base.total_gpu_hours,
        "tokens": adv.total_tokens, "baseline_tokens": base.total_tokens,
        "tokens_per_gpu_hour": adv.total_tokens / adv.total_gpu_hours,
        "baseline_tokens_per_gpu_hour": base.total_tokens / base.total_gpu_hours,
        "final_loss": final,
        "loss_penalty_equal_tokens": pen_tokens, "equal_tokens_at": at_tokens,
        "loss_penalty_equal_gpu_hours": pen_hours, "equal_gpu_hours_at": at_hours,
        "smoothing_tokens": span,
        "compared_at_adversary_end": bool(at_tokens is not None and at_tokens >= adv.tokens[-1]),
        "gpu_hour_multiplier": None if base_hours is None or base_hours <= 0 else float(adv.gpu_hours[-1]) / base_hours,
        "val_loss": adv.val_loss, "val_loss_tokens": adv.total_tokens, "val_loss_gpu_hours": adv.total_gpu_hours,
        "baseline_val_loss": base.val_loss, "baseline_val_loss_tokens": base.total_tokens,
        "baseline_val_loss_gpu_hours": base.total_gpu_hours,
    }


def holds(config: dict | None, required: dict | None) -> bool:
    """Whether a run's configuration has every key and value of ``required`` (nothing required: any run;
    a run whose configuration is unknown holds nothing)."""
    if not required:
        return True
    return config is not None and all(k in config and config[k] == v for k, v in required.items())


def disagreements(config: dict | None, other: dict | None) -> float:
    """How many keys the two configurations set differently (a key one of them lacks counts when the
    other sets it to anything but None); an unknown configuration is the worst match."""
    if config is None or other is None:
        return float("inf")
    return sum(1 for k in config.keys() | other.keys() if config.get(k) != other.get(k))


def closest(candidates: list["RunCost"], config: dict | None, ignore: tuple[str, ...] = (),
            exact: bool = False) -> "RunCost | None":
    """The baseline for a run of ``config`` among ``candidates``: the one whose configuration disagrees
    with it on the fewest keys (keys in ``ignore`` left out; with ``exact``, only one that disagrees on
    none), then the longest, so the curves overlap most, then by run id. None when there is none."""
    def strip(c: dict | None) -> dict | None:
        return None if c is None else {k: v for k, v in c.items() if k not in ignore}
    ranked = [(disagreements(strip(b.config), strip(config)), -b.total_tokens, b.run_id, i)
              for i, b in enumerate(candidates)]
    ranked = [r for r in ranked if not exact or r[0] == 0]
    return candidates[min(ranked)[3]] if ranked else None


# What makes two trainers the same model: a baseline of another width, depth, KV-head count, feed-forward
# width or sequence length trains another model, and tokens per GPU-hour against it are no cost. (Head
# count and batch are left out: the attacks on the FLOP estimator change them on purpose.)
MODEL_KEYS = ("d_model", "n_layers", "n_kv_heads", "d_ff", "seq_len")


def same_model(baseline: dict | None, config: dict | None) -> bool:
    """Whether a baseline run's configuration trains the adversary's model (``MODEL_KEYS`` equal; a
    key one of them lacks reads as None); an unknown configuration on either side is not refused."""
    if baseline is None or config is None:
        return True
    return all(baseline.get(k) == config.get(k) for k in MODEL_KEYS)


# DDP on one rank exchanges nothing: it is single-GPU training with the same body (workloads/train.py,
# ``_data_parallel``). For a one-rank adversary that names a DDP baseline, the runs of its one-GPU
# counterpart stand for it too (prefix of the named workload -> prefix of the counterpart's workloads).
ONE_RANK_COUNTERPARTS = {"train.ddp.": "train.single."}


def baseline_candidates(c: "RunCost", bases: dict[str, list["RunCost"]]) -> list["RunCost"]:
    """The runs that may stand as ``c``'s baseline: those of the workload it names and, when ``c`` ran on
    one rank and names a DDP workload, those of every single-GPU training workload
    (``ONE_RANK_COUNTERPARTS``); the model and ``baseline_config`` are checked by the caller."""
    if not c.baseline:
        return []
    found = list(bases.get(c.baseline, []))
    if c.ranks == 1:
        for named, counterpart in ONE_RANK_COUNTERPARTS.items():
            if c.baseline.startswith(named):
                found += [b for w, runs in sorted(bases.items()) if w.startswith(counterpart) for b in runs]
    return found


def score_costs(adv_paths: list[str | Path], base_paths: list[str | Path]) -> list[dict]:
    """Compare every adversarial run with a baseline run of the workload it names in
    ``extra["baseline"]`` whose configuration holds ``extra["baseline_config"]`` when the run names one
    (e.g. bf16 weights: the same workload was also recorded in fp32) and trains the same model
    (``same_model``: a throttled trainer resized to a service's shape has no baseline until that model
    is recorded unthrottled); a one-rank adversary also takes single-GPU runs of its model
    (``baseline_candidates``). Among those, the run whose
    configuration disagrees with the adversary's on the fewest keys (a workload is also recorded with
    overrides: another batch, depth or precision; the adversary's own keys count alike for every
    candidate), then the longest, so the curves overlap most, then by run id."""
    bases: dict[str, list[RunCost]] = {}
    for p in base_paths:
        c = run_cost(load_truth(p))
        bases.setdefault(c.workload, []).append(c)
    rows = []
    for p in adv_paths:
        c = run_cost(load_truth(p))
        named = [b for b in baseline_candidates(c, bases) if holds(b.config, c.baseline_config)]
        fits = [b for b in named if same_model(b.config, c.config)]
        if not fits:
            error = ("no baseline run of this workload" + (f" with {json.dumps(c.baseline_config, sort_keys=True)}"
                                                           if c.baseline_config and bases.get(c.baseline) else "")
                     if not named else "no baseline run of this model (" + ", ".join(
                         f"{k}={(c.config or {}).get(k)}" for k in MODEL_KEYS if (c.config or {}).get(k) is not None)
                     + f") among the runs of {c.baseline}" + (" or its single-GPU counterpart" if any(
                         b.workload != c.baseline for b in named) else ""))
            rows.append({"run_id": c.run_id, "workload": c.workload, "baseline": c.baseline,
                         "error": error, "gpu_hours": c.total_gpu_hours})
            continue
        rows.append(compare(c, closest(fits, c.config)))
    return rows


# The keys that make a configuration ZeRO-Offload (or set how its host update runs); everything else must
# match the GPU-only baseline's configuration.
OFFLOAD_KEYS = ("offload", "offload_overlap", "offload_overlap_after", "host_threads", "accum")


def median_or_none(v, digits: int | None = 4) -> float | None:
    """The median of the finite values among ``v`` (None entries skipped), to ``digits`` decimals (None:
    unrounded); None if there are none."""
    v = np.asarray([x for x in v if x is not None], dtype=float)
    v = v[np.isfinite(v)]
    if not v.size:
        return None
    m = float(np.median(v))
    return m if digits is None else round(m, digits)


def offload_name(labels: dict) -> str:
    """A ZeRO-Offload run's configuration name: its workload, with a ``host_threads`` override appended."""
    threads = (labels.get("overrides") or {}).get("host_threads")
    return labels["workload"] + (f"@host_threads={threads}" if threads else "")


def offload_costs(data: list[Path], baselines: list[Path] = ()) -> dict:
    """Per ZeRO-Offload configuration (family ``zero-offload`` in ``data``, named by
    :func:`offload_name`), medians over its runs of :func:`compare` against the GPU-only run (family
    ``single-gpu``) of the same configuration less :data:`OFFLOAD_KEYS` that :func:`closest` picks: one in ``data`` when
    there is one (recorded beside the offloaded runs, on the machine as it was then), else one in
    ``baselines``; ``slowdown``: the baseline's tokens per GPU-hour over the configuration's;
    ``host_threads``: the configured host threads (None: the workload's default)."""
    offload: dict[str, list[RunCost]] = {}
    alone: list[RunCost] = []         # GPU-only runs in data
    elsewhere: list[RunCost] = []     # GPU-only runs in baselines
    for root, is_data in [*((d, True) for d in data), *((b, False) for b in baselines)]:
        for m in sorted(Path(root).glob("*/manifest.json")):
            lab = json.loads(m.read_text())["labels"]
            if lab["family"] not in ("zero-offload", "single-gpu") or (lab["family"] == "zero-offload" and not is_data):
                continue
            truth = load_truth(m.parent)
            if not (truth["ground_truth"].get("steps") and truth["ground_truth"].get("loss_curve")):
                continue   # nothing to score (run_cost needs steps and a loss curve)
            c = run_cost(truth)
            if c.config is None:   # a run whose ground truth predates the recorded configuration
                c = replace(c, config=lab["config"])
            if lab["family"] == "zero-offload":
                offload.setdefault(offload_name(lab), []).append(c)
            else:
                (alone if is_data else elsewhere).append(c)
    cost = {}
    for name, runs in sorted(offload.items()):
        config = runs[0].config
        base = (closest(alone, config, OFFLOAD_KEYS, exact=True)
                or closest(elsewhere, config, OFFLOAD_KEYS, exact=True))
        rows = [compare(c, base) for c in runs] if base else []
        cost[name] = {"accum": config.get("accum", 1), "delayed_update": bool(config.get("offload_overlap")),
                      "host_threads": config.get("host_threads"),
                      "runs": [c.run_id for c in runs], "baseline_run": base.run_id if base else None,
                      "tokens_per_gpu_hour": median_or_none([r["tokens_per_gpu_hour"] for r in rows]),
                      "baseline_tokens_per_gpu_hour": round(rows[0]["baseline_tokens_per_gpu_hour"], 1) if rows else None,
                      "slowdown": median_or_none([r["baseline_tokens_per_gpu_hour"] / r["tokens_per_gpu_hour"] for r in rows]),
                      "gpu_hour_multiplier": median_or_none([r["gpu_hour_multiplier"] for r in rows]),
                      "loss_penalty_equal_tokens": median_or_none([r["loss_penalty_equal_tokens"] for r in rows])}
    return cost
