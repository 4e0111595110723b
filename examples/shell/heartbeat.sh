#!/bin/sh
# Acquire a lock with curl, heartbeat while working, release at the end.
# Needs only curl and sed. SIDELOCK_ADDR defaults to the pod's sidecar.
set -eu
API="${SIDELOCK_ADDR:-http://127.0.0.1:7420}"
NAME="${1:-orders/42}"

# Acquire: wait up to 10s, lease 30s. -f makes curl fail on 409/503.
LEASE=$(curl -fsS -X POST "$API/locks/$NAME?ttl=30s&wait=10s&owner=$(hostname)")
TOKEN=$(printf '%s' "$LEASE" | sed 's/.*"token":"\([0-9a-f]*\)".*/\1/')
FENCE=$(printf '%s' "$LEASE" | sed 's/.*"fence":\([0-9]*\).*/\1/')
echo "holding $NAME with fence $FENCE"

# Release on any exit, even an error.
trap 'curl -fsS -X DELETE -H "Lock-Token: $TOKEN" "$API/locks/$NAME" >/dev/null || true' EXIT

for step in 1 2 3; do
	echo "working: step $step"
	sleep "${STEP_SECONDS:-5}"
	# Heartbeat: pushes the lease out; a 410 means the lock was lost: stop.
	curl -fsS -X PUT -H "Lock-Token: $TOKEN" "$API/locks/$NAME" >/dev/null || { echo "lock lost" >&2; exit 1; }
done
