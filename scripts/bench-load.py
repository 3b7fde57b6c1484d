#!/usr/bin/env python3
"""Load on `spine serve`: many concurrent streamable-HTTP MCP sessions of the official Python SDK.

usage: target/pyenv/bin/python scripts/bench-load.py [path/to/spine] [sessions=50] [seconds=30] [seed_records=500]

The figures of issue 17 (50 concurrent HTTP sessions on a store/search/list/get/update/archive
mix: calls per second, search_memory p50, p50 of the calls that embed nothing); the script
measures and prints them, it does not judge them. It:

1. starts `spine serve --data-dir <fresh temp dir> --listen 127.0.0.1:<free port>` and waits
   for `GET /healthz`;
2. stores `seed_records` records through one session (documents from `spine-bench corpus N`
   next to the spine binary, as in scripts/bench-sdk.py: ~460 characters of real code);
3. opens `sessions` sessions (each its own SDK `Client` on `/mcp`, its own HTTP connection
   pool), lists the tools once in each (the SDK fetches output schemas on first use), and
   then runs them all for `seconds` seconds, each calling tools one after another, chosen at
   random with the weights of MIX: search_memory with a query not asked before (the corpus
   queries, then again with a numbered suffix: the query cache cannot answer), store_memory with a new document, get_memory / update_memory /
   archive_memory on a record stored earlier (each archived once), list_memory of the scope.
   Half of the updates replace the content (re-embedded, `update_memory (content)`), the
   others change only the tags (nothing to embed, `update_memory`);
4. prints calls/s, failures per tool and the first messages, p50/p95/p99 per tool, the p50
   of every call that embeds nothing, the same inside the server (its own call-duration
   histogram on GET /metrics, which leaves out the time a call waits in this client: one
   Python process, which on 2 cores saturates near 100-150 calls/s and then queues the
   calls of 50 sessions for hundreds of ms), the server's peak RSS (VmHWM) and the CPU time of the
   server, of this client (both share the machine) and of every other process (a build or
   test running meanwhile skews the figures), then the same figures as one JSON line.

Every call has a 30 s timeout; a tool error, an unexpected result or an exception is a
failed call. Calls started before the end are waited for; calls/s counts successful calls
over the time from start until the last call ended; the SDK's own warnings are counted and
printed once each. BENCH_MIX (e.g. `get_memory=50,list_memory=50`) replaces the weights of
MIX. BENCH_MODE picks how the SDK negotiates the protocol: `auto` (default, what
the SDK does unless told otherwise) settles on 2026-07-28, which spine serves without a
server-side session; `legacy` makes each client an initialize-handshake session with its own
`Mcp-Session-Id` (ended by DELETE /mcp). The negotiated version is printed.
`target/pyenv` is the SDK environment `scripts/test.sh` creates.
"""
import asyncio
import collections
import json
import logging
import os
import random
import re
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

import anyio
from mcp import Client

spine = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "target/release/spine")
sessions = int(sys.argv[2]) if len(sys.argv) > 2 else 50
seconds = float(sys.argv[3]) if len(sys.argv) > 3 else 30
seed_records = int(sys.argv[4]) if len(sys.argv) > 4 else 500
SCOPE = "bench:project:load"
MODE = os.environ.get("BENCH_MODE", "auto")
CALL_TIMEOUT = 30
# Tool weights (percent) of each session's calls.
MIX = {"search_memory": 30, "store_memory": 15, "get_memory": 20, "list_memory": 20,
       "update_memory": 10, "archive_memory": 5}
# BENCH_MIX="get_memory=50,list_memory=50" replaces the weights (e.g. to load the server with
# calls that embed nothing only).
if os.environ.get("BENCH_MIX"):
    MIX = {k: int(v) for k, v in (kv.split("=") for kv in os.environ["BENCH_MIX"].split(","))}
