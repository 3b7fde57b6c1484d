//! The audit log on PostgreSQL ([`crate::audit`]): the `audit_events` table (migration 8).
//!
//! A change made in one statement carries its event in that statement: the change becomes
//! the first query of a data-modifying CTE, and the event is inserted from the rows it
//! returns ([`recorded_sql`]), so the two commit together with no extra round trip. A change
//! made in a transaction inserts its event in it ([`append`]).

use deadpool_postgres::GenericClient;
use spine_core::audit::Lane;
use spine_core::{RecordId, Timestamp};
use tokio_postgres::Row;
use tokio_postgres::types::ToSql;

use super::query::{Param, Where};
use crate::audit::{AuditEvent, AuditQuery};
use crate::codec::parse_id;
use crate::{Result, StoreError};

/// The columns an event is written as, in [`event_params`]' order for the first seven.
const COLUMNS: &str =
    "at, actor, owner, lane, client, action, trace_id, scope, record_ids, outcome";

/// The event's own values, as the parameters [`recorded_sql`] takes: at, actor, owner, lane,
/// client, action, trace id.
pub(super) fn event_params(e: &AuditEvent) -> Vec<Param> {
    vec![
        Box::new(e.at.as_micros()),
        Box::new(e.actor.clone()),
        Box::new(e.owner.clone()),
        Box::new(e.lane.as_str().to_owned()),
        Box::new(e.client.clone()),
        Box::new(e.action.clone()),
        Box::new(e.trace_id.clone()),
    ]
}

/// [`event_params`] bound into `w`: their placeholders.
pub(super) fn bind_event(w: &mut Where, e: &AuditEvent) -> Vec<String> {
    vec![
        w.bind(e.at.as_micros()),
        w.bind(e.actor.clone()),
        w.bind(e.owner.clone()),
        w.bind(e.lane.as_str().to_owned()),
        w.bind(e.client.clone()),
        w.bind(e.action.clone()),
        w.bind(e.trace_id.clone()),
    ]
}

/// The placeholders of [`event_params`] appended after `before` other parameters.
pub(super) fn placeholders_after(before: usize) -> Vec<String> {
    (before + 1..=before + 7).map(|i| format!("${i}")).collect()
}

/// `change` — one statement writing `memories` that ends `RETURNING id, scope` — with the
/// event of what it changed written by the same statement: the event's values from the
/// parameters `at` names ([`event_params`]' order), its records and scope from the rows the
/// change returns, and no event when it changed nothing. Answers one row (`id`) per changed
/// record.
pub(super) fn recorded_sql(change: &str, at: &[String]) -> String {
    let [t, actor, owner, lane, client, action, trace] = at else {
        unreachable!("an event has seven parameters, not {}", at.len())
    };
    format!(
        "WITH changed AS ({change}),
         logged AS (
             INSERT INTO audit_events ({COLUMNS})
             SELECT {t}::bigint, {actor}::text, {owner}::text, {lane}::text, {client}::text,
                 {action}::text, {trace}::text,
                 CASE WHEN count(DISTINCT scope) = 1 THEN min(scope) ELSE '' END,
                 array_agg(id ORDER BY id), 'ok'
             FROM changed HAVING count(*) > 0
         )
         SELECT id FROM changed"
    )
}

/// Appends `e` through `client` (in a change's transaction, or on its own).
pub(super) async fn append<C: GenericClient>(client: &C, e: &AuditEvent) -> Result<()> {
    write(client, &format!("INSERT INTO audit_events ({COLUMNS}) VALUES ({VALUES})"), e)
        .await
        .map(|_| ())
}

/// [`COLUMNS`]' placeholders, typed.
const VALUES: &str = "$1::bigint, $2::text, $3::text, $4::text, $5::text, $6::text, $7::text, $8::text, $9::text[], $10::text";

/// Runs `sql` (an insert taking [`COLUMNS`] as [`VALUES`]) with `e`'s values: the rows it
/// wrote.
async fn write<C: GenericClient>(client: &C, sql: &str, e: &AuditEvent) -> Result<u64> {
    let ids: Vec<String> = e.record_ids.iter().map(|id| id.to_string()).collect();
    let stmt = client.prepare_cached(sql).await?;
    let values: [&(dyn ToSql + Sync); 10] = [
        &e.at.as_micros(),
        &e.actor,
        &e.owner,
        &e.lane.as_str(),
        &e.client,
        &e.action,
        &e.trace_id,
        &e.scope,
        &ids,
        &e.outcome,
    ];
    Ok(client.execute(&stmt, &values).await?)
}

/// The statement listing the events `q` selects, newest first.
pub(super) fn list_sql(q: &AuditQuery) -> (String, Where) {
    let mut w = Where::default();
    if let Some(t) = q.since {
        let p = w.bind(t.as_micros());
        w.push(&format!("at >= {p}"));
    }
    if let Some(t) = q.until {
        let p = w.bind(t.as_micros());
        w.push(&format!("at < {p}"));
    }
    if let Some(a) = &q.actor {
        let p = w.bind(a.clone());
        w.push(&format!("actor = {p}"));
    }
    if let Some(id) = &q.record {
        let p = w.bind(id.to_string());
        w.push(&format!("{p} = ANY(record_ids)"));
    }
    if let Some(s) = &q.scope {
        let p = w.bind(s.clone());
        w.push(&format!("scope = {p}"));
    }
    if let Some(a) = &q.action {
        let p = w.bind(a.clone());
        w.push(&format!("action = {p}"));
    }
    let limit = w.bind(i64::try_from(q.limit).unwrap_or(i64::MAX));
    let sql = format!(
        "SELECT {COLUMNS} FROM audit_events WHERE {} ORDER BY at DESC, seq DESC LIMIT {limit}",
        w.sql
    );
    (sql, w)
}

