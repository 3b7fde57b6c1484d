#!/usr/bin/env python3
"""Cold start and per-call latency of `spine mcp`, measured over raw JSON-RPC on stdio.

usage: python3 scripts/bench-latency.py [path/to/spine] [runs]

Cold start = from process launch to the `initialize` answer. Then one store_memory and
search_memory calls, each timed from request written to answer read (the model is warm
after the first call; the first store is reported separately): new queries (each asked
once: the query cache cannot answer) and one query repeated (the cache answers).
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

spine = sys.argv[1] if len(sys.argv) > 1 else "target/release/spine"
runs = int(sys.argv[2]) if len(sys.argv) > 2 else 50


class Session:
    def __init__(self, data_dir):
        self.t0 = time.perf_counter()
        self.p = subprocess.Popen(
            [spine, "mcp", "--data-dir", data_dir],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        self.next_id = 0

    def send(self, method, params=None, notify=False):
        msg = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            msg["params"] = params
        if not notify:
            self.next_id += 1
            msg["id"] = self.next_id
        self.p.stdin.write((json.dumps(msg) + "\n").encode())
        self.p.stdin.flush()
        if notify:
            return None
        while True:
            line = self.p.stdout.readline()
            if not line:
                raise RuntimeError("spine exited")
            reply = json.loads(line)
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise RuntimeError(reply["error"])
                return reply["result"]

    def call(self, tool, args):
        t = time.perf_counter()
        r = self.send("tools/call", {"name": tool, "arguments": args})
        ms = (time.perf_counter() - t) * 1000
        if r.get("isError"):
            raise RuntimeError(r)
        return r, ms


def main():
    starts = []
    for _ in range(5):
        with tempfile.TemporaryDirectory() as d:
            s = Session(d)
            s.send("initialize", {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "bench", "version": "0"},
            })
            starts.append((time.perf_counter() - s.t0) * 1000)
            s.p.kill()
            s.p.wait()
    print(f"cold start to initialize answer: median {statistics.median(starts):.1f} ms "
          f"(min {min(starts):.1f}, max {max(starts):.1f}, 5 launches)")

    with tempfile.TemporaryDirectory() as d:
        s = Session(d)
        s.send("initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                              "clientInfo": {"name": "bench", "version": "0"}})
        s.send("notifications/initialized", notify=True)
        scope = "bench:project:spine"
        _, first_store = s.call("store_memory", {
            "content": "We chose PostgreSQL for storage.", "scope": scope,
            "source": "user-said", "category": "decision"})
        for i in range(99):
            s.call("store_memory", {"content": f"Convention {i}: module {i} logs with tracing.",
                                    "scope": scope, "source": "agent-inferred",
                                    "category": "convention"})
        stores = [s.call("store_memory", {"content": f"Gotcha {i}: flaky test {i} needs a retry.",
                                          "scope": scope, "source": "agent-inferred",
                                          "category": "gotcha"})[1] for i in range(runs)]
        cached = [s.call("search_memory", {"query": "which database do we persist to",
                                           "scope": scope})[1] for _ in range(runs)]
        # New queries: each text is asked once, so the query cache never answers.
        topics = ["database", "logging", "retries", "flaky tests", "tracing", "storage",
                  "deploys", "caching", "timeouts", "modules"]
        searches = [s.call("search_memory", {
            "query": f"what did we decide about {topics[i % len(topics)]} in module {i}",
            "scope": scope})[1] for i in range(runs)]
        s.p.kill()
        s.p.wait()
    q = lambda xs, p: sorted(xs)[min(len(xs) - 1, int(len(xs) * p))]
    print(f"first store_memory (waits for the model to load): {first_store:.1f} ms")
    print(f"store_memory: p50 {q(stores, .5):.1f} ms, p95 {q(stores, .95):.1f} ms ({runs} calls)")
    print(f"search_memory over {100 + runs} records, new queries: p50 {q(searches, .5):.1f} ms, "
          f"p95 {q(searches, .95):.1f} ms ({runs} calls)")
    print(f"search_memory, one query repeated (cached): p50 {q(cached, .5):.1f} ms, "
          f"p95 {q(cached, .95):.1f} ms ({runs} calls)")


main()
