//! `spine`: the Spine memory server for coding agents.
//!
//! Thin glue: parse the command line, open the store, start loading the model, and hand
//! the assembled service to a transport. Logs go to stderr (stdout is the MCP channel of
//! `spine mcp`).

mod embedder;
mod ops;
mod settings;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use clap::builder::TypedValueParser;
use clap::{Args, Parser, Subcommand};
use rmcp::ServiceExt;
use spine_core::SystemClock;
use spine_server::auth::{OidcConfig, Verifier};
use spine_server::{HttpOptions, Identity, SpineMcp, http_router};
use spine_service::Service;
use spine_service::rerank::HttpReranker;
use spine_store::SqliteStore;

/// Spine: a memory service for software agents, over MCP.
#[derive(Debug, Parser)]
#[command(name = "spine", version, about)]
struct Cli {
    #[command(flatten)]
    common: Common,
    #[command(subcommand)]
    command: Command,
}

/// Flags every command takes.
#[derive(Debug, Args)]
struct Common {
    /// Directory holding the embedded database [default: $XDG_DATA_HOME/spine or ~/.local/share/spine]
    #[arg(long, global = true, env = "SPINE_DATA_DIR")]
    data_dir: Option<PathBuf>,
    /// PostgreSQL URL for the shared backend (not available yet in this version).
    #[arg(long, global = true, env = "SPINE_DATABASE_URL")]
    database_url: Option<String>,
    /// Directory holding the built-in model's files [default: ~/.cache/spine/models/all-MiniLM-L6-v2]
    #[arg(long, global = true, env = "SPINE_MODEL_DIR")]
    model_dir: Option<PathBuf>,
    /// OIDC issuer URL; when set, every call needs a valid bearer token from this issuer.
    #[arg(long, global = true, env = "SPINE_OIDC_ISSUER")]
    oidc_issuer: Option<String>,
    /// Audience the tokens must carry (required with --oidc-issuer).
    #[arg(long, global = true, env = "SPINE_OIDC_AUDIENCE")]
    oidc_audience: Option<String>,
    /// Token claim whose value owns the records a caller writes.
    #[arg(long, global = true, env = "SPINE_OWNER_CLAIM", default_value = "email")]
    owner_claim: String,
    #[command(flatten)]
    embedder: embedder::EmbedderArgs,
    #[command(flatten)]
    limits: settings::LimitArgs,
    #[command(flatten)]
    rerank: settings::RerankArgs,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve MCP on stdio (what Claude Code, Codex and Cursor launch).
    Mcp,
    /// Serve streamable HTTP MCP at /mcp, and /healthz.
    Serve {
        /// Address to listen on.
        #[arg(long, env = "SPINE_LISTEN", default_value = "127.0.0.1:8080")]
        listen: SocketAddr,
        /// Extra Host header values to accept besides loopback (comma-separated), for
        /// deployments behind a name; DNS-rebinding protection rejects others.
        #[arg(long = "allowed-host", env = "SPINE_ALLOWED_HOSTS", value_delimiter = ',')]
        allowed_hosts: Vec<String>,
        /// Extra browser Origins to accept besides loopback (comma-separated,
        /// scheme://host[:port]); requests from other origins are refused.
        #[arg(long = "allowed-origin", env = "SPINE_ALLOWED_ORIGINS", value_delimiter = ',')]
        allowed_origins: Vec<String>,
        /// Close an MCP session after this long without a request (e.g. 30m, 2h); its
        /// client then gets 404 and starts a new session.
        #[arg(long, env = "SPINE_SESSION_IDLE_TIMEOUT", default_value = "30m", value_parser = humantime::parse_duration)]
        session_idle_timeout: std::time::Duration,
        /// The most MCP sessions open at once; beyond it `initialize` is answered 503.
        #[arg(long, env = "SPINE_MAX_SESSIONS", default_value_t = spine_server::DEFAULT_MAX_SESSIONS, value_parser = clap::value_parser!(u64).range(1..).map(|n| n as usize))]
        max_sessions: usize,
    },
    /// Re-embed records whose vector is missing or from another embedder.
    ///
    /// Run it after changing --embedder or --embed-model, with the new flags. Batched and
    /// resumable (run it again to continue); safe while a server runs on the same data
    /// directory.
    Reindex {
        /// Records read, embedded and written per batch (an HTTP embedder sends at most 64
        /// texts per request).
        #[arg(long, default_value_t = 64)]
        batch: usize,
    },
    /// Fill in summaries for records without one (summary_source=auto).
    ///
    /// Needs SPINE_SUMMARY_MODEL: `builtin:extractive` (offline) or a chat model on the
    /// OpenAI-compatible server at SPINE_SUMMARY_URL. Records with a summary, and every
    /// client-written summary, are left alone. Each record is written whole or not at all,
    /// so Ctrl-C and --timeout stop cleanly; run it again to continue. Safe while a server
    /// runs on the same data directory.
    SummarizeMissing(ops::summarize::SummarizeArgs),
    /// Write records, with their vectors, as JSON lines (to stdout, or to a new file).
    ///
    /// Every record of every scope unless --scope is given. What it wrote is marked as
    /// exported, which `spine-review purge` requires before deleting a record. Safe while a
    /// server runs on the same data directory.
    Export(ops::export::ExportArgs),
    /// Read a file written by `spine export` into the store.
    ///
    /// Records whose id is present already are skipped, so an interrupted import continues
    /// when run again. Records without a vector are embedded with the configured embedder.
    /// Safe while a server runs on the same data directory.
    Import(ops::import::ImportArgs),
    /// Delete expired records: a preview unless --apply.
    ///
    /// Expired: not_after at or before now minus --older-than. Archived and superseded
    /// records are left to `spine-review purge`.
    PruneExpired(ops::prune::PruneArgs),
    /// Advance every record's schema_version to this binary's.
    ///
    /// Additive only; never lowers a newer record's stamp. Idempotent and resumable.
    Migrate(ops::migrate::MigrateArgs),
    /// Review the store: scan, verify, consolidate, purge, archive, restore.
    ///
    /// Sweeps (scan, verify, consolidate) need --scope or --all-scopes; consolidate and
    /// purge are previews unless --apply. Safe while a server runs on the same data
    /// directory.
    #[command(name = "spine-review")]
    SpineReview(ops::review::ReviewArgs),
}

