#!/usr/bin/env python3
"""A network's delay for benchmarks: a TCP relay on 127.0.0.1 that forwards every chunk, each
way, MS milliseconds after it arrived (in order). Put it between Spine and PostgreSQL to see
what round trips cost across a network:

usage: python3 scripts/bench-relay.py LISTEN_PORT TARGET_PORT MS
  e.g. python3 scripts/bench-relay.py 46000 5432 0.25 &
       spine-bench load --mode mix -- --database-url postgres://…@127.0.0.1:46000/spine

asyncio's timers make each round trip through it cost more than 2 x MS (~2.5 ms at 0.25):
compare builds through the same relay, not with a real network's figures."""
import asyncio, sys, time
lp, tp, ms = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]) / 1000
async def pipe(r, w):
    q = asyncio.Queue()
    async def sender():
        while True:
            due, data = await q.get()
            if data is None:
                w.close(); return
            d = due - time.monotonic()
            if d > 0: await asyncio.sleep(d)
            w.write(data); await w.drain()
    t = asyncio.create_task(sender())
    while True:
        data = await r.read(65536)
        await q.put((time.monotonic() + ms, data or None))
        if not data: break
    await t
async def handle(r, w):
    tr, tw = await asyncio.open_connection("127.0.0.1", tp)
    await asyncio.gather(pipe(r, tw), pipe(tr, w), return_exceptions=True)
async def main():
    s = await asyncio.start_server(handle, "127.0.0.1", lp)
    async with s: await s.serve_forever()
asyncio.run(main())
