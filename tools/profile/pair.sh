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
source "$(dirname "$0")/../sh/masters.sh"
start_masters "$masters"

(cd "$root/tools" && go build -o "$work/pairload" ./pairload)
case $target in
sidelock)
	build_sidelock "$work/sidecar"
	start_sidelock "$work/sidecar" "$joined" SIDELOCK_NODE_TIMEOUT=200ms
	;;
floor | floor-release-after | nethttp)
	api=$(freeport)
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
