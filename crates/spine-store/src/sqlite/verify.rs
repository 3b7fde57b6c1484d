//! The supersession checks of `spine-review verify` on one SQLite row, against the same
//! snapshot (a row's columns and vector are checked by the engine-neutral `crate::checks`).

use std::collections::HashSet;

use rusqlite::{Connection, OptionalExtension};
use spine_core::{Category, Memory, RecordId};

use super::decode;
use crate::checks::MAX_CHAIN;
use crate::{Check, Result};

/// The supersession checks of one decoded record, against the same snapshot.
pub(super) fn check_links(
    conn: &Connection,
    m: &Memory,
    found: &mut impl FnMut(Check, String),
) -> Result<()> {
    let mut successor_of =
        conn.prepare_cached("SELECT superseded_by FROM memories WHERE id = ?1")?;
    let mut body_of = conn.prepare_cached("SELECT body FROM memories WHERE id = ?1")?;
    if let Some(succ) = m.superseded_by {
        if m.category == Category::Rule {
            found(Check::RuleSuperseded, format!("rule superseded by {succ}"));
        }
        let body: Option<String> =
            body_of.query_row([succ.to_string()], |r| r.get(0)).optional()?;
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
                    let next: Option<Option<String>> =
                        successor_of.query_row([at.to_string()], |r| r.get(0)).optional()?;
                    match next.flatten().and_then(|s| RecordId::parse(&s)) {
                        Some(n) => at = n,
                        None => break,
                    }
                }
            }
        }
    }
    for p in &m.supersedes {
        let row: Option<Option<String>> =
            successor_of.query_row([p.to_string()], |r| r.get(0)).optional()?;
        match row {
            // Deleted or purged since: the head stays valid.
            None => {}
            Some(None) => found(
                Check::PredecessorNotSuperseded,
                format!("supersedes {p}, which is not superseded (a second live head)"),
            ),
            Some(Some(other)) if other != m.id.to_string() => found(
                Check::PredecessorOtherSuccessor,
                format!("supersedes {p}, which names {other} as its successor"),
            ),
            Some(Some(_)) => {}
        }
    }
    Ok(())
}
