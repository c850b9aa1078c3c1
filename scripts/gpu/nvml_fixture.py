#!/usr/bin/env python3
"""Record raw NVML answers on a real GPU machine, for the fake NVML the tests run on.

    python3 scripts/gpu/nvml_fixture.py OUT.json [--seconds 30] [--hz 10] [--with-load]

Run it beside a workload so the counters move; ``--with-load`` starts the built-in one (LOAD below,
under ``torchrun --nproc_per_node=<GPUs>``, 3 s into the recording, phase times to
OUT.load_log.json): idle, 40 x 256 MiB all-reduce, 40 x 256 MiB one-way send GPU0 -> GPU1, 4 s of
bf16 8192^3 matmuls, 40 steps of a 100M-parameter DDP transformer. tests/fixtures/h200/
h200x2_nvml_fixture.json.gz was recorded on 2 x H200 with ``--seconds 45 --hz 10 --with-load``. Needs only the standard library and nvidia-ml-py (``import pynvml``); it changes nothing on
the GPU (no clocks, limits, modes or resets). ``tests/fakes/h200_recording.py`` loads the output.

Per GPU and tick it stores exactly what NVML answered, errors included:
  fields: [fieldId, scopeId, nvmlReturn, value, timestamp_us] for NVLink DATA TX/RX (138/139) at every
          link scope 0..N-1 and at 0xFFFFFFFF (all links), and the link count (91)
  calls:  power_mw, energy_mj, util [gpu, memory], mem_used, sm_clock, mem_clock, temp,
          pcie_tx_kbps, pcie_rx_kbps; an error is {"err": code}; call_s holds each call's duration
  gpm:    {metricId: value | {"err": code}} between this tick's GPM sample and the previous one
          (two alternating sample buffers per GPU)
Format (``"format": "trainsentry.nvml-fixture/1"``):
  {format, driver, nvml_version, binding, hz, start, end, count,
   gpus: [{index, name, link_count, link_state, gpm_supported}],
   samples: [{t, gpu, fields, calls, call_s, gpm}]}
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import pynvml as N

FORMAT = "trainsentry.nvml-fixture/1"
FI_TX, FI_RX, FI_LINK_COUNT = 138, 139, 91
ALL_LINKS = 0xFFFFFFFF
GPM_IDS = (1, 2, 3, 5, 7, 10, 20, 21, 60, 61)  # graphics, SM, occupancy, any/HMMA tensor, DRAM, PCIe, NVLink


# The reference load (needs torch + NCCL, >= 2 GPUs). NVLink multicast stays off (set in main()).
LOAD = r"""
import os,sys,time,json,torch,torch.distributed as d
d.init_process_group("nccl");r=d.get_rank();torch.cuda.set_device(r)
L={};x=torch.randn(128*2**20,device="cuda",dtype=torch.bfloat16)
def ph(n,f):
  d.barrier();torch.cuda.synchronize();t=time.time();f();torch.cuda.synchronize();L[n]=[t,time.time()];d.barrier();time.sleep(2)
time.sleep(1)
ph("allreduce_256MiB_x40",lambda:[d.all_reduce(x) for _ in range(40)])
ph("send0to1_256MiB_x40",lambda:[d.send(x,1) if r==0 else d.recv(x,0) for _ in range(40)])
a=torch.randn(8192,8192,device="cuda",dtype=torch.bfloat16)
def mm():
  t=time.time()
  while time.time()-t<4:
    [a@a for _ in range(20)];torch.cuda.synchronize()
ph("matmul_bf16_8192_4s",mm)
m=torch.nn.parallel.DistributedDataParallel(torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(1024,16,4096,batch_first=True),8).cuda())
o=torch.optim.AdamW(m.parameters())
def ddp():
  for _ in range(40):
    m(torch.randn(8,512,1024,device="cuda")).float().pow(2).mean().backward();o.step();o.zero_grad()
