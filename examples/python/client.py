"""The Python client as installed (pip install sidelock): a lock kept by the
blocking client, then one by the asyncio client. Talks to $SIDELOCK_ADDR
(default http://127.0.0.1:7420); the install test runs it from a fresh
virtualenv against a real sidecar."""

import asyncio

import sidelock
from sidelock import AsyncClient, Client

with Client() as client:
    with client.lock("examples/client-py", ttl="30s", wait="10s", owner="example") as lock:
        lease = lock.extend(ttl="60s")
        print(f"sidelock {sidelock.__version__}: holding {lock.name}, fence {lock.fence}, ttl {lease.ttl}")
    print("released:", not lock.valid())


async def main() -> None:
    async with AsyncClient() as client:
        async with client.lock("examples/client-py", ttl="30s", wait="10s") as lock:
            print(f"asyncio: holding {lock.name}, fence {lock.fence}")
        print("asyncio released:", not lock.valid())


asyncio.run(main())
