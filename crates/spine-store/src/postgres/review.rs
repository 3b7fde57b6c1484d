//! The operator's view of the store on PostgreSQL, for `spine spine-review` (SPEC "Operator
//! commands"): state counts, invariant checks, near-duplicate candidates and their
//! consolidation, purging behind the extract-before-delete gate. The same semantics as the
//! SQLite backend's (`sqlite/review.rs`), method by method.
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
use pgvector::Vector;
use spine_core::{Category, EpochSeconds, Memory, RecordId, Scope, StateMarkers, Timestamp};

use super::PgStore;
use super::query::{Where, decode};
use super::store::{parse_id, stamp};
use super::verify::verify_rows;
use crate::operator::dedup;
use crate::{
    Check, ConsolidationCandidate, ConsolidationGroup, ConsolidationLink, Filter, PurgeCandidate,
    PurgeClass, PurgeCriteria, PurgeOutcome, PurgeRefusal, Result, ReviewStore, ScopeFilter,
    StateCounts, StoreError, VectorExpectation, VectorStamp, VerifyPage, Violation, purge_verdicts,
    record_digest,
};

/// Which records consolidate considers (as on SQLite): readable by someone (an owner key),
/// recall-visible whatever the time (no state marker and no validity window: a scheduled
/// memory is deliberate), not rules (SPEC: rules are immutable), and with a vector (which
/// always carries its embedder's stamp; one without cannot be grouped).
const CONSOLIDATION_ELIGIBLE: &str = "m.owner IS NOT NULL AND m.archived_at IS NULL
    AND m.superseded_by IS NULL AND m.not_before IS NULL AND m.not_after IS NULL
    AND m.category <> 'rule' AND m.vec IS NOT NULL AND m.model IS NOT NULL";

/// How many records one gate query checks in `purge_plan` (and one progress step).
const GATE_CHUNK: usize = 500;

/// Successor → the records whose `superseded_by` names it, for the successors `of` (every
/// owner, every scope): all the chain rule asks about.
async fn predecessors_by_successor<C: GenericClient>(
    client: &C,
    of: &[RecordId],
) -> Result<HashMap<RecordId, Vec<RecordId>>> {
    let of: Vec<String> = of.iter().map(RecordId::to_string).collect();
    let rows = client
        .query(
            "SELECT id, superseded_by FROM memories WHERE superseded_by = ANY($1) ORDER BY rowid",
            &[&of],
        )
        .await?;
    let mut out: HashMap<RecordId, Vec<RecordId>> = HashMap::new();
    for r in &rows {
        // Malformed ids are verify's business; they link nothing here.
        if let (Some(id), Some(succ)) = (RecordId::parse(r.get(0)), RecordId::parse(r.get(1))) {
            out.entry(succ).or_default().push(id);
        }
    }
    Ok(out)
}

/// The extract-before-delete gate for each of `ids`: whether the record exists and was
/// exported as it is now (its digest equals the exported one), and the file it was last
/// exported to.
pub(super) async fn export_gate<C: GenericClient>(
    client: &C,
    ids: &[RecordId],
) -> Result<Vec<(bool, Option<String>)>> {
    let wanted: Vec<String> = ids.iter().map(RecordId::to_string).collect();
    let rows = client
        .query(
            "SELECT m.id, m.body::text, e.digest, e.file FROM memories m
             JOIN exported e ON e.id = m.id WHERE m.id = ANY($1)",
            &[&wanted],
        )
        .await?;
    let found: HashMap<String, (String, String, String)> =
        rows.iter().map(|r| (r.get(0), (r.get(1), r.get(2), r.get(3)))).collect();
    wanted
        .iter()
        .map(|id| match found.get(id) {
            Some((body, digest, file)) => {
                Ok((record_digest(&decode(body)?)? == *digest, Some(file.clone())))
            }
            None => Ok((false, None)),
        })
        .collect()
}

