//! `spine audit`: lists the audit log's events, newest first; `spine audit prune` removes
//! the old ones, the only way events go (docs/observability.md, "Audit log").

use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};
use serde_json::{Value, json};
use spine_core::{Clock, RecordId, SystemClock, Timestamp};
use spine_store::{AuditEvent, AuditQuery, Store};

use super::{OutputArgs, count, parse_duration};

/// `spine audit`.
#[derive(Debug, Clone, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct AuditArgs {
    #[command(subcommand)]
    pub command: Option<AuditCommand>,
    #[command(flatten)]
    pub list: ListArgs,
}

/// `spine audit`'s subcommands.
#[derive(Debug, Clone, Subcommand)]
pub enum AuditCommand {
    /// Remove the events older than --older-than (the only way events are removed).
    Prune(PruneArgs),
}

/// `spine audit` (listing) flags.
#[derive(Debug, Clone, Args)]
pub struct ListArgs {
    /// Only events from this long ago or later (e.g. 30m, 7d).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub since: Option<Duration>,
    /// Only events before this time (RFC 3339, e.g. 2026-12-01T00:00:00Z).
    #[arg(long, value_name = "TIME", value_parser = parse_time)]
    pub until: Option<Timestamp>,
    /// Only events of this actor (the verified identity; empty for anonymous calls).
    #[arg(long)]
    pub actor: Option<String>,
    /// Only events that name this record (its full id).
    #[arg(long, value_name = "ID", value_parser = parse_record)]
    pub record: Option<RecordId>,
    /// Only events in this scope.
    #[arg(long)]
    pub scope: Option<String>,
    /// Only events of this action (a tool or command name, e.g. delete_memory).
    #[arg(long)]
    pub action: Option<String>,
    /// The most events listed.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub limit: u64,
    #[command(flatten)]
    pub out: OutputArgs,
}

/// `spine audit prune` flags.
#[derive(Debug, Clone, Args)]
pub struct PruneArgs {
    /// Remove events written longer ago than this (e.g. 90d, 12h).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub older_than: Duration,
    #[command(flatten)]
    pub out: OutputArgs,
}

fn parse_time(s: &str) -> Result<Timestamp, String> {
    Timestamp::parse_rfc3339(s.trim())
        .ok_or_else(|| format!("{s:?} is not an RFC 3339 time such as 2026-12-01T00:00:00Z"))
}

fn parse_record(s: &str) -> Result<RecordId, String> {
    RecordId::parse(s.trim()).ok_or_else(|| format!("{s:?} is not a full record id (a UUID)"))
}

/// `now` less `d`: the earliest time an event may have been written to be kept or listed.
pub(crate) fn before(now: Timestamp, d: Duration) -> Result<Timestamp> {
    let micros = i64::try_from(d.as_micros()).context("the duration is too long")?;
    match now.as_micros().checked_sub(micros) {
        Some(t) => Ok(Timestamp::from_micros(t)),
        None => bail!("the duration is too long"),
    }
}

/// `spine audit` on `store`.
pub fn run(store: &dyn Store, args: &AuditArgs) -> Result<()> {
    match &args.command {
        Some(AuditCommand::Prune(p)) => prune(store, p),
        None => list(store, &args.list),
    }
}

fn list(store: &dyn Store, a: &ListArgs) -> Result<()> {
    let now = SystemClock.now();
    let q = AuditQuery {
        since: a.since.map(|d| before(now, d)).transpose()?,
        until: a.until,
        actor: a.actor.clone(),
        record: a.record,
        scope: a.scope.clone(),
        action: a.action.clone(),
        limit: a.limit as usize,
    };
    let events = store.audit_events(&q).context("cannot read the audit log")?;
    let doc = json!({ "events": events.iter().map(event_json).collect::<Vec<_>>() });
    a.out.print(&doc, || {
        if events.is_empty() {
            println!("no audit events match");
        }
        for e in &events {
            println!("{}", event_line(e));
        }
    })
}

