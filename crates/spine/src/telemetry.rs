//! OpenTelemetry export for `spine serve` and `spine mcp` (docs/observability.md, "Traces and
//! metrics"): traces and metrics over OTLP, configured only by the standard environment
//! variables, off unless an endpoint is set.
//!
//! - `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` /
//!   `OTEL_EXPORTER_OTLP_METRICS_ENDPOINT`, one signal each) turns export on; `OTEL_SDK_DISABLED
//!   =true` keeps it off whatever is set.
//! - The exporters read the rest themselves: `OTEL_EXPORTER_OTLP_PROTOCOL` (`http/protobuf`
//!   by default, `grpc`), `…_HEADERS`, `…_TIMEOUT`; the SDK reads `OTEL_TRACES_SAMPLER` /
//!   `_ARG`, `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_SERVICE_NAME` (default here: `spine`),
//!   `OTEL_BSP_*` and `OTEL_METRIC_EXPORT_INTERVAL`.
//!
//! Key design decision: a collector that is down or slow must never slow or fail a call. Spans
//! go through the SDK's batch processor (its own thread, a bounded queue); [`Gate`] counts the
//! spans queued or being exported and drops a span beyond the queue's size itself, so every
//! dropped span is counted in `/metrics` (`spine_otel_spans_dropped_total`) — the SDK's own
//! processor drops them without a count anyone can read. Failed exports are counted too
//! (`spine_otel_export_failures_total{signal}`), never logged per batch.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context as TaskContext, Poll};
use std::time::Duration;

use anyhow::{Context, Result};
use opentelemetry::trace::{TraceContextExt, TracerProvider};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::metrics::data::ResourceMetrics;
use opentelemetry_sdk::metrics::exporter::PushMetricExporter;
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider, Temporality};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, SdkTracerProvider, SpanData, SpanExporter,
    SpanProcessor,
};
use tracing::Subscriber;
use tracing_subscriber::Layer;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// The batch processor's queue when `OTEL_BSP_MAX_QUEUE_SIZE` does not say (the SDK's
/// default).
const DEFAULT_QUEUE: usize = 2048;

/// How long a stop waits for the last spans and metrics to leave.
const FLUSH_TIMEOUT: Duration = Duration::from_secs(5);

/// The process's exporters while export is on.
pub struct Telemetry {
    traces: Option<SdkTracerProvider>,
    metrics: Option<SdkMeterProvider>,
}

/// The value of the variable `name`, when set and not blank.
fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

