#!/usr/bin/env python3
"""Latency of `spine hook` from process start to exit, on a store of N records.

usage: python3 scripts/bench-hook.py [path/to/spine] [records] [runs] [repos] [busy]

Builds a store of N records of ~460 characters in one scope of a scratch git repository
(`bench:project:hookbench`), 20 of them rules: one record is stored through `spine mcp` to
learn the record format, the rest are written as a `spine export` file and read back with
`spine import` (vectors are random unit vectors stamped with the built-in model: the index
scans them exactly as real ones, and no embedding is spent on the set-up). Then runs
`spine hook prompt` with distinct prompts and `spine hook session-start`, each `runs` times,
timing every process from spawn to exit (model load, store and index load, query embedding,
search, output), and prints p50 / p95 / max. With `repos` > 1 the records are spread over
that many repositories' scopes (`bench:project:hookbench` and `bench:project:other-N`, in
turn), as in a store that serves several repositories: the hook's holds one in `repos`.
With `busy` > 0, that many processes spin at normal priority while the hooks run, as a
build on every core would (give the machine's core count).
"""
import base64
import json
import os
import random
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import uuid

spine = sys.argv[1] if len(sys.argv) > 1 else "target/release/spine"
records = int(sys.argv[2]) if len(sys.argv) > 2 else 10_000
runs = int(sys.argv[3]) if len(sys.argv) > 3 else 30
repos = int(sys.argv[4]) if len(sys.argv) > 4 else 1
busy = int(sys.argv[5]) if len(sys.argv) > 5 else 0
SCOPE = "bench:project:hookbench"
CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
WORDS = ("deploy cache index query retry timeout build release schema migration token "
         "session scope vector embedding latency budget cursor shard replica backup "
         "rollback config flag secret certificate queue worker thread lock").split()


def seed_record(data):
    """Stores one record through MCP and exports it: the template of the others."""
    p = subprocess.Popen([spine, "mcp", "--data-dir", data], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)

    def call(i, method, params):
        p.stdin.write(json.dumps({"jsonrpc": "2.0", "id": i, "method": method,
                                  "params": params}) + "\n")
        p.stdin.flush()
        return json.loads(p.stdout.readline())

    call(1, "initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                           "clientInfo": {"name": "bench", "version": "1"}})
    p.stdin.write(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}) + "\n")
    call(2, "tools/call", {"name": "store_memory", "arguments": {
        "content": "template", "scope": SCOPE, "source": "user-said", "category": "decision"}})
    p.kill()
    p.wait()
    out = subprocess.run([spine, "export", "--data-dir", data], capture_output=True,
                         text=True, check=True).stdout.splitlines()
    return json.loads(out[0]), json.loads(out[1])


def sentence(rng, n):
    return " ".join(rng.choice(WORDS) for _ in range(n))


def build(data, n):
    header, line = seed_record(data)
    template, vector = line["record"], line["vector"]
    rng = random.Random(2026)
    path = os.path.join(data, "bench.jsonl")
    with open(path, "w") as f:
        f.write(json.dumps(header) + "\n")
        for i in range(n - 1):
            r = dict(template)
            r["id"] = str(uuid.uuid4())
            r["short_id"] = "".join(rng.choice(CROCKFORD) for _ in range(10))
            text = f"Note {i}: " + sentence(rng, 60)
            r["content"] = text[:460]
            if i % repos:
                r["scope"] = f"bench:project:other-{i % repos}"
            if i < 20:
                r["category"], r["scope"] = "rule", "rule:repo:hookbench"
                r["summary"], r["summary_source"] = sentence(rng, 8), "client"
            created = 1_790_000_000 + i
            r["created_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(created))
            v = [rng.gauss(0, 1) for _ in range(vector["dims"])]
            norm = sum(x * x for x in v) ** 0.5
            blob = struct.pack(f"<{len(v)}f", *(x / norm for x in v))
            vec = dict(vector, f32le=base64.b64encode(blob).decode())
            f.write(json.dumps({"record": r, "vector": vec}) + "\n")
        f.write(json.dumps({"end": {"records": n - 1}}) + "\n")
    subprocess.run([spine, "import", path, "--data-dir", data], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def timed(args, stdin):
    t0 = time.perf_counter()
    out = subprocess.run(args, input=stdin, capture_output=True, text=True)
    ms = (time.perf_counter() - t0) * 1000
    if out.returncode != 0 or out.stderr.strip():
        sys.exit(f"{args}: {out.returncode} {out.stderr}")
    return ms, out.stdout


def report(label, samples):
    s = sorted(samples)
    p95 = s[min(len(s) - 1, int(len(s) * 0.95))]
    print(f"{label}: p50 {statistics.median(s):.0f} ms, p95 {p95:.0f} ms, max {s[-1]:.0f} ms "
          f"({len(s)} runs)")


with tempfile.TemporaryDirectory() as tmp:
    data, repo = os.path.join(tmp, "data"), os.path.join(tmp, "hookbench")
    os.makedirs(os.path.join(repo, ".git"))
    with open(os.path.join(repo, ".spine.toml"), "w") as f:
        f.write(f'scope = "{SCOPE}"\nrule_scopes = ["rule:repo:hookbench"]\n')
    t0 = time.perf_counter()
    build(data, records)
    print(f"store of {records} records built in {time.perf_counter() - t0:.1f} s")
    hook = [spine, "hook", "--data-dir", data]
    spinning = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
                for _ in range(busy)]
    rng = random.Random(7)
    prompts, starts = [], []
    printed = 0
    for i in range(runs):
        text = f"How do we handle the {sentence(rng, 3)} when the {sentence(rng, 2)} fails?"
        ms, out = timed(hook + ["prompt", "--min-score", "0"],
                        json.dumps({"cwd": repo, "prompt": text}))
        prompts.append(ms)
        printed += len(out)
        ms, _ = timed(hook + ["session-start"], json.dumps({"cwd": repo, "source": "startup"}))
        starts.append(ms)
    for p in spinning:
        p.kill()
        p.wait()
    assert printed > 0, "the prompt hook printed nothing"
    report("spine hook prompt (model load + embed + search)", prompts)
    report("spine hook session-start (no model)", starts)
