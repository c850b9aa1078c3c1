"""8. Recommendations, each grounded in a result; where the result is not measured yet, the text says
which measurement decides it rather than assuming an outcome."""

import html

import numpy as np

from ..ranking import rank
from .s5_redteam import ONE_GPU, SINGLE, one_gpu_missed
from .s6_ranking import CHEAP
from ..summary import detector_vs_targets, meets_detector_targets, primary_detector, sec

TITLE = "Recommendations"
INPUTS = ("gpu_check", "detector", "redteam", "simulator", "familiarity", "one_gpu")


def _red_team_one_gpu(ctx) -> str:
    """One sentence from results/redteam-x1.json (optional): what the single-device trees still missed
    of the red team's one-GPU strategies in the last round, and at what cost to the adversary."""
    if not ctx.has(ONE_GPU) or ctx.value(ONE_GPU, "protocol").get("primary_detector") != SINGLE:
        return ""
    missed = one_gpu_missed(ctx)
    total = ctx.num(ONE_GPU, "data/strategy_settings", "int")
    if not missed:
        return (f" Against the red team on one GPU ({sec('s5_redteam')}) they caught all {total} "
                f"strategy settings in the last round; as the live verdict's single-device path they raise its alert.")
    costed = [r for r in missed if r.get("gpu_hour_overhead") is not None]
    cost = (", at " + ctx.spread([1 + r["gpu_hour_overhead"] for r in costed], "x",
                                 [(ONE_GPU, r["_path"] + "/gpu_hour_overhead") for r in costed])
            + " the GPU-hours per token of DDP") if costed else ""
    return (f" Against the red team on one GPU ({sec('s5_redteam')}) they still missed "
            f"{ctx.derived(len(missed), 'int', [(ONE_GPU, 'rounds')])} of {total} strategy settings in the last "
            f"round{cost}; those runs raise no alert in the live verdict either.")


def _backward_without_update(ctx) -> str:
    """Where the one-GPU node recorded input attribution (a backward pass over frozen weights, no update),
    how often the activity trees fitted on the two-GPU node took it for training (results/one_gpu.json)."""
    att = (ctx.value("one_gpu", "frozen/fused+single-device/per_family") or {}).get("attribute")
    if not att or not att.get("test_instances"):
        return ""
    path = "fused+single-device/per_family/attribute"
    added = (ctx.value("one_gpu", "added/fused+single-device/per_family") or {}).get("attribute")
    return (f" Work that runs a backward pass without updating a weight reads the same: input attribution on a "
            f"frozen model, recorded on that node, was taken for training in "
            f"{ctx.num('one_gpu', 'frozen/' + path + '/alerted_frac', 'pct')} of its "
            f"{ctx.num('one_gpu', 'frozen/' + path + '/test_instances', 'int')} runs by the trees that never saw it"
            + (f", and in {ctx.num('one_gpu', 'added/' + path + '/alerted_frac', 'pct')} of its test appearances "
               f"with its other configurations in the fit" if added and added.get("test_instances") else "")
            + "." + _matched_shapes(ctx))


def _matched_shapes(ctx) -> str:
    """Fine-tuning adapters on a frozen base is the same backward pass as attribution, plus the adapters'
    low-rank products and optimizer step: what the one-GPU node showed at equal shapes (results/pipes.json
    ``matched_summary``, scripts/pipes_study.py; absent from a file written before it), said in one of
    three ways (above at every shared shape, at some, at none) and, where above everywhere, whether the
    ranges still overlap across shapes."""
    robust = "; evidence that weights change (attestation of the weights' memory, for instance) would"
    summ = ((ctx.load("pipes") or {}).get("matched_summary") or {}) if ctx.has("pipes") else {}
    comps = summ.get("comparisons") or []
    i = next((i for i, c in enumerate(comps) if c["training"] == "lora" and c["other"] == "inference attribute"), None)
    if i is None:
        return (" It is the same computation as fine-tuning adapters on a frozen base, so no activity counter is "
                "likely to part them" + robust + ".")
    c, path = comps[i], f"matched_summary/comparisons/{i}"
    n = lambda k, fmt="int": ctx.num("pipes", f"{path}/{k}", fmt)  # noqa: E731
    said = (f" Fine-tuning adapters on a frozen base runs the same backward pass plus the adapters' low-rank "
            f"products and optimizer step; run at attribution's exact shapes, it read a higher ratio of DRAM to "
            f"tensor-core activity than attribution in {n('above')} of the {n('shapes')} shapes they share "
            f"(adapters {n('training_ratio/0', 'f2')} to {n('training_ratio/1', 'f2')}, attribution "
            f"{n('other_ratio/0', 'f2')} to {n('other_ratio/1', 'f2')}). ")
    if c["above"] == c["shapes"]:
        said += ("The ranges overlap across shapes, so that parts them only beside a run of the same shape, "
                 "which an inspector does not know" if c["overlap"] else
                 "Those few shapes are apart even across shapes, a lead to test on shapes not yet recorded")
    elif c["above"]:
        said += "So even at equal shapes it parts them only sometimes"
    else:
        said += "So even at equal shapes it does not part them"
    return said + _fewer_adapters(ctx, comps) + robust + " part them whatever the kernels."


