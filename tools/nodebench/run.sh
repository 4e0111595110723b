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
root=$(cd "$here/../.." && pwd)
work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
freeport() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
(cd "$here" && npm ci --no-audit --no-fund >/dev/null)
addrs=()
for _ in 1 2 3; do
	port=$(freeport)
	redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no >/dev/null 2>&1 &
	pids+=($!)
	addrs+=("127.0.0.1:$port")
done
joined=$(IFS=,; echo "${addrs[*]}")
for a in "${addrs[@]}"; do until redis-cli -p "${a##*:}" ping >/dev/null 2>&1; do sleep 0.05; done; done
(cd "$root" && CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o "$work/sidelock" ./cmd/sidelock)
api=$(freeport) admin=$(freeport)
SIDELOCK_REDIS_ADDRS=$joined SIDELOCK_LOG_LEVEL=error SIDELOCK_KEY_TTL=2s \
	SIDELOCK_LISTEN_ADDR=127.0.0.1:$api SIDELOCK_ADMIN_ADDR=127.0.0.1:$admin "$work/sidelock" &
pids+=($!)
until curl -sf "http://127.0.0.1:$admin/readyz" >/dev/null; do sleep 0.1; done
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
