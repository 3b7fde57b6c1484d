//! [`crate::Store::nearest`] on PostgreSQL: two nearest scans in one statement, so one
//! snapshot — the `any` nearest of every state and the `active` nearest the gate lets
//! through — re-scored exactly and merged as the SQLite backend merges them
//! (`crate::nearest`), so both give the same answer. When the filters leave few rows (one
//! owner's scope, a rare tag), an exact scan of those rows beats the HNSW index, whose
//! filtered walk may give up before it found enough of them; else the index with
//! pgvector's iterative scan keeps the filters exact.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use pgvector::Vector;
use spine_core::RecordId;

use super::PgStore;
use super::query::Where;
use crate::Body;
use crate::codec::parse_id;
use crate::fields::{Fields, markers};
use crate::nearest::{Scored, neighbours};
use crate::{Gate, NearestQuery, Neighbour, Result, StoreError};

/// At most this many rows left by a search's filters are scanned exactly instead of through
/// the HNSW index.
const EXACT_SCAN_ROWS: i64 = 5_000;

/// How long filters found to leave more than [`EXACT_SCAN_ROWS`] rows send their searches
/// straight to the index, without the probe (which reads up to one row past the limit
/// before it says so).
const LARGE_FOR: Duration = Duration::from_secs(60);

/// At most this many filters are remembered as large; past it, the memory starts over.
const LARGE_KEYS: usize = 4096;

/// How many index tuples pgvector's iterative scan may visit to find enough rows that pass
/// the filters (its default is 20,000); with more than [`EXACT_SCAN_ROWS`] passing, the
/// scan finds them long before this.
const MAX_SCAN_TUPLES: u32 = 100_000;

impl PgStore {
    pub(super) fn scan_nearest(&self, q: &NearestQuery<'_>) -> Result<Vec<Neighbour>> {
        let dims = q.vector.len();
        if dims == 0 || (q.any == 0 && q.active == 0) {
            return Ok(vec![]);
        }
        self.ensure_vector_index(dims)?;
        // The read predicate, the hard filters and the model, on `w`'s parameters: what
        // decides how many rows a search reads ([`LargeScans`]' key).
        let filters = |w: &mut Where| {
            w.access(q.access);
            w.filter(q.filter);
            let model = w.bind(q.model.to_owned());
            w.push(&format!("m.model = {model} AND m.dims = {dims}"));
        };
        // The filters, the gate when `gated`, and the record excluded, if any.
        let conditions = |w: &mut Where, gated: bool| {
            filters(w);
            if gated {
                w.gate(Gate::ActiveAt(q.now));
            }
            if let Some(ex) = q.exclude {
                let p = w.bind(ex.to_string());
                w.push(&format!("m.id <> {p}"));
            }
        };
        // Both scans as one statement, so that they read one snapshot. `exact`: ordered by
        // an exact scan of the rows that pass the filters, each branch run only when the
        // probe (a CTE counting them, up to one past the limit) finds at most
        // EXACT_SCAN_ROWS, and a last row, its id NULL, saying whether they ran. Else
        // ordered through the HNSW index.
        let statement = |exact: bool| {
            let mut w = Where::default();
            let mut with = String::new();
            if exact {
                conditions(&mut w, false);
                with = format!(
                    "WITH few AS MATERIALIZED (
                        SELECT count(*) <= {EXACT_SCAN_ROWS} AS ok
                        FROM (SELECT 1 FROM memories m WHERE {} LIMIT {}) counted) ",
                    w.sql,
                    EXACT_SCAN_ROWS + 1
                );
            }
            let v = w.bind(q.vector.to_vec());
            // `+ 0` orders by the same distance without matching the index's operator.
            let order = match exact {
                true => format!("(m.vec::vector({dims}) <=> {v}::real[]::vector({dims})) + 0"),
                false => format!("m.vec::vector({dims}) <=> {v}::real[]::vector({dims})"),
            };
            let mut branches = Vec::new();
            for (gated, limit) in [(false, q.any), (true, q.active)] {
                if limit == 0 {
                    continue;
                }
                // Each branch its own conditions, their parameters numbered after those
                // bound before (the probe's, the vector, the first branch's).
                w.sql = Where::default().sql;
                conditions(&mut w, gated);
                if exact {
                    // A condition on the probe alone: when it fails, the scan never runs.
                    w.push("(SELECT ok FROM few)");
                }
                let l = w.bind(limit as i64);
                // The payload is read as text only for the rows kept: cast in the scan,
                // every row it passes would be read from the TOAST table.
                branches.push(format!(
                    "(SELECT id, archived, superseded, not_before, not_after, vec, body::text,
                             NULL::bool AS ran
                      FROM (SELECT m.id, m.archived_at IS NOT NULL AS archived,
                                   m.superseded_by IS NOT NULL AS superseded,
                                   m.not_before, m.not_after, m.vec, m.body
                            FROM memories m WHERE {} ORDER BY {order} LIMIT {l}) kept)",
                    w.sql
                ));
            }
            if exact {
                branches
                    .push("SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, ok FROM few".into());
            }
            (format!("{with}{}", branches.join(" UNION ALL ")), w)
        };
        let ef = q.any.max(q.active).clamp(40, 1000);
        // Every statement goes unprepared with its parameters' types: parsed, planned for
        // these values and run in one round trip. One round trip when few rows pass the
        // filters; else that one (the probe alone runs) and one through the index, whose
        // settings need a transaction (`SET LOCAL`): its start, the settings, the scans and
        // the commit sent together.
        // Filters the probe found to leave many rows go straight to the index for a while
        // ([`LargeScans`]), without a probe that would count past EXACT_SCAN_ROWS again.
        let key = {
            let mut w = Where::default();
            filters(&mut w);
            w.fingerprint()
        };
        let large = self.large_scans.is_large(key, Instant::now());
        let rows = self.block(async {
            let client = self.pool.get().await?;
            super::know_vectors(&client).await?;
            if !large {
                let (sql, w) = statement(true);
                let mut rows = client.query_typed(sql.as_str(), &w.typed()).await?;
                // The probe's row is the one whose last column is not NULL (wherever the
                // server put it among the others).
                let mut ran = None;
                rows.retain(|r| match r.try_get::<_, Option<bool>>(7) {
                    Ok(Some(ok)) => {
                        ran = Some(ok);
                        false
                    }
                    _ => true,
                });
                match ran {
                    Some(true) => return Ok(rows),
                    Some(false) => self.large_scans.note(key, Instant::now()),
                    None => return Err(StoreError::Corrupt("a search without its probe".into())),
                }
            }
            let (sql, w) = statement(false);
            let params = w.typed();
            // The transaction's start with the settings, the scans and the commit go
            // together: each is sent when first polled, and `biased` polls them in this
            // order, so the client pipelines them in one round trip. A failed step leaves
            // the transaction aborted and the commit then rolls it back (the server runs a
            // request already sent even when its answer is no longer awaited), so the
            // connection goes back to the pool outside any transaction.
            let begin = format!(
                "BEGIN READ ONLY; SET LOCAL hnsw.iterative_scan = relaxed_order;
                 SET LOCAL hnsw.ef_search = {ef}; SET LOCAL hnsw.max_scan_tuples = {MAX_SCAN_TUPLES}"
            );
            let ((), rows, ()) = tokio::try_join!(
                biased;
                client.batch_execute(&begin),
                client.query_typed(sql.as_str(), &params),
                client.batch_execute("COMMIT"),
            )?;
            Ok::<_, StoreError>(rows)
        })?;
        // The two scans may both return a record: each once.
        let mut scored: HashMap<RecordId, Scored<String>> = HashMap::new();
        for r in &rows {
            let id = parse_id(&r.text(0)?)?;
            if scored.contains_key(&id) {
                continue;
            }
            let score = spine_core::cosine(q.vector, r.get::<_, Vector>(5).as_slice());
            scored.insert(id, Scored { score, id, markers: markers(r, 1)?, record: r.text(6)? });
        }
        neighbours(q, scored.into_values().collect(), |body| Ok(Body::new(body)))
    }
}