fn prune(store: &dyn Store, p: &PruneArgs) -> Result<()> {
    let cutoff = before(SystemClock.now(), p.older_than)?;
    let removed = store.prune_audit(cutoff).context("cannot prune the audit log")?;
    let doc = json!({ "removed": removed, "before": cutoff.to_rfc3339() });
    p.out.print(&doc, || {
        println!("removed {} written before {}", count(removed, "audit event"), cutoff.to_rfc3339())
    })
}

/// An event as `--json` prints it (docs/observability.md, "Audit log").
pub(crate) fn event_json(e: &AuditEvent) -> Value {
    json!({
        "at": e.at.to_rfc3339(),
        "actor": e.actor,
        "owner": e.owner,
        "lane": e.lane.as_str(),
        "client": e.client,
        "action": e.action,
        "scope": e.scope,
        "record_ids": e.record_ids.iter().map(RecordId::to_string).collect::<Vec<_>>(),
        "outcome": e.outcome,
        "trace_id": e.trace_id,
    })
}

/// An event as one line of text: time, outcome, lane, action, actor, scope, records, client.
fn event_line(e: &AuditEvent) -> String {
    let or_dash = |s: &str| if s.is_empty() { "-".to_owned() } else { s.to_owned() };
    let ids: Vec<String> = e.record_ids.iter().map(RecordId::to_string).collect();
    format!(
        "{}  {:<16} {:<8} {:<16} actor={} scope={} records=[{}] client={}",
        e.at.to_rfc3339(),
        e.outcome,
        e.lane.as_str(),
        e.action,
        or_dash(&e.actor),
        or_dash(&e.scope),
        ids.join(","),
        or_dash(&e.client),
    )
}

/// The audit attribution of one run of an operator command that changes records (`purge`,
/// `prune-expired --apply`, `consolidate --apply`, `archive`, `restore`, `import`, `reindex`,
/// `migrate`, `summarize-missing`): the store writes one event per transaction that changes
/// records, in it; a run that changed nothing, or failed before it did, leaves one event on
/// its own ([`Operator::finish`]).
pub struct Operator {
    access: spine_store::Access,
}

impl Operator {
    /// The attribution of command `action`, run by the login running this process.
    pub fn new(action: &str) -> Self {
        let audit = spine_core::audit::Audit::new(
            spine_core::audit::Lane::Operator,
            action,
            concat!("spine/", env!("CARGO_PKG_VERSION")),
        );
        Operator { access: spine_store::Access::operator().audited(login(), audit) }
    }

    /// The attributed access, for a change made through a `Store` method that takes one
    /// (archive / restore), rather than through the handle [`Self::attach`] attributes.
    pub fn access(&self) -> &spine_store::Access {
        &self.access
    }

    /// Records `store`'s changes from now on under this attribution.
    pub fn attach(&self, store: &dyn spine_ops::OperatorStore) {
        store.audit_as(self.access.clone());
    }

    /// Once the run returned `out`: appends its event through `store` when no change wrote
    /// one (nothing changed, or it failed first; outcome `ok` or `failed`), and passes `out`
    /// on. An event that cannot be written fails an otherwise successful run.
    pub fn finish<T>(&self, store: &dyn Store, out: Result<T>) -> Result<T> {
        let outcome = if out.is_ok() { spine_store::audit::OK } else { "failed" };
        let Some(event) = AuditEvent::unrecorded_run(&self.access, outcome) else { return out };
        let appended = store.append_audit(&event).context("writing the run's audit event");
        let value = out?;
        appended?;
        Ok(value)
    }
}

/// The login running this process (`$USER`, `$LOGNAME`, else the numeric user id): an
/// operator command's actor.
fn login() -> String {
    ["USER", "LOGNAME"]
        .iter()
        .find_map(|v| std::env::var(v).ok().filter(|s| !s.is_empty()))
        .unwrap_or_else(|| format!("uid {}", uid()))
}

/// The real user id, read from `/proc/self/status` (no `unsafe` for `getuid`).
fn uid() -> String {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|l| l.split_whitespace().next().map(str::to_owned))
        })
        .unwrap_or_else(|| "unknown".into())
}
