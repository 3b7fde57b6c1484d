//! The store half of `spine summarize-missing`: finding records without a summary and
//! filling one in place (SPEC "Operator commands", "States and transitions": no summary →
//! summary_source=auto).
//!
//! Operator views: not access-checked, every owner's records are swept (like
//! `needing_embedding`).
//!
//! Concurrency: a summary is written by one conditional `UPDATE` (its own transaction) that
//! matches only while the record still has no summary and its content is the text that was
//! summarized. A concurrent `update_memory` (new content, or a client summary) therefore
//! wins, and a stop between two writes leaves each record either summarized or untouched.
//! The update edits only payload keys: no indexed column changes, so the search index and
//! its change log are not involved.

use rusqlite::{params, params_from_iter};
use spine_core::{RecordId, SCHEMA_VERSION, Timestamp};

use super::{STAMP_VERSION, SqliteStore, Where};
use crate::predicate::no_summary;
use crate::{AutoSummary, MissingSummaries, Result, SummaryCandidate, SummaryStore};

impl SummaryStore for SqliteStore {
    /// How many records of every owner match `which` (the dry run's answer and the
    /// progress total).
    fn count_missing_summaries(&self, which: &MissingSummaries) -> Result<u64> {
        super::query::count(&self.lock(), Where::missing_summaries(which))
    }

    /// Up to `limit` records matching `which`, oldest first (created_at, then id), strictly
    /// after `after` in that order. Passing the last candidate of one page as `after` walks
    /// the matching records once, skipping those a previous page left without a summary.
    fn missing_summaries(
        &self,
        which: &MissingSummaries,
        after: Option<(Timestamp, RecordId)>,
        limit: usize,
    ) -> Result<Vec<SummaryCandidate>> {
        let (w, sql) = Where::missing_summaries_page(which, after, limit);
        let conn = self.lock();
        let mut stmt = conn.prepare(&sql)?;
        stmt.query_and_then(params_from_iter(w.params), |r| SummaryCandidate::read(r))?.collect()
    }

    /// Stores `summary` on record `id` with summary_source=auto, stamping the schema
    /// version, only if the record still has no summary and its content is still
    /// `summarized_content`. False when it does not match (edited, summarized by someone
    /// else, or deleted meanwhile): nothing was written.
    fn set_auto_summary(
        &self,
        id: &RecordId,
        summarized_content: &str,
        summary: AutoSummary<'_>,
    ) -> Result<bool> {
        // One statement is one transaction: the check and the write cannot be separated.
        // summary_egress_at is removed first, so a stale stamp never outlives the summary
        // it described, then set when the content left the process.
        let summarized = format!(
            "json_set(json_remove(body, '$.summary_egress_at'), '$.summary', ?1,
                '$.summary_source', 'auto', '$.summary_model', ?2, {STAMP_VERSION})"
        );
        // SQLite numbers a bare `?` one above the highest number before it: STAMP_VERSION's
        // is ?3, so the record's parameters follow from ?4.
        let matches = format!(
            "m.id = ?4 AND json_extract(m.body, '$.content') = ?5 AND {}",
            no_summary(&Where::default())
        );
        let record = *id;
        let id = id.to_string();
        let (set, wrote) = self.write(|conn| {
            let n = match summary.egress_at {
                None => conn.execute(
                    &format!("UPDATE memories AS m SET body = {summarized} WHERE {matches}"),
                    params![summary.summary, summary.model, SCHEMA_VERSION, id, summarized_content],
                )?,
                Some(at) => conn.execute(
                    &format!(
                        "UPDATE memories AS m SET body = json_set({summarized},
                            '$.summary_egress_at', ?6) WHERE {matches}"
                    ),
                    params![
                        summary.summary,
                        summary.model,
                        SCHEMA_VERSION,
                        id,
                        summarized_content,
                        at.to_rfc3339()
                    ],
                )?,
            };
            if n == 0 {
                return Ok((false, false));
            }
            let changed = super::audit::scoped(conn, &[record])?;
            Ok((true, self.record_operator(conn, changed)?))
        })?;
        self.operator_recorded(wrote);
        Ok(set)
    }
}

#[cfg(test)]
mod tests {
    use spine_core::{Caller, Category, IdRef, Memory, ShortId, Source, SummarySource};

    use super::*;
    use crate::{Access, Embedding, Store};
    use spine_core::Scope;

    fn record(store: &SqliteStore, scope: &str, content: &str, created_at: i64) -> Memory {
        let mut m = Memory::new(
            ShortId::mint(),
            content.into(),
            Scope::parse("scope", scope).unwrap(),
            Source::UserSaid,
            Category::Convention,
            &Caller::anonymous(),
            Timestamp::from_micros(created_at),
        );
        m.schema_version = 0;
        store
            .insert(
                &crate::Access::operator(),
                &m,
                Embedding { model: "test", vector: &[1.0, 0.0] },
            )
            .unwrap();
        m
    }

