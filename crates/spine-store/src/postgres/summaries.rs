//! The store half of `spine summarize-missing` on PostgreSQL (see `sqlite/summaries.rs` for
//! the rules): a summary is written by one conditional `UPDATE` that matches only while the
//! record still has no summary and its content is the text that was summarized.

use spine_core::{RecordId, Timestamp};

use super::PgStore;
use super::query::Where;
use super::rows::stamp;
use crate::predicate::no_summary;
use crate::{AutoSummary, MissingSummaries, Result, SummaryCandidate, SummaryStore};

impl SummaryStore for PgStore {
    fn count_missing_summaries(&self, which: &MissingSummaries) -> Result<u64> {
        self.count_where(&Where::missing_summaries(which))
    }

    fn missing_summaries(
        &self,
        which: &MissingSummaries,
        after: Option<(Timestamp, RecordId)>,
        limit: usize,
    ) -> Result<Vec<SummaryCandidate>> {
        let (w, sql) = Where::missing_summaries_page(which, after, limit);
        self.query_where(&sql, &w)?.iter().map(SummaryCandidate::read).collect()
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
            "UPDATE memories m SET body = {} WHERE m.id = $3 AND m.body->>'content' = $4 AND {}
             RETURNING m.id, m.scope",
            stamp(&format!("({body})")),
            no_summary(&Where::default())
        );
        let id = id.to_string();
        let egress = summary.egress_at.map(|t| t.to_rfc3339());
        let n = match &egress {
            None => self.change_recorded(
                &sql,
                &[&summary.summary, &summary.model, &id, &summarized_content],
            )?,
            Some(at) => self.change_recorded(
                &sql,
                &[&summary.summary, &summary.model, &id, &summarized_content, at],
            )?,
        };
        Ok(n > 0)
    }
}
