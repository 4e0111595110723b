#!/usr/bin/env bash
# Profile one lock sidecar process under one sequential caller's
# acquire+release pairs of distinct names (tools/pairload in a process of
# its own), against fresh redis-server masters on loopback:
#
#   tools/profile/pair.sh sidelock|floor|floor-release-after|nethttp [MASTERS] [PAIRS]
#
# Prints the sidecar process's task-clock and context switches per pair
# (perf stat; this VM exposes no instruction counter) and, from
# `perf record -g`, where its CPU goes (tools/profile/buckets.py). Needs perf (as root, or perf_event_paranoid
# <= 1). Wrap it in `flock /work/locks/bench.lock` beside other benchmarks.
set -euo pipefail
target=${1:?sidelock, floor, floor-release-after or nethttp}
masters=${2:-3}
pairs=${3:-5000}
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

freeport() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

addrs=()
for _ in $(seq "$masters"); do
	port=$(freeport)
	redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --daemonize no >"$work/redis-$port.log" 2>&1 &
	pids+=($!)
	addrs+=("127.0.0.1:$port")
done
joined=$(IFS=,; echo "${addrs[*]}")
for a in "${addrs[@]}"; do
	until redis-cli -p "${a##*:}" ping >/dev/null 2>&1; do sleep 0.05; done
done

(cd "$root/tools" && go build -o "$work/pairload" ./pairload)
api=$(freeport)
case $target in
sidelock)
	(cd "$root" && go build -o "$work/sidecar" ./cmd/sidelock)
	admin=$(freeport)
	SIDELOCK_REDIS_ADDRS=$joined SIDELOCK_LOG_LEVEL=error SIDELOCK_KEY_TTL=2s SIDELOCK_NODE_TIMEOUT=200ms \
		SIDELOCK_LISTEN_ADDR=127.0.0.1:$api SIDELOCK_ADMIN_ADDR=127.0.0.1:$admin "$work/sidecar" >"$work/sidecar.log" 2>&1 &
	pids+=($!)
	sidecar=$!
	# fresh masters without persistence sit out one key ttl (the restart guard)
	until curl -sf "http://127.0.0.1:$admin/readyz" >/dev/null; do sleep 0.1; done
	;;
floor | floor-release-after | nethttp)
	(cd "$root/tools" && go build -o "$work/sidecar" ./floor/cmd/floor)
	flags=(-masters "$joined")
	[ "$target" = nethttp ] && flags=(-http-only)
	[ "$target" = floor-release-after ] && flags+=(-release-after)
	"$work/sidecar" -listen "127.0.0.1:$api" "${flags[@]}" >"$work/sidecar.log" 2>&1 &
	pids+=($!)
	sidecar=$!
	until curl -s -o /dev/null "http://127.0.0.1:$api/"; do sleep 0.05; done
	;;
*) echo "unknown target $target" >&2; exit 2 ;;
esac
url=http://127.0.0.1:$api

"$work/pairload" -url "$url" -n 500 -warm 200 >/dev/null
echo "== $target, $masters masters, $pairs pairs, one sequential caller"
perf stat -x, -e task-clock,context-switches -p "$sidecar" -o "$work/stat" -- \
	"$work/pairload" -url "$url" -n "$pairs" -warm 0
awk -F, -v n="$pairs" '$3 ~ /task-clock/ { printf "sidecar task-clock per pair: %.1f µs\n", $1 * 1000 / n }
	$3 ~ /context-switches/ { printf "sidecar context switches per pair: %.2f\n", $1 / n }' "$work/stat"
perf record -q -F 1999 -g -p "$sidecar" -o "$work/perf.data" -- "$work/pairload" -url "$url" -n "$pairs" -warm 0 >/dev/null 2>&1
perf script -i "$work/perf.data" 2>/dev/null | python3 "$root/tools/profile/buckets.py"