    fn get(store: &SqliteStore, id: RecordId) -> Memory {
        store.resolve(&Access::owned(&Caller::anonymous()), &IdRef::Id(id)).unwrap().unwrap()
    }

    fn all(before: i64) -> MissingSummaries {
        MissingSummaries { scope: None, created_at_or_before: Timestamp::from_micros(before) }
    }

    const AUTO: AutoSummary<'static> =
        AutoSummary { summary: "short", model: "builtin:extractive", egress_at: None };

    #[test]
    fn candidates_are_records_without_any_summary_oldest_first_in_scope_and_age() {
        let dir = tempfile::TempDir::new().unwrap();
        let store = SqliteStore::open(dir.path()).unwrap();
        let a = record(&store, "a:b:c", "first", 10);
        let b = record(&store, "x:y:z", "second", 20);
        let mut client = record(&store, "a:b:c", "third", 30);
        client.summary = "mine".into();
        client.summary_source = SummarySource::Client;
        assert!(store.replace(&Access::owned(&Caller::anonymous()), &client, None).unwrap());
        let late = record(&store, "a:b:c", "fourth", 40);

        assert_eq!(store.count_missing_summaries(&all(40)).unwrap(), 3);
        let ids = |v: Vec<SummaryCandidate>| v.into_iter().map(|c| c.id).collect::<Vec<_>>();
        assert_eq!(
            ids(store.missing_summaries(&all(40), None, 10).unwrap()),
            [a.id, b.id, late.id]
        );
        // Age bound and paging.
        assert_eq!(ids(store.missing_summaries(&all(39), None, 10).unwrap()), [a.id, b.id]);
        let page = store.missing_summaries(&all(40), None, 1).unwrap();
        assert_eq!(page[0].content, "first");
        let next = store.missing_summaries(&all(40), Some((page[0].created_at, page[0].id)), 5);
        assert_eq!(ids(next.unwrap()), [b.id, late.id]);
        // Scope.
        let one = MissingSummaries { scope: Some(a.scope.clone()), ..all(40) };
        assert_eq!(store.count_missing_summaries(&one).unwrap(), 2);
    }

    #[test]
    fn a_summary_is_written_only_while_missing_and_over_the_same_content() {
        let dir = tempfile::TempDir::new().unwrap();
        let store = SqliteStore::open(dir.path()).unwrap();
        let m = record(&store, "a:b:c", "the content", 10);
        let at = Timestamp::from_micros(1_700_000_000_000_000);

        // Content changed since it was read: nothing written.
        assert!(!store.set_auto_summary(&m.id, "older content", AUTO).unwrap());
        assert_eq!(get(&store, m.id).summary_source, SummarySource::None);

        let sent = AutoSummary { egress_at: Some(at), ..AUTO };
        assert!(store.set_auto_summary(&m.id, "the content", sent).unwrap());
        let got = get(&store, m.id);
        assert_eq!(got.summary, "short");
        assert_eq!(got.summary_source, SummarySource::Auto);
        assert_eq!(got.summary_model, "builtin:extractive");
        assert_eq!(got.summary_egress_at, Some(at));
        assert_eq!(got.schema_version, SCHEMA_VERSION, "the edit stamps the version");
        assert_eq!(
            (got.content.as_str(), &got.tags, got.created_at),
            ("the content", &m.tags, m.created_at)
        );

        // It has a summary now: a second writer finds nothing to do.
        assert!(!store.set_auto_summary(&m.id, "the content", AUTO).unwrap());
        assert_eq!(store.count_missing_summaries(&all(10)).unwrap(), 0);
        // Deleted meanwhile.
        assert!(!store.set_auto_summary(&RecordId::mint(), "the content", AUTO).unwrap());
    }

    #[test]
    fn a_client_summary_is_never_replaced_and_a_stale_egress_stamp_is_dropped() {
        let dir = tempfile::TempDir::new().unwrap();
        let store = SqliteStore::open(dir.path()).unwrap();
        let mut m = record(&store, "a:b:c", "the content", 10);
        m.summary = "the client's".into();
        m.summary_source = SummarySource::Client;
        store.replace(&Access::owned(&Caller::anonymous()), &m, None).unwrap();
        assert!(!store.set_auto_summary(&m.id, "the content", AUTO).unwrap());
        assert_eq!(get(&store, m.id).summary, "the client's");

        // A record without a summary but with a leftover egress stamp: the offline
        // summary does not inherit it.
        let mut n = record(&store, "a:b:c", "other", 20);
        n.summary_egress_at = Some(Timestamp::from_micros(5));
        store.replace(&Access::owned(&Caller::anonymous()), &n, None).unwrap();
        assert!(store.set_auto_summary(&n.id, "other", AUTO).unwrap());
        assert_eq!(get(&store, n.id).summary_egress_at, None);
    }
}
