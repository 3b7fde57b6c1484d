//! The operator's view of the store, for `spine spine-review` (SPEC "Operator commands"):
//! state counts, invariant checks, near-duplicate candidates and their consolidation,
//! purging behind the extract-before-delete gate, and archive / restore of any record.
//!
//! Nothing here is access-checked: the operator acts on every owner's records. Every write
//! runs in one `IMMEDIATE` transaction that re-checks what the caller saw before writing, so
//! a command running beside a server (which may change the same records meanwhile) either
//! applies a change to the record as it was listed or skips it and says why. The `changes`
//! triggers see every write, so running servers' search indexes follow.

use std::collections::{HashMap, HashSet};

use rusqlite::types::Value;
use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params, params_from_iter};
use spine_core::{
    Category, EpochSeconds, Memory, RecordId, SCHEMA_VERSION, Scope, StateMarkers, Timestamp,
};

use super::verify::check_links;
use super::{STAMP_VERSION, SqliteStore, Where, blob_to_vec, decode};
use crate::checks::{Columns, check_vector};
use crate::operator::dedup;
use crate::{
    Check, ConsolidationCandidate, ConsolidationGroup, ConsolidationLink, Filter, PurgeCandidate,
    PurgeClass, PurgeCriteria, PurgeOutcome, PurgeRefusal, Result, ReviewStore, ScopeFilter,
    StateCounts, StoreError, TransferStore, VectorExpectation, VectorStamp, VerifyPage, Violation,
    purge_verdicts, record_digest,
};

/// The SQL of the expired state at `?` (epoch seconds); mirrors `StateMarkers::derive`.
const EXPIRED: &str = "(m.not_after IS NOT NULL AND m.not_after <= ?)";

/// Which records consolidate considers: readable by someone (an owner key), recall-visible
/// whatever the time (no state marker and no validity window: a scheduled memory is
/// deliberate), and not rules (SPEC: rules are immutable, never superseded nor superseding).
const CONSOLIDATION_ELIGIBLE: &str = "m.owner IS NOT NULL AND m.archived_at IS NULL
    AND m.superseded_by IS NULL AND m.not_before IS NULL AND m.not_after IS NULL
    AND m.category <> 'rule'";

fn bad_id(id: &str) -> StoreError {
    StoreError::Corrupt(format!("bad id {id}"))
}

fn parse_id(id: &str) -> Result<RecordId> {
    RecordId::parse(id).ok_or_else(|| bad_id(id))
}

/// Successor → the records whose `superseded_by` names it (every owner, every scope).
fn predecessors_by_successor(conn: &Connection) -> Result<HashMap<RecordId, Vec<RecordId>>> {
    let mut stmt =
        conn.prepare("SELECT id, superseded_by FROM memories WHERE superseded_by IS NOT NULL")?;
    let mut rows = stmt.query([])?;
    let mut out: HashMap<RecordId, Vec<RecordId>> = HashMap::new();
    while let Some(r) = rows.next()? {
        let (id, succ): (String, String) = (r.get(0)?, r.get(1)?);
        // Malformed ids are verify's business; they link nothing here.
        if let (Some(id), Some(succ)) = (RecordId::parse(&id), RecordId::parse(&succ)) {
            out.entry(succ).or_default().push(id);
        }
    }
    Ok(out)
}

