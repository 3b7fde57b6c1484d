//! The operator's view of the store, for `spine spine-review` (SPEC "Operator commands"):
//! state counts, invariant checks, near-duplicate candidates and their consolidation,
//! purging behind the extract-before-delete gate, and archive / restore of any record. What
//! each decides is engine-neutral (`crate::operator`, `crate::checks`); this reads and
//! writes.
//!
//! Nothing here is access-checked: the operator acts on every owner's records. Every write
//! runs in one `IMMEDIATE` transaction that re-checks what the caller saw before writing, so
//! a command running beside a server (which may change the same records meanwhile) either
//! applies a change to the record as it was listed or skips it and says why. The `changes`
//! triggers see every write, so running servers' search indexes follow.

use std::collections::{HashMap, HashSet};

use rusqlite::{Connection, OptionalExtension, params, params_from_iter};
use spine_core::{RecordId, SCHEMA_VERSION, Scope, Timestamp};

use super::rows::stamp_successor;
use super::transfer::export_gate;
use super::verify::verify_rows;
use super::{STAMP_VERSION, SqliteStore, Where};
use crate::operator::{consolidation, purge};
use crate::predicate::CONSOLIDATION_ELIGIBLE;
use crate::{
    ConsolidationCandidate, ConsolidationGroup, ConsolidationLink, PurgeCandidate, PurgeCriteria,
    PurgeOutcome, Result, ReviewStore, RowidPage, StateCounts, TransferStore, VectorExpectation,
    VectorStamp, VerifyPage, Violation,
};

/// Successor → the records whose `superseded_by` names it (every owner, every scope).
fn predecessors_by_successor(conn: &Connection) -> Result<HashMap<RecordId, Vec<RecordId>>> {
    let mut stmt =
        conn.prepare("SELECT id, superseded_by FROM memories WHERE superseded_by IS NOT NULL")?;
    let pairs = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?;
    Ok(purge::predecessors(pairs.collect::<Result<Vec<_>, _>>()?))
}

/// The records `c` selects at `now`, without verdicts, in rowid order.
fn purge_select(
    conn: &Connection,
    c: &PurgeCriteria,
    now: Timestamp,
) -> Result<Vec<PurgeCandidate>> {
    let mut w = Where::default();
    w.conditions(c.conditions(now));
    let mut stmt = conn.prepare(&format!(
        "SELECT m.id, m.short_id, m.scope, m.category, m.created_at, m.archived_at IS NOT NULL,
            m.superseded_by IS NOT NULL, m.not_before, m.not_after, e.file
         FROM memories m LEFT JOIN exported e ON e.id = m.id
         WHERE {} ORDER BY m.rowid",
        w.sql
    ))?;
    stmt.query_and_then(params_from_iter(w.params), |r| PurgeCandidate::read(r, now))?.collect()
}

impl ReviewStore for SqliteStore {
    fn state_counts(&self, scope: Option<&Scope>, now: Timestamp) -> Result<Vec<StateCounts>> {
        let (w, sql) = Where::state_counts(scope.map(Scope::as_str), now);
        let conn = self.lock();
        let mut stmt = conn.prepare_cached(&sql)?;
        stmt.query_and_then(params_from_iter(w.params), |r| StateCounts::read(r))?.collect()
    }

    fn vector_stamps(&self, scope: Option<&Scope>) -> Result<Vec<VectorStamp>> {
        let conn = self.lock();
        let mut stmt = conn.prepare(
            "SELECT v.model, length(v.vec) / 4, COUNT(*) FROM vectors v
             JOIN memories m ON m.rowid = v.memory
             WHERE ?1 IS NULL OR m.scope = ?1 GROUP BY 1, 2 ORDER BY 1, 2",
        )?;
        stmt.query_and_then([scope.map(Scope::as_str)], |r| VectorStamp::read(r))?.collect()
    }

    fn verify_page(&self, page: RowidPage<'_>, expect: &VectorExpectation) -> Result<VerifyPage> {
        let RowidPage { scope, after: after_rowid, limit } = page;
        let mut conn = self.lock();
        let tx = conn.transaction()?;
        verify_rows(&tx, scope, after_rowid, limit, expect)
    }

    fn duplicate_short_ids(&self, scope: Option<&Scope>) -> Result<Vec<Violation>> {
        let conn = self.lock();
        let mut stmt = conn.prepare(
            "SELECT m.id, m.short_id, m.scope, d.n FROM memories m
             JOIN (SELECT short_id, COUNT(*) AS n FROM memories GROUP BY short_id
                   HAVING COUNT(*) > 1) d ON d.short_id = m.short_id
             WHERE ?1 IS NULL OR m.scope = ?1 ORDER BY m.short_id, m.id",
        )?;
        stmt.query_and_then([scope.map(Scope::as_str)], |r| Violation::duplicate_short_id(r))?
            .collect()
    }

