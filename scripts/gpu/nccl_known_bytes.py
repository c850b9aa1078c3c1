"""Known NCCL traffic for the NVLink counter check. Run under torchrun with 2 ranks on the GPU node.

    torchrun --nproc_per_node=2 scripts/gpu/nccl_known_bytes.py PHASES.json

Phases, each separated by 3 s of idle so the recorder's 10 Hz counters settle between them:
1. all_reduce: N all-reduces of a bf16 buffer of S bytes. With 2 ranks NCCL's ring and tree both
   send S bytes per rank per all-reduce (S/2 in reduce-scatter, S/2 in all-gather), so every GPU's
   NVLink TX and RX should each grow by N·S.
2. send: M one-way sends of S bytes from rank 0 to rank 1: GPU0 TX and GPU1 RX grow by M·S; GPU0 RX
   and GPU1 TX stay (nearly) flat.
Rank 0 writes the phase times and the bytes handed to NCCL to PHASES.json.
"""

from __future__ import annotations

import datetime
import json
import os
import sys
import time

import torch
import torch.distributed as dist


def main(out_path: str) -> None:
    rank = int(os.environ["RANK"])
    torch.cuda.set_device(rank)
    dev = torch.device("cuda", rank)
    dist.init_process_group("nccl", device_id=dev, timeout=datetime.timedelta(minutes=5))
    size_bytes = 256 * 1024 * 1024
    buf = torch.randn(size_bytes // 2, device=dev, dtype=torch.bfloat16)
    phases = {"bytes_per_op": size_bytes, "world_size": dist.get_world_size()}
    # warm-up (not counted in a phase; the idle gap separates it)
    for _ in range(2):
        dist.all_reduce(buf)
    torch.cuda.synchronize()
    dist.barrier()
    time.sleep(3)

    n_allreduce = 80
    t0 = time.time()
    for _ in range(n_allreduce):
        dist.all_reduce(buf)
    torch.cuda.synchronize()
    dist.barrier()
    phases["all_reduce"] = {"start": t0, "end": time.time(), "n": n_allreduce,
                            "expected_tx_bytes_per_gpu": n_allreduce * size_bytes,
                            "expected_rx_bytes_per_gpu": n_allreduce * size_bytes}
    time.sleep(3)

    n_send = 80
    t0 = time.time()
    for _ in range(n_send):
        if rank == 0:
            dist.send(buf, 1)
        else:
            dist.recv(buf, 0)
    torch.cuda.synchronize()
    dist.barrier()
    phases["send"] = {"start": t0, "end": time.time(), "n": n_send,
                      "expected_tx_bytes": {"gpu0": n_send * size_bytes, "gpu1": 0},
                      "expected_rx_bytes": {"gpu0": 0, "gpu1": n_send * size_bytes}}
    time.sleep(3)
    if rank == 0:
        with open(out_path, "w") as f:
            json.dump(phases, f, indent=1)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
