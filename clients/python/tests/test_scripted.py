"""The client's own logic against a scripted server, no sidecar: a watch
reconnecting with Last-Event-ID, a campaign retrying until stopped."""

import threading
import unittest
from typing import List

from sidelock import Client, InvalidRequest, LockHeld

from .scripted import Answer, ScriptedServer, events, problem

SSE = "text/event-stream"


class WatchTest(unittest.TestCase):
    def serve(self, answers: List[Answer]) -> ScriptedServer:
        server = ScriptedServer(answers)
        self.addCleanup(server.close)
        return server

    def test_a_broken_stream_is_reconnected_with_the_last_event_id(self) -> None:
        server = self.serve([
            Answer(200, SSE, events("retry: 20", "", "id: 1", "event: state", 'data: {"name":"a/b","held":false}', "",
                                    "id: 2", "event: acquired", 'data: {"name":"a/b","owner":"x","fence":5}', "")),
            problem("no_quorum", 503, retry_after_ms=30),  # the sidecar cannot serve yet: tried again
            Answer(200, SSE, events("retry: 20", "", "id: 3", "event: state",
                                    'data: {"name":"a/b","held":true,"owner":"x","fence":5}', "",
                                    "id: 4", "event: released", 'data: {"name":"a/b","reason":"released"}', ""),
                   keep_open=True),
        ])
        with Client(server.url, timeout=5).watch("a/b") as watch:
            seen = []
            for change in watch:
                seen.append((change.kind, change.held, change.owner))
                if change.kind == "released":
                    break
        self.assertEqual(seen, [("state", False, ""), ("acquired", True, "x"), ("unavailable", None, ""),
                                ("state", True, "x"), ("released", False, "")])
        self.assertEqual([(m, p) for m, p, _ in server.requests], [("GET", "/locks/a/b?watch=true")] * 3)
        last_ids = [h.get("Last-Event-ID") for _, _, h in server.requests]
        self.assertEqual(last_ids, [None, "2", "2"])

    def test_close_ends_the_iteration_from_another_thread(self) -> None:
        server = self.serve([Answer(200, SSE, events("id: 1", "event: state", 'data: {"name":"x","held":false}', ""),
                                    keep_open=True)])
        watch = Client(server.url, timeout=5).watch("x")
        seen = []

        def follow() -> None:
            for change in watch:
                seen.append(change.kind)

        follower = threading.Thread(target=follow)
        follower.start()
        while not seen:  # the first change arrived: the follower is blocked on the stream now
            follower.join(0.01)
        watch.close()
        follower.join(5)
        self.assertFalse(follower.is_alive(), "close did not end the iteration")
        self.assertEqual(seen, ["state"])
        self.assertEqual(len(server.requests), 1)  # closed: not reconnected

    def test_what_a_retry_cannot_mend_is_raised(self) -> None:
        server = self.serve([problem("invalid_name", 400)])
        with self.assertRaises(InvalidRequest):
            Client(server.url, timeout=5).watch("a/../b")


class StopAfter(threading.Event):
    """A stop that reads as set from its n+1-th look on."""

    def __init__(self, looks: int) -> None:
        super().__init__()
        self.looks = looks

    def is_set(self) -> bool:
        self.looks -= 1
        return self.looks < 0


class CampaignTest(unittest.TestCase):
    def test_retries_on_lock_held_until_stopped(self) -> None:
        server = ScriptedServer([problem("lock_held", 409, retry_after_ms=1000)])
        self.addCleanup(server.close)
        with self.assertRaises(LockHeld):
            Client(server.url, timeout=5).campaign("jobs/leader", owner="me", wait="1s", stop=StopAfter(2))
        self.assertEqual(len(server.requests), 3)  # two refusals retried, the third raised
        method, path, _ = server.requests[0]
        self.assertEqual(method, "POST")
        self.assertTrue(path.startswith("/locks/jobs/leader?"), path)
        for part in ("wait=1s", "owner=me", "hold=true"):
            self.assertIn(part, path)

    def test_a_campaign_must_wait(self) -> None:
        with self.assertRaises(ValueError):
            Client("http://127.0.0.1:9").campaign("jobs/leader", owner="me", wait=0)


if __name__ == "__main__":
    unittest.main()
