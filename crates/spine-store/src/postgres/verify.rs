//! `spine-review verify` on PostgreSQL: one page of rows, each checked against one snapshot
//! (the caller's read-only REPEATABLE READ transaction). What is wrong is decided by the
//! engine-neutral `crate::checks`, so both backends report a row alike; the row here also
//! holds the `kind` and `tags` columns, which are compared with the payload too.

use std::collections::HashMap;

use deadpool_postgres::GenericClient;
use spine_core::{Memory, RecordId, Scope};

use crate::checks::{self, Findings, KindAndTags};
use crate::fields::Fields;
use crate::{Result, VectorExpectation, VerifyPage};

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
        let also = KindAndTags { kind: r.text_opt(16)?, tags: r.get(17) };
        if let Some((record, mut found)) = page.check(r, Some(also), expect)? {
            check_links(client, &record, &mut found).await?;
        }
    }
    Ok(page)
}

/// The supersession checks of one decoded record, against the same snapshot.
async fn check_links<C: GenericClient>(
    client: &C,
    m: &Memory,
    found: &mut Findings<'_>,
) -> Result<()> {
    if let Some(succ) = m.superseded_by {
        let sql = "SELECT body::text FROM memories WHERE id = $1";
        let body = client.query_opt(sql, &[&succ.to_string()]).await?;
        let body = body.map(|r| r.text(0)).transpose()?;
        let mut walk = checks::successor(m, succ, body.as_deref(), found);
        let successor_of =
            client.prepare_cached("SELECT superseded_by FROM memories WHERE id = $1").await?;
        while let Some(at) = walk.next(found) {
            let row = client.query_opt(&successor_of, &[&at.to_string()]).await?;
            walk.step(row.map(|r| r.text_opt(0)).transpose()?.flatten());
        }
    }
    if m.supersedes.is_empty() {
        return Ok(());
    }
    // Each predecessor's successor column, read at once.
    let wanted: Vec<String> = m.supersedes.iter().map(RecordId::to_string).collect();
    let sql = "SELECT id, superseded_by FROM memories WHERE id = ANY($1)";
    let mut successors: HashMap<String, Option<String>> = HashMap::new();
    for r in client.query(sql, &[&wanted]).await? {
        successors.insert(r.text(0)?, r.text_opt(1)?);
    }
    for (p, key) in m.supersedes.iter().zip(&wanted) {
        checks::predecessor(m, p, successors.get(key).cloned(), found);
    }
    Ok(())
}
