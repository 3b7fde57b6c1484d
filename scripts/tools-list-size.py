#!/usr/bin/env python3
"""Measures what `tools/list` costs a model's context: starts `spine mcp` on a scratch data
directory, lists the tools, and prints the characters (compact JSON, as on the wire) of the
whole list, of the part a model reads to call the tools (names, descriptions, input schemas)
and of the output schemas, with a ~4-characters-per-token estimate.

    python3 scripts/tools-list-size.py target/release/spine [--per-tool]
"""
import json
import subprocess
import sys
import tempfile


def compact(x):
    return json.dumps(x, separators=(",", ":"))


def main():
    spine = sys.argv[1] if len(sys.argv) > 1 else "target/release/spine"
    with tempfile.TemporaryDirectory() as data:
        p = subprocess.Popen([spine, "mcp", "--data-dir", data], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)

        def send(message):
            p.stdin.write(json.dumps(message) + "\n")
            p.stdin.flush()

        send({"jsonrpc": "2.0", "id": 1, "method": "initialize",
              "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                         "clientInfo": {"name": "size", "version": "1"}}})
        init = json.loads(p.stdout.readline())
        send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        send({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
        tools = json.loads(p.stdout.readline())["result"]["tools"]
        p.kill()
    whole = len(compact(tools))
    inputs = sum(len(compact(t.get("inputSchema", {}))) for t in tools)
    outputs = sum(len(compact(t.get("outputSchema", {}))) for t in tools)
    descriptions = sum(len(t.get("description", "")) for t in tools)
    names = sum(len(t["name"]) for t in tools)
    seen = names + descriptions + inputs
    instructions = len(init["result"].get("instructions", ""))
    print(f"{len(tools)} tools: whole list {whole} characters (~{whole // 4} tokens); "
          f"names + descriptions + input schemas {seen} (~{seen // 4} tokens: "
          f"{descriptions} descriptions, {inputs} input schemas); output schemas {outputs}; "
          f"server instructions (sent once) {instructions}")
    if "--per-tool" in sys.argv:
        for t in sorted(tools, key=lambda t: -len(compact(t.get("inputSchema", {})))):
            print(f"  {t['name']:20} input {len(compact(t.get('inputSchema', {}))):5}  "
                  f"output {len(compact(t.get('outputSchema', {}))):5}  "
                  f"description {len(t.get('description', '')):4}")


if __name__ == "__main__":
    main()
