"""CPU and wall time of each NVML call the agent makes, on this machine's GPUs (GPU machine only).

    python3 scripts/gpu/nvml_call_costs.py --out $OUT/nvml_call_costs.json

For each call: N repetitions on GPU 0, process CPU time (user + system, all threads) and wall time
per call. Tells which reads dominate the agent's CPU cost (benchmarks/bench_agent.py --real).

``--spaced S`` also times every call the way the agent makes it: one call every S seconds (the
agent's tick is 0.1 s), process CPU over the whole loop (sleeps included, so work the driver does
in its own threads between calls counts) minus the same loop with no call, per call. Back-to-back
repetitions may be served from a driver cache; on 2026-11-30 the agent measured about twice what
the back-to-back table predicts (docs/performance.md), and this is the number that says whether
that is the reason."""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

import pynvml as n


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=300)
    ap.add_argument("--out", required=True)
    ap.add_argument("--spaced", type=float, default=0.0, metavar="S",
                    help="also time each call made once every S seconds (0: skip)")
    ap.add_argument("--spaced-n", type=int, default=40, help="calls per spaced measurement")
    args = ap.parse_args()
    n.nvmlInit()
    h = n.nvmlDeviceGetHandleByIndex(0)
    ALL = 0xFFFFFFFF
    calls = {
        "fieldvalues_nvlink_txrx_all_links+energy": lambda: n.nvmlDeviceGetFieldValues(h, [(138, ALL), (139, ALL), 83]),
        "fieldvalues_nvlink_txrx_all_links": lambda: n.nvmlDeviceGetFieldValues(h, [(138, ALL), (139, ALL)]),
        "fieldvalues_energy_only": lambda: n.nvmlDeviceGetFieldValues(h, [83]),
        "fieldvalues_nvlink_tx_link0": lambda: n.nvmlDeviceGetFieldValues(h, [(138, 0)]),
        "total_energy": lambda: n.nvmlDeviceGetTotalEnergyConsumption(h),
        "power_usage": lambda: n.nvmlDeviceGetPowerUsage(h),
        "utilization_rates": lambda: n.nvmlDeviceGetUtilizationRates(h),
        "memory_info": lambda: n.nvmlDeviceGetMemoryInfo(h),
        "clock_sm": lambda: n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM),
        "temperature": lambda: n.nvmlDeviceGetTemperature(h, n.NVML_TEMPERATURE_GPU),
    }
    metric_answers: dict[str, dict] = {}
    try:
        buf = n.nvmlGpmSampleAlloc()
        calls["gpm_sample_get"] = lambda: n.nvmlGpmSampleGet(h, buf)
        # metrics-get between two samples 100 ms apart, with the agent's eight metrics plus metric 1
        # (graphics util, not requested by the agent) and with only the NVLink pair (60/61).
        s1, s2 = n.nvmlGpmSampleAlloc(), n.nvmlGpmSampleAlloc()
        n.nvmlGpmSampleGet(h, s1)
        time.sleep(0.1)
        n.nvmlGpmSampleGet(h, s2)

        def request(ids):
            mg = n.c_nvmlGpmMetricsGet_t()
            mg.version = n.NVML_GPM_METRICS_GET_VERSION
            mg.numMetrics = len(ids)
            mg.sample1, mg.sample2 = s1, s2
            for j, mid in enumerate(ids):
                mg.metrics[j].metricId = mid
            return mg
        agent_ids = [2, 3, 5, 10, 20, 21, 60, 61, 1]
        mg9, mg2 = request(agent_ids), request([60, 61])
        calls["gpm_metrics_get_9"] = lambda: n.nvmlGpmMetricsGet(mg9)
        calls["gpm_metrics_get_nvlink_only"] = lambda: n.nvmlGpmMetricsGet(mg2)
        # Each metric's own return code and value: a cheap call that answered nothing is no answer
        # (2026-11-30: the NVLink-only request took 1.4 us against 1.4 ms for all nine).
        for name, mg in (("gpm_metrics_get_9", mg9), ("gpm_metrics_get_nvlink_only", mg2)):
            n.nvmlGpmMetricsGet(mg)
            metric_answers[name] = {str(mg.metrics[j].metricId): [int(mg.metrics[j].nvmlReturn), float(mg.metrics[j].value)]
                                    for j in range(mg.numMetrics)}
        # one metric per call: which of the nine is the costly one
        for mid in agent_ids:
            one = request([mid])
            calls[f"gpm_metrics_get_only_{mid}"] = lambda one=one: n.nvmlGpmMetricsGet(one)
    except Exception as e:  # noqa: BLE001
        print("no GPM:", e)
    out = {}
    for name, fn in calls.items():
        try:
            fn()
        except Exception as e:  # noqa: BLE001
            out[name] = {"error": repr(e)}
            continue
        c0, w0 = time.process_time(), time.perf_counter()
        for _ in range(args.n):
            fn()
        c1, w1 = time.process_time(), time.perf_counter()
        out[name] = {"cpu_us": round((c1 - c0) / args.n * 1e6, 1), "wall_us": round((w1 - w0) / args.n * 1e6, 1)}
        print(f"{name:45s} cpu {out[name]['cpu_us']:9.1f} us  wall {out[name]['wall_us']:9.1f} us")
    spaced: dict[str, dict] = {}
    if args.spaced > 0:
        def loop(fn) -> float:
            c0 = time.process_time()
            nxt = time.perf_counter()
            for _ in range(args.spaced_n):
                if fn is not None:
                    fn()
                nxt += args.spaced
                time.sleep(max(0.0, nxt - time.perf_counter()))
            return time.process_time() - c0
        base = loop(None)
        spaced["_baseline_loop_cpu_us_per_period"] = round(base / args.spaced_n * 1e6, 1)
        for name, fn in calls.items():
            if name in out and "error" not in out[name]:
                cpu = loop(fn) - base
                spaced[name] = {"cpu_us": round(cpu / args.spaced_n * 1e6, 1)}
                print(f"spaced {args.spaced:g} s  {name:38s} cpu {spaced[name]['cpu_us']:9.1f} us")
    res = {"calls": out, **({"spaced_calls": spaced, "spaced_period_s": args.spaced,
                             "spaced_n": args.spaced_n} if spaced else {}), "gpm_metric_answers": metric_answers, "n": args.n, "gpu": n.nvmlDeviceGetName(h), "driver": n.nvmlSystemGetDriverVersion(),
           "host_cores": os.cpu_count(), "python": platform.python_version(),
           "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "command": "python3 scripts/gpu/nvml_call_costs.py " + " ".join(sys.argv[1:])}
    with open(args.out, "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
