//! `GET /metrics` of `spine serve`: the Prometheus text exposition of what the libraries
//! record (see `spine_server::metrics` for the list), plus the records by state, counted
//! from the store when scraped.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use axum::Router;
use axum::http::header::CONTENT_TYPE;
use axum::response::IntoResponse;
use axum::routing::get;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use spine_core::{Clock, SystemClock, Timestamp};
use spine_ops::review::StateCounts;

/// Counts the records by state, per scope, at a time (whichever backend the server runs on).
pub type StateCounter =
    Arc<dyn Fn(Timestamp) -> Result<Vec<StateCounts>, spine_store::StoreError> + Send + Sync>;

/// Installs the process-wide recorder and returns the `/metrics` route.
pub fn router(store: StateCounter) -> Result<Router> {
    // Latency buckets from a cached read (~1 ms) to a slow write under load (10 s).
    let buckets = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];
    // The embedded store's write connection is held for a fraction of a millisecond.
    let store_buckets =
        [0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1, 1.0];
    let handle = PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), &buckets)
        .context("configuring the metrics buckets")?
        .set_buckets_for_metric(Matcher::Prefix("spine_store_".into()), &store_buckets)
        .context("configuring the metrics buckets")?
        .install_recorder()
        .context("installing the metrics recorder")?;
    spine_server::metrics::describe();
    tokio::spawn(upkeep(handle.clone()));
    Ok(Router::new().route("/metrics", get(move || render(handle.clone(), store.clone()))))
}

/// How often the histograms' samples are folded into their buckets.
const UPKEEP_EVERY: Duration = Duration::from_secs(5);

/// Folds the histograms' samples into their buckets every [`UPKEEP_EVERY`]. The recorder
/// queues every sample until upkeep (or a scrape) drains it, and `install_recorder`, unlike
/// the exporter's own listener, leaves upkeep to its caller: without this task a server
/// that nobody scrapes held each call's samples for ever (about 35 MiB an hour under the
/// soak's load; docs/reliability.md, "Soak").
async fn upkeep(handle: PrometheusHandle) {
    let mut every = tokio::time::interval(UPKEEP_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        handle.run_upkeep();
    }
}

/// Counts the records by state (a full pass over the store's state columns), then renders
/// every metric.
async fn render(handle: PrometheusHandle, store: StateCounter) -> impl IntoResponse {
    let counted = tokio::task::spawn_blocking(move || store(SystemClock.now())).await;
    match counted {
        Ok(Ok(per_scope)) => {
            let mut total = spine_ops::review::StateCounts::default();
            for c in &per_scope {
                total.add(c);
            }
            for (state, n) in [
                ("active", total.active),
                ("archived", total.archived),
                ("superseded", total.superseded),
                ("expired", total.expired),
                ("scheduled", total.scheduled),
            ] {
                metrics::gauge!("spine_records", "state" => state).set(n as f64);
            }
        }
        Ok(Err(e)) => tracing::warn!(error = %e, "counting records for /metrics failed"),
        Err(e) => tracing::warn!(error = %e, "counting records for /metrics panicked"),
    }
    ([(CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], handle.render())
}
