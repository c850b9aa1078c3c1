"""Instructions per agent tick, counted by valgrind (cachegrind): a measure of the agent's CPU cost
that the other jobs on a shared machine do not move.

``bench_agent.py`` measures CPU time, which on the shared 2-core VM moves by ±10 % from run to run
with what else runs; a change worth a few percent cannot be told from noise there. This counts the
instructions one tick executes instead: the same path as the benchmark (8 fake GPUs answering from
the H200 recording, the sysfs fixture's 4 network devices, sampler, staging into the spool, a seal
every 10 ticks; no sender, no sleeping), on a manual clock that moves 0.1 s a tick so every
periodic read (energy, slow gauges, GPM) comes at its real rate. It runs itself under valgrind for
``--short`` and ``--long`` ticks and divides the difference by the ticks between, so start-up
(imports, recording load, spool creation) cancels out.

    python3 benchmarks/agent_tick_instructions.py                 # this checkout
    python3 benchmarks/agent_tick_instructions.py --tree ../main  # another checkout, for a before/after
    python3 benchmarks/agent_tick_instructions.py --part nvml     # only the NVML source's read

``--part``: ``all`` (the tick as above), ``read`` (the sources and the sampler's read), ``nvml`` (the
NVML source over the fake), ``binding`` (one GPU's every-tick calls through the real ``pynvml``
binding over a driver that does nothing, the real binding's own Python; per call set, not per
tick), ``fake-calls`` (the same calls through the fake). Prints one JSON line; the count is
deterministic to a few hundred instructions a tick (hash seed fixed, one OpenBLAS thread).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PARTS = ("all", "read", "nvml", "binding", "fake-calls")


def workload(tree: Path, part: str, ticks: int) -> None:
    """What valgrind runs: ``ticks`` ticks of ``part`` after the set-up."""
    sys.path[:0] = [str(tree / "src"), str(tree / "tests")]
    import gc

    from fakes.fake_pynvml import FakeNvml, ManualClock
    clock = ManualClock(1_800_000_000.0)
    fake = FakeNvml(gpu_count=8, clock=clock, start=clock() - 5.0)
    if part in ("binding", "fake-calls"):
        import ctypes

        import pynvml
        req = [(138, 0xFFFFFFFF), (139, 0xFFFFFFFF)]
        if part == "binding":
            stub = ctypes.CDLL(None).sched_yield
            stub.restype = ctypes.c_int
            pynvml._nvmlGetFunctionPointer = lambda name: stub
            nvml, h = pynvml, pynvml.c_nvmlDevice_t()
        else:
            fake.nvmlInit()
            nvml, h = fake, fake.nvmlDeviceGetHandleByIndex(3)
        gc.freeze()
        for _ in range(ticks):
            clock.advance(0.1)
            nvml.nvmlDeviceGetFieldValues(h, req)
            nvml.nvmlDeviceGetPowerUsage(h)
            nvml.nvmlDeviceGetUtilizationRates(h)
        return
    from trainsentry.agent.node import Agent, AgentConfig
    from trainsentry.telemetry import open_sources
    sources = open_sources(["nvml", "net"], nvml_module=fake, clock=clock,
                           net_sysfs_root=str(tree / "tests" / "fixtures" / "sysfs" / "node1"))
    agent = Agent(AgentConfig(collector_url="http://127.0.0.1:9", node="n", key="00" * 32,
                              spool_path=Path(tempfile.mkdtemp()) / "spool.db"), sources)
    sampler = agent.sampler
    gc.freeze()   # as Agent.run does before its loop
    for k in range(ticks):
        clock.advance(0.1)
        if part == "nvml":
            sources[0].read()
            continue
        readings = sampler._read_all()
        if part == "all":
            agent._on_tick(readings)
            if k % 10 == 9:
                agent._on_batch(readings, 1.0)


def count(tree: Path, part: str, ticks: int) -> int:
    with tempfile.TemporaryDirectory() as d:
        # OpenBLAS's worker threads (numpy, where a checkout still imports pyarrow with the agent) spin
        # a varying while under valgrind: one thread keeps the count deterministic
        env = dict(os.environ, PYTHONHASHSEED="0", OPENBLAS_NUM_THREADS="1")
        p = subprocess.run(["valgrind", "--tool=cachegrind", "--cache-sim=no", f"--cachegrind-out-file={d}/cg.out",
                            sys.executable, __file__, "--workload", "--tree", str(tree), "--part", part,
                            "--ticks", str(ticks)], capture_output=True, text=True, env=env)
    m = re.search(r"I\s+refs:\s+([\d,]+)", p.stderr)
    if p.returncode != 0 or m is None:
        raise SystemExit(f"valgrind failed ({p.returncode}): {p.stderr[-2000:]}")
    return int(m.group(1).replace(",", ""))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tree", type=Path, default=REPO, help="checkout whose src/ and tests/fakes run (default: this one)")
    ap.add_argument("--part", choices=PARTS, default="all")
    ap.add_argument("--short", type=int, default=10)
    ap.add_argument("--long", type=int, default=210)
    ap.add_argument("--workload", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--ticks", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.workload:
        workload(args.tree.resolve(), args.part, args.ticks)
        return
    short, long = count(args.tree, args.part, args.short), count(args.tree, args.part, args.long)
    per = (long - short) / (args.long - args.short)
    unit = "per GPU call set" if args.part in ("binding", "fake-calls") else "per tick"
    print(json.dumps({"tree": str(args.tree.resolve()), "part": args.part, "instructions": round(per), "unit": unit,
                      "ticks": [args.short, args.long], "python": sys.version.split()[0]}))


if __name__ == "__main__":
    main()