ph("ddp_100M_40steps",ddp)
if r==0: json.dump(L,open(sys.argv[1],"w"),indent=1)
d.destroy_process_group()
"""


def start_load(out: str, gpus: int) -> subprocess.Popen:
    env = dict(os.environ, NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1", NVSHMEM_DISABLE_NVLS="1")
    script = os.path.join(tempfile.mkdtemp(), "nvml_fixture_load.py")
    with open(script, "w") as f:
        f.write(LOAD)
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={gpus}", script, out + ".load_log.json"]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def field_value(fv) -> int | float:
    t = fv.valueType
    u = fv.value
    return {0: u.dVal, 1: u.uiVal, 2: u.ulVal, 3: u.ullVal, 4: u.sllVal, 5: u.siVal,
            6: getattr(u, "usVal", u.uiVal)}.get(t, u.ullVal)


def call(fn):
    t = time.perf_counter()
    try:
        v = fn()
    except N.NVMLError as e:
        v = {"err": int(e.value)}
    return v, round(time.perf_counter() - t, 6)


def describe(i: int, h) -> dict:
    fv = N.nvmlDeviceGetFieldValues(h, [(FI_LINK_COUNT, 0)])[0]
    links = int(field_value(fv)) if fv.nvmlReturn == 0 else 0
    states = []
    for link in range(max(links, 18)):
        s, _ = call(lambda: N.nvmlDeviceGetNvLinkState(h, link))
        states.append(s if isinstance(s, int) else 0)
    gpm, _ = call(lambda: N.nvmlGpmQueryDeviceSupport(h).isSupportedDevice)
    return {"index": i, "name": str(N.nvmlDeviceGetName(h)), "link_count": links,
            "link_state": states[:links] if links else states, "gpm_supported": gpm == 1}


def tick(h, links: int, gpm: dict) -> dict:
    scopes = list(range(links)) + [ALL_LINKS]
    req = [(FI_TX, s) for s in scopes] + [(FI_RX, s) for s in scopes] + [(FI_LINK_COUNT, 0)]
    fields = []
    try:
        vals = N.nvmlDeviceGetFieldValues(h, req)
        for (fid, scope), fv in zip(req, vals):
            ok = fv.nvmlReturn == 0
            fields.append([fid, scope, int(fv.nvmlReturn), field_value(fv) if ok else 0, int(fv.timestamp)])
    except N.NVMLError as e:
        fields = [[fid, scope, int(e.value), 0, 0] for fid, scope in req]
    calls, call_s = {}, {}
    for name, fn in (
        ("power_mw", lambda: N.nvmlDeviceGetPowerUsage(h)),
        ("energy_mj", lambda: N.nvmlDeviceGetTotalEnergyConsumption(h)),
        ("util", lambda: (lambda u: [u.gpu, u.memory])(N.nvmlDeviceGetUtilizationRates(h))),
        ("mem_used", lambda: N.nvmlDeviceGetMemoryInfo(h).used),
        ("sm_clock", lambda: N.nvmlDeviceGetClockInfo(h, N.NVML_CLOCK_SM)),
        ("mem_clock", lambda: N.nvmlDeviceGetClockInfo(h, N.NVML_CLOCK_MEM)),
        ("temp", lambda: N.nvmlDeviceGetTemperature(h, N.NVML_TEMPERATURE_GPU)),
        ("pcie_tx_kbps", lambda: N.nvmlDeviceGetPcieThroughput(h, N.NVML_PCIE_UTIL_TX_BYTES)),
        ("pcie_rx_kbps", lambda: N.nvmlDeviceGetPcieThroughput(h, N.NVML_PCIE_UTIL_RX_BYTES)),
    ):
        calls[name], call_s[name] = call(fn)
    out = {"fields": fields, "calls": calls, "call_s": call_s}
    if gpm:
        nxt = 1 - gpm["last"] if gpm["last"] is not None else 0
        got, call_s["gpm_sample"] = call(lambda: N.nvmlGpmSampleGet(h, gpm["bufs"][nxt]))
        if not isinstance(got, dict):
            if gpm["last"] is not None:
                mg = N.c_nvmlGpmMetricsGet_t()
                mg.version = N.NVML_GPM_METRICS_GET_VERSION
                mg.numMetrics = len(GPM_IDS)
                mg.sample1, mg.sample2 = gpm["bufs"][gpm["last"]], gpm["bufs"][nxt]
                for j, mid in enumerate(GPM_IDS):
                    mg.metrics[j].metricId = mid
                res, call_s["gpm_metrics"] = call(lambda: N.nvmlGpmMetricsGet(mg))
                if isinstance(res, dict):
                    out["gpm"] = {str(mid): res for mid in GPM_IDS}
                else:
                    out["gpm"] = {str(mid): (float(mg.metrics[j].value) if mg.metrics[j].nvmlReturn == 0
                                             else {"err": int(mg.metrics[j].nvmlReturn)})
                                  for j, mid in enumerate(GPM_IDS)}
            gpm["last"] = nxt
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    ap.add_argument("out", help="JSON file to write")
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--hz", type=float, default=10.0)
    ap.add_argument("--with-load", action="store_true", help="run the built-in reference load meanwhile")
    args = ap.parse_args()
    load = None
    N.nvmlInit()
    try:
        handles = [N.nvmlDeviceGetHandleByIndex(i) for i in range(N.nvmlDeviceGetCount())]
        gpus = [describe(i, h) for i, h in enumerate(handles)]
        gpm = {}
        for g, h in zip(gpus, handles):
            if g["gpm_supported"]:
                gpm[g["index"]] = {"bufs": [N.nvmlGpmSampleAlloc(), N.nvmlGpmSampleAlloc()], "last": None}
        doc = {"format": FORMAT, "driver": str(N.nvmlSystemGetDriverVersion()),
               "nvml_version": str(N.nvmlSystemGetNVMLVersion()),
               "binding": getattr(N, "__version__", ""), "hz": args.hz, "count": len(handles),
               "gpus": gpus, "samples": [], "start": time.time()}
        period = 1.0 / args.hz
        next_t = time.monotonic()
        end = next_t + args.seconds
        while time.monotonic() < end:
            if args.with_load and load is None and time.monotonic() - (end - args.seconds) >= 3.0:
                load = start_load(args.out, len(handles))
            for g, h in zip(gpus, handles):
                t = time.time()  # host time at the start of this GPU's queries
                s = tick(h, g["link_count"], gpm.get(g["index"], {}))
                s.update(t=t, gpu=g["index"])
                doc["samples"].append(s)
            next_t += period
            time.sleep(max(0.0, next_t - time.monotonic()))
        doc["end"] = time.time()
        if load is not None:
            doc["load_rc"] = load.wait()
        for st in gpm.values():
            for b in st["bufs"]:
                N.nvmlGpmSampleFree(b)
    finally:
        N.nvmlShutdown()
    tmp = args.out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, separators=(",", ":"))
    os.replace(tmp, args.out)
    print(f"{args.out}: {len(doc['samples'])} samples, {len(gpus)} GPUs, {doc['end'] - doc['start']:.1f} s")


if __name__ == "__main__":
    main()
