//! The audit log on SQLite ([`crate::audit`]): the `audit_events` table (migration 11).

use rusqlite::types::Value;
use rusqlite::{Connection, OptionalExtension, params, params_from_iter};
use spine_core::audit::Lane;
use spine_core::{RecordId, Timestamp};

use crate::audit::{AuditEvent, AuditQuery};
use crate::codec::parse_id;
use crate::{Access, Result, StoreError};

/// Appends `e` through `conn`: inside a write's transaction, with its change.
pub(super) fn append(conn: &Connection, e: &AuditEvent) -> Result<()> {
    write(conn, APPEND, e).map(|_| ())
}

/// The columns of an event, in [`write`]'s parameter order and the order [`list`] reads.
macro_rules! columns {
    () => {
        "at, actor, owner, lane, client, action, scope, record_ids, outcome, trace_id"
    };
}

/// Appends the event bound as `?1` … `?10`.
const APPEND: &str = concat!(
    "INSERT INTO audit_events (",
    columns!(),
    ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)"
);

/// Appends the event bound as `?1` … `?10` unless an identical one is in the log.
const APPEND_NEW: &str = concat!(
    "INSERT INTO audit_events (",
    columns!(),
    ") SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10
     WHERE NOT EXISTS (SELECT 1 FROM audit_events WHERE at = ?1 AND actor = ?2 AND owner = ?3
        AND lane = ?4 AND client = ?5 AND action = ?6 AND scope = ?7 AND record_ids = ?8
        AND outcome = ?9 AND trace_id = ?10)"
);

/// Runs `sql` (an insert taking the `columns!()` as `?1` … `?10`) with `e`'s values: the rows
/// it wrote.
fn write(conn: &Connection, sql: &str, e: &AuditEvent) -> Result<usize> {
    Ok(conn.prepare_cached(sql)?.execute(params![
        e.at.as_micros(),
        e.actor,
        e.owner,
        e.lane.as_str(),
        e.client,
        e.action,
        e.scope,
        e.ids_json(),
        e.outcome,
        e.trace_id,
    ])?)
}

/// Writes the event of a change `access` attributes, over the records it `changed` (with
/// their scopes), in the change's transaction: whether it wrote one (nothing changed, or no
/// attribution: none).
pub(super) fn record(
    conn: &Connection,
    access: &Access,
    changed: impl IntoIterator<Item = (RecordId, String)>,
) -> Result<bool> {
    match AuditEvent::of_change(access, changed) {
        Some(e) => append(conn, &e).map(|()| true),
        None => Ok(false),
    }
}

/// The events `q` selects, newest first (by time, then by the order they were written).
pub(super) fn list(conn: &Connection, q: &AuditQuery) -> Result<Vec<AuditEvent>> {
    let mut sql = String::from(concat!("SELECT ", columns!(), " FROM audit_events WHERE 1 = 1"));
    let mut p: Vec<Value> = Vec::new();
    let mut and = |clause: &str, v: Value| {
        sql.push_str(" AND ");
        sql.push_str(clause);
        p.push(v);
    };
    if let Some(t) = q.since {
        and("at >= ?", Value::Integer(t.as_micros()));
    }
    if let Some(t) = q.until {
        and("at < ?", Value::Integer(t.as_micros()));
    }
    if let Some(a) = &q.actor {
        and("actor = ?", Value::Text(a.clone()));
    }
    if let Some(id) = &q.record {
        and(
            "EXISTS (SELECT 1 FROM json_each(record_ids) WHERE value = ?)",
            Value::Text(id.to_string()),
        );
    }
    if let Some(s) = &q.scope {
        and("scope = ?", Value::Text(s.clone()));
    }
    if let Some(a) = &q.action {
        and("action = ?", Value::Text(a.clone()));
    }
    sql.push_str(" ORDER BY at DESC, seq DESC LIMIT ?");
    p.push(Value::Integer(i64::try_from(q.limit).unwrap_or(i64::MAX)));
    let mut stmt = conn.prepare(&sql)?;
    let mut rows = stmt.query(params_from_iter(p))?;
    let mut out = Vec::new();
    while let Some(r) = rows.next()? {
        out.push(read(r, 0)?);
    }
    Ok(out)
}

