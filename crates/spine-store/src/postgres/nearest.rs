//! [`crate::Store::nearest`] on PostgreSQL: two nearest scans in one statement, so one
//! snapshot — the `any` nearest of every state and the `active` nearest the gate lets
//! through — re-scored exactly and merged as the SQLite backend merges them
//! (`crate::nearest`), so both give the same answer. When the filters leave few rows (one
//! owner's scope, a rare tag), an exact scan of those rows beats the HNSW index, whose
//! filtered walk may give up before it found enough of them; else the index with
//! pgvector's iterative scan keeps the filters exact.

use std::collections::HashMap;

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
        // The read predicate, the gate when `gated`, and the model, on `w`'s parameters.
        let conditions = |w: &mut Where, gated: bool| {
            w.access(q.access);
            w.filter(q.filter);
            if gated {
                w.gate(Gate::ActiveAt(q.now));
            }
            let model = w.bind(q.model.to_owned());
            w.push(&format!("m.model = {model} AND m.dims = {dims}"));
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
        // filters; else that one (the probe alone runs) and three through the index, since
        // its settings need a transaction (`SET LOCAL`): its start, the settings and the
        // scans sent together (the client pipelines requests polled at once), the commit.
        let rows = self.block(async {
            let mut client = self.pool.get().await?;
            super::know_vectors(&client).await?;
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
                Some(false) => {}
                None => return Err(StoreError::Corrupt("a search without its probe".into())),
            }
            let (sql, w) = statement(false);
            let params = w.typed();
            let tx = super::snapshot(&mut client).await?;
            let settings = format!(
                "SET LOCAL hnsw.iterative_scan = relaxed_order; SET LOCAL hnsw.ef_search = {ef};
                 SET LOCAL hnsw.max_scan_tuples = {MAX_SCAN_TUPLES}"
            );
            let settings = tx.batch_execute(&settings);
            let ((), rows) = tokio::try_join!(settings, tx.query_typed(sql.as_str(), &params))?;
            tx.commit().await?;
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
