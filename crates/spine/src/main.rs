//! `spine`: the Spine memory server for coding agents.
//!
//! Thin glue: parse the command line, open the store, start loading the model, and hand
//! the assembled service to a transport. Logs go to stderr (stdout is the MCP channel of
//! `spine mcp`).

mod cli;
mod doctor;
mod embedder;
mod engines;
mod hook;
mod install;
mod metrics;
mod notes;
mod ops;
mod settings;
mod telemetry;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::Parser;
use cli::{Cli, Command, Common};
use engines::{Opener, model_dir, operator_store, service_store};
use rmcp::ServiceExt;
use spine_core::{Clock, SystemClock};
use spine_server::auth::{OidcConfig, Verifier};
use spine_server::{HttpOptions, Identity, SpineMcp, Transport, http_router};
use spine_service::Service;
use spine_service::rerank::HttpReranker;

/// Opens the store and starts the model loading; fails with an actionable message.
fn build_service(common: &Common) -> Result<Service> {
    build_service_and_store(common).map(|(service, _)| service)
}

/// [`build_service`], and the records-by-state count of `/metrics`.
fn build_service_and_store(common: &Common) -> Result<(Service, metrics::StateCounter)> {
    let limits = common.limits.limits();
    let rerank = common.rerank.config()?;
    let model_dir = model_dir(common);
    let embedder = embedder::build(&common.embedder, &model_dir)?;
    let opened = service_store(common, Opener::Server)?;
    opened.check_embedder(embedder.as_ref(), common)?;
    tracing::info!(model = %model_dir.display(), "model directory");
    let mut service = Service::new(opened.store, embedder, Arc::new(SystemClock), limits)
        .with_similar_threshold(common.limits.similar_threshold.0)
        .with_secrets(common.limits.secrets)
        .with_audit_reads(common.audit_reads);
    if let Some(config) = rerank {
        tracing::info!(url = %config.url, model = ?config.model, "reranking search results (--search-ranker jev)");
        let reranker = HttpReranker::new(config).context("setting up the reranker")?;
        service = service.with_reranker(Arc::new(reranker));
    }
    Ok((service, opened.counts))
}

/// Secure by default: a non-loopback address without OIDC is refused unless the operator
/// says so (`--allow-unauthenticated`), and then warned about on every start.
fn check_exposure(common: &Common, listen: SocketAddr, allow_unauthenticated: bool) -> Result<()> {
    let oidc = common.oidc_issuer.as_deref().is_some_and(|s| !s.is_empty());
    if oidc || listen.ip().is_loopback() {
        return Ok(());
    }
    if !allow_unauthenticated {
        bail!(
            "refusing to serve {listen} without authentication: anyone who can reach it would \
             read and write every record. Configure OIDC (--oidc-issuer, --oidc-audience), \
             listen on loopback (127.0.0.1), or pass --allow-unauthenticated \
             (SPINE_ALLOW_UNAUTHENTICATED=true) if a trusted network or proxy guards it"
        );
    }
    tracing::warn!(
        %listen,
        "serving a non-loopback address WITHOUT authentication (--allow-unauthenticated): \
         anyone who can reach it reads and writes every record"
    );
    Ok(())
}

/// The token verifier when OIDC is configured; tokens issued to the console's client id
/// (`console_client_id`) are accepted beside the audience.
async fn verifier(common: &Common, console_client_id: Option<&str>) -> Result<Option<Verifier>> {
    let Some(issuer) = common.oidc_issuer.clone().filter(|s| !s.is_empty()) else {
        return Ok(None);
    };
    let Some(audience) = common.oidc_audience.clone().filter(|s| !s.is_empty()) else {
        bail!(
            "--oidc-issuer needs --oidc-audience (SPINE_OIDC_AUDIENCE): the audience your tokens are issued for"
        );
    };
    let config = OidcConfig {
        owner_claim: common.owner_claim.clone(),
        console_client_id: console_client_id.map(str::to_owned),
        ..OidcConfig::new(&issuer, audience)
    };
    let verifier = Verifier::discover(config)
        .await
        .with_context(|| format!("reading the OIDC configuration of {issuer}"))?;
    tracing::info!(%issuer, owner_claim = %common.owner_claim, "OIDC enabled");
    Ok(Some(verifier))
}

