#!/usr/bin/env bash
# GPU check of the telemetry backbone on the lent 2 x H200 machine, in one device call:
#  1. the agent records NVML + network at 10 Hz while known NCCL traffic runs (all-reduce, one-way send);
#  2. the measured NVLink bytes are compared with the bytes handed to NCCL -> results/gpu_check.json;
#  3. a raw NVML dump for the fake NVML used by the CPU tests;
#  4. the agent's CPU cost at 10 Hz on the real GPUs.
# Everything it makes lands in $OUT (at most 8 files).
set -uo pipefail
cd "$(dirname "$0")/../.."
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
RUN=/tmp/gpu_check_run
TS="python3 -m trainsentry.cli"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/machine.txt"
nvidia-smi topo -m >> "$OUT/machine.txt" 2>&1
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)" | tee -a "$OUT/machine.txt"

$TS record "$RUN" --hz 10 --source nvml --source net \
   --label workload=nccl-known-bytes --label class=other --label family=nccl-check & REC=$!
sleep 3
torchrun --nproc_per_node=2 scripts/gpu/nccl_known_bytes.py /tmp/phases.json > "$OUT/nccl.log" 2>&1
echo "torchrun rc=$?"
sleep 2
kill -INT $REC; wait $REC
cp /tmp/phases.json "$OUT/phases.json"
$TS lab gpu-check "$RUN" /tmp/phases.json --out "$OUT/gpu_check.json" \
   --machine "$(head -1 "$OUT/machine.txt" | cut -d, -f1) x2, $(hostname)"
tar czf "$OUT/gpu_check_trace.tgz" -C /tmp gpu_check_run

python3 scripts/gpu/nvml_fixture.py 20 "$OUT/nvml_fixture.json" > /dev/null 2>&1 &
FIX=$!
torchrun --nproc_per_node=2 scripts/gpu/nccl_known_bytes.py /tmp/phases2.json > /dev/null 2>&1
wait $FIX
python3 benchmarks/bench_agent.py --real --seconds 30 --out "$OUT/agent_real.json" 2>&1 | tail -5
ls -la "$OUT"
