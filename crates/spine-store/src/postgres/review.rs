//! The operator's view of the store on PostgreSQL, for `spine spine-review` (SPEC "Operator
//! commands"): state counts, invariant checks, near-duplicate candidates and their
//! consolidation, purging behind the extract-before-delete gate. What each decides is
//! engine-neutral (`crate::operator`, `crate::checks`), as on SQLite; this reads and writes.
//!
//! Nothing here is access-checked: the operator acts on every owner's records. Reads that
//! must agree with one another (a verify page, a purge plan's selection and chains) run in
//! one read-only REPEATABLE READ transaction. Every write locks the rows it is about to
//! change (`SELECT ... FOR UPDATE`, in id order, as `supersede` does, so no two writers
//! deadlock) and re-checks them, as they are now, before changing them, so a command running
//! beside a server either applies a change to the record as it was listed or skips it and
//! says why.

use std::collections::{HashMap, HashSet};

use deadpool_postgres::GenericClient;
use spine_core::{RecordId, Scope, Timestamp};

use super::PgStore;
use super::query::Where;
use super::rows::{stamp, stamp_successor};
use super::transfer::export_gate;
use super::verify::verify_rows;
use crate::fields::Fields;
use crate::operator::{consolidation, dedup, purge};
use crate::predicate::CONSOLIDATION_ELIGIBLE;
use crate::{
    ConsolidationCandidate, ConsolidationGroup, ConsolidationLink, PurgeCandidate, PurgeCriteria,
    PurgeOutcome, Result, ReviewStore, RowidPage, StateCounts, StoreError, TransferStore,
    VectorExpectation, VectorStamp, VerifyPage, Violation,
};

/// [`CONSOLIDATION_ELIGIBLE`], with a vector (which always carries its embedder's stamp;
/// one without cannot be grouped).
const ELIGIBLE_WITH_VECTOR: &str = "m.vec IS NOT NULL AND m.model IS NOT NULL";

/// Successor → the records whose `superseded_by` names it, for the successors `of` (every
/// owner, every scope): all the chain rule asks about.
async fn predecessors_by_successor<C: GenericClient>(
    client: &C,
    of: &[RecordId],
) -> Result<HashMap<RecordId, Vec<RecordId>>> {
    let of: Vec<String> = of.iter().map(RecordId::to_string).collect();
    let sql = "SELECT id, superseded_by FROM memories WHERE superseded_by = ANY($1) ORDER BY rowid";
    let rows = client.query(sql, &[&of]).await?;
    let pairs = rows.iter().map(|r| Ok((r.text(0)?, r.text(1)?))).collect::<Result<Vec<_>>>()?;
    Ok(purge::predecessors(pairs))
}

/// The records `c` selects at `now` (among `among` when given), without verdicts, in rowid
/// order.
async fn purge_select<C: GenericClient>(
    client: &C,
    c: &PurgeCriteria,
    now: Timestamp,
    among: Option<&[RecordId]>,
) -> Result<Vec<PurgeCandidate>> {
    let mut w = Where::default();
    w.conditions(c.conditions(now));
    if let Some(ids) = among {
        let p = w.bind(ids.iter().map(RecordId::to_string).collect::<Vec<_>>());
        w.push(&format!("m.id = ANY({p})"));
    }
    let sql = format!(
        "SELECT m.id, m.short_id, m.scope, m.category, m.created_at,
            m.archived_at IS NOT NULL, m.superseded_by IS NOT NULL, m.not_before, m.not_after,
            e.file
         FROM memories m LEFT JOIN exported e ON e.id = m.id
         WHERE {} ORDER BY m.rowid",
        w.sql
    );
    let rows = client.query(&sql, &w.refs()).await?;
    rows.iter().map(|r| PurgeCandidate::read(r, now)).collect()
}

/// `scope` as the optional text parameter the queries take.
fn scope_param(scope: Option<&Scope>) -> Option<String> {
    scope.map(|s| s.as_str().to_owned())
}

impl ReviewStore for PgStore {
    fn state_counts(&self, scope: Option<&Scope>, now: Timestamp) -> Result<Vec<StateCounts>> {
        let (w, sql) = Where::state_counts(scope.map(Scope::as_str), now);
        let rows = self.query_where(&sql, &w)?;
        rows.iter().map(StateCounts::read).collect()
    }

    /// The length is the vector's own, not the `dims` column.
    fn vector_stamps(&self, scope: Option<&Scope>) -> Result<Vec<VectorStamp>> {
        let rows = self.query(
            "SELECT coalesce(m.model, '') COLLATE \"C\", vector_dims(m.vec), count(*)
             FROM memories m
             WHERE m.vec IS NOT NULL AND ($1::text IS NULL OR m.scope = $1)
             GROUP BY 1, 2 ORDER BY 1, 2",
            &[&scope_param(scope)],
        )?;
        rows.iter().map(VectorStamp::read).collect()
    }

    /// A page is one read-only REPEATABLE READ transaction.
    fn verify_page(&self, page: RowidPage<'_>, expect: &VectorExpectation) -> Result<VerifyPage> {
        let RowidPage { scope, after: after_rowid, limit } = page;
        self.block(async {
            let mut client = self.pool.get().await?;
            let tx = super::snapshot(&mut client).await?;
            let page = verify_rows(&tx, scope, after_rowid, limit, expect).await?;
            tx.commit().await?;
            Ok(page)
        })
    }

    /// The `short_id` column is UNIQUE on PostgreSQL, so this finds none unless the
    /// constraint was dropped; it asks all the same.
    fn duplicate_short_ids(&self, scope: Option<&Scope>) -> Result<Vec<Violation>> {
        let rows = self.query(
            "SELECT m.id, m.short_id, m.scope, d.n FROM memories m
             JOIN (SELECT short_id, count(*) AS n FROM memories GROUP BY short_id
                   HAVING count(*) > 1) d ON d.short_id = m.short_id
             WHERE $1::text IS NULL OR m.scope = $1 ORDER BY m.short_id, m.id",
            &[&scope_param(scope)],
        )?;
        rows.iter().map(Violation::duplicate_short_id).collect()
    }