/// jemalloc, not the platform's allocator. Under the soak's 50 sessions the heap held
/// steady after the warm-up (112 → 119 MB live, jemalloc's heap profile) while glibc's
/// malloc grew the process's anonymous memory 16% in nine minutes (210 → 244 MiB), and
/// jemalloc kept it level (189 → 189 MiB): glibc keeps freed memory in an arena per thread
/// that allocated it, and the server's allocations come from dozens of blocking-pool
/// threads (docs/reliability.md, "Soak"). On Linux it serves C code too (SQLite's page
/// caches); a background thread returns pages freed for ten seconds to the OS.
#[cfg(not(target_env = "msvc"))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Returns jemalloc's free pages to the OS now, in every arena, rather than when their
/// decay runs out (`HttpOptions::release_memory`: after many sessions have closed).
#[cfg(not(target_env = "msvc"))]
fn release_free_memory() {
    // "arena.<i>.purge" for i = MALLCTL_ARENAS_ALL (4096 in jemalloc.h, which the sys
    // crate does not export) takes and returns nothing.
    const PURGE_ALL: &[u8] = b"arena.4096.purge\0";
    // SAFETY: a NUL-terminated name and no value pointers, as this control expects.
    let rc = unsafe {
        tikv_jemalloc_sys::mallctl(
            PURGE_ALL.as_ptr().cast(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            0,
        )
    };
    if rc != 0 {
        tracing::debug!(rc, "jemalloc did not purge its arenas");
    }
}

#[cfg(target_env = "msvc")]
use spine_server::trim_system_allocator as release_free_memory;

fn main() -> Result<()> {
    // Before the runtime starts any thread (see its docs).
    spine_embed::configure_threads();
    // A file-size limit (RLIMIT_FSIZE) reached by a write must fail that write with an error
    // the client sees, not kill the server: with SIGXFSZ ignored the write returns EFBIG.
    #[cfg(unix)]
    // SAFETY: setting a signal's disposition to SIG_IGN before any thread starts.
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
    }
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?
        .block_on(run())
}

async fn run() -> Result<()> {
    let Cli { common, command } = Cli::parse();
    // A hook's stderr is shown to the user: only what went wrong.
    let quiet = matches!(command, Command::Hook(_));
    // The servers export spans and metrics when an OTLP endpoint is set (docs/observability.md).
    let telemetry = match command {
        Command::Mcp | Command::Serve { .. } => telemetry::Telemetry::from_env()?,
        _ => None,
    };
    let logs = tracing_subscriber::EnvFilter::try_from_env("SPINE_LOG")
        .unwrap_or_else(|_| {
            tracing_subscriber::EnvFilter::new(if quiet { "error" } else { "info" })
        })
        // The export spans are for the collector; log lines name their trace instead.
        .add_directive(format!("{}=off", spine_core::telemetry::TARGET).parse()?);
    {
        use tracing_subscriber::layer::SubscriberExt;
        use tracing_subscriber::util::SubscriberInitExt;
        use tracing_subscriber::{Layer, fmt};
        let format = telemetry::WithTraceIds(fmt::format());
        tracing_subscriber::registry()
            .with(fmt::layer().with_writer(std::io::stderr).event_format(format).with_filter(logs))
            .with(telemetry.as_ref().and_then(|t| t.layer()))
            .init();
    }
    let result = command_run(common, command).await;
    if let Some(t) = telemetry {
        // Flushed on SIGTERM and on the end of stdin alike: both end the command first.
        let _ = tokio::task::spawn_blocking(move || t.shutdown()).await;
    }
    result
}

