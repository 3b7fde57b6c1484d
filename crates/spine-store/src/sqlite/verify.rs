//! `spine-review verify` on SQLite: one page of rows, each checked against one snapshot (the
//! caller's read transaction). What is wrong is decided by the engine-neutral
//! `crate::checks`; this reads the rows and the records their links name.

use rusqlite::{Connection, OptionalExtension, params};
use spine_core::{Memory, Scope};

use crate::checks::{self, Findings};
use crate::{Result, VectorExpectation, VerifyPage};

/// Checks up to `limit` rows of `scope` after `after_rowid` through `conn` (one
/// transaction, so every row and every link is read from the same snapshot).
pub(super) fn verify_rows(
    conn: &Connection,
    scope: Option<&Scope>,
    after_rowid: i64,
    limit: usize,
    expect: &VectorExpectation,
) -> Result<VerifyPage> {
    let mut page = VerifyPage::default();
    let mut stmt = conn.prepare_cached(
        "SELECT m.rowid, m.id, m.short_id, m.owner, m.visibility, m.scope, m.category,
            m.created_at, m.not_before, m.not_after, m.archived_at, m.superseded_by, m.body,
            v.model, v.dims, v.vec
         FROM memories m LEFT JOIN vectors v ON v.memory = m.rowid
         WHERE m.rowid > ?1 AND (?2 IS NULL OR m.scope = ?2) ORDER BY m.rowid LIMIT ?3",
    )?;
    let mut rows = stmt.query(params![after_rowid, scope.map(Scope::as_str), limit as i64])?;
    while let Some(r) = rows.next()? {
        if let Some((record, mut found)) = page.check(r, None, expect)? {
            check_links(conn, &record, &mut found)?;
        }
    }
    Ok(page)
}

/// The supersession checks of one decoded record, against the same snapshot.
fn check_links(conn: &Connection, m: &Memory, found: &mut Findings<'_>) -> Result<()> {
    let mut successor_of =
        conn.prepare_cached("SELECT superseded_by FROM memories WHERE id = ?1")?;
    if let Some(succ) = m.superseded_by {
        let body: Option<String> = conn
            .prepare_cached("SELECT body FROM memories WHERE id = ?1")?
            .query_row([succ.to_string()], |r| r.get(0))
            .optional()?;
        let mut walk = checks::successor(m, succ, body.as_deref(), found);
        while let Some(at) = walk.next(found) {
            walk.step(successor_of.query_row([at.to_string()], |r| r.get(0)).optional()?.flatten());
        }
    }
    for p in &m.supersedes {
        let column = successor_of.query_row([p.to_string()], |r| r.get(0)).optional()?;
        checks::predecessor(m, p, column, found);
    }
    Ok(())
}
