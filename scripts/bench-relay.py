#!/usr/bin/env python3
"""A network's delay for benchmarks: a TCP relay on 127.0.0.1 that forwards every chunk, each
way, MS milliseconds after it arrived (in order). Put it between Spine and PostgreSQL to see
what round trips cost across a network:

usage: python3 scripts/bench-relay.py LISTEN_PORT TARGET_PORT MS
  e.g. python3 scripts/bench-relay.py 46000 5432 0.25 &
       spine-bench load --mode mix -- --database-url postgres://…@127.0.0.1:46000/spine

asyncio's timers make each round trip through it cost more than 2 x MS (~2.5 ms at 0.25):
compare builds through the same relay, not with a real network's figures.

`kill -USR1 <pid>` cuts every connection open through it at once, as a network that drops
them: both sockets of each are aborted, whatever is queued is lost. New connections are
relayed as before. The fault tests (crates/spine/tests/pgfaults.rs) cut a node's database
connections in the middle of its requests this way."""
import asyncio, signal, sys, time
lp, tp, ms = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]) / 1000
live = set()  # (client writer, server writer) of each open connection
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
    pair = (w, tw)
    live.add(pair)
    try:
        await asyncio.gather(pipe(r, tw), pipe(tr, w), return_exceptions=True)
    finally:
        live.discard(pair)
def cut():
    for pair in list(live):
        for w in pair: w.transport.abort()
async def main():
    asyncio.get_running_loop().add_signal_handler(signal.SIGUSR1, cut)
    s = await asyncio.start_server(handle, "127.0.0.1", lp)
    async with s: await s.serve_forever()
asyncio.run(main())
