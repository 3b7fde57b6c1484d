"""End-to-end check with the official Python MCP SDK (the client most agents' tooling uses).

Usage: python sdk_client.py path/to/spine
       python sdk_client.py --oidc http://host:port/mcp TOKEN

The first form starts `spine mcp` (stdio) and `spine serve` (streamable HTTP) on fresh data
directories, and for each: negotiates the protocol, lists the tools and checks every SPEC
annotation, stores and recalls a memory, and checks the error envelope of a rejected call.

The second form runs the same checks against a running `spine serve --oidc-issuer …` with a
bearer token, after checking that a client without the token is refused (the OIDC end-to-end
test in crates/spine/tests/auth.rs drives it).
"""

import asyncio
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

from mcp import Client, StdioServerParameters

# SPEC "Tool annotations": readOnly, destructive, idempotent, openWorld.
ANNOTATIONS = {
    "store_memory": (False, False, False, False),
    "schedule_memory": (False, False, False, False),
    "search_memory": (True, False, True, False),
    "list_memory": (True, False, True, False),
    "list_scheduled": (True, False, True, False),
    "get_memory": (True, False, True, False),
    "update_memory": (False, True, True, False),
    "delete_memory": (False, True, True, False),
    "delete_all": (False, True, True, False),
    "set_visibility": (False, False, True, False),
    "list_tags": (True, False, True, False),
    "supersede_memory": (False, False, True, False),
    "archive_memory": (False, False, True, False),
    "restore_memory": (False, False, True, False),
    "related_memories": (True, False, True, False),
    "store_discovery": (False, False, False, False),
    "search_discovery": (True, False, True, False),
    "store_rule": (False, False, False, False),
    "list_rules": (True, False, True, False),
}


def check(cond, what):
    if not cond:
        raise AssertionError(what)


async def exercise(client, label):
    print(f"[{label}] protocol {client.protocol_version}")
    tools = {t.name: t for t in (await client.list_tools()).tools}
    check(sorted(tools) == sorted(ANNOTATIONS), f"{label}: exactly the SPEC tools, got {sorted(tools)}")
    for name, hints in ANNOTATIONS.items():
        check(name in tools, f"{label}: tool {name} listed")
        a = tools[name].annotations
        got = (a.read_only_hint, a.destructive_hint, a.idempotent_hint, a.open_world_hint)
        check(got == hints, f"{label}: {name} annotations {got} != {hints}")
        check(tools[name].output_schema is not None, f"{label}: {name} has an outputSchema")
        check(len(tools[name].description or "") > 40, f"{label}: {name} has a description")

    stored = await client.call_tool(
        "store_memory",
        {
            "content": "The billing service retries webhooks with exponential backoff, max 5 attempts.",
            "scope": "run:project:billing",
            "source": "user-said",
            "category": "decision",
            "tags": ["webhooks"],
        },
    )
    check(not stored.is_error, f"{label}: store ok: {stored}")
    sid = stored.structured_content["short_id"]
    check(json.loads(stored.content[0].text) == stored.structured_content, f"{label}: text block = structured")

    found = await client.call_tool(
        "search_memory", {"query": "how are webhook deliveries retried?", "scope": "run:project:billing"}
    )
    check(not found.is_error, f"{label}: search ok")
    hits = found.structured_content["memories"]
    check(hits and hits[0]["short_id"] == sid, f"{label}: stored memory found first: {hits}")
    check(0 < hits[0]["score"] <= 1, f"{label}: score is a cosine")

    got = await client.call_tool("get_memory", {"id": sid.lower()})
    check(got.structured_content["access_count"] == 1, f"{label}: get touches")

    bad = await client.call_tool("search_memory", {"query": "x", "scope": "run:project:billing", "k": 1001})
    check(bad.is_error, f"{label}: k=1001 rejected")
    err = json.loads(bad.content[0].text)["error"]
    check(err["field"] == "k" and err["hint"] == "out_of_range", f"{label}: envelope {err}")
    check(err["code"] == "invalid_argument" and err["message"], f"{label}: envelope {err}")
    print(f"[{label}] ok: {len(tools)} tools, store/search/get, error envelope")


async def stdio(spine, data_dir):
    params = StdioServerParameters(command=spine, args=["mcp", "--data-dir", data_dir])
    async with Client(params) as client:
        await exercise(client, "stdio")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def http(spine, data_dir):
    port = free_port()
    proc = subprocess.Popen([spine, "serve", "--data-dir", data_dir, "--listen", f"127.0.0.1:{port}"])
    try:
        deadline = time.time() + 30
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1) as r:
                    if r.status == 200:
                        break
            except OSError:
                if time.time() > deadline:
                    raise
                time.sleep(0.1)
        async with Client(f"http://127.0.0.1:{port}/mcp") as client:
            await exercise(client, "http")
    finally:
        proc.terminate()
        proc.wait(timeout=10)


async def oidc(url, token):
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    try:
        async with Client(url) as client:
            await client.list_tools()
        raise AssertionError("oidc: a client without a token was served")
    except AssertionError:
        raise
    except Exception as e:  # the SDK surfaces the 401 as an error
        print(f"[oidc] no token refused: {type(e).__name__}")
    http_client = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    async with http_client:
        async with Client(streamable_http_client(url, http_client=http_client)) as client:
            await exercise(client, "oidc")
            got = await client.call_tool("list_memory", {"scope": "run:project:billing", "full": True})
            owner = got.structured_content["memories"][0]["owner"]
            check(owner != "", f"oidc: records are owned by the token's identity, got {owner!r}")
            print(f"[oidc] owner {owner}")


def main():
    if sys.argv[1] == "--oidc":
        asyncio.run(oidc(sys.argv[2], sys.argv[3]))
        print("python sdk (oidc): all checks passed")
        return
    spine = os.path.abspath(sys.argv[1])
    with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
        asyncio.run(stdio(spine, a))
        asyncio.run(http(spine, b))
    print("python sdk: all checks passed")


if __name__ == "__main__":
    main()