    fn consolidation_groups(&self, scope: Option<&Scope>) -> Result<Vec<ConsolidationGroup>> {
        let sql = format!(
            "SELECT m.scope, m.owner, m.visibility COLLATE \"C\", m.model COLLATE \"C\", count(*)
             FROM memories m
             WHERE {CONSOLIDATION_ELIGIBLE} AND {ELIGIBLE_WITH_VECTOR}
                AND ($1::text IS NULL OR m.scope = $1)
             GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4"
        );
        self.query(&sql, &[&scope_param(scope)])?.iter().map(ConsolidationGroup::read).collect()
    }

    fn consolidation_candidates(
        &self,
        g: &ConsolidationGroup,
    ) -> Result<Vec<ConsolidationCandidate>> {
        let sql = format!(
            "SELECT m.body::text, m.vec FROM memories m
             WHERE {CONSOLIDATION_ELIGIBLE} AND {ELIGIBLE_WITH_VECTOR}
                AND m.scope = $1 AND m.owner = $2 AND m.visibility = $3 AND m.model = $4
             ORDER BY m.created_at, m.id"
        );
        let rows = self.query(&sql, &[&g.scope, &g.owner, &g.visibility, &g.model])?;
        rows.iter().map(ConsolidationCandidate::read).filter_map(Result::transpose).collect()
    }

    /// Every record involved is locked (in id order) before it is re-read.
    fn apply_consolidation(&self, links: &[ConsolidationLink]) -> Result<Vec<Option<String>>> {
        if links.is_empty() {
            return Ok(vec![]);
        }
        let involved: Vec<String> = links
            .iter()
            .flat_map(|l| [l.target, l.successor])
            .collect::<HashSet<_>>()
            .iter()
            .map(RecordId::to_string)
            .collect();
        let link_sql = format!(
            "UPDATE memories SET body = {} WHERE id = $2",
            stamp("jsonb_set(body::jsonb, '{supersedes}', $1::text::jsonb)")
        );
        let (outcomes, wrote) = self.block(async {
            let mut client = self.pool.get().await?;
            let tx = client.transaction().await?;
            // Locks every involved record (in id order: two writers cannot deadlock) and
            // reads it as the last committed change left it.
            let sql =
                "SELECT id, body::text FROM memories WHERE id = ANY($1) ORDER BY id FOR UPDATE";
            let mut bodies: HashMap<String, String> = HashMap::new();
            for r in tx.query(sql, &[&involved]).await? {
                bodies.insert(r.text(0)?, r.text(1)?);
            }
            let applied = consolidation::apply(links, |id| Ok(bodies.remove(&id.to_string())))?;
            for (target, successor) in &applied.stamps {
                stamp_successor(&tx, target, successor).await?;
            }
            for (successor, json) in &applied.supersedes {
                tx.execute(link_sql.as_str(), &[json, &successor.to_string()]).await?;
            }
            let changed = super::audit::scoped(&tx, &applied.changed()).await?;
            let wrote = self.record_operator(&tx, changed).await?;
            tx.commit().await?;
            Ok::<_, StoreError>((applied.outcomes, wrote))
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
        // The selection and its chains from one snapshot.
        let selected = self.block(async {
            let mut client = self.pool.get().await?;
            let tx = super::snapshot(&mut client).await?;
            let candidates = purge_select(&tx, c, now, None).await?;
            let ids: Vec<RecordId> = candidates.iter().map(|c| c.id).collect();
            let predecessors = predecessors_by_successor(&tx, &ids).await?;
            tx.commit().await?;
            Ok::<_, StoreError>((candidates, predecessors))
        })?;
        purge::plan(selected, |ids| self.exported_unchanged(ids), gate_progress)
    }

    /// The listed records are locked first (in id order). A record's tags and vector live in
    /// its row and go with it.
    fn purge_apply(
        &self,
        listed: &[RecordId],
        c: &PurgeCriteria,
        now: Timestamp,
    ) -> Result<Vec<PurgeOutcome>> {
        let unique = dedup(listed);
        let keys: Vec<String> = unique.iter().map(RecordId::to_string).collect();
        let (out, wrote) = self.block(async {
            let mut client = self.pool.get().await?;
            let tx = client.transaction().await?;
            // READ COMMITTED: once the rows are locked, each statement below reads them (and
            // everything else) as last committed.
            tx.query("SELECT id FROM memories WHERE id = ANY($1) ORDER BY id FOR UPDATE", &[&keys])
                .await?;
            let selected = purge_select(&tx, c, now, Some(&unique)).await?;
            let ids: Vec<RecordId> = selected.iter().map(|c| c.id).collect();
            let gate = export_gate(&tx, &ids).await?;
            let predecessors = predecessors_by_successor(&tx, &ids).await?;
            let out = purge::outcomes(listed, selected, gate, &predecessors);
            let deleted: Vec<RecordId> = out.iter().filter(|o| o.deleted).map(|o| o.id).collect();
            let gone = super::audit::scoped(&tx, &deleted).await?;
            let delete = tx.prepare("DELETE FROM memories WHERE id = $1").await?;
            for id in &deleted {
                tx.execute(&delete, &[&id.to_string()]).await?;
            }
            let wrote = self.record_operator(&tx, gone).await?;
            tx.commit().await?;
            Ok::<_, StoreError>((out, wrote))
        })?;
        self.operator_recorded(wrote);
        Ok(out)
    }
}