    fn consolidation_groups(&self, scope: Option<&Scope>) -> Result<Vec<ConsolidationGroup>> {
        let conn = self.lock();
        let mut stmt = conn.prepare(&format!(
            "SELECT m.scope, m.owner, m.visibility, v.model, COUNT(*)
             FROM memories m JOIN vectors v ON v.memory = m.rowid
             WHERE {CONSOLIDATION_ELIGIBLE} AND (?1 IS NULL OR m.scope = ?1)
             GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4"
        ))?;
        stmt.query_and_then([scope.map(Scope::as_str)], |r| ConsolidationGroup::read(r))?.collect()
    }

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
        let params = params![g.scope, g.owner, g.visibility, g.model];
        let candidates = stmt.query_and_then(params, |r| ConsolidationCandidate::read(r))?;
        candidates.filter_map(Result::transpose).collect()
    }

    fn apply_consolidation(&self, links: &[ConsolidationLink]) -> Result<Vec<Option<String>>> {
        let (outcomes, wrote) = self.write(|tx| {
            let applied = {
                let mut read = tx.prepare_cached("SELECT body FROM memories WHERE id = ?1")?;
                consolidation::apply(links, |id| {
                    Ok(read.query_row([id.to_string()], |r| r.get(0)).optional()?)
                })?
            };
            for (target, successor) in &applied.stamps {
                stamp_successor(tx, target, successor)?;
            }
            {
                let mut link = tx.prepare_cached(&format!(
                    "UPDATE memories SET body = json_set(body, '$.supersedes', json(?1), {STAMP_VERSION})
                     WHERE id = ?3"
                ))?;
                for (successor, json) in &applied.supersedes {
                    link.execute(params![json, SCHEMA_VERSION, successor.to_string()])?;
                }
            }
            let changed = super::audit::scoped(tx, &applied.changed())?;
            let wrote = self.record_operator(tx, changed)?;
            Ok((applied.outcomes, wrote))
        })?;
        self.operator_recorded(wrote);
        Ok(outcomes)
    }

    fn purge_plan(
        &self,
        c: &PurgeCriteria,
        now: Timestamp,
        gate_progress: &mut dyn FnMut(u64, u64),
    ) -> Result<Vec<PurgeCandidate>> {
        let selected = {
            let mut conn = self.lock();
            let tx = conn.transaction()?;
            (purge_select(&tx, c, now)?, predecessors_by_successor(&tx)?)
        };
        purge::plan(selected, |ids| self.exported_unchanged(ids), gate_progress)
    }

    fn purge_apply(
        &self,
        listed: &[RecordId],
        c: &PurgeCriteria,
        now: Timestamp,
    ) -> Result<Vec<PurgeOutcome>> {
        let (out, wrote) = self.write(|tx| {
            let wanted: HashSet<RecordId> = listed.iter().copied().collect();
            let selected: Vec<PurgeCandidate> =
                purge_select(tx, c, now)?.into_iter().filter(|c| wanted.contains(&c.id)).collect();
            let ids: Vec<RecordId> = selected.iter().map(|c| c.id).collect();
            let gate = export_gate(tx, &ids)?;
            let out = purge::outcomes(listed, selected, gate, &predecessors_by_successor(tx)?);
            let deleted: Vec<RecordId> = out.iter().filter(|o| o.deleted).map(|o| o.id).collect();
            let gone = super::audit::scoped(tx, &deleted)?;
            for id in &deleted {
                tx.prepare_cached("DELETE FROM memories WHERE id = ?1")?
                    .execute([id.to_string()])?;
            }
            let wrote = self.record_operator(tx, gone)?;
            Ok((out, wrote))
        })?;
        self.operator_recorded(wrote);
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use spine_core::{Caller, State};

    use super::*;
    use crate::{
        Access, Embedding, Filter, Gate, Page, PurgeClass, ScopeFilter, Selection, Store,
        record_digest,
    };
    use spine_core::{EpochSeconds, Memory};

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
        s.insert(&crate::Access::operator(), m, Embedding { model: "m", vector: &[1.0, 0.5] })
            .unwrap();
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
        let sel = Selection {
            access: &Access::owned(&Caller::anonymous()),
            filter: &Filter::new(ScopeFilter::One(scope)),
            gate: Gate::ActiveAt(now),
        };
        let gate = s.list(sel, Page::recent(None, 0, 1000)).unwrap();
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
        let mine: Vec<(bool, Option<String>)> = export_gate(&s.lock(), &ids).unwrap();
        let file = Some("x.jsonl".to_owned());
        assert_eq!(mine, [(true, file), (false, None), (false, None)]);
        assert_eq!(s.exported_unchanged(&ids).unwrap(), [true, false, false]);
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
