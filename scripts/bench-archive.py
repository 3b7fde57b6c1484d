#!/usr/bin/env python3
"""archive_memory and restore_memory of ten ids at once, over one kept-alive HTTP connection
(raw JSON-RPC, no SDK): starts `spine serve` on a fresh data directory and the given database,
stores ten notes, then archives and restores all ten 30 times; prints each tool's p50 in ms.

usage: python3 scripts/bench-archive.py path/to/spine DATABASE_URL
  (put scripts/bench-relay.py in front of the database to see its round trips)"""
import http.client, json, os, socket, statistics, subprocess, sys, tempfile, time
spine, db = sys.argv[1], sys.argv[2]
s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
d = tempfile.mkdtemp()
p = subprocess.Popen([spine, "serve", "--data-dir", d, "--listen", f"127.0.0.1:{port}", "--database-url", db],
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, "SPINE_LOG": "warn"})
for _ in range(300):
    try: socket.create_connection(("127.0.0.1", port)).close(); break
    except OSError: time.sleep(0.1)
c = http.client.HTTPConnection("127.0.0.1", port)
H = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
n = [0]
def rpc(method, params, sid=None):
    n[0] += 1
    h = dict(H)
    if sid: h["Mcp-Session-Id"] = sid; h["MCP-Protocol-Version"] = "2025-06-18"
    c.request("POST", "/mcp", json.dumps({"jsonrpc": "2.0", "id": n[0], "method": method, "params": params}), h)
    r = c.getresponse(); body = r.read().decode()
    sid = r.getheader("Mcp-Session-Id") or sid
    for line in body.splitlines():
        if line.startswith("data:"): body = line[5:]
    return json.loads(body), sid
_, sid = rpc("initialize", {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "a", "version": "1"}})
h = dict(H); h["Mcp-Session-Id"] = sid; h["MCP-Protocol-Version"] = "2025-06-18"
c.request("POST", "/mcp", json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}), h); c.getresponse().read()
def tool(name, args):
    r, _ = rpc("tools/call", {"name": name, "arguments": args}, sid)
    return r["result"]["structuredContent"]
ids = [tool("store_memory", {"content": f"Archive test note number {i}: the build cache lives in /var/cache/b{i}.",
        "scope": "bench:project:arch", "source": "agent-inferred", "category": "convention"})["id"] for i in range(10)]
ms = {"archive_memory": [], "restore_memory": []}
for _ in range(30):
    for t in ms:
        s0 = time.perf_counter(); out = tool(t, {"ids": ids}); ms[t].append((time.perf_counter() - s0) * 1e3)
        assert all(r["outcome"] in ("archived", "restored") for r in out["results"]), out
print({t: round(statistics.median(v), 1) for t, v in ms.items()})
p.terminate(); p.wait()
