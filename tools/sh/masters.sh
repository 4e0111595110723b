# Sourced by the one-off harnesses under tools/ (profile/pair.sh,
# nodebench/run.sh, daprrow/run.sh): a scratch directory removed at exit
# with every process started here, free loopback ports, fresh
# redis-server masters without persistence, and the sidecar as shipped.
# Sets root (the repository) and work (the scratch directory).
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

freeport() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# start_masters N: N masters, their addresses in addrs and, joined by
# commas, in joined; returns once each answers.
start_masters() {
	addrs=()
	local port a
	for _ in $(seq "$1"); do
		port=$(freeport)
		redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --daemonize no >"$work/redis-$port.log" 2>&1 &
		pids+=($!)
		addrs+=("127.0.0.1:$port")
	done
	joined=$(IFS=,; echo "${addrs[*]}")
	for a in "${addrs[@]}"; do
		until redis-cli -p "${a##*:}" ping >/dev/null 2>&1; do sleep 0.05; done
	done
}

# start_sidelock BIN MASTERS [ENV...]: BIN over MASTERS (comma-separated),
# its lock API at http://127.0.0.1:$api, its pid in sidecar; returns once
# it is ready (fresh masters sit out one key ttl: SIDELOCK_KEY_TTL=2s).
start_sidelock() {
	local bin=$1 masters=$2 admin
	shift 2
	api=$(freeport) admin=$(freeport)
	env SIDELOCK_REDIS_ADDRS="$masters" SIDELOCK_LOG_LEVEL=error SIDELOCK_KEY_TTL=2s "$@" \
		SIDELOCK_LISTEN_ADDR="127.0.0.1:$api" SIDELOCK_ADMIN_ADDR="127.0.0.1:$admin" "$bin" >"$work/sidelock.log" 2>&1 &
	pids+=($!)
	sidecar=$!
	until curl -sf "http://127.0.0.1:$admin/readyz" >/dev/null; do sleep 0.1; done
}

# build_sidelock OUT [FLAGS...]: go build of cmd/sidelock.
build_sidelock() {
	local out=$1
	shift
	(cd "$root" && CGO_ENABLED=0 go build "$@" -o "$out" ./cmd/sidelock)
}