/// An event read back from a row of [`list_sql`].
pub(super) fn read_event(r: &Row) -> Result<AuditEvent> {
    read_at(r, 0)
}

/// The event in the columns of `r` from `first` on, in [`COLUMNS`]' order.
fn read_at(r: &Row, first: usize) -> Result<AuditEvent> {
    let lane: String = r.try_get(first + 3)?;
    let ids: Vec<String> = r.try_get(first + 8)?;
    Ok(AuditEvent {
        at: Timestamp::from_micros(r.try_get(first)?),
        actor: r.try_get(first + 1)?,
        owner: r.try_get(first + 2)?,
        lane: Lane::parse(&lane)
            .ok_or_else(|| StoreError::Corrupt(format!("audit event lane {lane:?}")))?,
        client: r.try_get(first + 4)?,
        action: r.try_get(first + 5)?,
        trace_id: r.try_get(first + 6)?,
        scope: r.try_get(first + 7)?,
        record_ids: ids.iter().map(|id| parse_id(id)).collect::<Result<_>>()?,
        outcome: r.try_get(first + 9)?,
    })
}

/// The statement of one page of events in the order written (`spine export`): `$1` the
/// position after which, `$2` the scope or null, `$3` the limit.
pub(super) const PAGE_SQL: &str = "SELECT seq, at, actor, owner, lane, client, action, trace_id,
        scope, record_ids, outcome
     FROM audit_events WHERE seq > $1 AND ($2::text IS NULL OR scope = $2) ORDER BY seq LIMIT $3";

/// A row of [`PAGE_SQL`]: the event's position and the event.
pub(super) fn read_positioned(r: &Row) -> Result<(i64, AuditEvent)> {
    Ok((r.try_get(0)?, read_at(r, 1)?))
}

/// Appends each of `events` through `client` unless an identical one is in the log: how
/// many it appended.
pub(super) async fn import<C: GenericClient>(client: &C, events: &[AuditEvent]) -> Result<u64> {
    let sql = format!(
        "INSERT INTO audit_events ({COLUMNS}) SELECT {VALUES}
         WHERE NOT EXISTS (SELECT 1 FROM audit_events WHERE ({COLUMNS}) = ({VALUES}))"
    );
    let mut appended = 0;
    for e in events {
        appended += write(client, &sql, e).await?;
    }
    Ok(appended)
}

/// The scope of each of `ids` still present, as `client` sees them (an operator change reads
/// them before a delete, after an insert or update).
pub(super) async fn scoped<C: GenericClient>(
    client: &C,
    ids: &[RecordId],
) -> Result<Vec<(RecordId, String)>> {
    if ids.is_empty() {
        return Ok(vec![]);
    }
    let keys: Vec<String> = ids.iter().map(RecordId::to_string).collect();
    let rows = client
        .query("SELECT id, scope FROM memories WHERE id = ANY($1) ORDER BY id", &[&keys])
        .await?;
    rows.iter().map(|r| Ok((parse_id(r.try_get(0)?)?, r.try_get(1)?))).collect()
}

impl super::PgStore {
    /// Writes the event of an operator command's change through `client`, in the change's
    /// transaction, when this handle has an attribution ([`crate::TransferStore::audit_as`]):
    /// whether it wrote one.
    pub(super) async fn record_operator<C: GenericClient>(
        &self,
        client: &C,
        changed: Vec<(RecordId, String)>,
    ) -> Result<bool> {
        let Some(e) = self.operator_audit.get().and_then(|a| AuditEvent::of_change(a, changed))
        else {
            return Ok(false);
        };
        append(client, &e).await?;
        Ok(true)
    }

    /// Notes, once its transaction committed, that an operator change wrote its event.
    pub(super) fn operator_recorded(&self, wrote: bool) {
        if let (true, Some(access)) = (wrote, self.operator_audit.get()) {
            access.recorded();
        }
    }

    /// `change` — one statement ending `RETURNING id, scope`, with `params` — and, when this
    /// handle has an operator attribution, its event in the same statement
    /// ([`recorded_sql`]): how many records it changed.
    pub(super) fn change_recorded(
        &self,
        change: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<u64> {
        let Some(e) = self.operator_audit.get().and_then(AuditEvent::attributed) else {
            return Ok(self.query(change, params)?.len() as u64);
        };
        let at = placeholders_after(params.len());
        let values = event_params(&e);
        let mut all: Vec<&(dyn ToSql + Sync)> = params.to_vec();
        all.extend(values.iter().map(|p| p.as_ref() as &(dyn ToSql + Sync)));
        let n = self.query(&recorded_sql(change, &at), &all)?.len() as u64;
        self.operator_recorded(n > 0);
        Ok(n)
    }
}
