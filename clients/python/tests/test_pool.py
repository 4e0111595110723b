"""Both clients reuse one kept-alive connection for calls made one after
another, and open a new one when the sidecar closed an idle one."""

import time
import unittest

from sidelock import AsyncClient, Client

from .scripted import KeepAliveServer


class PoolTest(unittest.TestCase):
    def setUp(self) -> None:
        self.server = KeepAliveServer()
        self.addCleanup(self.server.close)

    def test_calls_one_after_another_share_one_connection(self) -> None:
        with Client(self.server.url, timeout=5) as client:
            for _ in range(20):
                self.assertFalse(client.inspect("x").held)
        self.assertEqual((self.server.requests, self.server.connections), (20, 1))

    def test_an_idle_connection_the_sidecar_closed_is_replaced(self) -> None:
        with Client(self.server.url, timeout=5) as client:
            client.inspect("x")
            self.server.close_idle()
            time.sleep(0.05)
            self.assertFalse(client.inspect("x").held)
        self.assertEqual((self.server.requests, self.server.connections), (2, 2))


class AsyncPoolTest(unittest.IsolatedAsyncioTestCase):
    def setUp(self) -> None:
        self.server = KeepAliveServer()
        self.addCleanup(self.server.close)

    async def test_calls_one_after_another_share_one_connection(self) -> None:
        async with AsyncClient(self.server.url, timeout=5) as client:
            for _ in range(20):
                self.assertFalse((await client.inspect("x")).held)
        self.assertEqual((self.server.requests, self.server.connections), (20, 1))

    async def test_an_idle_connection_the_sidecar_closed_is_replaced(self) -> None:
        async with AsyncClient(self.server.url, timeout=5) as client:
            await client.inspect("x")
            self.server.close_idle()
            self.assertFalse((await client.inspect("x")).held)
        self.assertEqual((self.server.requests, self.server.connections), (2, 2))


if __name__ == "__main__":
    unittest.main()