CONTENT_UPDATES = 0.5  # the share of update_memory calls that replace the content
# Labels of the calls that embed nothing (update_memory: tags only, same content).
NO_EMBED = ("get_memory", "list_memory", "update_memory", "archive_memory")
# The server's histogram has one label for both kinds of update: those it leaves out.
SERVER_NO_EMBED = ("get_memory", "list_memory", "archive_memory")
LABELS = ["search_memory", "store_memory", "get_memory", "list_memory", "update_memory",
          "update_memory (content)", "archive_memory"]
SHOW_ERRORS = 5
ENV = {**os.environ, "SPINE_LOG": "warn"}


def corpus(n):
    """`spine-bench corpus n`, or as many pairs as the corpus makes when it makes fewer."""
    bench = os.path.join(os.path.dirname(spine), "spine-bench")
    out = subprocess.run([bench, "corpus", str(n)], capture_output=True, text=True)
    if out.returncode != 0:
        words = out.stderr.split("makes only ")
        if len(words) < 2:
            raise RuntimeError(f"spine-bench corpus {n}: {out.stderr.strip()}")
        return corpus(int(words[1].split()[0]))
    return [json.loads(line) for line in out.stdout.splitlines()]


def q(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p))] if xs else float("nan")


def pct(xs, p):
    """A percentile for the JSON line: rounded, None without calls."""
    return round(q(xs, p), 1) if xs else None


class Tally(logging.Handler):
    """Counts the SDK's warnings (one per session would bury the summary) for the report."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.seen = collections.Counter()

    def emit(self, record):
        self.seen[record.getMessage()[:200]] += 1


SDK_WARNINGS = Tally()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def proc_status(pid, key):
    """A `kB` field of /proc/<pid>/status in MB, or None once the process is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None


def proc_cpu(pid):
    """User + system CPU seconds of a process (/proc/<pid>/stat), or None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except OSError:
        return None


def machine_cpu():
    """CPU seconds every process of the machine has used (/proc/stat), or None."""
    try:
        with open("/proc/stat") as f:
            ticks = [int(x) for x in f.readline().split()[1:]]
    except OSError:
        return None
    busy = sum(ticks[:7]) - ticks[3] - ticks[4]  # user to softirq but idle and iowait
    return busy / os.sysconf("SC_CLK_TCK")


def own_cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def wait_healthy(port, proc, timeout=60):
    deadline = time.time() + timeout
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"spine serve exited with {proc.returncode} before answering")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1) as r:
                if r.status == 200:
                    return
        except OSError:
            if time.time() > deadline:
                raise RuntimeError(f"spine serve did not answer /healthz within {timeout} s")
            time.sleep(0.1)


BUCKET = re.compile(r'^spine_call_duration_seconds_bucket\{(.*)\} (\S+)$')


def server_buckets(port):
    """{tool: [(upper bound s, cumulative count)]} of the server's own call durations
    (`spine_call_duration_seconds` on GET /metrics, MCP lane), or None if unreadable."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            text = r.read().decode()
    except OSError:
        return None
    out = collections.defaultdict(list)
    for line in text.splitlines():
        m = BUCKET.match(line)
        if not m:
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1)))
        if labels.get("lane") == "mcp":
            out[labels["tool"]].append((float(labels["le"]), float(m.group(2))))
    return {tool: sorted(b) for tool, b in out.items()}


def bucket_diff(after, before, tools):
    """The buckets of `tools` summed, counting only calls between the two scrapes."""
    total = collections.Counter()
    for tool in tools:
        for le, n in after.get(tool, []):
            total[le] += n
        for le, n in (before or {}).get(tool, []):
            total[le] -= n
    return sorted(total.items())


def bucket_quantile(buckets, p):
    """Prometheus' histogram_quantile: linear within the bucket holding the p-th call."""
    count = buckets[-1][1] if buckets else 0
    if count <= 0:
        return None
    rank, lower, below = p * count, 0.0, 0.0
    for le, n in buckets:
        if n >= rank:
            if le == float("inf"):
                return lower * 1e3
            return (lower + (le - lower) * (rank - below) / max(n - below, 1e-9)) * 1e3
        lower, below = le, n
    return None