async fn command_run(common: Common, command: Command) -> Result<()> {
    if let Command::Hook(args) = command {
        hook(common, args).await;
        return Ok(());
    }
    match command {
        Command::Mcp => mcp(&common).await,
        Command::Serve {
            listen,
            metrics_listen,
            allowed_hosts,
            allowed_origins,
            session_idle_timeout,
            max_sessions,
            stateless,
            console_client_id,
            allow_unauthenticated,
            audit_retention,
        } => {
            if session_idle_timeout.is_zero() {
                bail!("--session-idle-timeout must be above zero (e.g. 30m)");
            }
            check_exposure(&common, listen, allow_unauthenticated)?;
            let options = |verifier| HttpOptions {
                allowed_hosts,
                allowed_origins,
                verifier,
                session_idle_timeout,
                max_sessions,
                stateless,
                draining: Default::default(),
                release_memory: release_free_memory,
            };
            let console = console_client_id.as_deref().filter(|s| !s.is_empty());
            serve(&common, listen, metrics_listen, console, audit_retention, options).await
        }
        Command::Reindex { batch } => reindex(common, batch).await,
        Command::SummarizeMissing(args) => summarize_missing(&common, args).await,
        Command::Export(args) => export(&common, args).await,
        Command::Import(args) => import(common, args).await,
        Command::PruneExpired(args) => {
            let store = operator_store(&common, true)?;
            blocking("prune-expired", move || {
                if !args.apply {
                    return ops::prune::run(store.as_ref(), &args);
                }
                let audit = ops::audit::Operator::new("prune-expired");
                audit.attach(store.as_ref());
                audit.finish(store.as_ref(), ops::prune::run(store.as_ref(), &args))
            })
            .await
        }
        Command::Audit(args) => {
            let store = operator_store(&common, true)?;
            blocking("audit", move || ops::audit::run(store.as_ref(), &args)).await
        }
        Command::Migrate(args) => {
            let store = operator_store(&common, true)?;
            blocking("migrate", move || {
                let audit = ops::audit::Operator::new("migrate");
                audit.attach(store.as_ref());
                audit.finish(store.as_ref(), ops::migrate::run(store.as_ref(), &args))
            })
            .await
        }
        Command::SpineReview(args) => spine_review(common, args).await,
        Command::Hook(_) => unreachable!("handled above"),
        Command::Install(args) => install::run(&args, true, common.data_dir.as_deref()),
        Command::Uninstall(args) => install::run(&args, false, common.data_dir.as_deref()),
        Command::ImportNotes(args) => import_notes(common, args).await,
        Command::Doctor(args) => {
            if !doctor::run(&common, &args).await? {
                std::process::exit(1);
            }
            Ok(())
        }
    }
}

/// Runs `f` (SQLite, inference or HTTP: blocking work) off the async runtime.
async fn blocking<T: Send + 'static>(
    command: &str,
    f: impl FnOnce() -> Result<T> + Send + 'static,
) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .with_context(|| format!("the {command} thread panicked"))?
}

/// Exits with `code` when a command stopped early (signal, timeout), else returns.
fn exit_unless_zero(code: i32) -> Result<()> {
    if code != 0 {
        std::process::exit(code);
    }
    Ok(())
}

/// With OIDC on, the verifier, SPINE_TOKEN and the caller it names (for a command that
/// runs for one user: `spine mcp`, `spine hook`); `None` without OIDC.
async fn token_caller(
    common: &Common,
    command: &str,
) -> Result<Option<(Verifier, String, spine_core::Caller)>> {
    let Some(verifier) = verifier(common, None).await? else { return Ok(None) };
    let token = std::env::var("SPINE_TOKEN").unwrap_or_default();
    let token = token.trim();
    if token.is_empty() {
        bail!(
            "OIDC is enabled: set SPINE_TOKEN to a bearer token from {} for spine {command}",
            verifier.issuer()
        );
    }
    let caller = verifier
        .verify(token)
        .await
        .map_err(|e| anyhow::anyhow!("SPINE_TOKEN was rejected: {e}"))?;
    tracing::info!(actor = caller.actor(), "stdio caller verified");
    Ok(Some((verifier, token.to_owned(), caller)))
}

/// `spine mcp`: one MCP session on stdio; with OIDC on, its caller comes from SPINE_TOKEN.
async fn mcp(common: &Common) -> Result<()> {
    let identity = match token_caller(common, "mcp").await? {
        None => Identity::Anonymous,
        Some((verifier, token, _)) => Identity::Token { verifier, token: token.into() },
    };
    let service = build_service(common)?;
    let running = SpineMcp::with_identity(service, identity)
        .traced(Transport::Pipe)
        .serve(spine_server::stdio::stdio())
        .await
        .context("starting the MCP session on stdio")?;
    running.waiting().await.context("serving MCP on stdio")?;
    Ok(())
}