def _fewer_adapters(ctx, comps: list[dict]) -> str:
    """The LoRA variants of the matched shapes (adapters on some projections, or in the top blocks only:
    pipes_study's groups "lora (...)") beside attribution: at how many shared shapes each read the higher
    ratio. An adversary chooses the variant, so a gap that closes as adapters are fewer is no separator."""
    rows = [(j, c) for j, c in enumerate(comps)
            if c["training"].startswith("lora (") and c["other"] == "inference attribute" and c["shapes"]]
    if not rows:
        return ""
    each = []
    for j, c in rows:
        path = f"matched_summary/comparisons/{j}"
        each.append(f"{ctx.derived(c['training'].removeprefix('lora (').removesuffix(')'), 'str', [('pipes', path + '/training')])} "
                    f"above at {ctx.num('pipes', path + '/above', 'int')} of {ctx.num('pipes', path + '/shapes', 'int')}")
    closes = any(c["above"] < c["shapes"] for _, c in rows)
    return ((". With fewer adapters the gap closes (adapters on " if closes else
             ". With fewer adapters it holds (adapters on ") + "; ".join(each) + ")")


def _pipes(ctx) -> str:
    """One sentence from results/pipes.json (optional): the non-tensor pipes as a backward-pass signal,
    its wording chosen from the numbers (as scripts/pipes_study.py's own reading is)."""
    if not ctx.has("pipes"):
        return ""
    t = ctx.term
    sep = ctx.value("pipes", "separation")
    strong = ctx.value("pipes", "candidates")   # the study's own criterion (scripts/pipes_study.py)
    fp32 = sep["training_vs_inference"]["signals"]["gpm_fp32_util_pct"]["window_auc"]
    path = "separation/training_vs_inference"
    way = "lower, not higher" if fp32 is not None and fp32 < 0.5 else "higher"
    sentence = (f" The GPU's own {t('FP32')}, {t('FP16')} and integer pipe counters were tried as a signal of "
                "training on one device and "
                + ("one separated in this data, a candidate to validate" if strong else "did not give one")
                + f" ({ctx.num('pipes', path + '/runs', 'int')} busy one-GPU runs, "
                f"{ctx.num('pipes', path + '/training_runs', 'int')} of them training: against inference, "
                f"mixed-precision training's {t('FP32')} pipe read {way}, window AUC "
                f"{ctx.num('pipes', path + '/signals/gpm_fp32_util_pct/window_auc', 'f2')})")
    # where the FP16 pipe read above zero, as the study stored it (scripts/pipes_study.py above_zero_in)
    fp16 = ctx.value("pipes", "above_zero_in")["gpm_fp16_util_pct"]
    on, top = fp16["groups"], fp16["highest"]
    if on == ["training (bf16)"] and fp16["of"] > 1:
        share = "groups/training (bf16)/above_zero/gpm_fp16_util_pct"
        sentence += (f"; the {t('FP16')} pipe read above zero only in pure {t('bf16')} training "
                     f"({ctx.num('pipes', share, 'pct')} of its busy windows), a lead to test against "
                     f"half-precision serving")
    elif "training (bf16)" in on and 1 < len(on) < fp16["of"]:
        # the lead was tested and read above zero in benign work too (the study's own condition): say so,
        # and where it read highest
        sentence += (f"; the {t('FP16')} pipe, above zero in pure {t('bf16')} training, read above zero in "
                     f"{ctx.derived(len(on) - 1, 'int', [('pipes', 'above_zero_in/gpm_fp16_util_pct/groups')])} other "
                     f"group(s) of runs too, "
                     + ("highest in one that does not train: no training signal" if not top.startswith("training")
                        else "highest in training, but not in training alone"))
    return sentence + "."