def share_within(buckets, seconds_bound):
    """The share of calls that took at most `seconds_bound` (a bucket bound, so exact)."""
    count = buckets[-1][1] if buckets else 0
    n = next((n for le, n in buckets if abs(le - seconds_bound) < 1e-12), None)
    return None if not count or n is None else n / count


def describe(e):
    """An exception in one line; an exception group by its first leaf (the SDK's task groups)."""
    while isinstance(e, BaseExceptionGroup) and e.exceptions:
        e = e.exceptions[0]
    return f"{type(e).__name__}: {e}"[:300]


def text_of(result):
    return " ".join(getattr(c, "text", str(c)) for c in result.content)[:300]


def note(doc):
    return {"content": doc, "scope": SCOPE, "source": "agent-inferred", "category": "convention"}


class Load:
    """What the sessions share: the records stored so far, the texts to use, the figures."""

    def __init__(self, docs, queries):
        self.docs, self.queries = docs, queries
        self.next_doc = self.next_query = 0
        self.ids = []          # every record stored (seed and load)
        self.content = {}      # id -> its current content, while known for sure
        self.archived = set()  # archived (or being archived): never archived twice
        self.busy = set()      # being updated or archived by some session right now
        self.ms = {label: [] for label in LABELS}
        self.failed = {label: 0 for label in LABELS}
        self.errors = []
        self.deadline = float("inf")
        self.last_end = 0.0    # when the latest call ended

    def doc(self):
        i, self.next_doc = self.next_doc, self.next_doc + 1
        doc = self.docs[i % len(self.docs)]
        return doc if i < len(self.docs) else f"{doc}\n// copy {i // len(self.docs)}"

    def query(self):
        i, self.next_query = self.next_query, self.next_query + 1
        text = self.queries[i % len(self.queries)]
        return text if i < len(self.queries) else f"{text} (case {i // len(self.queries)})"

    def fail(self, label, message):
        self.failed[label] += 1
        if len(self.errors) < SHOW_ERRORS:
            self.errors.append(f"{label}: {message}")

    def pick_id(self, rng, usable):
        """A random stored id passing `usable`, or None after a few misses."""
        for _ in range(20):
            if not self.ids:
                return None
            i = rng.choice(self.ids)
            if usable(i):
                return i
        return None

    def stored(self, content, sc):
        self.ids.append(sc["id"])
        self.content[sc["id"]] = content

    async def call(self, client, label, tool, args, check):
        """One timed call; returns its structured content, or None when it failed."""
        t = time.perf_counter()
        try:
            with anyio.fail_after(CALL_TIMEOUT + 5):
                r = await client.call_tool(tool, args, read_timeout_seconds=CALL_TIMEOUT)
            ms = (time.perf_counter() - t) * 1000
            if r.is_error:
                self.fail(label, f"tool error: {text_of(r)}")
                return None
            sc = r.structured_content
            problem = check(sc or {})
            if problem:
                self.fail(label, f"unexpected result ({problem}): {json.dumps(sc)[:300]}")
                return None
        except Exception as e:  # noqa: BLE001 -- any exception is a failed call
            self.fail(label, f"after {time.perf_counter() - t:.1f} s: {describe(e)}")
            return None
        except BaseException:  # cancelled: its session broke down (or the run was stopped)
            self.fail(label, f"cancelled after {time.perf_counter() - t:.1f} s")
            raise
        finally:
            self.last_end = time.perf_counter()
        self.ms[label].append(ms)
        return sc

    async def one(self, client, rng):
        """One call of the mix."""
        tool = rng.choices(list(MIX), weights=list(MIX.values()))[0]
        if tool == "search_memory":
            await self.call(client, tool, tool, {"query": self.query(), "scope": SCOPE},
                            lambda sc: None if "memories" in sc else "no memories")
        elif tool == "list_memory":
            await self.call(client, tool, tool, {"scope": SCOPE},
                            lambda sc: None if "memories" in sc else "no memories")
        elif tool == "store_memory":
            doc = self.doc()
            sc = await self.call(client, tool, tool, note(doc),
                                 lambda sc: None if sc.get("id") else "no id")
            if sc:
                self.stored(doc, sc)
        elif tool == "get_memory":
            i = self.pick_id(rng, lambda i: True)
            if i is None:
                return await asyncio.sleep(0)  # nothing stored yet: let the other sessions run
            await self.call(client, tool, tool, {"id": i},
                            lambda sc: None if sc.get("id") == i else "another id")
        elif tool == "update_memory":
            i = self.pick_id(rng, lambda i: i not in self.busy and i in self.content)
            if i is None:
                return await asyncio.sleep(0)
            self.busy.add(i)
            try:
                if rng.random() < CONTENT_UPDATES:
                    label, content, extra = "update_memory (content)", self.doc(), {}
                else:
                    label, content = "update_memory", self.content[i]
                    extra = {"tags": ["load", f"v{rng.randrange(1000)}"]}
                sc = await self.call(client, label, tool, {"id": i, "content": content, **extra},
                                     lambda sc: None if sc.get("status") == "updated" else "status")
                if sc:
                    self.content[i] = content
                else:  # the server may or may not have applied it: no tags-only update again
                    self.content.pop(i, None)
            finally:
                self.busy.discard(i)
        elif tool == "archive_memory":
            i = self.pick_id(rng, lambda i: i not in self.busy and i not in self.archived)
            if i is None:
                return await asyncio.sleep(0)
            self.busy.add(i)
            self.archived.add(i)
            try:
                await self.call(
                    client, tool, tool, {"ids": [i]},
                    lambda sc: None if [x.get("outcome") for x in sc.get("results", [])] == ["archived"]
                    else "outcome")
            finally:
                self.busy.discard(i)


