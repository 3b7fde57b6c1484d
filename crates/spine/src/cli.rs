//! The command line: every command and flag (names are fixed: scripts and docs depend on
//! them, see DESIGN "Command line").

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::builder::TypedValueParser;
use clap::{Args, Parser, Subcommand};

use crate::{embedder, hook, install, notes, ops, settings};

/// Spine: a memory service for software agents, over MCP.
#[derive(Debug, Parser)]
#[command(name = "spine", version, about)]
pub struct Cli {
    #[command(flatten)]
    pub common: Common,
    #[command(subcommand)]
    pub command: Command,
}

/// Flags every command takes.
#[derive(Debug, Args)]
pub struct Common {
    /// Directory of the embedded SQLite store (spine.db); --database-url selects PostgreSQL instead
    /// [default: $XDG_DATA_HOME/spine or ~/.local/share/spine]
    #[arg(long, global = true, env = "SPINE_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// PostgreSQL (with pgvector) instead of the embedded store: postgres://user@host:port/db.
    #[arg(long, global = true, env = "SPINE_DATABASE_URL")]
    pub database_url: Option<String>,
    /// Directory holding the built-in model's files [default:
    /// $XDG_CACHE_HOME/spine/models/all-MiniLM-L6-v2 or ~/.cache/spine/models/all-MiniLM-L6-v2]
    #[arg(long, global = true, env = "SPINE_MODEL_DIR")]
    pub model_dir: Option<PathBuf>,
    /// OIDC issuer URL; when set, every call needs a valid bearer token from this issuer.
    #[arg(long, global = true, env = "SPINE_OIDC_ISSUER")]
    pub oidc_issuer: Option<String>,
    /// Audience the tokens must carry (required with --oidc-issuer).
    #[arg(long, global = true, env = "SPINE_OIDC_AUDIENCE")]
    pub oidc_audience: Option<String>,
    /// Token claim whose value owns the records a caller writes.
    #[arg(long, global = true, env = "SPINE_OWNER_CLAIM", default_value = "email")]
    pub owner_claim: String,
    /// Audit reads too: one audit event per recall call (search, get, list, related,
    /// rules, discoveries), naming the records it returned, never the query.
    #[arg(long, global = true, env = "SPINE_AUDIT_READS")]
    pub audit_reads: bool,
    #[command(flatten)]
    pub embedder: embedder::EmbedderArgs,
    #[command(flatten)]
    pub limits: settings::LimitArgs,
    #[command(flatten)]
    pub rerank: settings::RerankArgs,
}

/// What `spine serve` answers on `--listen` (and `--metrics-listen`), as its help lists it.
const SERVE_ENDPOINTS: &str = "\
Endpoints on the --listen address:
  /mcp                                    MCP over streamable HTTP (DELETE ends a session)
  /healthz                                GET: liveness, answers \"ok\"
  /readyz                                 GET: readiness, \"ready\" (200) once the model is
                                          loaded and the store answers, while not stopping;
                                          else 503 \"not ready: <reason>\"
  /spine.v1.MemoryService/<Method>        Connect API, POST (JSON or binary protobuf):
                                          SearchMemories, ListMemories, GetMemory,
                                          ArchiveMemory, RestoreMemory, ListScopes, ListTags,
                                          RelatedMemories, ListRules, GetMemoryHistory
                                          (docs/connect.md)
  /console                                the web console (docs/console.md); its files under
                                          /console/ and its OAuth redirect, /console/callback
  /metrics                                Prometheus text format; served on --metrics-listen
                                          instead when that is given
  /.well-known/oauth-protected-resource   with --oidc-issuer: the protected-resource metadata
                                          (RFC 9728), also at .../oauth-protected-resource/mcp

