#!/bin/sh
# Leader election with curl alone. A candidate campaigns: it holds the lock
# NAME over an open stream (POST ?hold=true&wait=...), asking again after
# each 409, and leads for as long as that curl runs. The sidecar frees the
# lock the moment curl exits or is killed (a whole pod that dies frees it
# within one key TTL, 10s by default), and grants it to the next candidate
# waiting. Meanwhile every candidate says who leads, following the lock's
# changes (GET ?watch=true).
#
#   sh leader.sh a    # in one terminal: "a: elected, term N", then working
#   sh leader.sh b    # in another: "b: leader is a, term N"
#
# Stop the leader with Ctrl-C: it resigns and b is elected at once, with a
# greater term (the lock's fence). WORK_STEPS=n resigns after n steps of
# work (STEP_SECONDS each, default 1). Needs only curl and sed.
set -eu
API="${SIDELOCK_ADDR:-http://127.0.0.1:7420}"
ME="${1:-$(hostname)-$$}"
NAME="${2:-examples/leader}"
STEP="${STEP_SECONDS:-1}"

DIR=$(mktemp -d)
mkfifo "$DIR/changes" "$DIR/term"
CURL="" WORKER="" WATCHER="" OBSERVER=""
# Killing the term's curl resigns; the watch's curl and its reader go too,
# and the script ends after them: no curl of it outlives it.
trap 'for p in $CURL $WORKER $WATCHER $OBSERVER; do kill "$p" 2>/dev/null || true; done; wait; rm -rf "$DIR"' EXIT
trap 'exit 130' INT TERM

# field NAME JSON: one member of a flat JSON object (enough for these events).
field() { printf '%s' "$2" | sed -n 's/.*"'"$1"'":"\{0,1\}\([^",}]*\).*/\1/p'; }

# observe reads the watch stream: state and acquired name the leader (its
# owner; its fence is the term), released says there is none.
observe() {
	event=""
	while IFS= read -r line; do
		case "$line" in
		"event: "*) event=${line#event: } ;;
		"data: "*)
			data=${line#data: }
			case "$event" in
			state | acquired)
				if [ "$event" = acquired ] || [ "$(field held "$data")" = true ]; then
					echo "$ME: leader is $(field owner "$data"), term $(field fence "$data")"
				else
					echo "$ME: no leader"
				fi
				;;
			released) echo "$ME: no leader ($(field reason "$data"))" ;;
			unavailable) echo "$ME: leader unknown: $(field detail "$data")" ;;
			esac
			;;
		esac
	done
}

# work is the singleton work, done only while this candidate's curl holds
# the term; after WORK_STEPS steps it resigns by ending that curl.
work() {
	i=0
	while [ -z "${WORK_STEPS:-}" ] || [ "$i" -lt "$WORK_STEPS" ]; do
		sleep "$STEP"
		i=$((i + 1))
		echo "$ME: term $1: working"
	done
	echo "$ME: resigning, term $1"
	kill "$CURL"
}

# lead follows one campaign's answer: a 409 problem (someone else still
# leads after the wait) or the term's events, then the status curl adds.
lead() {
	event="" term=""
	while IFS= read -r line; do
		case "$line" in
		"event: "*) event=${line#event: } ;;
		"data: "*)
			data=${line#data: }
			case "$event" in
			acquired)
				term=$(field fence "$data")
				echo "$ME: elected, term $term"
				work "$term" &
				WORKER=$!
				;;
			lost | released)
				echo "$ME: term $term over: $event $(field reason "$data")"
				kill "$WORKER" 2>/dev/null || true
				;;
			esac
			;;
		status=200 | status=409) ;; # the term ended, or not elected within the wait
		status=*)
			echo "$ME: campaign refused (HTTP ${line#status=}); trying again" >&2
			sleep 1
			;;
		esac
	done
}

curl -sN "$API/locks/$NAME?watch=true" >"$DIR/changes" &
WATCHER=$!
observe <"$DIR/changes" &
OBSERVER=$!

while :; do
	# The lock is held while this curl runs; -w adds the status once it ends.
	curl -sN -X POST -w '\nstatus=%{http_code}\n' "$API/locks/$NAME?hold=true&wait=30s&owner=$ME" >"$DIR/term" &
	CURL=$!
	lead <"$DIR/term"
	wait "$CURL" || true
	if [ -n "$term" ] && [ -n "${WORK_STEPS:-}" ]; then
		exit 0 # led once, and resigned
	fi
done
