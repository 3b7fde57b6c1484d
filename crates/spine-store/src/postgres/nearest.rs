//! [`crate::Store::nearest`] on PostgreSQL: two nearest scans in one snapshot — the `any`
//! nearest of every state and the `active` nearest the gate lets through — re-scored exactly
//! and merged as the SQLite backend merges them (`crate::nearest`), so both give the same
//! answer. When the filters leave few rows (one owner's scope, a rare tag), an exact scan of
//! those rows beats the HNSW index, whose filtered walk may give up before it found enough
//! of them; else the index with pgvector's iterative scan keeps the filters exact.

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
        let base = |gated: bool| {
            let mut w = Where::default();
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
            w
        };
        let scan = |gated: bool, limit: usize, exact: bool| {
            let mut w = base(gated);
            let v = w.bind(Vector::from(q.vector.to_vec()));
            let l = w.bind(limit as i64);
            // `+ 0` orders by the same distance without matching the index's operator.
            let order = match exact {
                true => format!("(m.vec::vector({dims}) <=> {v}::vector({dims})) + 0"),
                false => format!("m.vec::vector({dims}) <=> {v}::vector({dims})"),
            };
            let sql = format!(
                "SELECT m.id, m.archived_at IS NOT NULL, m.superseded_by IS NOT NULL,
                    m.not_before, m.not_after, m.vec, m.body::text
                 FROM memories m WHERE {} ORDER BY {order} LIMIT {l}",
                w.sql
            );
            (sql, w)
        };
        let probe = base(false);
        let probe_sql = format!(
            "SELECT count(*) FROM (SELECT 1 FROM memories m WHERE {} LIMIT {}) few",
            probe.sql,
            EXACT_SCAN_ROWS + 1
        );
        let ef = q.any.max(q.active).clamp(40, 1000);
        let rows = self.block(async {
            let mut client = self.pool.get().await?;
            let tx = super::snapshot(&mut client).await?;
            let candidates: i64 = tx.query_one(probe_sql.as_str(), &probe.refs()).await?.get(0);
            let exact = candidates <= EXACT_SCAN_ROWS;
            if !exact {
                tx.batch_execute(&format!(
                    "SET LOCAL hnsw.iterative_scan = relaxed_order; SET LOCAL hnsw.ef_search = {ef};
                     SET LOCAL hnsw.max_scan_tuples = {MAX_SCAN_TUPLES}"
                ))
                .await?;
            }
            let mut scans = Vec::new();
            if q.any > 0 {
                scans.push(scan(false, q.any, exact));
            }
            if q.active > 0 {
                scans.push(scan(true, q.active, exact));
            }
            let mut rows = Vec::new();
            for (sql, w) in &scans {
                rows.extend(tx.query(sql.as_str(), &w.refs()).await?);
            }
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