/// The gate of `gate.rs` on an open connection (the delete transaction holds the store's
/// lock, so it cannot call [`SqliteStore::exported_unchanged`]): whether the record was
/// exported as it is now, and the file it went to.
fn export_gate_in(conn: &Connection, id: &RecordId) -> Result<(bool, Option<String>)> {
    let row: Option<(String, String, String)> = conn
        .prepare_cached(
            "SELECT m.body, e.digest, e.file FROM memories m JOIN exported e ON e.id = m.id
             WHERE m.id = ?1",
        )?
        .query_row([id.to_string()], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .optional()?;
    match row {
        Some((body, digest, file)) => Ok((record_digest(&decode(&body)?)? == digest, Some(file))),
        None => Ok((false, None)),
    }
}

/// The records `c` selects at `now`: (candidate without verdict, rowid order).
fn purge_select(
    conn: &Connection,
    c: &PurgeCriteria,
    now: Timestamp,
) -> Result<Vec<PurgeCandidate>> {
    let now_s = now.to_epoch_seconds().as_secs();
    let mut w = Where::new();
    if !c.classes.is_empty() {
        let mut any = Vec::new();
        let mut p = Vec::new();
        for class in dedup(&c.classes) {
            match class {
                PurgeClass::Archived => any.push("m.archived_at IS NOT NULL"),
                PurgeClass::Superseded => any.push("m.superseded_by IS NOT NULL"),
                PurgeClass::Expired => {
                    any.push(EXPIRED);
                    p.push(Value::Integer(now_s));
                }
            }
        }
        w.and(&any.join(" OR "), p);
    }
    let filter = Filter {
        tags_all: c.tags_all.clone(),
        categories_any: c.category.map(|c| vec![c]),
        created_before: c.created_before,
        ..Filter::new(match &c.scope {
            Some(s) => ScopeFilter::One(s.clone()),
            None => ScopeFilter::All,
        })
    };
    w.filter(&filter);
    let mut stmt = conn.prepare(&format!(
        "SELECT m.id, m.short_id, m.scope, m.category, m.created_at, m.archived_at IS NOT NULL,
            m.superseded_by IS NOT NULL, m.not_before, m.not_after, e.file
         FROM memories m LEFT JOIN exported e ON e.id = m.id
         WHERE {} ORDER BY m.rowid",
        w.sql
    ))?;
    let mut rows = stmt.query(params_from_iter(w.params))?;
    let mut out = Vec::new();
    while let Some(r) = rows.next()? {
        let id: String = r.get(0)?;
        let markers = StateMarkers {
            archived: r.get(5)?,
            superseded: r.get(6)?,
            not_before: r.get::<_, Option<i64>>(7)?.map(EpochSeconds::from_secs),
            not_after: r.get::<_, Option<i64>>(8)?.map(EpochSeconds::from_secs),
        };
        out.push(PurgeCandidate {
            id: parse_id(&id)?,
            short_id: r.get(1)?,
            scope: r.get(2)?,
            category: r.get(3)?,
            created_at: Timestamp::from_micros(r.get(4)?),
            states: markers.derive(now),
            exported_to: r.get(9)?,
            refused: None,
        });
    }
    Ok(out)
}

impl ReviewStore for SqliteStore {
    /// Records per scope by state at `now`, in scope order; only `scope` when given.
    fn state_counts(&self, scope: Option<&Scope>, now: Timestamp) -> Result<Vec<StateCounts>> {
        // Mirrors `StateMarkers::derive`: half-open window, expired suppressing scheduled.
        let not_expired = "(m.not_after IS NULL OR m.not_after > :now)";
        let scheduled =
            format!("({not_expired} AND m.not_before IS NOT NULL AND m.not_before > :now)");
        let sql = format!(
            "SELECT m.scope, COUNT(*),
                SUM(m.archived_at IS NULL AND m.superseded_by IS NULL AND {not_expired}
                    AND NOT {scheduled}),
                SUM(m.archived_at IS NOT NULL),
                SUM(m.superseded_by IS NOT NULL),
                SUM(NOT {not_expired}),
                SUM({scheduled})
             FROM memories m WHERE :scope IS NULL OR m.scope = :scope
             GROUP BY m.scope ORDER BY m.scope"
        );
        let conn = self.lock();
        let mut stmt = conn.prepare(&sql)?;
        let now_s = now.to_epoch_seconds().as_secs();
        let rows = stmt.query_map(
            rusqlite::named_params! {":now": now_s, ":scope": scope.map(Scope::as_str)},
            |r| {
                let n = |i: usize| r.get::<_, Option<i64>>(i).map(|v| v.unwrap_or(0) as u64);
                let (records, active) = (n(1)?, n(2)?);
                Ok(StateCounts {
                    scope: r.get(0)?,
                    records,
                    active,
                    hidden: records - active,
                    archived: n(3)?,
                    superseded: n(4)?,
                    expired: n(5)?,
                    scheduled: n(6)?,
                })
            },
        )?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// The vectors of the records in `scope` (or the whole store) by stamp and length.
    fn vector_stamps(&self, scope: Option<&Scope>) -> Result<Vec<VectorStamp>> {
        let conn = self.lock();
        let mut stmt = conn.prepare(
            "SELECT v.model, length(v.vec) / 4, COUNT(*) FROM vectors v
             JOIN memories m ON m.rowid = v.memory
             WHERE ?1 IS NULL OR m.scope = ?1 GROUP BY 1, 2 ORDER BY 1, 2",
        )?;
        let rows = stmt.query_map([scope.map(Scope::as_str)], |r| {
            Ok(VectorStamp {
                model: r.get(0)?,
                dims: r.get::<_, i64>(1)? as usize,
                vectors: r.get::<_, i64>(2)? as u64,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Checks up to `limit` records of `scope` (or every scope) after `after_rowid`, in
    /// rowid order, each against one snapshot (a page is one read transaction, so a
    /// supersession committed meanwhile is seen whole or not at all).
    ///
    /// Short_id uniqueness is checked by [`SqliteStore::duplicate_short_ids`]. A
    /// `supersedes` entry naming a record that no longer exists is not a violation: deleting
    /// or purging a chain's old records is allowed and leaves the head valid.
    fn verify_page(
        &self,
        scope: Option<&Scope>,
        after_rowid: i64,
        limit: usize,
        expect: &VectorExpectation,
    ) -> Result<VerifyPage> {
        let mut conn = self.lock();
        let tx = conn.transaction()?;
        let mut page = VerifyPage::default();
        let mut stmt = tx.prepare_cached(
            "SELECT m.rowid, m.id, m.short_id, m.owner, m.visibility, m.scope, m.category,
                m.created_at, m.not_before, m.not_after, m.archived_at, m.superseded_by, m.body,
                v.model, v.dims, v.vec
             FROM memories m LEFT JOIN vectors v ON v.memory = m.rowid
             WHERE m.rowid > ?1 AND (?2 IS NULL OR m.scope = ?2) ORDER BY m.rowid LIMIT ?3",
        )?;
        let mut rows = stmt.query(params![after_rowid, scope.map(Scope::as_str), limit as i64])?;
        while let Some(r) = rows.next()? {
            page.checked += 1;
            page.last_rowid = Some(r.get(0)?);
            let cols = Columns {
                id: r.get(1)?,
                short_id: r.get(2)?,
                owner: r.get(3)?,
                visibility: r.get(4)?,
                scope: r.get(5)?,
                category: r.get(6)?,
                created_at: r.get(7)?,
                not_before: r.get(8)?,
                not_after: r.get(9)?,
                archived_at: r.get(10)?,
                superseded_by: r.get(11)?,
            };
            let body: String = r.get(12)?;
            let vector: Option<(String, i64, Vec<u8>)> = match r.get::<_, Option<String>>(13)? {
                Some(model) => Some((model, r.get(14)?, r.get(15)?)),
                None => None,
            };
            let mut found = |check: Check, detail: String| {
                page.violations.push(Violation {
                    id: cols.id.clone(),
                    short_id: cols.short_id.clone(),
                    scope: cols.scope.clone(),
                    check,
                    detail,
                })
            };
            check_vector(vector.as_ref(), expect, &mut found);
            let record = match decode(&body) {
                Ok(m) => m,
                Err(e) => {
                    found(Check::PayloadCorrupt, e.to_string());
                    continue;
                }
            };
            let mismatched = cols.mismatches(&record);
            if !mismatched.is_empty() {
                found(
                    Check::ColumnsMismatch,
                    format!("columns differ from the payload: {}", mismatched.join(", ")),
                );
            }
            check_links(&tx, &record, &mut found)?;
        }
        Ok(page)
    }

    /// Records of `scope` (or every scope) whose short_id another record (anywhere) shares.
    fn duplicate_short_ids(&self, scope: Option<&Scope>) -> Result<Vec<Violation>> {
        let conn = self.lock();
        let mut stmt = conn.prepare(
            "SELECT m.id, m.short_id, m.scope, d.n FROM memories m
             JOIN (SELECT short_id, COUNT(*) AS n FROM memories GROUP BY short_id
                   HAVING COUNT(*) > 1) d ON d.short_id = m.short_id
             WHERE ?1 IS NULL OR m.scope = ?1 ORDER BY m.short_id, m.id",
        )?;
        let rows = stmt.query_map([scope.map(Scope::as_str)], |r| {
            let n: i64 = r.get(3)?;
            Ok(Violation {
                id: r.get(0)?,
                short_id: r.get(1)?,
                scope: r.get(2)?,
                check: Check::DuplicateShortId,
                detail: format!("{} records share this short_id; it resolves to none of them", n),
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// The groups consolidate compares, with their sizes: recall-visible, unwindowed,
    /// non-rule records with a vector, by scope, owner, visibility and embedder stamp.
    fn consolidation_groups(&self, scope: Option<&Scope>) -> Result<Vec<ConsolidationGroup>> {
        let conn = self.lock();
        let mut stmt = conn.prepare(&format!(
            "SELECT m.scope, m.owner, m.visibility, v.model, COUNT(*)
             FROM memories m JOIN vectors v ON v.memory = m.rowid
             WHERE {CONSOLIDATION_ELIGIBLE} AND (?1 IS NULL OR m.scope = ?1)
             GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4"
        ))?;
        let rows = stmt.query_map([scope.map(Scope::as_str)], |r| {
            Ok(ConsolidationGroup {
                scope: r.get(0)?,
                owner: r.get(1)?,
                visibility: r.get(2)?,
                model: r.get(3)?,
                records: r.get::<_, i64>(4)? as u64,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// The records of group `g`, oldest first (created_at, then id). Records whose payload
    /// does not decode are left out (verify reports them).
    fn consolidation_candidates(
        &self,
        g: &ConsolidationGroup,
    ) -> Result<Vec<ConsolidationCandidate>> {
        let conn = self.lock();
        let mut stmt = conn.prepare(&format!(
            "SELECT m.body, v.vec FROM memories m JOIN vectors v ON v.memory = m.rowid
             WHERE {CONSOLIDATION_ELIGIBLE} AND m.scope = ?1 AND m.owner = ?2
                AND m.visibility = ?3 AND v.model = ?4
             ORDER BY m.created_at, m.id"
        ))?;
        let mut rows = stmt.query(params![g.scope, g.owner, g.visibility, g.model])?;
        let mut out = Vec::new();
        while let Some(r) = rows.next()? {
            let body: String = r.get(0)?;
            let Ok(record) = decode(&body) else { continue };
            let digest = record_digest(&record)?;
            out.push(ConsolidationCandidate {
                record,
                vector: blob_to_vec(&r.get::<_, Vec<u8>>(1)?),
                digest,
            });
        }
        Ok(out)
    }

    /// Applies `links` in one transaction: each target gets `superseded_by`, each successor
    /// lists its targets in `supersedes` (links both ways, SPEC "Supersession rules").
    ///
    /// Every record involved is re-read first: a link is skipped (with the reason) when
    /// either record is gone, changed since it was planned (digest), or is a rule, or when
    /// its target already got a successor earlier in `links`. Entry i is `None` when link i
    /// was applied.
    fn apply_consolidation(&self, links: &[ConsolidationLink]) -> Result<Vec<Option<String>>> {
        let mut conn = self.lock();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        // Each involved record, as it is now: Err(reason) when it may not be touched.
        let mut state: HashMap<RecordId, std::result::Result<Memory, String>> = HashMap::new();
        {
            let mut read = tx.prepare_cached("SELECT body FROM memories WHERE id = ?1")?;
            for l in links {
                for (id, digest) in
                    [(l.target, &l.target_digest), (l.successor, &l.successor_digest)]
                {
                    if state.contains_key(&id) {
                        continue;
                    }
                    let body: Option<String> =
                        read.query_row([id.to_string()], |r| r.get(0)).optional()?;
                    let verdict = match body.map(|b| decode(&b)) {
                        None => Err(format!("{id} no longer exists")),
                        Some(Err(_)) => Err(format!("{id} has a corrupt payload")),
                        Some(Ok(m)) if m.category == Category::Rule => {
                            Err(format!("{id} is a rule (rules are immutable)"))
                        }
                        Some(Ok(m)) if &record_digest(&m)? != digest => {
                            Err(format!("{id} changed since it was compared"))
                        }
                        Some(Ok(m)) => Ok(m),
                    };
                    state.insert(id, verdict);
                }
            }
        }
        let mut outcomes = Vec::with_capacity(links.len());
        let mut stamped: HashSet<RecordId> = HashSet::new();
        let mut added: HashMap<RecordId, Vec<RecordId>> = HashMap::new();
        {
            let mut stamp = tx.prepare_cached(&format!(
                "UPDATE memories SET superseded_by = ?1,
                    body = json_set(body, '$.superseded_by', ?1, {STAMP_VERSION})
                 WHERE id = ?3"
            ))?;
            for l in links {
                let why = [l.target, l.successor].iter().find_map(|id| state[id].as_ref().err());
                if let Some(why) = why {
                    outcomes.push(Some(why.clone()));
                    continue;
                }
                if l.target == l.successor || !stamped.insert(l.target) {
                    outcomes.push(Some(format!("{} already has a successor", l.target)));
                    continue;
                }
                stamp.execute(params![
                    l.successor.to_string(),
                    SCHEMA_VERSION,
                    l.target.to_string()
                ])?;
                added.entry(l.successor).or_default().push(l.target);
                outcomes.push(None);
            }
            let mut link = tx.prepare_cached(&format!(
                "UPDATE memories SET body = json_set(body, '$.supersedes', json(?1), {STAMP_VERSION})
                 WHERE id = ?3"
            ))?;
            for (successor, targets) in &added {
                let Ok(m) = &state[successor] else { continue };
                let mut supersedes = m.supersedes.clone();
                for t in targets {
                    if !supersedes.contains(t) {
                        supersedes.push(*t);
                    }
                }
                let ids: Vec<String> = supersedes.iter().map(RecordId::to_string).collect();
                let json =
                    serde_json::to_string(&ids).map_err(|e| StoreError::Corrupt(e.to_string()))?;
                link.execute(params![json, SCHEMA_VERSION, successor.to_string()])?;
            }
        }
        tx.commit()?;
        Ok(outcomes)
    }

    /// The records `c` selects at `now`, each with its verdict: eligible (`refused` is
    /// `None`) only when it passes the extract-before-delete gate
    /// ([`SqliteStore::exported_unchanged`]) and deleting it leaves no chain without a
    /// live head. `gate_progress(n, total)` is called after each `n` of the `total` selected
    /// records are gate-checked.
    fn purge_plan(
        &self,
        c: &PurgeCriteria,
        now: Timestamp,
        gate_progress: &mut dyn FnMut(u64, u64),
    ) -> Result<Vec<PurgeCandidate>> {
        let (mut candidates, predecessors) = {
            let mut conn = self.lock();
            let tx = conn.transaction()?;
            (purge_select(&tx, c, now)?, predecessors_by_successor(&tx)?)
        };
        let ids: Vec<RecordId> = candidates.iter().map(|c| c.id).collect();
        let mut passed = Vec::with_capacity(ids.len());
        for chunk in ids.chunks(500) {
            passed.extend(self.exported_unchanged(chunk)?);
            gate_progress(chunk.len() as u64, ids.len() as u64);
        }
        purge_verdicts(&mut candidates, &passed, &predecessors);
        Ok(candidates)
    }

    /// Deletes for good those of `listed` (a plan's eligible records) that are still
    /// eligible, re-checking everything [`SqliteStore::purge_plan`] checked inside the
    /// delete transaction (selection by `c` at `now`, the gate, the chain rule). Deleting a
    /// record deletes its tags and vector with it (foreign keys). One outcome per listed
    /// record, in order.
    fn purge_apply(
        &self,
        listed: &[RecordId],
        c: &PurgeCriteria,
        now: Timestamp,
    ) -> Result<Vec<PurgeOutcome>> {
        let mut conn = self.lock();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let wanted: HashSet<RecordId> = listed.iter().copied().collect();
        let mut candidates: Vec<PurgeCandidate> =
            purge_select(&tx, c, now)?.into_iter().filter(|c| wanted.contains(&c.id)).collect();
        let mut passed = Vec::with_capacity(candidates.len());
        for cand in &mut candidates {
            let (ok, file) = export_gate_in(&tx, &cand.id)?;
            passed.push(ok);
            if file.is_some() {
                cand.exported_to = file;
            }
        }
        // Only the listed records may be deleted: a record that became eligible since the
        // plan counts as staying, so it also holds back its successors.
        purge_verdicts(&mut candidates, &passed, &predecessors_by_successor(&tx)?);
        let verdicts: HashMap<RecordId, Option<PurgeRefusal>> =
            candidates.into_iter().map(|c| (c.id, c.refused)).collect();
        let mut out = Vec::with_capacity(listed.len());
        {
            let mut delete = tx.prepare_cached("DELETE FROM memories WHERE id = ?1")?;
            let mut done = HashSet::new();
            for id in listed {
                let skipped = match verdicts.get(id) {
                    _ if done.contains(id) => Some("listed twice".to_owned()),
                    None => Some("gone, or no longer matches the selection".to_owned()),
                    Some(Some(PurgeRefusal::NotExported)) => {
                        Some("no longer passes the export gate".to_owned())
                    }
                    Some(Some(PurgeRefusal::ChangedSinceExport)) => {
                        Some("changed since it was exported".to_owned())
                    }
                    Some(Some(PurgeRefusal::SupersedesRecordsThatStay { predecessors })) => {
                        Some(format!(
                            "supersedes records that stay: {}",
                            predecessors
                                .iter()
                                .map(RecordId::to_string)
                                .collect::<Vec<_>>()
                                .join(", ")
                        ))
                    }
                    Some(None) => {
                        delete.execute([id.to_string()])?;
                        done.insert(*id);
                        None
                    }
                };
                out.push(PurgeOutcome { id: *id, deleted: skipped.is_none(), skipped });
            }
        }
        tx.commit()?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use spine_core::{Caller, State};

    use super::*;
    use crate::{Access, Embedding, Gate, Store};

    const T: i64 = 1_800_000_000;

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_micros(secs * 1_000_000)
    }

    fn record(scope: &str, content: &str, created: i64) -> Memory {
        spine_testkit::records::record(scope, content, "", created)
    }

    fn store() -> (tempfile::TempDir, SqliteStore) {
        let dir = tempfile::tempdir().unwrap();
        let s = SqliteStore::open(dir.path()).unwrap();
        (dir, s)
    }

    fn put(s: &SqliteStore, m: &Memory) {
        s.insert(m, Embedding { model: "m", vector: &[1.0, 0.5] }).unwrap();
    }

    #[test]
    fn counts_follow_derive_states_for_every_marker_combination() {
        let (_d, s) = store();
        let now = at(T);
        let mut expected = StateCounts::default();
        let windows = [None, Some(T - 10), Some(T), Some(T + 10)];
        let mut n = 0;
        for archived in [false, true] {
            for superseded in [false, true] {
                for nb in windows {
                    for na in windows {
                        n += 1;
                        let mut m = record("a:b:c", &format!("r{n}"), T - 100);
                        m.archived_at = archived.then(|| EpochSeconds::from_secs(T - 5));
                        m.superseded_by = superseded.then(RecordId::mint);
                        m.not_before = nb.map(EpochSeconds::from_secs);
                        m.not_after = na.map(EpochSeconds::from_secs);
                        put(&s, &m);
                        let states = spine_core::derive_states(&m, now);
                        expected.records += 1;
                        if states.is_empty() {
                            expected.active += 1;
                        } else {
                            expected.hidden += 1;
                        }
                        for st in states {
                            match st {
                                State::Archived => expected.archived += 1,
                                State::Superseded => expected.superseded += 1,
                                State::Expired => expected.expired += 1,
                                State::Scheduled => expected.scheduled += 1,
                            }
                        }
                    }
                }
            }
        }
        put(&s, &record("other:b:c", "elsewhere", T));
        let scope = Scope::parse("s", "a:b:c").unwrap();
        let got = s.state_counts(Some(&scope), now).unwrap();
        expected.scope = "a:b:c".into();
        assert_eq!(got, vec![expected.clone()]);
        let all = s.state_counts(None, now).unwrap();
        assert_eq!(all.len(), 2);
        assert_eq!(all[0], expected);
        assert_eq!(all[1].records, 1);
        // The active count is the recall gate's.
        let gate = s
            .list(
                &Access::owned(&Caller::anonymous()),
                &Filter::new(ScopeFilter::One(scope)),
                Gate::ActiveAt(now),
                None,
                0,
                1000,
            )
            .unwrap();
        assert_eq!(gate.len() as u64, expected.active);
    }

    #[test]
    fn the_in_transaction_gate_agrees_with_exported_unchanged() {
        let (_d, s) = store();
        let (a, b) = (record("a:b:c", "a", T), record("a:b:c", "b", T));
        put(&s, &a);
        put(&s, &b);
        s.mark_exported(std::slice::from_ref(&a), "x.jsonl", EpochSeconds::from_secs(T)).unwrap();
        let ids = [a.id, b.id, RecordId::mint()];
        let mine: Vec<bool> =
            ids.iter().map(|id| export_gate_in(&s.lock(), id).unwrap().0).collect();
        assert_eq!(mine, s.exported_unchanged(&ids).unwrap());
        assert_eq!(mine, [true, false, false]);
    }

    #[test]
    fn purge_apply_skips_what_changed_after_the_plan() {
        let (_d, s) = store();
        let mut records = Vec::new();
        for i in 0..3 {
            let mut m = record("a:b:c", &format!("old {i}"), T - 100);
            m.archived_at = Some(EpochSeconds::from_secs(T - 50));
            put(&s, &m);
            records.push(m);
        }
        s.mark_exported(&records, "x.jsonl", EpochSeconds::from_secs(T)).unwrap();
        let c = PurgeCriteria {
            classes: vec![PurgeClass::Archived],
            scope: None,
            category: None,
            tags_all: vec![],
            created_before: None,
        };
        let plan = s.purge_plan(&c, at(T), &mut |_, _| {}).unwrap();
        assert!(plan.iter().all(|c| c.refused.is_none()), "{plan:?}");
        let listed: Vec<RecordId> = plan.iter().map(|c| c.id).collect();
        // After the plan: one record restored, one edited.
        s.set_archived(&Access::operator(), &[records[0].id], None).unwrap();
        let mut edited = records[1].clone();
        edited.content = "edited".into();
        s.replace(&Access::owned(&Caller::anonymous()), &edited, None).unwrap();
        let out = s.purge_apply(&listed, &c, at(T)).unwrap();
        assert_eq!(out.iter().map(|o| o.deleted).collect::<Vec<_>>(), [false, false, true]);
        assert!(out[0].skipped.as_deref().unwrap().contains("no longer matches"));
        assert!(out[1].skipped.as_deref().unwrap().contains("changed since"));
        assert_eq!(s.get_many(&listed).unwrap().len(), 2);
    }

    #[test]
    fn consolidation_skips_links_whose_records_changed() {
        let (_d, s) = store();
        let (old, new) = (record("a:b:c", "x", T - 10), record("a:b:c", "x again", T));
        let (old2, new2) = (record("a:b:c", "y", T - 10), record("a:b:c", "y again", T));
        for m in [&old, &new, &old2, &new2] {
            put(&s, m);
        }
        let digest = |m: &Memory| record_digest(m).unwrap();
        let link = |t: &Memory, s: &Memory| ConsolidationLink {
            target: t.id,
            target_digest: digest(t),
            successor: s.id,
            successor_digest: digest(s),
        };
        let links = [link(&old, &new), link(&old2, &new2)];
        s.touch(&old.id, at(T + 1)).unwrap(); // a read is not a change
        let mut changed = new2.clone();
        changed.tags = vec!["t".into()];
        s.replace(&Access::owned(&Caller::anonymous()), &changed, None).unwrap();
        let out = s.apply_consolidation(&links).unwrap();
        assert_eq!(out[0], None);
        assert!(out[1].as_deref().unwrap().contains("changed since"), "{out:?}");
        let got = s.get_many(&[old.id, new.id, old2.id]).unwrap();
        assert_eq!(got[0].superseded_by, Some(new.id));
        assert_eq!(got[1].supersedes, vec![old.id]);
        assert_eq!(got[2].superseded_by, None);
    }
}
