//! The store half of `spine summarize-missing` on PostgreSQL (see `sqlite/summaries.rs` for
//! the rules): a summary is written by one conditional `UPDATE` that matches only while the
//! record still has no summary and its content is the text that was summarized.

use spine_core::{RecordId, Timestamp};

use super::PgStore;
use super::query::Where;
use super::store::{parse_id, stamp};
use crate::{AutoSummary, MissingSummaries, Result, StoreError, SummaryCandidate, SummaryStore};

/// SQL: the record has no summary, and none written by a client (SPEC: never touched).
const NO_SUMMARY: &str = "coalesce(m.body->>'summary', '') = '' \
     AND coalesce(m.body->>'summary_source', '') <> 'client'";

fn missing(which: &MissingSummaries) -> Where {
    let mut w = Where::new();
    if let Some(scope) = &which.scope {
        let p = w.bind(scope.as_str().to_owned());
        w.and(&format!("m.scope = {p}"));
    }
    let p = w.bind(which.created_at_or_before.as_micros());
    w.and(&format!("m.created_at <= {p}"));
    w.and(NO_SUMMARY);
    w
}

impl SummaryStore for PgStore {
    fn count_missing_summaries(&self, which: &MissingSummaries) -> Result<u64> {
        let w = missing(which);
        self.block(async {
            let client = self.pool.get().await?;
            let sql = format!("SELECT count(*) FROM memories m WHERE {}", w.sql);
            Ok(client.query_one(&sql, &w.refs()).await?.get::<_, i64>(0) as u64)
        })
    }

    fn missing_summaries(
        &self,
        which: &MissingSummaries,
        after: Option<(Timestamp, RecordId)>,
        limit: usize,
    ) -> Result<Vec<SummaryCandidate>> {
        let mut w = missing(which);
        if let Some((created_at, id)) = after {
            let t = w.bind(created_at.as_micros());
            let id = w.bind(id.to_string());
            w.and(&format!("m.created_at > {t} OR (m.created_at = {t} AND m.id > {id})"));
        }
        let l = w.bind(limit as i64);
        let rows = self.block(async {
            let client = self.pool.get().await?;
            let sql = format!(
                "SELECT m.id, m.created_at, coalesce(m.body->>'content', '')
                 FROM memories m WHERE {} ORDER BY m.created_at ASC, m.id ASC LIMIT {l}",
                w.sql
            );
            Ok::<_, StoreError>(client.query(&sql, &w.refs()).await?)
        })?;
        rows.iter()
            .map(|r| {
                Ok(SummaryCandidate {
                    id: parse_id(r.get(0))?,
                    created_at: Timestamp::from_micros(r.get(1)),
                    content: r.get(2),
                })
            })
            .collect()
    }

    fn set_auto_summary(
        &self,
        id: &RecordId,
        summarized_content: &str,
        summary: AutoSummary<'_>,
    ) -> Result<bool> {
        // summary_egress_at is removed first, so a stale stamp never outlives the summary it
        // described, then set when the content left the process.
        let mut body =
            "(m.body::jsonb - 'summary_egress_at') || jsonb_build_object('summary', $1::text, \
             'summary_source', 'auto', 'summary_model', $2::text)"
                .to_owned();
        if summary.egress_at.is_some() {
            body = format!("{body} || jsonb_build_object('summary_egress_at', $5::text)");
        }
        let sql = format!(
            "UPDATE memories m SET body = {} WHERE m.id = $3 AND m.body->>'content' = $4 AND {NO_SUMMARY}",
            stamp(&format!("({body})"))
        );
        let id = id.to_string();
        let egress = summary.egress_at.map(|t| t.to_rfc3339());
        self.block(async {
            let client = self.pool.get().await?;
            let n = match &egress {
                None => {
                    client
                        .execute(
                            &sql,
                            &[&summary.summary, &summary.model, &id, &summarized_content],
                        )
                        .await?
                }
                Some(at) => {
                    client
                        .execute(
                            &sql,
                            &[&summary.summary, &summary.model, &id, &summarized_content, at],
                        )
                        .await?
                }
            };
            Ok(n > 0)
        })
    }
}
