#!/usr/bin/env bash
# Issue 30's Node row, outside make bench (it needs node and npm):
# sidelock (the binary as shipped, its own process) called from Node over
# undici's keep-alive Pool, against node-redlock 4.2.0 over ioredis
# in-process, on the same 3 fresh redis-server masters, alternating
# REPS times (default 3); prints each run and the medians' ratios.
#   tools/nodebench/run.sh [REPS]
set -euo pipefail
reps=${1:-3}
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../sh/masters.sh"
(cd "$here" && npm ci --no-audit --no-fund >/dev/null)
start_masters 3
build_sidelock "$work/sidelock" -trimpath -ldflags '-s -w'
# The node timeout the benchmarks use on this loaded machine (tools/bench, cpuSidecarEnv).
start_sidelock "$work/sidelock" "$joined" SIDELOCK_NODE_TIMEOUT=200ms
for r in $(seq "$reps"); do
	node "$here/bench.mjs" sidelock "http://127.0.0.1:$api" | tee -a "$work/runs"
	node "$here/bench.mjs" redlock "$joined" | tee -a "$work/runs"
done
python3 - "$work/runs" <<'PY'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
med = lambda m, k: statistics.median(r[k] for r in runs if r["mode"] == m)
print(f"medians of {len(runs)//2}: sidelock p50 {med('sidelock','p50_us')} µs, {med('sidelock','pairs_per_s')} pairs/s; "
      f"node-redlock p50 {med('redlock','p50_us')} µs, {med('redlock','pairs_per_s')} pairs/s")
print(f"pair p50 sidelock/node-redlock {med('sidelock','p50_us')/med('redlock','p50_us'):.2f}x (target <= 1.5x); "
      f"pairs/s at 64 callers {med('sidelock','pairs_per_s')/med('redlock','pairs_per_s'):.2f}x (target >= 1.0x)")
PY