/// `spine serve`: streamable HTTP MCP until Ctrl-C.
async fn serve(
    common: &Common,
    listen: SocketAddr,
    metrics_listen: Option<SocketAddr>,
    console_client_id: Option<&str>,
    audit_retention: Option<Duration>,
    options: impl FnOnce(Option<Verifier>) -> HttpOptions,
) -> Result<()> {
    let options = options(verifier(common, console_client_id).await?);
    let draining = options.draining.clone();
    let (service, store) = build_service_and_store(common)?;
    if let Some(keep) = audit_retention {
        tokio::spawn(retain_audit(service.clone(), keep));
    }
    let metrics = metrics::router(store)?;
    let mut app = http_router(service, options);
    match metrics_listen {
        None => app = app.merge(metrics),
        Some(addr) => {
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("binding {addr} (--metrics-listen)"))?;
            tracing::info!("metrics on http://{}/metrics", listener.local_addr().unwrap_or(addr));
            let listener = no_delay(listener);
            tokio::spawn(async move {
                if let Err(e) = axum::serve(listener, metrics).await {
                    tracing::error!(error = %e, "serving /metrics failed");
                }
            });
        }
    }
    let listener =
        tokio::net::TcpListener::bind(listen).await.with_context(|| format!("binding {listen}"))?;
    tracing::info!("spine listening on http://{}/mcp", listener.local_addr().unwrap_or(listen));
    let listener = no_delay(listener);
    // On SIGTERM or Ctrl-C: stop accepting, let every call in flight finish and answer, then
    // exit; streams left open (an MCP client's event stream) are cut after DRAIN_DEADLINE.
    let (stopping, mut stopped) = tokio::sync::watch::channel(false);
    let server = axum::serve(listener, app).with_graceful_shutdown(async move {
        shutdown_signal().await;
        draining.store(true, std::sync::atomic::Ordering::SeqCst);
        tracing::info!("stopping: finishing the calls in flight");
        let _ = stopping.send(true);
    });
    tokio::select! {
        served = std::future::IntoFuture::into_future(server) => served.context("serving HTTP"),
        _ = async {
            let _ = stopped.wait_for(|s| *s).await;
            tokio::time::sleep(DRAIN_DEADLINE).await;
        } => {
            tracing::warn!(deadline = ?DRAIN_DEADLINE, "stopping: connections still open at the deadline are closed");
            Ok(())
        }
    }
}

/// `--audit-retention`: at start and then once a day, removes the audit events older than
/// `keep`. A failed prune is logged and tried again the next day.
async fn retain_audit(service: Service, keep: Duration) {
    let mut daily = tokio::time::interval(Duration::from_secs(24 * 60 * 60));
    loop {
        daily.tick().await;
        let service = service.clone();
        let pruned = tokio::task::spawn_blocking(move || {
            let cutoff = ops::audit::before(SystemClock.now(), keep)?;
            anyhow::Ok(service.prune_audit(cutoff)?)
        })
        .await;
        match pruned {
            Ok(Ok(n)) => tracing::info!(removed = n, retention = ?keep, "pruned the audit log"),
            Ok(Err(e)) => tracing::warn!(error = %e, "pruning the audit log failed"),
            Err(e) => tracing::warn!(error = %e, "pruning the audit log failed"),
        }
    }
}

/// `listener` with Nagle's algorithm off on every connection it accepts. An MCP answer goes
/// out as a stream in several small writes; with Nagle on, the last one waited for the
/// client's delayed ACK, and every call on a kept-alive connection took ~40 ms more.
fn no_delay(listener: tokio::net::TcpListener) -> impl axum::serve::Listener<Addr = SocketAddr> {
    use axum::serve::ListenerExt;
    listener.tap_io(|stream| {
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!(error = %e, "cannot set TCP_NODELAY on an accepted connection");
        }
    })
}

/// How long `spine serve` waits, once told to stop, for open connections to finish.
const DRAIN_DEADLINE: std::time::Duration = std::time::Duration::from_secs(10);

/// Resolves on Ctrl-C or, on Unix, SIGTERM (what service managers and container runtimes
/// send to stop a process).
async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
                return;
            }
            Err(e) => tracing::warn!(error = %e, "SIGTERM cannot be caught; Ctrl-C only"),
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}

/// `spine reindex`: the store, the configured embedder, then the re-embedding.
async fn reindex(common: Common, batch: usize) -> Result<()> {
    let store = operator_store(&common, false)?;
    let model_dir = model_dir(&common);
    blocking("reindex", move || {
        let audit = ops::audit::Operator::new("reindex");
        audit.attach(store.as_ref());
        let run = embedder::build(&common.embedder, &model_dir)
            .and_then(|embedder| ops::reindex::run(store.as_ref(), embedder.as_ref(), batch));
        audit.finish(store.as_ref(), run)
    })
    .await
}

/// `spine summarize-missing`.
async fn summarize_missing(common: &Common, args: ops::summarize::SummarizeArgs) -> Result<()> {
    let plan = ops::summarize::Plan::new(&args, common.limits.memory_max_summary_bytes)?;
    let store = operator_store(common, true)?;
    // Installed here, on the runtime, before any record is touched.
    let stop = ops::stop::Stop::install(args.timeout)?;
    let audit = (!args.dry_run).then(|| ops::audit::Operator::new("summarize-missing"));
    exit_unless_zero(
        blocking("summarize-missing", move || match audit {
            None => plan.run(store.as_ref(), &stop),
            Some(audit) => {
                audit.attach(store.as_ref());
                audit.finish(store.as_ref(), plan.run(store.as_ref(), &stop))
            }
        })
        .await?,
    )
}

