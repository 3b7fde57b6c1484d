//! What `spine serve` reports at `/metrics` (Prometheus text format), recorded through the
//! `metrics` facade: nothing is recorded unless the binary installs a recorder, and no label
//! ever carries record content, a scope or an owner — only tool names, outcome codes, states
//! and reasons.
//!
//! | metric | type | labels |
//! |---|---|---|
//! | `spine_calls_total` | counter | `lane` (`mcp`), `tool`, `outcome` (`ok` or the error code) |
//! | `spine_call_duration_seconds` | histogram | `lane`, `tool` |
//! | `spine_embed_duration_seconds` | histogram | `kind` (`query`, `content`) |
//! | `spine_embedded_texts_total` | counter | `kind` |
//! | `spine_query_cache_total` | counter | `result` (`hit`, `miss`) |
//! | `spine_index_records` | gauge | — |
//! | `spine_index_load_seconds` | gauge | — |
//! | `spine_store_write_wait_seconds` | histogram | `kind` (`write`, `touch`) |
//! | `spine_store_write_hold_seconds` | histogram | `kind` |
//! | `spine_store_write_batches_total` | counter | — |
//! | `spine_records` | gauge | `state` (`active`, `archived`, `superseded`, `expired`, `scheduled`) |
//! | `spine_auth_failures_total` | counter | `reason` |
//! | `spine_mcp_sessions` | gauge | — |
//! | `spine_otel_spans_dropped_total` | counter | — |
//! | `spine_otel_export_failures_total` | counter | `signal` (`traces`, `metrics`) |

use std::time::Duration;

/// Counts one call of `tool` on `lane` that ended with `outcome`, and its duration.
pub fn call(lane: &'static str, tool: &'static str, outcome: &'static str, took: Duration) {
    metrics::counter!("spine_calls_total", "lane" => lane, "tool" => tool, "outcome" => outcome)
        .increment(1);
    metrics::histogram!("spine_call_duration_seconds", "lane" => lane, "tool" => tool)
        .record(took.as_secs_f64());
}

/// Counts one request refused for want of a valid bearer token.
pub fn auth_failure(reason: &'static str) {
    metrics::counter!("spine_auth_failures_total", "reason" => reason).increment(1);
}

/// The MCP sessions open now.
pub fn sessions(open: usize) {
    metrics::gauge!("spine_mcp_sessions").set(open as f64);
}

/// Registers the help text of every metric (call once, after installing a recorder).
pub fn describe() {
    use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
    describe_counter!("spine_calls_total", "Tool calls by lane, tool and outcome");
    describe_histogram!(
        "spine_call_duration_seconds",
        Unit::Seconds,
        "Tool call latency by lane and tool, argument parsing to encoded result"
    );
    describe_histogram!(
        "spine_embed_duration_seconds",
        Unit::Seconds,
        "Embedding calls (queries, and contents on write) by kind"
    );
    describe_counter!("spine_embedded_texts_total", "Texts embedded, by kind");
    describe_counter!("spine_query_cache_total", "Query-embedding cache lookups by result");
    describe_gauge!("spine_index_records", "Records in the in-memory search index");
    describe_gauge!("spine_index_load_seconds", Unit::Seconds, "Last full search index load");
    describe_histogram!(
        "spine_store_write_wait_seconds",
        Unit::Seconds,
        "Embedded store: a write's wait for its batch to start, by kind (write, get_memory's touch)"
    );
    describe_histogram!(
        "spine_store_write_hold_seconds",
        Unit::Seconds,
        "Embedded store: a write's share of its batch's time on the write connection, by kind"
    );
    describe_counter!(
        "spine_store_write_batches_total",
        "Embedded store: transactions that committed queued writes together"
    );
    describe_gauge!("spine_records", "Records by state (a record may count in several)");
    describe_counter!("spine_auth_failures_total", "Requests refused for their token, by reason");
    describe_gauge!("spine_mcp_sessions", "Open MCP sessions (streamable HTTP)");
    describe_counter!(
        "spine_otel_spans_dropped_total",
        "Spans dropped because the OTLP export queue was full (the collector down or slow)"
    );
    describe_counter!(
        "spine_otel_export_failures_total",
        "OTLP exports that failed, by signal (traces, metrics)"
    );
}