/// The records `c` selects at `now` (among `among` when given), without verdicts, in rowid
/// order.
async fn purge_select<C: GenericClient>(
    client: &C,
    c: &PurgeCriteria,
    now: Timestamp,
    among: Option<&[RecordId]>,
) -> Result<Vec<PurgeCandidate>> {
    let mut w = Where::new();
    if !c.classes.is_empty() {
        let mut any = Vec::new();
        for class in dedup(&c.classes) {
            any.push(match class {
                PurgeClass::Archived => "m.archived_at IS NOT NULL".to_owned(),
                PurgeClass::Superseded => "m.superseded_by IS NOT NULL".to_owned(),
                PurgeClass::Expired => {
                    // Mirrors `StateMarkers::derive`: expired at or past `not_after`.
                    let p = w.bind(now.to_epoch_seconds().as_secs());
                    format!("(m.not_after IS NOT NULL AND m.not_after <= {p})")
                }
            });
        }
        w.and(&any.join(" OR "));
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
    if let Some(ids) = among {
        let p = w.bind(ids.iter().map(RecordId::to_string).collect::<Vec<_>>());
        w.and(&format!("m.id = ANY({p})"));
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
    rows.iter()
        .map(|r| {
            let markers = StateMarkers {
                archived: r.get(5),
                superseded: r.get(6),
                not_before: r.get::<_, Option<i64>>(7).map(EpochSeconds::from_secs),
                not_after: r.get::<_, Option<i64>>(8).map(EpochSeconds::from_secs),
            };
            Ok(PurgeCandidate {
                id: parse_id(r.get(0))?,
                short_id: r.get(1),
                scope: r.get(2),
                category: r.get(3),
                created_at: Timestamp::from_micros(r.get(4)),
                states: markers.derive(now),
                exported_to: r.get(9),
                refused: None,
            })
        })
        .collect()
}

/// Why a listed record was not deleted, in the words of the SQLite backend.
fn skip_reason(refusal: &PurgeRefusal) -> String {
    match refusal {
        PurgeRefusal::NotExported => "no longer passes the export gate".to_owned(),
        PurgeRefusal::ChangedSinceExport => "changed since it was exported".to_owned(),
        PurgeRefusal::SupersedesRecordsThatStay { predecessors } => format!(
            "supersedes records that stay: {}",
            predecessors.iter().map(RecordId::to_string).collect::<Vec<_>>().join(", ")
        ),
    }
}

/// `scope` as the optional text parameter the queries take.
fn scope_param(scope: Option<&Scope>) -> Option<String> {
    scope.map(|s| s.as_str().to_owned())
}

impl ReviewStore for PgStore {
    /// Records per scope by state at `now`, in scope order; only `scope` when given.
    fn state_counts(&self, scope: Option<&Scope>, now: Timestamp) -> Result<Vec<StateCounts>> {
        // Mirrors `StateMarkers::derive`: half-open window, expired suppressing scheduled.
        let not_expired = "(m.not_after IS NULL OR m.not_after > $1)";
        let scheduled =
            format!("({not_expired} AND m.not_before IS NOT NULL AND m.not_before > $1)");
        let sql = format!(
            "SELECT m.scope, count(*),
                count(*) FILTER (WHERE m.archived_at IS NULL AND m.superseded_by IS NULL
                    AND {not_expired} AND NOT {scheduled}),
                count(*) FILTER (WHERE m.archived_at IS NOT NULL),
                count(*) FILTER (WHERE m.superseded_by IS NOT NULL),
                count(*) FILTER (WHERE NOT {not_expired}),
                count(*) FILTER (WHERE {scheduled})
             FROM memories m WHERE $2::text IS NULL OR m.scope = $2
             GROUP BY m.scope ORDER BY m.scope"
        );
        let now = now.to_epoch_seconds().as_secs();
        let scope = scope_param(scope);
        let rows = self.block(async {
            let client = self.pool.get().await?;
            Ok::<_, StoreError>(client.query(&sql, &[&now, &scope]).await?)
        })?;
        Ok(rows
            .iter()
            .map(|r| {
                let n = |i: usize| r.get::<_, i64>(i) as u64;
                let (records, active) = (n(1), n(2));
                StateCounts {
                    scope: r.get(0),
                    records,
                    active,
                    hidden: records - active,
                    archived: n(3),
                    superseded: n(4),
                    expired: n(5),
                    scheduled: n(6),
                }
            })
            .collect())
    }

    /// The vectors of the records in `scope` (or the whole store) by stamp and length (the
    /// vector's own length, not the `dims` column).
    fn vector_stamps(&self, scope: Option<&Scope>) -> Result<Vec<VectorStamp>> {
        let scope = scope_param(scope);
        let rows = self.block(async {
            let client = self.pool.get().await?;
            Ok::<_, StoreError>(
                client
                    .query(
                        "SELECT coalesce(m.model, '') COLLATE \"C\", vector_dims(m.vec), count(*)
                         FROM memories m
                         WHERE m.vec IS NOT NULL AND ($1::text IS NULL OR m.scope = $1)
                         GROUP BY 1, 2 ORDER BY 1, 2",
                        &[&scope],
                    )
                    .await?,
            )
        })?;
        Ok(rows
            .iter()
            .map(|r| VectorStamp {
                model: r.get(0),
                dims: r.get::<_, i32>(1) as usize,
                vectors: r.get::<_, i64>(2) as u64,
            })
            .collect())
    }

    /// Checks up to `limit` records of `scope` (or every scope) after `after_rowid`, in
    /// rowid order, each against one snapshot (a page is one read-only REPEATABLE READ
    /// transaction, so a supersession committed meanwhile is seen whole or not at all).
    fn verify_page(
        &self,
        scope: Option<&Scope>,
        after_rowid: i64,
        limit: usize,
        expect: &VectorExpectation,
    ) -> Result<VerifyPage> {
        self.block(async {
            let mut client = self.pool.get().await?;
            let tx = super::snapshot(&mut client).await?;
            let page = verify_rows(&tx, scope, after_rowid, limit, expect).await?;
            tx.commit().await?;
            Ok(page)
        })
    }

    /// Records of `scope` (or every scope) whose short_id another record (anywhere) shares.
    /// The `short_id` column is UNIQUE on PostgreSQL, so this finds none unless the
    /// constraint was dropped; it asks all the same.
    fn duplicate_short_ids(&self, scope: Option<&Scope>) -> Result<Vec<Violation>> {
        let scope = scope_param(scope);
        let rows = self.block(async {
            let client = self.pool.get().await?;
            Ok::<_, StoreError>(
                client
                    .query(
                        "SELECT m.id, m.short_id, m.scope, d.n FROM memories m
                         JOIN (SELECT short_id, count(*) AS n FROM memories GROUP BY short_id
                               HAVING count(*) > 1) d ON d.short_id = m.short_id
                         WHERE $1::text IS NULL OR m.scope = $1 ORDER BY m.short_id, m.id",
                        &[&scope],
                    )
                    .await?,
            )
        })?;
        Ok(rows
            .iter()
            .map(|r| Violation {
                id: r.get(0),
                short_id: r.get(1),
                scope: r.get(2),
                check: Check::DuplicateShortId,
                detail: format!(
                    "{} records share this short_id; it resolves to none of them",
                    r.get::<_, i64>(3)
                ),
            })
            .collect())
    }

    /// The groups consolidate compares, with their sizes: recall-visible, unwindowed,
    /// non-rule records with a vector, by scope, owner, visibility and embedder stamp.
    fn consolidation_groups(&self, scope: Option<&Scope>) -> Result<Vec<ConsolidationGroup>> {
        let scope = scope_param(scope);
        let sql = format!(
            "SELECT m.scope, m.owner, m.visibility COLLATE \"C\", m.model COLLATE \"C\", count(*)
             FROM memories m
             WHERE {CONSOLIDATION_ELIGIBLE} AND ($1::text IS NULL OR m.scope = $1)
             GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4"
        );
        let rows = self.block(async {
            let client = self.pool.get().await?;
            Ok::<_, StoreError>(client.query(&sql, &[&scope]).await?)
        })?;
        Ok(rows
            .iter()
            .map(|r| ConsolidationGroup {
                scope: r.get(0),
                owner: r.get(1),
                visibility: r.get(2),
                model: r.get(3),
                records: r.get::<_, i64>(4) as u64,
            })
            .collect())
    }

    /// The records of group `g`, oldest first (created_at, then id). Records whose payload
    /// does not decode are left out (verify reports them).
    fn consolidation_candidates(
        &self,
        g: &ConsolidationGroup,
    ) -> Result<Vec<ConsolidationCandidate>> {
        let sql = format!(
            "SELECT m.body::text, m.vec FROM memories m
             WHERE {CONSOLIDATION_ELIGIBLE} AND m.scope = $1 AND m.owner = $2
                AND m.visibility = $3 AND m.model = $4
             ORDER BY m.created_at, m.id"
        );
        let rows = self.block(async {
            let client = self.pool.get().await?;
            Ok::<_, StoreError>(
                client.query(&sql, &[&g.scope, &g.owner, &g.visibility, &g.model]).await?,
            )
        })?;
        let mut out = Vec::new();
        for r in &rows {
            let Ok(record) = decode(r.get(0)) else { continue };
            let digest = record_digest(&record)?;
            out.push(ConsolidationCandidate {
                record,
                vector: r.get::<_, Vector>(1).to_vec(),
                digest,
            });
        }
        Ok(out)
    }

    /// Applies `links` in one transaction: each target gets `superseded_by`, each successor
    /// lists its targets in `supersedes` (links both ways, SPEC "Supersession rules").
    ///
    /// Every record involved is locked and re-read first: a link is skipped (with the
    /// reason) when either record is gone, changed since it was planned (digest), or is a
    /// rule, or when its target already got a successor earlier in `links`. Entry i is
    /// `None` when link i was applied.
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
        let stamp_sql = format!(
            "UPDATE memories SET superseded_by = $1, body = {} WHERE id = $2",
            stamp("jsonb_set(body::jsonb, '{superseded_by}', to_jsonb($1::text))")
        );
        let link_sql = format!(
            "UPDATE memories SET body = {} WHERE id = $2",
            stamp("jsonb_set(body::jsonb, '{supersedes}', $1::text::jsonb)")
        );
        self.block(async {
            let mut client = self.pool.get().await?;
            let tx = client.transaction().await?;
            // Locks every involved record (in id order: two writers cannot deadlock) and
            // reads it as the last committed change left it.
            let bodies: HashMap<String, String> = tx
                .query(
                    "SELECT id, body::text FROM memories WHERE id = ANY($1) ORDER BY id
                     FOR UPDATE",
                    &[&involved],
                )
                .await?
                .iter()
                .map(|r| (r.get(0), r.get(1)))
                .collect();
            // Each involved record, as it is now: Err(reason) when it may not be touched.
            let mut state: HashMap<RecordId, std::result::Result<Memory, String>> = HashMap::new();
            for l in links {
                for (id, digest) in
                    [(l.target, &l.target_digest), (l.successor, &l.successor_digest)]
                {
                    if state.contains_key(&id) {
                        continue;
                    }
                    let verdict = match bodies.get(&id.to_string()).map(|b| decode(b)) {
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
            let mut outcomes = Vec::with_capacity(links.len());
            let mut stamped: HashSet<RecordId> = HashSet::new();
            // Successors in the order they first get a target (a deterministic write order).
            let mut added: Vec<(RecordId, Vec<RecordId>)> = Vec::new();
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
                tx.execute(stamp_sql.as_str(), &[&l.successor.to_string(), &l.target.to_string()])
                    .await?;
                match added.iter_mut().find(|(s, _)| *s == l.successor) {
                    Some((_, targets)) => targets.push(l.target),
                    None => added.push((l.successor, vec![l.target])),
                }
                outcomes.push(None);
            }
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
                tx.execute(link_sql.as_str(), &[&json, &successor.to_string()]).await?;
            }
            tx.commit().await?;
            Ok(outcomes)
        })
    }

    /// The records `c` selects at `now`, each with its verdict: eligible (`refused` is
    /// `None`) only when it passes the extract-before-delete gate and deleting it leaves no
    /// chain without a live head. `gate_progress(n, total)` is called after each `n` of the
    /// `total` selected records are gate-checked.
    fn purge_plan(
        &self,
        c: &PurgeCriteria,
        now: Timestamp,
        gate_progress: &mut dyn FnMut(u64, u64),
    ) -> Result<Vec<PurgeCandidate>> {
        // The selection and its chains from one snapshot.
        let (mut candidates, predecessors) = self.block(async {
            let mut client = self.pool.get().await?;
            let tx = super::snapshot(&mut client).await?;
            let candidates = purge_select(&tx, c, now, None).await?;
            let ids: Vec<RecordId> = candidates.iter().map(|c| c.id).collect();
            let predecessors = predecessors_by_successor(&tx, &ids).await?;
            tx.commit().await?;
            Ok::<_, StoreError>((candidates, predecessors))
        })?;
        let ids: Vec<RecordId> = candidates.iter().map(|c| c.id).collect();
        let mut passed = Vec::with_capacity(ids.len());
        for chunk in ids.chunks(GATE_CHUNK) {
            let verdicts = self.block(async {
                let client = self.pool.get().await?;
                export_gate(&client, chunk).await
            })?;
            passed.extend(verdicts.into_iter().map(|(ok, _)| ok));
            gate_progress(chunk.len() as u64, ids.len() as u64);
        }
        purge_verdicts(&mut candidates, &passed, &predecessors);
        Ok(candidates)
    }

    /// Deletes for good those of `listed` (a plan's eligible records) that are still
    /// eligible. The listed records are locked first (in id order), then everything
    /// `purge_plan` checked is checked again inside the delete transaction (selection by `c`
    /// at `now`, the gate, the chain rule). A record's tags and vector live in its row and
    /// go with it. One outcome per listed record, in order.
    fn purge_apply(
        &self,
        listed: &[RecordId],
        c: &PurgeCriteria,
        now: Timestamp,
    ) -> Result<Vec<PurgeOutcome>> {
        let unique = dedup(listed);
        let keys: Vec<String> = unique.iter().map(RecordId::to_string).collect();
        self.block(async {
            let mut client = self.pool.get().await?;
            let tx = client.transaction().await?;
            // READ COMMITTED: once the rows are locked, each statement below reads them (and
            // everything else) as last committed.
            tx.query("SELECT id FROM memories WHERE id = ANY($1) ORDER BY id FOR UPDATE", &[&keys])
                .await?;
            let mut candidates = purge_select(&tx, c, now, Some(&unique)).await?;
            let ids: Vec<RecordId> = candidates.iter().map(|c| c.id).collect();
            let mut passed = Vec::with_capacity(candidates.len());
            for (cand, (ok, file)) in candidates.iter_mut().zip(export_gate(&tx, &ids).await?) {
                passed.push(ok);
                if file.is_some() {
                    cand.exported_to = file;
                }
            }
            // Only the listed records may be deleted: a record that became eligible since
            // the plan counts as staying, so it also holds back its successors.
            purge_verdicts(&mut candidates, &passed, &predecessors_by_successor(&tx, &ids).await?);
            let verdicts: HashMap<RecordId, Option<PurgeRefusal>> =
                candidates.into_iter().map(|c| (c.id, c.refused)).collect();
            let delete = tx.prepare("DELETE FROM memories WHERE id = $1").await?;
            let mut out = Vec::with_capacity(listed.len());
            let mut done = HashSet::new();
            for id in listed {
                let skipped = match verdicts.get(id) {
                    _ if done.contains(id) => Some("listed twice".to_owned()),
                    None => Some("gone, or no longer matches the selection".to_owned()),
                    Some(Some(refusal)) => Some(skip_reason(refusal)),
                    Some(None) => {
                        tx.execute(&delete, &[&id.to_string()]).await?;
                        done.insert(*id);
                        None
                    }
                };
                out.push(PurgeOutcome { id: *id, deleted: skipped.is_none(), skipped });
            }
            tx.commit().await?;
            Ok(out)
        })
    }
}
