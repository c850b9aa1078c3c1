#!/usr/bin/env bash
# GPU check of the telemetry backbone on the lent 2 x H200 machine, in one device call:
#  1. the agent records NVML + network at 10 Hz while known NCCL traffic runs (all-reduce, one-way send);
#  2. the measured NVLink bytes are compared with the bytes handed to NCCL -> results/gpu_check.json;
#  3. the agent's CPU cost at 10 Hz on the real GPUs;
#  4. (CAMPAIGN=...) the next runs of a lab campaign in the time left.
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
torchrun --nproc_per_node=2 scripts/gpu/nccl_known_bytes.py /tmp/phases.json >> "$OUT/machine.txt" 2>&1
echo "torchrun rc=$?"
sleep 2
kill -INT $REC; wait $REC
cp /tmp/phases.json "$RUN/phases.json"
$TS lab gpu-check "$RUN" /tmp/phases.json --out "$OUT/gpu_check.json" \
   --machine "$(head -1 "$OUT/machine.txt" | cut -d, -f1) x2, $(hostname)"
tar czf "$OUT/gpu_check_trace.tgz" -C /tmp gpu_check_run

# 3. the agent's CPU cost on the real GPUs, measured while the campaign below loads them
python3 benchmarks/bench_agent.py --real --duration 30 --out "$OUT/agent_real.json" > "$OUT/agent_real.log" 2>&1 &
BENCH=$!

# 5. with the time left in this call, the next runs of the benign dataset campaign
if [ -n "${CAMPAIGN:-}" ]; then
  LEFT=$(( ${CALL_LIMIT_S:-560} - SECONDS - 25 ))
  echo "campaign budget ${LEFT}s"
  $TS lab run "$CAMPAIGN" --data data --budget-s "$LEFT" > "$OUT/campaign.log" 2>&1
  tail -5 "$OUT/campaign.log"
  tar czf "$OUT/data.tgz" data/h200
fi
wait $BENCH; tail -3 "$OUT/agent_real.log"
ls -la "$OUT"
