"""Time per lock (acquire + release, one caller) of the Python client: the
blocking Client and the AsyncClient, from the tree or from another copy of
the package (SIDELOCK_PY_SRC, e.g. the client before kept-alive
connections, from git). make bench-clients runs it against a real sidecar
over three real redis-server masters; by hand:

    SIDELOCK_ADDR=http://127.0.0.1:7420 python3 bench.py blocking 2000

Prints one JSON line: p50 and p99 per pair in milliseconds, CPU per pair.
"""

import asyncio
import json
import os
import sys
import time

sys.path.insert(0, os.environ.get("SIDELOCK_PY_SRC") or os.path.join(os.path.dirname(__file__), "../../clients/python/src"))

from sidelock import Client, SidelockError  # noqa: E402


ERRORS = []


def blocking(n: int) -> list:
    client = Client()
    out = []
    for i in range(n):
        name = f"bench/py/{os.getpid()}/{i}/{len(out)}"  # a fresh name: a pair cut short may leave its lock held
        start = time.perf_counter()
        try:
            lease = client.acquire(name, ttl="30s")
            client.release(name, lease.token)
        except SidelockError as e:
            ERRORS.append(e)
            continue
        out.append(time.perf_counter() - start)
    return out


def asynchronous(n: int) -> list:
    from sidelock import AsyncClient

    async def run() -> list:
        out = []
        async with AsyncClient() as client:
            for i in range(n):
                name = f"bench/py-async/{os.getpid()}/{i}/{len(out)}"
                start = time.perf_counter()
                try:
                    lease = await client.acquire(name, ttl="30s")
                    await client.release(name, lease.token)
                except SidelockError as e:
                    ERRORS.append(e)
                    continue
                out.append(time.perf_counter() - start)
        return out

    return asyncio.run(run())


def main() -> None:
    mode = sys.argv[1] if len(sys.argv) > 1 else "blocking"
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 2000
    run = {"blocking": blocking, "async": asynchronous}[mode]
    run(max(n // 10, 10))  # warm up
    ERRORS.clear()
    cpu0 = time.process_time()
    took = sorted(run(n))
    cpu = time.process_time() - cpu0
    done = max(len(took), 1)
    print(json.dumps({"mode": mode, "src": os.environ.get("SIDELOCK_PY_SRC") or "tree", "pairs": len(took),
                      "errors": len(ERRORS), "p50_ms": round(took[done // 2] * 1000, 3),
                      "p99_ms": round(took[done * 99 // 100] * 1000, 3), "cpu_us_per_pair": round(cpu / done * 1e6)}))


if __name__ == "__main__":
    main()