# what each benign family that loads PCIe both ways is, for the host-link item (a family not listed is named only)
HOST_LINK_WORK = {
    "inference kvswap": "a chat server keeping its conversations' caches in host memory between turns",
    "other stream": "a signal-processing service streaming blocks in and results out",
}


# what the benign families the host witness can see do on the host (a family not listed is named only)
HOST_WORK = {"other stream": "in its detector configurations, a service that computes on the host what the GPU returns",
             "inference rag": "retrieval-augmented generation searching its index on the host's cores",
             "inference specdec": "speculative decoding drafting on the host's cores",
             "inference agent": "a tool-calling agent whose tool queries a database on several host threads"}


def _host_link(ctx) -> str:
    """One item from results/offload-gate.json (optional): training whose optimizer moved to the host
    passes the exchange gate on PCIe; whether benign work passes it too (then the gate cannot alert
    alone), whether the fused detector's trees followed, and what the offloading costs."""
    fams = ctx.value("offload_gate", "by_family") or {}
    zero = fams.get("training zero-offload")
    if not zero:
        return ""
    key = "by_family/training zero-offload"
    others = {f: v for f, v in fams.items() if f != "training zero-offload"}
    benign = {f: v for f, v in others.items() if not f.startswith("training")}
    src = [("offload_gate", "by_family")]
    passing = sum(v["passing_runs"] for v in benign.values())
    total = ctx.derived(sum(v["runs"] for v in benign.values()), "int", src)
    fused = (ctx.value("one_gpu", "frozen/fused/per_family") or {}).get("zero-offload") if ctx.has("one_gpu") else None
    verdict = (f"the fused detector, whose trees learned training from exchanges over NVLink, alerted on "
               f"{ctx.num('one_gpu', 'frozen/fused/per_family/zero-offload/alerted_frac', 'pct')} of them"
               if fused else "the fused detector's trees, which learned training from exchanges over NVLink, "
               "decide whether it alerts")
    cost = {w: c for w, c in ((ctx.load("offload_gate") or {}).get("cost") or {}).items() if c.get("slowdown")}
    plain = [c["slowdown"] for c in cost.values() if c.get("accum", 1) == 1]
    accum = [c["slowdown"] for c in cost.values() if c.get("accum", 1) > 1]
    csrc = [("offload_gate", "cost")]
    price = "at the price of the host's update in every step"
    if plain:
        price = (f"at a price: the same configurations trained on the GPU alone ran "
                 f"{ctx.spread(plain, 'x', csrc)} as many tokens per GPU-hour"
                 + (f" ({ctx.spread(accum, 'x', csrc)} with gradient accumulation, several micro-batches per "
                    f"exchange)" if accum else ""))
    item = (f"<li><b>Watch the host beside the host link.</b> Training whose optimizer runs on the host "
            f"(ZeRO-Offload: gradients out and weights back over PCIe at every step) passed the exchange gate in "
            f"at least half its windows in {ctx.num('offload_gate', key + '/passing_runs', 'int')} of its "
            f"{ctx.num('offload_gate', key + '/runs', 'int')} runs on the one-GPU node, and {verdict}: any "
            f"framework that offloads its optimizer offers this evasion, {price}. ")
    if not passing:
        lacking = not any(f in benign for f in HOST_LINK_WORK)
        return item + (f"None of that node's {total} benign runs passed the gate"
                       + (", but none of them moved as many bytes into the GPU as out of it; until benign work "
                          "that does is in the corpus, the gate's PCIe evidence cannot be trusted to alert alone"
                          if lacking else "") + ".</li>")
    named = []
    for f, v in sorted(benign.items()):
        if not v["passing_runs"]:
            continue
        cls, fam = f.split(" ", 1)
        what = f": {HOST_LINK_WORK[f]}" if f in HOST_LINK_WORK else ""
        named.append(f"{ctx.num('offload_gate', f'by_family/{f}/passing_runs', 'int')} of "
                     f"{ctx.num('offload_gate', f'by_family/{f}/runs', 'int')} {html.escape(fam)} runs "
                     f"({html.escape(cls)}{html.escape(what)})")
    return item + (f"The gate alone cannot be the answer: "
                   f"{ctx.derived(passing, 'int', src)} of the node's {total} benign runs passed it too ("
                   + "; ".join(named) + "). What sets the optimizer apart may be on the host: the update is "
                   "arithmetic on every byte that came down, done by the CPU between the download and the upload, "
                   "where a cache tier mostly copies (a real service also spends host CPU on its own work). "
                   + (_host_witness(ctx) if ctx.has("host_study") else
                      "Host CPU energy and utilisation sampled beside the PCIe counters might separate them; this "
                      "project has not measured them yet.") + "</li>")