async def seed(url, load, n):
    async with Client(url, mode=MODE, read_timeout_seconds=CALL_TIMEOUT, cache=None) as client:
        protocol = client.protocol_version
        t = time.perf_counter()
        for _ in range(n):
            doc = load.doc()
            sc = await load.call(client, "store_memory", "store_memory", note(doc),
                                 lambda sc: None if sc.get("id") else "no id")
            if sc:
                load.stored(doc, sc)
        secs = time.perf_counter() - t
    seeded = load.ms["store_memory"]
    print(f"seeded {len(seeded)} records (of {n}) through one session in {secs:.1f} s "
          f"(store_memory p50 {q(seeded, .5):.1f} ms), protocol {protocol}, mode {MODE}")
    if load.failed["store_memory"]:
        print(f"  {load.failed['store_memory']} seed stores failed: {load.errors}")
    # The measurement starts from clean figures.
    load.ms = {label: [] for label in LABELS}
    load.failed = {label: 0 for label in LABELS}
    load.errors = []


async def run_session(k, url, load, ready, go, outcome):
    rng = random.Random(k)
    try:
        async with Client(url, mode=MODE, read_timeout_seconds=CALL_TIMEOUT, cache=None) as client:
            with anyio.fail_after(CALL_TIMEOUT):
                await client.list_tools()
            outcome["connected"] += 1
            ready()
            await go.wait()
            while time.perf_counter() < load.deadline:
                await load.one(client, rng)
    except Exception as e:  # noqa: BLE001 -- a session that cannot connect or breaks down
        outcome["broken"] += 1
        if len(outcome["messages"]) < SHOW_ERRORS:
            outcome["messages"].append(f"session {k}: {describe(e)}")
        ready()