fn default_data_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("XDG_DATA_HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(d).join("spine");
    }
    let home = std::env::var_os("HOME").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("."));
    home.join(".local/share/spine")
}

/// The embedded store an operator command works on; `existing`: refuse to create one (a
/// mistyped --data-dir would otherwise look like an empty store).
fn operator_store(common: &Common, command: &str, existing: bool) -> Result<SqliteStore> {
    if common.database_url.is_some() {
        bail!("spine {command} works on the embedded store only (omit --database-url)");
    }
    let data_dir = common.data_dir.clone().unwrap_or_else(default_data_dir);
    if existing && !data_dir.join("spine.db").is_file() {
        bail!("no Spine store in {} (no spine.db there): check --data-dir", data_dir.display());
    }
    SqliteStore::open(&data_dir)
        .with_context(|| format!("opening the store in {}", data_dir.display()))
}

/// Opens the store and starts the model loading; fails with an actionable message.
fn build_service(common: &Common) -> Result<Service> {
    if let Some(url) = &common.database_url {
        bail!(
            "--database-url ({}) is not supported by this version of spine yet; \
             omit it to use the embedded store in --data-dir",
            url.split('@').next_back().unwrap_or("")
        );
    }
    let limits = common.limits.limits();
    let rerank = common.rerank.config()?;
    let model_dir = common.model_dir.clone().unwrap_or_else(spine_embed::default_model_dir);
    let embedder = embedder::build(&common.embedder, &model_dir)?;
    let data_dir = common.data_dir.clone().unwrap_or_else(default_data_dir);
    let store = SqliteStore::open(&data_dir)
        .with_context(|| format!("opening the store in {}", data_dir.display()))?;
    embedder::check_identity(&store, embedder.as_ref(), &common.embedder, &data_dir)?;
    tracing::info!(db = %store.path().display(), model = %model_dir.display(), "store open");
    let store = Arc::new(store);
    let warm = store.clone();
    std::thread::Builder::new().name("index-load".into()).spawn(move || {
        if let Err(e) = warm.warm_index() {
            tracing::warn!(error = %e, "loading the search index failed; the first search retries");
        }
    })?;
    let mut service = Service::new(store, embedder, Arc::new(SystemClock), limits);
    if let Some(config) = rerank {
        tracing::info!(url = %config.url, model = ?config.model, "reranking search results (--search-ranker jev)");
        let reranker = HttpReranker::new(config).context("setting up the reranker")?;
        service = service.with_reranker(Arc::new(reranker));
    }
    Ok(service)
}

/// The token verifier when OIDC is configured.
async fn verifier(common: &Common) -> Result<Option<Verifier>> {
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
        ..OidcConfig::new(&issuer, audience)
    };
    let verifier = Verifier::discover(config)
        .await
        .with_context(|| format!("reading the OIDC configuration of {issuer}"))?;
    tracing::info!(%issuer, owner_claim = %common.owner_claim, "OIDC enabled");
    Ok(Some(verifier))
}