def _host_witness(ctx) -> str:
    """What the host source measured (results/host-study.json): which benign runs the CPU witness saw,
    which ZeRO-Offload configurations it did not see and at what cost, and what the committed detectors
    plus gate and witness caught."""
    res = ctx.load("host_study")
    fams = res.get("by_family") or {}
    benign = {f: v for f, v in fams.items() if not f.startswith("training")}
    src = [("host_study", "by_family")]
    n_benign = ctx.derived(sum(v["runs"] for v in benign.values()), "int", src)
    seen = {f: v for f, v in benign.items() if v["witnessed"]}
    quiet = [v["busy_cores_median"] for v in (res.get("runs") or {}).values()
             if not v["class"].startswith("training") and not v["witnessed"] and v["busy_cores_median"] is not None]
    out = "The agent's host source (CPU time from /proc/stat) measured it: "
    if quiet:
        rsrc = [("host_study", "runs")]
        out += (f"the benign runs it did not witness kept a median of "
                f"{ctx.derived(float(np.median(quiet)), 'g3', rsrc)} core(s) busy (a GPU program's launching thread "
                f"spins while it waits), and ")
    if seen:
        named = "; ".join(f"{ctx.num('host_study', f'by_family/{f}/witnessed', 'int')} of "
                          f"{ctx.num('host_study', f'by_family/{f}/runs', 'int')} {html.escape(f.split(' ', 1)[1])} runs"
                          + (f": {HOST_WORK[f]}" if f in HOST_WORK else "") for f in sorted(seen))
        out += (f"the witness ({ctx.num('host_study', 'busy_cores', 'g3')} or more cores busy in at least "
                f"{ctx.num('host_study', 'busy_share', 'pct')} of the tenth-of-a-second bins) saw "
                f"{ctx.derived(sum(v['witnessed'] for v in seen.values()), 'int', src)} of the {n_benign} benign "
                f"runs ({named}). ")
    else:
        out += f"the witness saw none of the {n_benign} benign runs. "
    hidden = {k: v for k, v in (res.get("offload") or {}).items() if not v["witnessed_runs"] and v.get("slowdown")}
    if hidden:
        osrc = [("host_study", "offload")]
        plain = [v["slowdown"] for v in hidden.values() if v.get("accum", 1) == 1]
        accum = [v["slowdown"] for v in hidden.values() if v.get("accum", 1) > 1]
        threads = sorted({v["host_threads"] for v in hidden.values() if v.get("host_threads")})
        mult = [v["gpu_hour_multiplier"] for v in hidden.values() if v.get("gpu_hour_multiplier")]
        out += ("The evader has an answer: an update on "
                + (" or ".join(ctx.derived(t_, "int", osrc) for t_ in threads) + " host thread(s)" if threads
                   else "fewer host threads")
                + " was never witnessed"
                + (f", at {ctx.spread(plain, 'x', osrc)} fewer tokens per GPU-hour than on the GPU alone" if plain else "")
                + (f" ({ctx.spread(accum, 'x', osrc)} with gradient accumulation)" if accum else "")
                + (f" and {ctx.spread(mult, 'x', osrc)} the GPU-hours to reach the same loss" if mult else "") + ". ")
    zero = fams.get("training zero-offload")
    if zero and "stack" in zero:
        key = "by_family/training zero-offload"
        out += (f"The committed detectors alerted on {ctx.num('host_study', key + '/detectors', 'int')} of the "
                f"{ctx.num('host_study', key + '/runs', 'int')} ZeRO-Offload runs recorded with the host source, and with gate and witness beside "
                f"them on {ctx.num('host_study', key + '/stack', 'int')}, at the price of "
                f"{ctx.derived(sum(v.get('stack', 0) for v in benign.values()), 'int', src)} false alerts in the "
                f"{n_benign} benign runs. ")
    return out + ("So the host's CPU is evidence to show beside a verdict, not an alert of its own: it separates "
                  "an optimizer on the host from copies, not from other host computation, and an evader who pays "
                  "for fewer threads hides it.")


