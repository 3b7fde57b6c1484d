//! The invariant checks of `spine-review verify` on PostgreSQL: one page of rows, each
//! checked against one snapshot (the caller's read-only REPEATABLE READ transaction).
//!
//! The checks of a row's columns and vector are shared with the SQLite backend
//! (`crate::checks`: [`Columns::mismatches`], [`check_vector`]), so both backends report a row alike. The
//! row here also holds the `kind` and `tags` columns (SQLite keeps tags in a table of their
//! own and derives the kind from the payload): they are compared with the payload too.

use std::collections::{HashMap, HashSet};

use deadpool_postgres::GenericClient;
use pgvector::Vector;
use spine_core::{Category, Memory, RecordId, Scope};
use tokio_postgres::Row;

use super::query::decode;
use crate::checks::{Columns, MAX_CHAIN, check_vector};
use crate::codec::vec_to_blob;
use crate::{Check, Result, VectorExpectation, VerifyPage, Violation};

/// One page of rows in rowid order, every column the checks read.
const PAGE: &str = "SELECT m.rowid, m.id, m.short_id, m.owner, m.visibility, m.scope,
        m.category, m.created_at, m.not_before, m.not_after, m.archived_at, m.superseded_by,
        m.body::text, m.model, m.dims, m.vec, m.kind, m.tags
     FROM memories m
     WHERE m.rowid > $1 AND ($2::text IS NULL OR m.scope = $2) ORDER BY m.rowid LIMIT $3";

/// Checks up to `limit` rows of `scope` after `after_rowid` through `client` (one
/// transaction, so every row and every link is read from the same snapshot).
pub(super) async fn verify_rows<C: GenericClient>(
    client: &C,
    scope: Option<&Scope>,
    after_rowid: i64,
    limit: usize,
    expect: &VectorExpectation,
) -> Result<VerifyPage> {
    let scope = scope.map(|s| s.as_str().to_owned());
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let rows = client.query(PAGE, &[&after_rowid, &scope, &limit]).await?;
    let mut page = VerifyPage::default();
    for r in &rows {
        page.checked += 1;
        page.last_rowid = Some(r.get(0));
        check_row(client, r, expect, &mut page.violations).await?;
    }
    Ok(page)
}

/// The checks of one row of [`PAGE`].
async fn check_row<C: GenericClient>(
    client: &C,
    r: &Row,
    expect: &VectorExpectation,
    violations: &mut Vec<Violation>,
) -> Result<()> {
    let cols = Columns {
        id: r.get(1),
        short_id: r.get(2),
        owner: r.get(3),
        visibility: r.get(4),
        scope: r.get(5),
        category: r.get(6),
        created_at: r.get(7),
        not_before: r.get(8),
        not_after: r.get(9),
        archived_at: r.get(10),
        superseded_by: r.get(11),
    };
    let body: String = r.get(12);
    // "Has a vector" is `vec IS NOT NULL`; the stamp and the stated length sit beside it.
    // The vector goes to the shared check as the bytes SQLite would hold for it.
    let vector = r.get::<_, Option<Vector>>(15).map(|v| {
        let model = r.get::<_, Option<String>>(13).unwrap_or_default();
        let dims = r.get::<_, Option<i32>>(14).map_or(0, i64::from);
        (model, dims, vec_to_blob(v.as_slice()))
    });
    let kind: Option<String> = r.get(16);
    let tags: Vec<String> = r.get(17);
    let mut found = |check: Check, detail: String| {
        violations.push(Violation {
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
            return Ok(());
        }
    };
    let mut mismatched = cols.mismatches(&record);
    if kind.as_deref() != record.kind.map(|k| k.as_str()) {
        mismatched.push("kind");
    }
    if tag_set(&tags) != tag_set(&record.tags) {
        mismatched.push("tags");
    }
    if !mismatched.is_empty() {
        found(
            Check::ColumnsMismatch,
            format!("columns differ from the payload: {}", mismatched.join(", ")),
        );
    }
    check_links(client, &record, &mut found).await
}

/// Tags as the column holds them: each once, order irrelevant.
fn tag_set(tags: &[String]) -> Vec<&str> {
    let mut out: Vec<&str> = tags.iter().map(String::as_str).collect();
    out.sort_unstable();
    out.dedup();
    out
}

/// The supersession checks of one decoded record, against the same snapshot (mirrors the
/// SQLite backend's `check_links`).
async fn check_links<C: GenericClient>(
    client: &C,
    m: &Memory,
    found: &mut impl FnMut(Check, String),
) -> Result<()> {
    let successor_of =
        client.prepare_cached("SELECT superseded_by FROM memories WHERE id = $1").await?;
    if let Some(succ) = m.superseded_by {
        if m.category == Category::Rule {
            found(Check::RuleSuperseded, format!("rule superseded by {succ}"));
        }
        let body: Option<String> = client
            .query_opt("SELECT body::text FROM memories WHERE id = $1", &[&succ.to_string()])
            .await?
            .map(|r| r.get(0));
        match body {
            None => found(
                Check::DanglingSuccessor,
                format!("superseded by {succ}, which does not exist"),
            ),
            Some(body) => {
                // A successor whose payload is corrupt is reported on its own.
                if let Ok(s) = decode(&body)
                    && !s.supersedes.contains(&m.id)
                {
                    found(
                        Check::BacklinkMissing,
                        format!("superseded by {succ}, whose supersedes does not list it"),
                    );
                }
                // Walk the chain forward to its head.
                let mut seen = HashSet::from([m.id]);
                let mut at = succ;
                for _ in 0..MAX_CHAIN {
                    if !seen.insert(at) {
                        found(
                            Check::ChainCycle,
                            format!(
                                "following superseded_by from here returns to {at}: the chain has no live head"
                            ),
                        );
                        break;
                    }
                    let next: Option<Option<String>> = client
                        .query_opt(&successor_of, &[&at.to_string()])
                        .await?
                        .map(|r| r.get(0));
                    match next.flatten().and_then(|s| RecordId::parse(&s)) {
                        Some(n) => at = n,
                        None => break,
                    }
                }
            }
        }
    }
    if m.supersedes.is_empty() {
        return Ok(());
    }
    // Each predecessor's successor column, read at once; a predecessor without a row was
    // deleted or purged since (the head stays valid).
    let wanted: Vec<String> = m.supersedes.iter().map(RecordId::to_string).collect();
    let successors: HashMap<String, Option<String>> = client
        .query("SELECT id, superseded_by FROM memories WHERE id = ANY($1)", &[&wanted])
        .await?
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    for (p, key) in m.supersedes.iter().zip(&wanted) {
        match successors.get(key) {
            None => {}
            Some(None) => found(
                Check::PredecessorNotSuperseded,
                format!("supersedes {p}, which is not superseded (a second live head)"),
            ),
            Some(Some(other)) if *other != m.id.to_string() => found(
                Check::PredecessorOtherSuccessor,
                format!("supersedes {p}, which names {other} as its successor"),
            ),
            Some(Some(_)) => {}
        }
    }
    Ok(())
}
