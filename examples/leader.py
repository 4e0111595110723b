#!/usr/bin/env python3
"""Leader election with the sidelock Python client: a standby that
campaigns for a lock, says who leads meanwhile (a watch of the lock), and
does the singleton work only while it leads.

Run two of them against `make run`, each in a terminal of its own:

    python3 examples/leader.py --id a    # a: elected, term N; a: term N: working
    python3 examples/leader.py --id b    # b: leader is a, term N

Stop the leader with Ctrl-C (or SIGTERM): it resigns and b is elected at
once, with a greater term (the lock's fence). Kill it with kill -9: the
sidecar releases the lock as its connection closes. A whole pod that dies
takes its sidecar along; the lock's keys then lapse on the masters and b
is elected within one key TTL (SIDELOCK_KEY_TTL, 10s by default).

The client is clients/python (pip install ./clients/python, standard
library only); run from a checkout, it is found there without installing.
SIDELOCK_ADDR defaults to the pod's sidecar, http://127.0.0.1:7420.
"""
import argparse
import os
import signal
import socket
import sys
import threading

try:
    from sidelock import Client, KeptLock, SidelockError, Watch
except ImportError:  # a checkout: the client next door
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "clients", "python", "src"))
    from sidelock import Client, KeptLock, SidelockError, Watch

_print_lock = threading.Lock()


def say(line: str) -> None:
    """One line, whole, from whichever thread: the watch and the work print concurrently."""
    with _print_lock:
        print(line, flush=True)


def follow_leader(watch: Watch, me: str) -> None:
    """Say who leads whenever it changes, until the watch is closed."""
    try:
        for change in watch:
            if change.held:
                say(f"{me}: leader is {change.owner}, term {change.fence}")
            elif change.kind == "unavailable":
                say(f"{me}: leader unknown: {change.detail}")
            else:
                say(f"{me}: no leader")
    except SidelockError as e:
        say(f"{me}: cannot watch: {e}")


def lead(term: KeptLock, me: str, every: float) -> None:
    """Do the singleton work until the term ends. The fence is the term:
    pass it to whatever the work writes, so that a store can refuse a
    deposed leader's late writes (examples/fenced-resource)."""
    with term:  # leaving it resigns: the standby is elected at once
        say(f"{me}: elected, term {term.fence}")
        try:
            while not term.lost.wait(every):
                say(f"{me}: term {term.fence}: working")
        except KeyboardInterrupt:
            say(f"{me}: resigning, term {term.fence}")
            raise
        say(f"{me}: term {term.fence} over: lost {term.lost_reason}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--id", default=f"{socket.gethostname()}-{os.getpid()}",
                        help="this candidate's name, which the others see as the leader")
    parser.add_argument("--name", default="examples/leader", help="the election's lock")
    parser.add_argument("--every", type=float, default=float(os.environ.get("STEP_SECONDS", "1")),
                        help="seconds between two steps of the leader's work")
    args = parser.parse_args()
    # Resign on SIGTERM as on Ctrl-C; SIGINT too when started in the
    # background, where a shell leaves it ignored.
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.default_int_handler)

    client = Client()
    watch = client.watch(args.name)
    watcher = threading.Thread(target=follow_leader, args=(watch, args.id))
    watcher.start()
    try:
        while True:
            # Waits in the sidecar's queue, asking again every 10 s, until elected.
            lead(client.campaign(args.name, owner=args.id), args.id, args.every)
    except KeyboardInterrupt:
        pass
    finally:
        watch.close()
        watcher.join()


if __name__ == "__main__":
    main()