def render(ctx, figs) -> str:
    c, t = ctx.cite, ctx.term
    items = []
    if ctx.has("gpu_check") and ctx.value("gpu_check", "within_1pct") and ctx.value("gpu_check", "send_direction_visible"):
        items.append(f"<li><b>Read interconnect counters, not only activity.</b> The NVLink counters matched "
                     f"the bytes handed to NCCL within {ctx.num('gpu_check', 'max_abs_rel_error', 'pctg')} and "
                     f"told the sending direction from the receiving one, so a regime can rely on them as a "
                     f"primary signal, which the activity-only classifier of {c('rt')} did not have.</li>")
    else:
        items.append("<li><b>Interconnect counters.</b> Whether they can be relied on depends on the counter "
                     "check. " + (ctx.missing("gpu_check") if not ctx.has("gpu_check") else
                                  "The check did not find them within a percent, or could not tell the sending "
                                  "direction; treat them as supporting evidence only.")
                     + "</li>")
    if ctx.has("detector"):
        name = primary_detector(ctx)
        dets = ctx.value("detector", "detectors")
        d = dets[name]
        if meets_detector_targets(ctx, name):
            items.append(f"<li><b>Deploy the {html.escape(name)} detector.</b> On this data it reaches "
                         f"{detector_vs_targets(ctx, name)}.</li>")
        else:
            items.append(f"<li><b>Do not act on single alerts yet; record more benign variety first.</b> The best "
                         f"detector so far, {html.escape(name)}, reaches {detector_vs_targets(ctx, name)}. At that "
                         f"false-positive rate an inspector would chase many benign inference jobs"
                         + (f", and a training family it never saw can pass unnoticed (worst held-out family: "
                            f"{ctx.num('detector', f'detectors/{name}/lofo_min_family_detection', 'pct')} detected)"
                            if (d.get("lofo_min_family_detection") or 0) < 1 else "")
                         + f". Use its verdicts to pick jobs for closer inspection, and finish the benign campaign before "
                         f"relying on it.</li>")
    else:
        items.append("<li><b>Which detector to deploy</b> is decided by the benign evaluation. "
                     + ctx.missing("detector") + "</li>")
    ranked = rank(ctx.load("redteam")) if ctx.has("redteam") else []
    if ranked and ranked[0]["score"] > 0:
        top = ranked[0]
        p = top["_path"]
        items.append(f"<li><b>Close the cheapest hole first.</b> The highest-scoring evasion was "
                     f"<b>{html.escape(top['name'])}</b> ({ctx.num('redteam', p + '/run_detection', 'pct')} of its "
                     f"runs detected in its last round, at "
                     f"{ctx.derived(1 + top['gpu_hour_overhead'], 'x', [('redteam', p + '/gpu_hour_overhead')])} the "
                     f"GPU-hours per token of DDP). Detection should cover its signature ({sec('s6_ranking')} says "
                     f"what its telemetry looked like) before strategies that cost the adversary more"
                     + ("; since it evaded at a large cost per token, a regime that also bounds compute limits what "
                        "it can gain.</li>" if top["gpu_hour_overhead"] > CHEAP else
                        "; it cost the adversary little or nothing per token, so it is the hole to close first.</li>"))
    elif ranked:
        items.append("<li><b>Keep the red team going.</b> No recorded strategy setting evaded the detectors in its "
                     "last round; most planned strategies are not recorded yet, and the ranking will say which hole "
                     "to close once they are.</li>")
    else:
        items.append("<li><b>Which hole to close first</b> follows from the red-team ranking. "
                     + (ctx.missing("redteam") if not ctx.has("redteam") else "No strategy has both a detection rate "
                        "and a cost yet.") + "</li>")
    if ctx.has("familiarity"):
        lofo = ctx.value("familiarity", "leave_one_family_out")
        red = ctx.value("familiarity", "red_team") or {}
        missed = [rid for rid, v in red.items() if v.get("fused_round1_run_detection") == 0]
        flagged = [rid for rid in missed if (red[rid]["unfamiliar"] or 0) >= 0.5]
        cp = (f" (for example {ctx.num('familiarity', 'leave_one_family_out/cp/unfamiliar', 'pct')} of the "
              f"windows of context-parallel prefill when that family is left out of the fit)" if "cp" in lofo else "")
        single = (f"; it is no safety net: held-out single-GPU training, which the fused detector misses, reads unfamiliar "
                  f"in only {ctx.num('familiarity', 'leave_one_family_out/single-gpu/unfamiliar', 'pct')} of its "
                  f"windows" if "single-gpu" in lofo else "")
        items.append(f"<li><b>Say when a verdict extrapolates.</b> A learned detector is confident on workloads it "
                     f"never saw; a distance to the fitting data flags some of them{cp}, while calling "
                     f"{ctx.num('familiarity', 'new_configs/unfamiliar', 'pct')} of the windows of new settings of known "
                     f"workloads unfamiliar{single}. Of the "
                     f"{ctx.derived(len(missed), 'int', [('familiarity', 'red_team'), ('redteam', 'rounds/0')])} "
                     f"red-team runs the fused detector missed, "
                     f"{ctx.derived(len(flagged), 'int', [('familiarity', 'red_team')])} were unfamiliar in most "
                     f"windows: route unfamiliar workloads to human review rather than trusting either verdict.</li>")
    if ctx.has("one_gpu") and {"fused", "fused+single-device"} <= set(ctx.value("one_gpu", "frozen")):
        n = lambda path, fmt="pct": ctx.num("one_gpu", path, fmt)  # noqa: E731
        items.append(f"<li><b>Treat training on one device as unverified by the exchange.</b> On a one-GPU node "
                     f"({n('target/runs_by_class/training', 'int')} training and "
                     f"{n('target/runs_by_class/inference', 'int')} inference runs, most of them settings the "
                     f"detectors never saw), the fused detector fitted on the two-GPU node found "
                     f"{n('frozen/fused/training_detection')} of the training: its gate waits for a gradient "
                     f"exchange that one device never makes. The same trees on the busiest GPU's activity alone "
                     f"found {n('frozen/fused+single-device/training_detection')} with "
                     f"{n('frozen/fused+single-device/inference_fpr')} false alerts on that node's inference, but "
                     f"they also take input attribution and batched forward work (embedding) for training, so the live "
                     f"collector calls training through them only where a GPU is busy and the window lies inside the trees' domain, and "
                     f"names that path in the verdict, its evidence and its alert.{_red_team_one_gpu(ctx)} A regime that must "
                     f"see small fine-tuning jobs needs a signal of the weight update that these activity counters "
                     f"do not give.{_backward_without_update(ctx)}"
                     f"{_pipes(ctx)}</li>")
    if ctx.has("offload_gate"):
        items.append(_host_link(ctx))
    if ctx.has("simulator"):
        rows = ctx.value("simulator", "traffic_free")
        net_only = [i for i, r in enumerate(rows) if r["seen_by"] == ["network"]]
        items.append(f"<li><b>Monitor the network as well as the node.</b> In "
                     f"{ctx.derived(len(net_only), 'int', [('simulator', 'traffic_free')])} of the "
                     f"{ctx.derived(len(rows), 'int', [('simulator', 'traffic_free')])} cheapest distributed "
                     f"configurations the simulator found, the most evasive in-node layout left only the "
                     f"wide-area traffic above our thresholds: a node-local monitor alone would miss them, so "
                     f"node verdicts should be joined with per-node network bytes across the fleet.</li>")
    else:
        items.append("<li><b>Fleet-level network monitoring</b> depends on the simulator. " + ctx.missing("simulator") + "</li>")
    items.append(f"<li><b>Protect the read path.</b> Our transport signs and chains every batch, but the "
                 f"counters themselves are read by software the operator controls. Attested monitor code, a "
                 f"tamper-resistant read path and wall-power metering, as {c('rt')} also recommend, are what "
                 f"makes the signals trustworthy; no detector can make up for forged inputs.</li>")
    items.append("<li><b>Several independent layers.</b> Judge NVLink, network, energy and "
                 f"{t('NVML')} activity together, so that an evasion has to shape all of them at once; the "
                 f"{c('seed')} drew the same conclusion for FLOP accounting.</li>")
    return "<ol class='recs'>" + "\n".join(items) + "</ol>"