impl Telemetry {
    /// The exporters the environment asks for, installed as the process's providers and the
    /// W3C trace-context propagator; `None` when no endpoint is set or `OTEL_SDK_DISABLED` is
    /// `true`. Must run inside the Tokio runtime (gRPC exports run on it).
    pub fn from_env() -> Result<Option<Telemetry>> {
        if var("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true")) {
            return Ok(None);
        }
        let any = var("OTEL_EXPORTER_OTLP_ENDPOINT").is_some();
        let traces = any || var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").is_some();
        let metrics = any || var("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT").is_some();
        if !traces && !metrics {
            return Ok(None);
        }
        let runtime = tokio::runtime::Handle::current();
        // tonic's channel starts its tasks on the runtime it is built in.
        let _entered = runtime.enter();
        let resource = resource();
        let traces = traces
            .then(|| -> Result<SdkTracerProvider> {
                let exporter = opentelemetry_otlp::SpanExporter::builder()
                    .build()
                    .context("building the OTLP span exporter (OTEL_EXPORTER_OTLP_* variables)")?;
                let queue = var("OTEL_BSP_MAX_QUEUE_SIZE")
                    .and_then(|v| v.trim().parse().ok())
                    .filter(|&n: &usize| n > 0)
                    .unwrap_or(DEFAULT_QUEUE);
                let pending = Arc::new(AtomicUsize::new(0));
                let exporter =
                    Counted { inner: exporter, pending: pending.clone(), runtime: runtime.clone() };
                let batch = BatchSpanProcessor::builder(exporter)
                    .with_batch_config(
                        BatchConfigBuilder::default().with_max_queue_size(queue).build(),
                    )
                    .build();
                Ok(SdkTracerProvider::builder()
                    .with_span_processor(Gate { inner: batch, pending, queue })
                    .with_resource(resource.clone())
                    .build())
            })
            .transpose()?;
        let metrics = metrics
            .then(|| -> Result<SdkMeterProvider> {
                let exporter = opentelemetry_otlp::MetricExporter::builder().build().context(
                    "building the OTLP metric exporter (OTEL_EXPORTER_OTLP_* variables)",
                )?;
                let exporter = InRuntimeMetrics { inner: exporter, runtime: runtime.clone() };
                Ok(SdkMeterProvider::builder()
                    .with_reader(PeriodicReader::builder(exporter).build())
                    .with_resource(resource)
                    .build())
            })
            .transpose()?;
        opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());
        if let Some(m) = &metrics {
            opentelemetry::global::set_meter_provider(m.clone());
        }
        if let Some(t) = &traces {
            opentelemetry::global::set_tracer_provider(t.clone());
        }
        spine_core::telemetry::turn_on();
        Ok(Some(Telemetry { traces, metrics }))
    }

    /// The layer that turns Spine's export spans (target `spine::otel`, and no others) into
    /// OpenTelemetry spans; `None` without a traces endpoint.
    pub fn layer<S>(&self) -> Option<impl Layer<S> + use<S>>
    where
        S: Subscriber + for<'a> LookupSpan<'a>,
    {
        let tracer = self.traces.as_ref()?.tracer("spine");
        // Only the conventions' attributes: no source locations, threads, targets or
        // busy/idle timings.
        let layer = tracing_opentelemetry::layer()
            .with_tracer(tracer)
            .with_location(false)
            .with_threads(false)
            .with_target(false)
            .with_tracked_inactivity(false);
        Some(layer.with_filter(tracing_subscriber::filter::filter_fn(|m| {
            m.target() == spine_core::telemetry::TARGET
        })))
    }

    /// Sends what is still queued and stops the exporters, waiting at most a few seconds
    /// (SIGTERM, the end of stdin). Blocks: call it off the async threads.
    pub fn shutdown(self) {
        if let Some(t) = self.traces
            && let Err(e) = t.shutdown_with_timeout(FLUSH_TIMEOUT)
        {
            tracing::warn!(error = %e, "flushing the last spans failed");
        }
        if let Some(m) = self.metrics
            && let Err(e) = m.shutdown_with_timeout(FLUSH_TIMEOUT)
        {
            tracing::warn!(error = %e, "flushing the last metrics failed");
        }
    }
}

/// The process's resource: the SDK's detectors (`OTEL_RESOURCE_ATTRIBUTES`,
/// `OTEL_SERVICE_NAME`), `service.name` `spine` unless one of them names it, and
/// `service.version`.
fn resource() -> Resource {
    let named = var("OTEL_SERVICE_NAME").is_some()
        || var("OTEL_RESOURCE_ATTRIBUTES")
            .is_some_and(|a| a.split(',').any(|kv| kv.trim_start().starts_with("service.name=")));
    let builder = Resource::builder()
        .with_attribute(opentelemetry::KeyValue::new("service.version", env!("CARGO_PKG_VERSION")));
    if named { builder.build() } else { builder.with_service_name("spine").build() }
}

/// The span processor: the SDK's batch processor behind a gate that keeps its queue from
/// ever filling, dropping and counting the spans beyond it.
#[derive(Debug)]
struct Gate {
    inner: BatchSpanProcessor,
    /// Spans handed to `inner` and not yet exported (or failed), shared with [`Counted`].
    pending: Arc<AtomicUsize>,
    queue: usize,
}

impl SpanProcessor for Gate {
    fn on_start(&self, span: &mut opentelemetry_sdk::trace::Span, cx: &opentelemetry::Context) {
        self.inner.on_start(span, cx);
    }