#[tokio::main]
async fn main() -> Result<()> {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("SPINE_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let cli = Cli::parse();
    match cli.command {
        Command::Mcp => {
            let identity = match verifier(&cli.common).await? {
                None => Identity::Anonymous,
                Some(verifier) => {
                    let token = std::env::var("SPINE_TOKEN").unwrap_or_default();
                    if token.trim().is_empty() {
                        bail!(
                            "OIDC is enabled: set SPINE_TOKEN to a bearer token from {} for spine mcp",
                            verifier.issuer()
                        );
                    }
                    let caller = verifier
                        .verify(token.trim())
                        .await
                        .map_err(|e| anyhow::anyhow!("SPINE_TOKEN was rejected: {e}"))?;
                    tracing::info!(actor = caller.actor(), "stdio caller verified");
                    Identity::Token { verifier, token: token.trim().into() }
                }
            };
            let service = build_service(&cli.common)?;
            let running = SpineMcp::with_identity(service, identity)
                .serve(rmcp::transport::stdio())
                .await
                .context("starting the MCP session on stdio")?;
            running.waiting().await.context("serving MCP on stdio")?;
        }
        Command::Serve {
            listen,
            allowed_hosts,
            allowed_origins,
            session_idle_timeout,
            max_sessions,
        } => {
            if session_idle_timeout.is_zero() {
                bail!("--session-idle-timeout must be above zero (e.g. 30m)");
            }
            let verifier = verifier(&cli.common).await?;
            let service = build_service(&cli.common)?;
            let options = HttpOptions {
                allowed_hosts,
                allowed_origins,
                verifier,
                session_idle_timeout,
                max_sessions,
            };
            let app = http_router(service, options);
            let listener = tokio::net::TcpListener::bind(listen)
                .await
                .with_context(|| format!("binding {listen}"))?;
            tracing::info!(
                "spine listening on http://{}/mcp",
                listener.local_addr().unwrap_or(listen)
            );
            axum::serve(listener, app)
                .with_graceful_shutdown(async {
                    let _ = tokio::signal::ctrl_c().await;
                })
                .await
                .context("serving HTTP")?;
        }
        Command::Reindex { batch } => {
            if cli.common.database_url.is_some() {
                bail!("spine reindex works on the embedded store only (omit --database-url)");
            }
            let data_dir = cli.common.data_dir.clone().unwrap_or_else(default_data_dir);
            let model_dir =
                cli.common.model_dir.clone().unwrap_or_else(spine_embed::default_model_dir);
            let args = cli.common.embedder.clone();
            // Embedding blocks (HTTP or inference): keep it off the async runtime.
            tokio::task::spawn_blocking(move || {
                embedder::reindex_command(&data_dir, &model_dir, &args, batch)
            })
            .await
            .context("the reindex thread panicked")??;
        }
        Command::SummarizeMissing(args) => {
            let plan =
                ops::summarize::Plan::new(&args, cli.common.limits.memory_max_summary_bytes)?;
            let store = operator_store(&cli.common, "summarize-missing", true)?;
            // Installed here, on the runtime, before any record is touched.
            let stop = ops::stop::Stop::install(args.timeout)?;
            let code = tokio::task::spawn_blocking(move || plan.run(&store, &stop))
                .await
                .context("the summarize-missing thread panicked")??;
            if code != 0 {
                std::process::exit(code);
            }
        }
        Command::Export(args) => {
            let store = operator_store(&cli.common, "export", true)?;
            // Ctrl-C stops between pages and removes the unfinished file.
            let stop = ops::stop::Stop::install(std::time::Duration::ZERO)?;
            let code = tokio::task::spawn_blocking(move || ops::export::run(&store, &args, &stop))
                .await
                .context("the export thread panicked")??;
            if code != 0 {
                std::process::exit(code);
            }
        }
        Command::Import(args) => {
            let model_dir =
                cli.common.model_dir.clone().unwrap_or_else(spine_embed::default_model_dir);
            let embedder = cli.common.embedder.clone();
            tokio::task::spawn_blocking(move || {
                let open = || operator_store(&cli.common, "import", false);
                ops::import::run(open, &embedder, &model_dir, &args)
            })
            .await
            .context("the import thread panicked")??;
        }
        Command::PruneExpired(args) => {
            let store = operator_store(&cli.common, "prune-expired", true)?;
            tokio::task::spawn_blocking(move || ops::prune::run(&store, &args))
                .await
                .context("the prune-expired thread panicked")??;
        }
        Command::Migrate(args) => {
            let store = operator_store(&cli.common, "migrate", true)?;
            tokio::task::spawn_blocking(move || ops::migrate::run(&store, &args))
                .await
                .context("the migrate thread panicked")??;
        }
        Command::SpineReview(args) => {
            let plan = ops::review::Plan::new(args)?;
            let store = operator_store(&cli.common, "spine-review", true)?;
            let model_dir =
                cli.common.model_dir.clone().unwrap_or_else(spine_embed::default_model_dir);
            let embedder = cli.common.embedder.clone();
            let failed =
                tokio::task::spawn_blocking(move || plan.run(&store, &model_dir, &embedder))
                    .await
                    .context("the spine-review thread panicked")??;
            if failed {
                ops::review::flush();
                std::process::exit(1);
            }
        }
    }
    Ok(())
}