/// The filters (the read predicate, the hard filters and the model, hashed:
/// [`Where::fingerprint`]) whose last probe found more than [`EXACT_SCAN_ROWS`] rows, and
/// when: for [`LARGE_FOR`] after, their searches go straight to the index. A hint on this
/// node alone, never a wrong answer: a filter that shrank meanwhile is searched through
/// the index, as it was when it had many rows.
#[derive(Default)]
pub(super) struct LargeScans(Mutex<HashMap<u64, Instant>>);

impl LargeScans {
    /// Whether `key` was found large less than [`LARGE_FOR`] before `now`.
    pub(super) fn is_large(&self, key: u64, now: Instant) -> bool {
        self.seen().get(&key).is_some_and(|&at| now.saturating_duration_since(at) < LARGE_FOR)
    }

    pub(super) fn note(&self, key: u64, now: Instant) {
        let mut seen = self.seen();
        if seen.len() >= LARGE_KEYS {
            seen.clear();
        }
        seen.insert(key, now);
    }

    /// The map; a thread that panicked holding it left it whole (one insert or clear).
    fn seen(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Instant>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_large_filter_goes_to_the_index_for_a_while_and_then_is_probed_again() {
        let large = LargeScans::default();
        let t = Instant::now();
        assert!(!large.is_large(1, t), "nothing is large before a probe said so");
        large.note(1, t);
        assert!(large.is_large(1, t));
        assert!(large.is_large(1, t + LARGE_FOR - Duration::from_millis(1)));
        assert!(!large.is_large(1, t + LARGE_FOR), "the window is half-open");
        assert!(!large.is_large(2, t), "another filter is not large");
        // A full memory starts over rather than growing.
        for key in 0..LARGE_KEYS as u64 {
            large.note(key + 10, t);
        }
        assert!(!large.is_large(1, t));
        assert_eq!(large.seen().len(), 1);
    }
}
