#!/usr/bin/env bash
# One device call of a lab campaign on the lent 2 x H200 machine:
#   run(command="bash scripts/gpu/campaign.sh configs/campaigns/h200.yaml 560", timeout_s=600)
# Runs as many of the campaign's remaining runs as fit in LIMIT seconds (default 560), writing each
# run as it finishes, then packs the new run directories into $OUT/data.tgz (+ the log).
# Back here: tar xzf /work/.device/N/data.tgz  (extracts under data/CAMPAIGN/), then commit.
set -uo pipefail
cd "$(dirname "$0")/../.."
CAMPAIGN=${1:?usage: campaign.sh CAMPAIGN.yaml [LIMIT_S]}
LIMIT=${2:-560}
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
NAME=$(python3 -c "import yaml,sys; print(yaml.safe_load(open(sys.argv[1]))['name'])" "$CAMPAIGN")
# Runs live in /tmp/tsdata on the device, outside the synced checkout: the next call on the same
# warm machine resumes from them even before this call's runs are committed here. Runs committed
# here are seeded in (never overwritten).
ROOT=/tmp/tsdata
mkdir -p "$ROOT/$NAME"
[ -d "data/$NAME" ] && cp -rn "data/$NAME/." "$ROOT/$NAME/"
touch /tmp/campaign.start
BUDGET=$(( LIMIT - SECONDS - 20 ))
python3 -m trainsentry.cli lab run "$CAMPAIGN" --data "$ROOT" --budget-s "$BUDGET" ${TS_SOURCES:+--source $TS_SOURCES} > "$OUT/campaign.log" 2>&1
grep -v "Warning\|warn(" "$OUT/campaign.log" | tail -25
# only the runs written by this call travel back, as data/NAME/RUN/...
( cd "$ROOT" && find "$NAME" -newer /tmp/campaign.start -name manifest.json -printf '%h\n' | sort ) > /tmp/new_runs
cp "$ROOT/$NAME/campaign_log.jsonl" "$OUT/" 2>/dev/null
tar czf "$OUT/data.tgz" -C "$ROOT" --transform 's,^,data/,' -T /tmp/new_runs
echo "$(wc -l < /tmp/new_runs) new runs packed"