async def bench(url, port, load, pid):
    await seed(url, load, seed_records)
    rss_seeded = proc_status(pid, "VmHWM")
    outcome = {"connected": 0, "broken": 0, "messages": []}
    go, all_ready, waiting = asyncio.Event(), asyncio.Event(), [sessions]

    def ready():
        waiting[0] -= 1
        if waiting[0] <= 0:
            all_ready.set()

    t = time.perf_counter()
    tasks = [asyncio.create_task(run_session(k, url, load, ready, go, outcome))
             for k in range(sessions)]
    try:
        await asyncio.wait_for(all_ready.wait(), 120)
    except asyncio.TimeoutError:
        pass
    connect_secs = time.perf_counter() - t
    buckets0 = server_buckets(port)
    cpu0, server_cpu0, machine0 = own_cpu(), proc_cpu(pid), machine_cpu()
    start = time.perf_counter()
    load.deadline = start + seconds
    go.set()
    _, pending = await asyncio.wait(tasks, timeout=seconds + CALL_TIMEOUT + 60)
    for task in pending:
        task.cancel()
    # Up to the end of the last call, not of the sessions' teardown (DELETE /mcp).
    elapsed = max(load.last_end, load.deadline) - start
    server_cpu1, machine1 = proc_cpu(pid), machine_cpu()
    buckets1 = server_buckets(port)
    client_cpu = own_cpu() - cpu0
    server_cpu = None if server_cpu0 is None or server_cpu1 is None else server_cpu1 - server_cpu0
    others = None
    if machine0 is not None and machine1 is not None and server_cpu is not None:
        others = max(0.0, machine1 - machine0 - server_cpu - client_cpu)
    return {
        "connect_secs": connect_secs,
        "elapsed": elapsed,
        "outcome": outcome,
        "stuck": len(pending),
        "client_cpu": client_cpu,
        "server_cpu": server_cpu,
        "others_cpu": others,
        "rss_seeded": rss_seeded,
        "server_buckets": None if buckets0 is None or buckets1 is None else (buckets0, buckets1),
    }


def report(load, r, peak_rss):
    ok = sum(len(v) for v in load.ms.values())
    failed = sum(load.failed.values())
    elapsed = r["elapsed"]
    no_embed = [ms for label in NO_EMBED for ms in load.ms[label]]
    o = r["outcome"]
    print(f"{sessions} sessions ({o['connected']} connected in {r['connect_secs']:.1f} s, "
          f"{o['broken']} broken, {r['stuck']} stuck), {seconds:g} s of load "
          f"({elapsed:.1f} s until the last call ended), {len(load.ids)} records at the end, "
          f"{len(load.archived)} archived")
    for m in o["messages"]:
        print(f"  {m}")
    print(f"calls: {ok + failed} ({failed} failed), {ok / elapsed:.1f} successful calls/s")
    print(f"{'tool':<24}{'calls':>7}{'failed':>8}{'p50 ms':>9}{'p95 ms':>9}{'p99 ms':>9}")
    tools = {}
    for label in LABELS:
        xs = load.ms[label]
        tools[label] = {"calls": len(xs) + load.failed[label], "failed": load.failed[label],
                        "p50_ms": pct(xs, .5), "p95_ms": pct(xs, .95), "p99_ms": pct(xs, .99)}
        print(f"{label:<24}{len(xs) + load.failed[label]:>7}{load.failed[label]:>8}"
              f"{q(xs, .5):>9.1f}{q(xs, .95):>9.1f}{q(xs, .99):>9.1f}")
    print(f"calls that embed nothing ({', '.join(NO_EMBED)}): {len(no_embed)}, "
          f"p50 {q(no_embed, .5):.1f} ms, p95 {q(no_embed, .95):.1f} ms")
    server_side = {}
    if r["server_buckets"] is not None:
        before, after = r["server_buckets"]
        print("inside the server (spine_call_duration_seconds from GET /metrics: from the "
              "tool's dispatch to its result, so without HTTP framing and the client's "
              "queueing; p50 interpolated within histogram buckets):")
        for name, group, bound in [("search_memory", ["search_memory"], 0.25),
                                   ("store_memory", ["store_memory"], 0.25),
                                   ("get/list/archive (embed nothing)", SERVER_NO_EMBED, 0.01)]:
            b = bucket_diff(after, before, group)
            p50, within = bucket_quantile(b, .5), share_within(b, bound)
            server_side[name] = {"p50_ms": None if p50 is None else round(p50, 1),
                                 f"within_{bound * 1e3:g}ms": None if within is None
                                 else round(within, 3)}
            p50s = "n/a" if p50 is None else f"{p50:.1f} ms"
            withins = "n/a" if within is None else f"{within:.0%}"
            print(f"  {name}: p50 {p50s}, {withins} within {bound * 1e3:g} ms")
    rss = "unknown" if peak_rss is None else f"{peak_rss:.0f} MB"
    seeded = "unknown" if r["rss_seeded"] is None else f"{r['rss_seeded']:.0f} MB"
    server_cpu, others = r["server_cpu"], r["others_cpu"]
    print(f"server peak RSS (VmHWM): {rss} (after seeding: {seeded})")
    print(f"CPU during the load: server {'unknown' if server_cpu is None else f'{server_cpu:.1f} s'}, "
          f"this client {r['client_cpu']:.1f} s, other processes "
          f"{'unknown' if others is None else f'{others:.1f} s'}, over {elapsed:.1f} s "
          f"on {os.cpu_count()} CPUs")
    for message, n in SDK_WARNINGS.seen.most_common(SHOW_ERRORS):
        print(f"SDK warning, {n} times: {message}")
    if load.errors:
        print("first failures:")
        for e in load.errors:
            print(f"  {e}")
    print(json.dumps({
        "sessions": sessions, "seconds": seconds, "seed_records": seed_records, "mode": MODE,
        "elapsed_s": round(elapsed, 2), "calls": ok + failed, "failed": failed,
        "calls_per_s": round(ok / elapsed, 1),
        "search_p50_ms": tools["search_memory"]["p50_ms"],
        "no_embed_p50_ms": pct(no_embed, .5),
        "peak_rss_mb": None if peak_rss is None else round(peak_rss),
        "server_cpu_s": None if server_cpu is None else round(server_cpu, 1),
        "client_cpu_s": round(r["client_cpu"], 1),
        "others_cpu_s": None if others is None else round(others, 1),
        "broken_sessions": o["broken"], "sdk_warnings": sum(SDK_WARNINGS.seen.values()),
        "tools": tools,
        "server_side": server_side,
    }))


