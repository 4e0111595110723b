#!/bin/sh
# Two ways to hold a lock for exactly as long as a process lives.
set -eu
API="${SIDELOCK_ADDR:-http://127.0.0.1:7420}"

# 1. sidelock exec: runs the command while holding the lock, passes
#    SIDELOCK_LOCK_NAME, SIDELOCK_TOKEN and SIDELOCK_FENCE, stops it if the
#    lock is lost (exit 79), exits 75 if not acquired within --wait.
sidelock exec --wait 30s reports/nightly -- sh -c 'echo "fence $SIDELOCK_FENCE"; sleep 1'

# 2. Plain curl: a held lock is a server-sent events stream. The lock lives
#    while curl runs and is released the moment curl exits or is killed.
curl -sN -X POST "$API/locks/reports/nightly?hold=true&wait=30s" &
HOLDER=$!
sleep "${STEP_SECONDS:-2}"   # ... the work ...
kill "$HOLDER"   # releases the lock at once
