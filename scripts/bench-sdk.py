#!/usr/bin/env python3
"""search_memory and store_memory end to end through the official Python MCP SDK over stdio.

usage: target/pyenv/bin/python scripts/bench-sdk.py [path/to/spine] [records] [clients] [code|prose]

The documents and queries come from `spine-bench corpus N` (the evaluation corpus: real
functions of pinned crates of 460 characters or more, each document cut to 460, each query
the first sentence of another function's doc comment, so no query was asked before), or with
`prose` from `spine-bench corpus N prose` (Debian package descriptions of 200-2,000 bytes, their
synopses as queries: the texts issue 34 was measured with). The script:

1. starts `spine mcp` on a fresh data directory with the SDK's stdio client and stores the
   records one `store_memory` call at a time (the ingest rate of one client);
2. times 100 `search_memory` calls with new queries over that scope, then one query repeated;
3. with `clients` > 1, stores 400 more records from that many concurrent clients (each its own
   `spine mcp` process on the same data directory, the laptop case), for the ingest rate
   of several clients.

`target/pyenv` is the SDK environment `scripts/test.sh` creates.
"""
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from mcp import Client, StdioServerParameters

spine = sys.argv[1] if len(sys.argv) > 1 else "target/release/spine"
records = int(sys.argv[2]) if len(sys.argv) > 2 else 2000
clients = int(sys.argv[3]) if len(sys.argv) > 3 else 8
texts = sys.argv[4] if len(sys.argv) > 4 else "code"
if texts not in ("code", "prose"):
    sys.exit(f"the corpus is code or prose, not {texts!r}")
SCOPE = "bench:project:sdk"
QUERIES = 100
ENV = {**os.environ, "SPINE_LOG": "warn"}


def corpus(n):
    bench = os.path.join(os.path.dirname(spine), "spine-bench")
    args = [bench, "corpus", str(n)] + (["prose"] if texts == "prose" else [])
    out = subprocess.run(args, check=True, capture_output=True, text=True)
    return [json.loads(line) for line in out.stdout.splitlines()]


def q(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p))]


def note(doc):
    return {"content": doc, "scope": SCOPE, "source": "agent-inferred", "category": "convention"}


async def timed(client, tool, args):
    t = time.perf_counter()
    r = await client.call_tool(tool, args)
    ms = (time.perf_counter() - t) * 1000
    if r.is_error:
        raise RuntimeError(f"{tool}: {r.content}")
    return ms


async def store_all(data_dir, docs):
    params = StdioServerParameters(command=spine, args=["mcp", "--data-dir", data_dir], env=ENV)
    async with Client(params) as client:
        return [await timed(client, "store_memory", note(d)) for d in docs]


async def main():
    pairs = corpus(records + QUERIES + 400)
    docs = [p["doc"] for p in pairs[:records]]
    queries = [p["query"] for p in pairs[records:records + QUERIES]]
    extra = [p["doc"] for p in pairs[records + QUERIES:]]
    with tempfile.TemporaryDirectory() as d:
        params = StdioServerParameters(command=spine, args=["mcp", "--data-dir", d], env=ENV)
        async with Client(params) as client:
            t = time.perf_counter()
            stores = [await timed(client, "store_memory", note(doc)) for doc in docs]
            secs = time.perf_counter() - t
            print(f"store_memory, one client: {len(docs)} records of "
                  f"{statistics.mean(map(len, docs)):.0f} characters on average in {secs:.1f} s "
                  f"= {len(docs) / secs:.1f} records/s (p50 {q(stores, .5):.1f} ms)")
            new = [await timed(client, "search_memory", {"query": x, "scope": SCOPE})
                   for x in queries]
            same = [await timed(client, "search_memory", {"query": queries[0], "scope": SCOPE})
                    for _ in range(50)]
            print(f"search_memory over {len(docs)} records, new queries: p50 {q(new, .5):.1f} ms, "
                  f"p95 {q(new, .95):.1f} ms ({len(new)} calls)")
            print(f"search_memory, one query repeated (cached): p50 {q(same, .5):.1f} ms, "
                  f"p95 {q(same, .95):.1f} ms")
        if clients > 1:
            parts = [extra[i::clients] for i in range(clients)]
            t = time.perf_counter()
            done = await asyncio.gather(*(store_all(d, part) for part in parts))
            secs = time.perf_counter() - t
            n = sum(len(x) for x in done)
            print(f"store_memory, {clients} clients (one spine mcp each, one data directory): "
                  f"{n} records in {secs:.1f} s = {n / secs:.1f} records/s "
                  f"(p50 {q([ms for x in done for ms in x], .5):.1f} ms)")


asyncio.run(main())
