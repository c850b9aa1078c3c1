#!/bin/bash
# Ingest A/B of two checkouts: alternating runs of benchmarks/bench_ingest.py (--repeats 1 --no-write),
# each checkout's own benchmark and code (its src on PYTHONPATH), under flock so no other benchmark
# overlaps. Writes OUTDIR/{before,after}-ROUND.txt; results/ingest-durable-ab.json was built from them.
#   bash scripts/bench_ab_ingest.sh /work/wt-before /work/main /tmp/ab [ROUNDS]
set -u
BEFORE=${1:?before checkout}; AFTER=${2:?after checkout}; OUT=${3:?out dir}; ROUNDS=${4:-6}
PY=${PY:-$(dirname "$0")/../.venv/bin/python}
mkdir -p "$OUT"
for i in $(seq 1 "$ROUNDS"); do
  for side in before after; do
    if [ "$side" = before ]; then B=$BEFORE; else B=$AFTER; fi
    PYTHONPATH=$B/src flock /tmp/bench.lock "$PY" "$B/benchmarks/bench_ingest.py" --repeats 1 --no-write > "$OUT/$side-$i.txt" 2>&1
  done
done
