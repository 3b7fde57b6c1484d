//! The invariant checks of `spine-review verify` on one stored row: its indexed columns
//! against its payload, its vector against the expectation, its supersession links against
//! the same snapshot. [`Columns`] and [`check_vector`] are backend-neutral: the PostgreSQL
//! backend's `verify_page` applies them too, so both report a row alike.

use std::collections::HashSet;

use rusqlite::{Connection, OptionalExtension};
use spine_core::{Category, EpochSeconds, Memory, RecordId};

use super::{blob_to_vec, decode};
use crate::{Check, Result, VectorExpectation};

/// Longest supersession chain followed before a chain is called a cycle.
pub(crate) const MAX_CHAIN: usize = 100_000;

/// The indexed columns of a row, as stored.
pub(crate) struct Columns {
    pub(crate) id: String,
    pub(crate) short_id: String,
    pub(crate) owner: Option<String>,
    pub(crate) visibility: String,
    pub(crate) scope: String,
    pub(crate) category: String,
    pub(crate) created_at: i64,
    pub(crate) not_before: Option<i64>,
    pub(crate) not_after: Option<i64>,
    pub(crate) archived_at: Option<i64>,
    pub(crate) superseded_by: Option<String>,
}

impl Columns {
    /// The columns that do not hold what `write_row` would write for `m`.
    pub(crate) fn mismatches(&self, m: &Memory) -> Vec<&'static str> {
        let secs = |v: Option<EpochSeconds>| v.map(EpochSeconds::as_secs);
        let mut out = Vec::new();
        let mut check = |name, same: bool| {
            if !same {
                out.push(name);
            }
        };
        check("id", self.id == m.id.to_string());
        check("short_id", self.short_id == m.short_id.as_str());
        check("owner", self.owner == m.owner);
        check("visibility", self.visibility == m.visibility.as_str());
        check("scope", self.scope == m.scope.as_str());
        check("category", self.category == m.category.as_str());
        check("created_at", self.created_at == m.created_at.as_micros());
        check("not_before", self.not_before == secs(m.not_before));
        check("not_after", self.not_after == secs(m.not_after));
        check("archived_at", self.archived_at == secs(m.archived_at));
        check("superseded_by", self.superseded_by == m.superseded_by.map(|s| s.to_string()));
        out
    }
}

pub(crate) fn check_vector(
    vector: Option<&(String, i64, Vec<u8>)>,
    expect: &VectorExpectation,
    found: &mut impl FnMut(Check, String),
) {
    let Some((model, dims, blob)) = vector else {
        found(Check::MissingVector, "no vector: search can never return it".into());
        return;
    };
    if blob.len() % 4 != 0 || blob.len() / 4 != *dims as usize {
        found(
            Check::VectorCorrupt,
            format!("{} bytes stored for a vector of {dims} dimensions", blob.len()),
        );
        return;
    }
    let v = blob_to_vec(blob);
    if v.iter().any(|x| !x.is_finite()) {
        found(Check::VectorCorrupt, "the vector holds NaN or infinite values".into());
    } else if v.iter().all(|x| *x == 0.0) {
        found(Check::VectorCorrupt, "the vector is all zeros".into());
    }
    match &expect.model {
        Some(want) if want != model => {
            let whose = if expect.configured { "the configured embedder" } else { "most vectors" };
            found(
                Check::EmbedderStamp,
                format!("made by {model}; {whose} is {want} (run `spine reindex`)"),
            );
        }
        _ => {
            if let Some(want) = expect.dims.filter(|d| *d != v.len()) {
                found(
                    Check::VectorDimension,
                    format!("{} dimensions; {model} vectors have {want}", v.len()),
                );
            }
        }
    }
}

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
