"""Drives `spine serve` with the Python MCP SDK inside a trace of the caller's own, for the
OpenTelemetry test (crates/spine/tests/otel.rs).

    otel_client.py URL TRACE_ID SPAN_ID MARKER

The SDK injects the active span's context into every request's `params._meta.traceparent`
(SEP-414). With only the OpenTelemetry API installed its own client spans do not record, so
the context it sends is the one set here: TRACE_ID / SPAN_ID (hex). Stores a memory whose
content, scope and tags carry MARKER, searches with it, reads a missing id (a tool error),
and prints one JSON line: the stored id and the protocol version.
"""

import asyncio
import json
import sys

from mcp import Client
from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags


def check(cond, what):
    if not cond:
        raise AssertionError(what)


async def main(url, trace_id, span_id, marker):
    parent = NonRecordingSpan(
        SpanContext(
            trace_id=int(trace_id, 16),
            span_id=int(span_id, 16),
            is_remote=False,
            trace_flags=TraceFlags(TraceFlags.SAMPLED),
        )
    )
    with trace.use_span(parent):
        async with Client(url) as client:
            await client.list_tools()
            stored = await client.call_tool(
                "store_memory",
                {
                    "content": f"The {marker}content service keeps its queue in Redis.",
                    "scope": f"otel:project:{marker}scope",
                    "source": "user-said",
                    "category": "decision",
                    "tags": [f"{marker}tag"],
                },
            )
            check(not stored.is_error, f"store ok: {stored}")
            found = await client.call_tool(
                "search_memory",
                {"query": f"where does {marker}query keep its queue?", "scope": f"otel:project:{marker}scope"},
            )
            check(not found.is_error, f"search ok: {found}")
            check(found.structured_content["memories"], "the stored memory is found")
            missing = await client.call_tool("get_memory", {"id": "0000000000"})
            check(missing.is_error, f"a missing id is a tool error: {missing}")
            check(json.loads(missing.content[0].text)["error"]["code"] == "not_found", "not_found")
            print(json.dumps({"id": stored.structured_content["id"], "protocol": client.protocol_version}))


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:5]))