/// `spine export`.
async fn export(common: &Common, args: ops::export::ExportArgs) -> Result<()> {
    let store = operator_store(common, true)?;
    // Ctrl-C stops between pages and removes the unfinished file.
    let stop = ops::stop::Stop::install(std::time::Duration::ZERO)?;
    exit_unless_zero(
        blocking("export", move || ops::export::run(store.as_ref(), &args, &stop)).await?,
    )
}

/// `spine import`: the store is opened once the file's header was read.
async fn import(common: Common, args: ops::import::ImportArgs) -> Result<()> {
    let model_dir = model_dir(&common);
    blocking("import", move || {
        let audit = ops::audit::Operator::new("import");
        let opened = std::cell::Cell::new(false);
        let open = || {
            let store = operator_store(&common, false)?;
            audit.attach(store.as_ref());
            opened.set(true);
            Ok(store)
        };
        let run = ops::import::run(open, &common.embedder, &model_dir, &args);
        // A run that stopped before it opened the store (an unreadable file) never reached
        // it, and leaves no event there.
        if !opened.get() {
            return run;
        }
        match operator_store(&common, false) {
            Ok(store) => audit.finish(store.as_ref(), run),
            Err(e) => run.and(Err(e)),
        }
    })
    .await
}

/// `spine spine-review …`: exits 1 when verify found violations.
async fn spine_review(common: Common, args: ops::review::ReviewArgs) -> Result<()> {
    let plan = ops::review::Plan::new(args)?;
    let store = operator_store(&common, true)?;
    let model_dir = model_dir(&common);
    let failed = blocking("spine-review", move || match plan.audited_action() {
        None => {
            plan.run(store.as_ref(), &spine_store::Access::operator(), &model_dir, &common.embedder)
        }
        Some(action) => {
            let audit = ops::audit::Operator::new(action);
            audit.attach(store.as_ref());
            let run = plan.run(store.as_ref(), audit.access(), &model_dir, &common.embedder);
            audit.finish(store.as_ref(), run)
        }
    })
    .await?;
    if failed {
        ops::review::flush();
        std::process::exit(1);
    }
    Ok(())
}

/// The service a hook reads through: the existing store (never created by a hook), whose
/// search index it never loads (a prompt's search scans its scopes in SQL), the embedder
/// loaded only when `needs_model` (a prompt is embedded; a digest embeds nothing), no
/// reranker (a hook must be quick).
fn hook_service(common: &Common, needs_model: bool) -> Result<Service> {
    let opened = service_store(common, Opener::Hook)?;
    let model_dir = model_dir(common);
    let embedder = embedder::build_for_one_text(&common.embedder, &model_dir, needs_model)?;
    if needs_model {
        opened.check_embedder(embedder.as_ref(), common)?;
    }
    let limits = common.limits.limits();
    Ok(Service::new(opened.store, embedder, Arc::new(SystemClock), limits))
}

/// `spine hook <event>`: prints the context for the agent, or nothing; never fails.
async fn hook(common: Common, args: hook::HookArgs) {
    let event = args.event;
    let ran = async {
        let caller = match token_caller(&common, "hook").await? {
            Some((_, _, caller)) => caller,
            None => spine_core::Caller::anonymous(),
        };
        let format = args.format;
        let digest = blocking("hook", move || {
            hook::context(&args, |needs_model| Ok((hook_service(&common, needs_model)?, caller)))
        })
        .await?;
        Ok::<_, anyhow::Error>(hook::render(event, format, &digest))
    };
    match ran.await {
        Ok(Some(out)) => println!("{out}"),
        Ok(None) => {}
        Err(e) => {
            let what = format!("{e:#}").replace('\n', " ");
            eprintln!("spine hook {}: nothing added: {what}", hook::event_name(event));
        }
    }
}

/// `spine import-notes`: stores through the service, as the caller SPINE_TOKEN names (OIDC)
/// or anonymously.
async fn import_notes(common: Common, args: notes::ImportNotesArgs) -> Result<()> {
    let caller = match token_caller(&common, "import-notes").await? {
        Some((_, _, caller)) => caller,
        None => spine_core::Caller::anonymous(),
    };
    let service = build_service(&common)?;
    blocking("import-notes", move || notes::run(&service, &caller, &args)).await
}