    fn on_end(&self, span: SpanData) {
        if self.pending.fetch_add(1, Ordering::AcqRel) >= self.queue {
            self.pending.fetch_sub(1, Ordering::AcqRel);
            metrics::counter!("spine_otel_spans_dropped_total").increment(1);
            return;
        }
        self.inner.on_end(span);
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

/// The span exporter: releases each batch's spans from the [`Gate`]'s count when its export
/// ends (or is abandoned), counts failures, and runs the export inside the Tokio runtime.
#[derive(Debug)]
struct Counted<E> {
    inner: E,
    pending: Arc<AtomicUsize>,
    runtime: tokio::runtime::Handle,
}

/// Releases `n` spans from the gate's count when dropped.
struct Release {
    pending: Arc<AtomicUsize>,
    n: usize,
}

impl Drop for Release {
    fn drop(&mut self) {
        self.pending.fetch_sub(self.n, Ordering::AcqRel);
    }
}

impl<E: SpanExporter> SpanExporter for Counted<E> {
    fn export(&self, batch: Vec<SpanData>) -> impl Future<Output = OTelSdkResult> + Send {
        let release = Release { pending: self.pending.clone(), n: batch.len() };
        let export =
            InRuntime { runtime: self.runtime.clone(), inner: Box::pin(self.inner.export(batch)) };
        async move {
            let result = export.await;
            drop(release);
            if result.is_err() {
                metrics::counter!("spine_otel_export_failures_total", "signal" => "traces")
                    .increment(1);
            }
            result
        }
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        let _entered = self.runtime.enter();
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

/// The metric exporter, run inside the Tokio runtime, its failures counted.
struct InRuntimeMetrics<E> {
    inner: E,
    runtime: tokio::runtime::Handle,
}

impl<E: PushMetricExporter> PushMetricExporter for InRuntimeMetrics<E> {
    fn export(&self, batch: &ResourceMetrics) -> impl Future<Output = OTelSdkResult> + Send {
        let export =
            InRuntime { runtime: self.runtime.clone(), inner: Box::pin(self.inner.export(batch)) };
        async move {
            let result = export.await;
            if result.is_err() {
                metrics::counter!("spine_otel_export_failures_total", "signal" => "metrics")
                    .increment(1);
            }
            result
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        let _entered = self.runtime.enter();
        self.inner.shutdown_with_timeout(timeout)
    }

    fn temporality(&self) -> Temporality {
        self.inner.temporality()
    }
}

/// A future polled inside the Tokio runtime: the SDK drives exports from its own threads,
/// and the gRPC client's connections, timers and tasks live in the runtime.
struct InRuntime<F> {
    runtime: tokio::runtime::Handle,
    inner: Pin<Box<F>>,
}

impl<F: Future> Future for InRuntime<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<F::Output> {
        let this = self.get_mut();
        let _entered = this.runtime.enter();
        this.inner.as_mut().poll(cx)
    }
}

/// The log line format with the active span's `trace_id` and `span_id` at the end of a line
/// written inside an exported span; the format it wraps otherwise.
pub struct WithTraceIds<F>(pub F);

impl<S, N, F> FormatEvent<S, N> for WithTraceIds<F>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
    F: FormatEvent<S, N>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &tracing::Event<'_>,
    ) -> std::fmt::Result {
        let ids = spine_core::telemetry::on()
            .then(|| {
                let cx = opentelemetry::Context::current();
                let span = cx.span();
                let sc = span.span_context();
                sc.is_valid().then(|| (sc.trace_id(), sc.span_id()))
            })
            .flatten();
        let Some((trace_id, span_id)) = ids else {
            return self.0.format_event(ctx, writer, event);
        };
        let mut line = String::new();
        self.0.format_event(ctx, Writer::new(&mut line), event)?;
        let line = line.strip_suffix('\n').unwrap_or(&line);
        writeln!(writer, "{line} trace_id={trace_id} span_id={span_id}")
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use tracing_subscriber::layer::SubscriberExt;

    use super::*;

    /// A log writer into a shared buffer.
    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Buffer {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn log_lines_inside_an_exported_span_name_its_trace() {
        spine_core::telemetry::turn_on();
        let provider = SdkTracerProvider::builder().build();
        let telemetry = Telemetry { traces: Some(provider), metrics: None };
        let buffer = Buffer::default();
        let writer = buffer.clone();
        let subscriber = tracing_subscriber::registry()
            .with(
                tracing_subscriber::fmt::layer()
                    .with_ansi(false)
                    .with_writer(move || writer.clone())
                    .event_format(WithTraceIds(tracing_subscriber::fmt::format())),
            )
            .with(telemetry.layer());
        tracing::subscriber::with_default(subscriber, || {
            tracing::info!("outside");
            let span = tracing::info_span!(target: "spine::otel", "call");
            let _entered = span.enter();
            tracing::info!("inside");
        });
        let text = String::from_utf8(buffer.0.lock().unwrap().clone()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert!(lines[0].ends_with("outside"), "{text}");
        let (_, ids) = lines[1].split_once("inside trace_id=").expect("the trace id at the end");
        let (trace_id, span_id) = ids.split_once(" span_id=").expect("then the span id");
        assert_eq!((trace_id.len(), span_id.len()), (32, 16), "{text}");
    }
}
