#!/usr/bin/env bash
# Issue 30's Dapr row, a one-off outside make bench (Dapr is no dependency
# of the project): sidelock (the binary as shipped) beside daprd's lock API
# (lock.redis) on the same single fresh redis-server master, each in a
# process of its own driven by tools/pairload, alternating REPS times:
# pair p50 of one sequential caller, pairs/s with 64 callers, and CPU per
# pair (the sidecar process from /proc, plus the master from INFO cpu)
# over the 64-caller run. daprd v1.18.0 is built by hand from dapr/dapr at
# that tag (go build -tags allcomponents ./cmd/daprd) outside this tree:
#   DAPRD=/path/to/daprd tools/daprrow/run.sh [REPS]
set -euo pipefail
reps=${1:-3}
daprd=${DAPRD:?set DAPRD to a daprd binary}
source "$(dirname "$0")/../sh/masters.sh"
cpu_of() { awk '{ sub(/.*\) /, ""); split($0, f, " "); print (f[12] + f[13]) / 100 }' "/proc/$1/stat"; }
redis_cpu() { redis-cli -p "$rport" info cpu | awk -F: '/used_cpu_(user|sys):/ { s += $2 } END { print s }'; }

start_masters 1
rport=${addrs[0]##*:}
(cd "$root/tools" && go build -o "$work/pairload" ./pairload)
build_sidelock "$work/sidelock" -trimpath -ldflags '-s -w'
start_sidelock "$work/sidelock" "$joined"
sidelock=$sidecar

mkdir "$work/components"
cat >"$work/components/lock.yaml" <<YAML
apiVersion: dapr.io/v1alpha1
kind: Component
metadata:
  name: lockstore
spec:
  type: lock.redis
  version: v1
  metadata:
  - name: redisHost
    value: 127.0.0.1:$rport
  - name: redisPassword
    value: ""
YAML
dhttp=$(freeport)
"$daprd" --app-id daprrow --dapr-http-port "$dhttp" --dapr-grpc-port "$(freeport)" --dapr-internal-grpc-port "$(freeport)" \
	--metrics-port "$(freeport)" --resources-path "$work/components" --log-level error >"$work/daprd.log" 2>&1 &
pids+=($!)
dapr=$!
until curl -sf "http://127.0.0.1:$dhttp/v1.0/healthz/outbound" >/dev/null 2>&1; do sleep 0.2; done

# one NAME API URL PID: a sequential run and a 64-caller run, with CPU.
one() {
	local seq par c0 r0 c1 r1
	seq=$("$work/pairload" -api "$2" -url "$3" -n 3000 -callers 1)
	c0=$(cpu_of "$4") r0=$(redis_cpu)
	par=$("$work/pairload" -api "$2" -url "$3" -n 20000 -callers 64 -warm 500)
	c1=$(cpu_of "$4") r1=$(redis_cpu)
	python3 - "$1" "$seq" "$par" "$c0" "$c1" "$r0" "$r1" >>"$work/runs" <<'PY'
import json, sys
name, seq, par, c0, c1, r0, r1 = sys.argv[1:]
f = lambda line, key: float(line.split(key + " ")[1].split()[0])
pairs = f(par, "pairs")
print(json.dumps({"name": name, "p50_us": f(seq, "p50-µs"), "pairs_per_s": f(par, "pairs/s"),
                  "sidecar_cpu_us": (float(c1) - float(c0)) * 1e6 / pairs, "redis_cpu_us": (float(r1) - float(r0)) * 1e6 / pairs}))
PY
	tail -1 "$work/runs"
}
for _ in $(seq "$reps"); do
	one sidelock sidelock "http://127.0.0.1:$api" "$sidelock"
	one dapr dapr "http://127.0.0.1:$dhttp" "$dapr"
done
echo "daprd RSS: $(awk '/VmRSS/ {print $2/1024 " MB"}' /proc/$dapr/status); sidelock RSS: $(awk '/VmRSS/ {print $2/1024 " MB"}' /proc/$sidelock/status)"
python3 - "$work/runs" <<'PY'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
med = lambda n, k: statistics.median(r[k] for r in runs if r["name"] == n)
cpu = lambda n: med(n, "sidecar_cpu_us") + med(n, "redis_cpu_us")
print(f"medians of {len(runs)//2} alternating runs, 1 master:")
for n in ("sidelock", "dapr"):
    print(f"  {n}: p50 {med(n,'p50_us'):.0f} µs, {med(n,'pairs_per_s'):.0f} pairs/s at 64 callers, CPU per pair {med(n,'sidecar_cpu_us'):.0f} µs sidecar + {med(n,'redis_cpu_us'):.0f} µs Redis")
print(f"sidelock / Dapr: p50 {med('sidelock','p50_us')/med('dapr','p50_us'):.2f}x (target <= 0.5x), "
      f"pairs/s {med('sidelock','pairs_per_s')/med('dapr','pairs_per_s'):.2f}x (target >= 2x), "
      f"CPU per pair (sidecar + Redis) {cpu('sidelock')/cpu('dapr'):.2f}x (target <= 0.5x)")
PY