/// The event in the ten columns of `r` from `first` on, in `columns!()`' order.
fn read(r: &rusqlite::Row<'_>, first: usize) -> Result<AuditEvent> {
    let lane: String = r.get(first + 3)?;
    let ids: String = r.get(first + 7)?;
    let ids: Vec<String> = serde_json::from_str(&ids)
        .map_err(|e| StoreError::Corrupt(format!("audit event record_ids: {e}")))?;
    Ok(AuditEvent {
        at: Timestamp::from_micros(r.get(first)?),
        actor: r.get(first + 1)?,
        owner: r.get(first + 2)?,
        lane: Lane::parse(&lane)
            .ok_or_else(|| StoreError::Corrupt(format!("audit event lane {lane:?}")))?,
        client: r.get(first + 4)?,
        action: r.get(first + 5)?,
        scope: r.get(first + 6)?,
        record_ids: ids.iter().map(|id| parse_id(id)).collect::<Result<_>>()?,
        outcome: r.get(first + 8)?,
        trace_id: r.get(first + 9)?,
    })
}

/// Up to `limit` events after position `after` in the order written, of `scope` when given:
/// each with its position (`seq`).
pub(super) fn page(
    conn: &Connection,
    scope: Option<&str>,
    after: i64,
    limit: usize,
) -> Result<Vec<(i64, AuditEvent)>> {
    let mut stmt = conn.prepare_cached(concat!(
        "SELECT seq, ",
        columns!(),
        " FROM audit_events WHERE seq > ?1 AND (?2 IS NULL OR scope = ?2) ORDER BY seq LIMIT ?3"
    ))?;
    let mut rows = stmt.query(params![after, scope, i64::try_from(limit).unwrap_or(i64::MAX)])?;
    let mut out = Vec::new();
    while let Some(r) = rows.next()? {
        out.push((r.get(0)?, read(r, 1)?));
    }
    Ok(out)
}

/// Appends each of `events` unless an identical one is in the log: how many it appended.
pub(super) fn import(conn: &Connection, events: &[AuditEvent]) -> Result<u64> {
    let mut appended = 0;
    for e in events {
        appended += write(conn, APPEND_NEW, e)? as u64;
    }
    Ok(appended)
}

/// Removes the events written before `before`: how many.
pub(super) fn prune(conn: &Connection, before: Timestamp) -> Result<u64> {
    Ok(conn.execute("DELETE FROM audit_events WHERE at < ?1", [before.as_micros()])? as u64)
}

/// The scope of each of `ids` still present in `conn`'s view (an operator change reads them
/// before a delete, after an insert or update).
pub(super) fn scoped(conn: &Connection, ids: &[RecordId]) -> Result<Vec<(RecordId, String)>> {
    let mut stmt = conn.prepare_cached("SELECT scope FROM memories WHERE id = ?1")?;
    let mut out = Vec::with_capacity(ids.len());
    for id in ids {
        if let Some(scope) =
            stmt.query_row([id.to_string()], |r| r.get::<_, String>(0)).optional()?
        {
            out.push((*id, scope));
        }
    }
    Ok(out)
}

impl super::SqliteStore {
    /// Writes the event of an operator command's change through `conn`, in the change's
    /// transaction, when this handle has an attribution ([`crate::TransferStore::audit_as`]):
    /// whether it wrote one.
    pub(super) fn record_operator(
        &self,
        conn: &Connection,
        changed: Vec<(RecordId, String)>,
    ) -> Result<bool> {
        match self.operator_audit.get() {
            Some(access) => record(conn, access, changed),
            None => Ok(false),
        }
    }

    /// Notes, once its transaction committed, that an operator change wrote its event.
    pub(super) fn operator_recorded(&self, wrote: bool) {
        if let (true, Some(access)) = (wrote, self.operator_audit.get()) {
            access.recorded();
        }
    }

    /// [`crate::TransferStore::audit_as`].
    pub(super) fn set_operator_audit(&self, access: Access) {
        let _ = self.operator_audit.set(access);
    }
}