With --oidc-issuer, /mcp and the Connect API need Authorization: Bearer <token>.";

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve MCP on stdio (what Claude Code, Codex and Cursor launch).
    Mcp,
    /// Serve MCP over streamable HTTP, the Connect API, the web console and /metrics.
    #[command(after_help = SERVE_ENDPOINTS)]
    Serve {
        /// Address to listen on.
        #[arg(long, env = "SPINE_LISTEN", default_value = "127.0.0.1:8080")]
        listen: SocketAddr,
        /// Serve /metrics on this address instead of beside /mcp (e.g. 127.0.0.1:9090).
        #[arg(long, env = "SPINE_METRICS_LISTEN")]
        metrics_listen: Option<SocketAddr>,
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
        /// Answer every MCP request on its own, without sessions, so that any of several
        /// nodes behind a load balancer can serve any request (docs/operations.md).
        #[arg(long, env = "SPINE_STATELESS")]
        stateless: bool,
        /// OAuth client id the web console (/console) signs in with: a public client at the
        /// --oidc-issuer with redirect URI http(s)://<this host>/console/callback; tokens
        /// issued to it are accepted beside --oidc-audience (docs/console.md).
        #[arg(long, env = "SPINE_CONSOLE_CLIENT_ID")]
        console_client_id: Option<String>,
        /// Serve a non-loopback --listen address without OIDC: anyone who can reach it
        /// reads and writes every record. Refused without this flag; warned on every start.
        #[arg(long, env = "SPINE_ALLOW_UNAUTHENTICATED")]
        allow_unauthenticated: bool,
        /// Remove audit events older than this once a day (e.g. 90d); without it every
        /// event is kept (`spine audit prune` removes them by hand).
        #[arg(long, env = "SPINE_AUDIT_RETENTION", value_name = "DURATION", value_parser = ops::parse_duration)]
        audit_retention: Option<std::time::Duration>,
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
    /// List the audit log: every change, and every refused attempt, newest first.
    ///
    /// One event per call of a tool that may change records: time, actor, owner, lane,
    /// client, action, scope, record ids, outcome. Never content, summaries, tags or tokens.
    /// `spine audit prune --older-than DUR` removes old events. See docs/observability.md.
    Audit(ops::audit::AuditArgs),
    /// Review the store: scan, verify, consolidate, purge, archive, restore.
    ///
    /// Sweeps (scan, verify, consolidate) need --scope or --all-scopes; consolidate and
    /// purge are previews unless --apply. Safe while a server runs on the same data
    /// directory.
    #[command(name = "spine-review")]
    SpineReview(ops::review::ReviewArgs),
    /// Print memory for a coding agent's session hook (JSON input on stdin).
    ///
    /// session-start and pre-compact print the repository's digest (its rules, then its
    /// most recent memories); prompt prints the memories relevant to the prompt, or nothing.
    /// Reads the store directly (no server needed). Never fails the session: on any problem
    /// it prints nothing, one line on stderr, and exits 0. See docs/hooks.md.
    Hook(hook::HookArgs),
    /// Add Spine to a coding client's configuration: its MCP server and session hooks.
    ///
    /// Writes the client's own files (user-wide by default, --project for one project),
    /// keeping everything else in them; idempotent; backs up a file before changing it.
    /// Passes --data-dir on to the entries when given. --all configures every client found
    /// on this machine. See docs/clients.md.
    Install(install::InstallArgs),
    /// Remove what `spine install` added to a client's configuration.
    Uninstall(install::InstallArgs),
    /// Check the model files, the store, the configured clients and (--url) a running
    /// server; say what to do about each problem.
    ///
    /// Exit status 0 only when nothing is wrong; --json prints one object for scripts.
    Doctor(DoctorArgs),
    /// Import CLAUDE.md, AGENTS.md and Claude Code's memory files as memories.
    ///
    /// One record per bullet or paragraph, with its heading, into the repository's scope;
    /// tagged with the file it came from; a second run imports nothing twice. --dry-run
    /// shows what would be stored.
    ImportNotes(notes::ImportNotesArgs),
}

/// `spine doctor` flags.
#[derive(Debug, Clone, Args)]
pub struct DoctorArgs {
    /// Also check the `spine serve` at this base URL (e.g. http://127.0.0.1:8080): its
    /// /healthz, whether it requires authentication, and whether it answers without
    /// authentication beyond loopback.
    #[arg(long, value_name = "URL")]
    pub url: Option<String>,
    /// Print one JSON object (for scripts) instead of text.
    #[arg(long)]
    pub json: bool,
}