def stop(proc):
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def interrupted(*_):
    raise KeyboardInterrupt


def main():
    # A SIGTERM to this script cleans up like Ctrl-C does.
    signal.signal(signal.SIGTERM, interrupted)
    sdk_log = logging.getLogger("mcp")
    sdk_log.addHandler(SDK_WARNINGS)
    sdk_log.propagate = False
    pairs = corpus(seed_records + 4000)
    docs = [p["doc"] for p in pairs]
    queries = [p["query"] for p in pairs]
    random.Random(17).shuffle(queries)
    load = Load(docs, queries)
    data_dir = tempfile.mkdtemp(prefix="spine-bench-load-")
    port = free_port()
    log_path = os.path.join(data_dir, "serve.log")
    proc = None
    try:
        with open(log_path, "w") as log:
            proc = subprocess.Popen(
                [spine, "serve", "--data-dir", os.path.join(data_dir, "data"),
                 "--listen", f"127.0.0.1:{port}"],
                env=ENV, stdout=log, stderr=subprocess.STDOUT)
        wait_healthy(port, proc)
        r = asyncio.run(bench(f"http://127.0.0.1:{port}/mcp", port, load, proc.pid))
        peak_rss = proc_status(proc.pid, "VmHWM")
        if proc.poll() is not None:
            print(f"spine serve exited with {proc.returncode} during the run")
        report(load, r, peak_rss)
    finally:
        if proc is not None:
            stop(proc)
            with open(log_path, errors="replace") as f:
                lines = f.read().splitlines()
            if lines:
                print(f"spine serve logged {len(lines)} lines (SPINE_LOG=warn), the last ones:",
                      file=sys.stderr)
                for line in lines[-10:]:
                    print(f"  {line}", file=sys.stderr)
        shutil.rmtree(data_dir, ignore_errors=True)


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        print("interrupted: server stopped, data directory removed", file=sys.stderr)
        sys.exit(130)
