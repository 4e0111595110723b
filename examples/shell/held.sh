#!/bin/sh
# Two ways to hold a lock for exactly as long as a process lives.
set -eu
API="${SIDELOCK_ADDR:-http://127.0.0.1:7420}"

# 1. sidelock exec: runs the command while holding the lock, passes
#    SIDELOCK_LOCK_NAME, SIDELOCK_TOKEN and SIDELOCK_FENCE, stops it if the
#    lock is lost (exit 79), exits 75 if not acquired within --wait.
sidelock exec --wait 30s reports/nightly -- sh -c 'echo "fence $SIDELOCK_FENCE"; sleep 1'

# 2. Plain curl: a held lock is a server-sent events stream. The lock is
#    yours from its "event: acquired" line, while curl runs, and is released
#    the moment curl exits or is killed. Until that line curl is only waiting,
#    so the work starts after it, never after a guessed sleep.
DIR=$(mktemp -d)
mkfifo "$DIR/stream"
HOLDER=""
trap 'kill $HOLDER 2>/dev/null || true; rm -rf "$DIR"' EXIT
curl -sN -X POST "$API/locks/reports/nightly?hold=true&wait=30s" >"$DIR/stream" &
HOLDER=$!
exec 3<"$DIR/stream"
acquired=""
while IFS= read -r line <&3; do
	echo "$line"
	if [ "$line" = "event: acquired" ]; then acquired=yes && break; fi
done
[ -n "$acquired" ] || { echo "not acquired within the wait" >&2; exit 75; }
cat <&3 >/dev/null & # keep reading the stream (renewed, lost) so curl never blocks
sleep "${STEP_SECONDS:-2}" # ... the work ...
kill "$HOLDER" # releases the lock at once
