#!/usr/bin/env python3
"""sidelock from Python with the standard library only.

    python3 lock.py            # acquire, heartbeat, release
    python3 lock.py --hold     # hold over a server-sent events stream

SIDELOCK_ADDR defaults to the pod's sidecar, http://127.0.0.1:7420.
"""
import json
import os
import sys
import threading
import time
import urllib.error
import urllib.request

API = os.environ.get("SIDELOCK_ADDR", "http://127.0.0.1:7420")


def call(method, path, token=None, timeout=60):
    req = urllib.request.Request(API + path, method=method)
    if token:
        req.add_header("Lock-Token", token)
    with urllib.request.urlopen(req, timeout=timeout) as res:
        body = res.read()
        return json.loads(body) if body else None


def heartbeat_lease(name):
    try:
        lease = call("POST", f"/locks/{name}?ttl=30s&wait=10s&owner=python-example")
    except urllib.error.HTTPError as e:
        problem = json.loads(e.read())
        sys.exit(f"not acquired: {e.code} {problem['code']}: {problem['detail']}")
    token = lease["token"]
    print(f"holding {name}, fence {lease['fence']}, valid until {lease['valid_until']}")
    try:
        for step in range(3):
            print(f"working: step {step}")
            time.sleep(float(os.environ.get("STEP_SECONDS", "5")))
            try:  # the heartbeat; 410 means the lock is gone: stop at once
                lease = call("PUT", f"/locks/{name}", token)
            except urllib.error.HTTPError as e:
                if e.code == 410:
                    sys.exit("lock lost; stopping")
                raise
    finally:
        try:
            call("DELETE", f"/locks/{name}", token)
        except urllib.error.HTTPError:
            pass


def read_events(stream):
    """Yield (event, data) pairs from a server-sent events stream."""
    event = None
    for raw in stream:
        line = raw.decode().rstrip("\n")
        if line.startswith("event: "):
            event = line[len("event: "):]
        elif line.startswith("data: "):
            yield event, json.loads(line[len("data: "):])


def held_stream(name):
    """Hold for as long as the connection is open: no heartbeats. A thread
    watches the stream and flags a lost lock; closing the stream releases."""
    req = urllib.request.Request(f"{API}/locks/{name}?hold=true&wait=10s", method="POST")
    stream = urllib.request.urlopen(req, timeout=None)
    events = read_events(stream)
    _, lease = next(events)  # the first event is "acquired"
    print(f"holding {name}, fence {lease['fence']}")
    lost = threading.Event()

    def watch():
        for event, data in events:
            if event in ("lost", "released"):
                print(f"lock {event}: {data['reason']}")
                lost.set()
                return

    threading.Thread(target=watch, daemon=True).start()
    for step in range(3):
        if lost.is_set():
            sys.exit("lock lost; stopping")
        print(f"working: step {step}")
        time.sleep(float(os.environ.get("STEP_SECONDS", "5")))
    stream.close()  # releases the lock
    print("released")


if __name__ == "__main__":
    if "--hold" in sys.argv:
        held_stream("reports/nightly")
    else:
        heartbeat_lease("orders/42")
