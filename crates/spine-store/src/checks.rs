//! The invariant checks of `spine-review verify`, the same on every engine: a row's indexed
//! columns against its payload, its vector against the expectation, and its supersession
//! links. Each engine reads a page of rows and, for the links, the rows they name, in one
//! snapshot; what is wrong is decided here, so a row is reported alike on each.

use std::collections::HashSet;

use spine_core::{Category, Memory, RecordId};

use crate::codec::{blob_to_vec, decode, secs};
use crate::fields::Fields;
use crate::{Check, Result, VectorExpectation, VerifyPage, Violation};

/// Longest supersession chain followed before a chain is called a cycle.
const MAX_CHAIN: usize = 100_000;

/// The indexed columns of a row, as stored.
struct Columns {
    id: String,
    short_id: String,
    owner: Option<String>,
    visibility: String,
    scope: String,
    category: String,
    created_at: i64,
    not_before: Option<i64>,
    not_after: Option<i64>,
    archived_at: Option<i64>,
    superseded_by: Option<String>,
}

/// The columns PostgreSQL keeps beside the payload that SQLite does not (SQLite derives
/// the kind from the payload and keeps tags in a table of their own).
pub(crate) struct KindAndTags {
    pub(crate) kind: Option<String>,
    pub(crate) tags: Vec<String>,
}

impl Columns {
    /// Columns 1 to 11 of a verify row (see [`VerifyPage::check`]).
    fn read(r: &impl Fields) -> Result<Self> {
        Ok(Columns {
            id: r.text(1)?,
            short_id: r.text(2)?,
            owner: r.text_opt(3)?,
            visibility: r.text(4)?,
            scope: r.text(5)?,
            category: r.text(6)?,
            created_at: r.int(7)?,
            not_before: r.int_opt(8)?,
            not_after: r.int_opt(9)?,
            archived_at: r.int_opt(10)?,
            superseded_by: r.text_opt(11)?,
        })
    }

    /// The columns that do not hold what the engine's row writer would write for `m`.
    fn mismatches(&self, m: &Memory, also: Option<&KindAndTags>) -> Vec<&'static str> {
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
        if let Some(also) = also {
            check("kind", also.kind.as_deref() == m.kind.map(|k| k.as_str()));
            check("tags", tag_set(&also.tags) == tag_set(&m.tags));
        }
        out
    }
}

/// Tags as a set: each once, order irrelevant.
fn tag_set(tags: &[String]) -> Vec<&str> {
    let mut out: Vec<&str> = tags.iter().map(String::as_str).collect();
    out.sort_unstable();
    out.dedup();
    out
}

/// Where the violations found on one row go, each naming the row.
pub(crate) struct Findings<'a> {
    row: Columns,
    out: &'a mut Vec<Violation>,
}

impl Findings<'_> {
    fn found(&mut self, check: Check, detail: String) {
        self.out.push(Violation {
            id: self.row.id.clone(),
            short_id: self.row.short_id.clone(),
            scope: self.row.scope.clone(),
            check,
            detail,
        });
    }
}

impl VerifyPage {
    /// Counts one row of a page and runs the checks that need no other row. Columns:
    /// rowid, id, short_id, owner, visibility, scope, category, created_at, not_before,
    /// not_after, archived_at, superseded_by, body, model, dims, vec (vec NULL: no vector);
    /// `also`, the engine's further columns. Returns the record, when its payload decodes,
    /// for the link checks ([`successor`], [`ChainWalk`], [`predecessor`]).
    pub(crate) fn check(
        &mut self,
        r: &impl Fields,
        also: Option<KindAndTags>,
        expect: &VectorExpectation,
    ) -> Result<Option<(Memory, Findings<'_>)>> {
        self.checked += 1;
        self.last_rowid = Some(r.int(0)?);
        let vector = match r.vector_bytes(15)? {
            Some(blob) => Some((r.text_opt(13)?.unwrap_or_default(), r.int_opt(14)?, blob)),
            None => None,
        };
        let mut found = Findings { row: Columns::read(r)?, out: &mut self.violations };
        check_vector(vector.as_ref(), expect, &mut found);
        let record = match decode(&r.text(12)?) {
            Ok(m) => m,
            Err(e) => {
                found.found(Check::PayloadCorrupt, e.to_string());
                return Ok(None);
            }
        };
        let mismatched = found.row.mismatches(&record, also.as_ref());
        if !mismatched.is_empty() {
            found.found(
                Check::ColumnsMismatch,
                format!("columns differ from the payload: {}", mismatched.join(", ")),
            );
        }
        Ok(Some((record, found)))
    }
}

/// A stored vector: its embedder stamp, its stated length and its bytes.
fn check_vector(
    vector: Option<&(String, Option<i64>, Vec<u8>)>,
    expect: &VectorExpectation,
    found: &mut Findings<'_>,
) {
    let Some((model, dims, blob)) = vector else {
        found.found(Check::MissingVector, "no vector: search can never return it".into());
        return;
    };
    let dims = dims.unwrap_or(0);
    if blob.len() % 4 != 0 || blob.len() / 4 != dims as usize {
        found.found(
            Check::VectorCorrupt,
            format!("{} bytes stored for a vector of {dims} dimensions", blob.len()),
        );
        return;
    }
    let v = blob_to_vec(blob);
    if v.iter().any(|x| !x.is_finite()) {
        found.found(Check::VectorCorrupt, "the vector holds NaN or infinite values".into());
    } else if v.iter().all(|x| *x == 0.0) {
        found.found(Check::VectorCorrupt, "the vector is all zeros".into());
    }
    match &expect.model {
        Some(want) if want != model => {
            let whose = if expect.configured { "the configured embedder" } else { "most vectors" };
            found.found(
                Check::EmbedderStamp,
                format!("made by {model}; {whose} is {want} (run `spine reindex`)"),
            );
        }
        _ => {
            if let Some(want) = expect.dims.filter(|d| *d != v.len()) {
                found.found(
                    Check::VectorDimension,
                    format!("{} dimensions; {model} vectors have {want}", v.len()),
                );
            }
        }
    }
}

/// The checks of `m`'s successor `succ`, whose stored payload is `body` (`None`: no such
/// record). Returns the walk along the chain to its head, to run when the successor exists.
pub(crate) fn successor(
    m: &Memory,
    succ: RecordId,
    body: Option<&str>,
    found: &mut Findings<'_>,
) -> ChainWalk {
    if m.category == Category::Rule {
        found.found(Check::RuleSuperseded, format!("rule superseded by {succ}"));
    }
    let Some(body) = body else {
        found
            .found(Check::DanglingSuccessor, format!("superseded by {succ}, which does not exist"));
        return ChainWalk { seen: HashSet::new(), at: None, steps: 0 };
    };
    // A successor whose payload is corrupt is reported on its own.
    if let Ok(s) = decode(body)
        && !s.supersedes.contains(&m.id)
    {
        found.found(
            Check::BacklinkMissing,
            format!("superseded by {succ}, whose supersedes does not list it"),
        );
    }
    ChainWalk { seen: HashSet::from([m.id]), at: Some(succ), steps: 0 }
}

/// Following `superseded_by` forward from a record to its chain's head. The engine reads,
/// for each record [`ChainWalk::next`] names, its `superseded_by` column and hands it to
/// [`ChainWalk::step`].
pub(crate) struct ChainWalk {
    seen: HashSet<RecordId>,
    at: Option<RecordId>,
    steps: usize,
}

impl ChainWalk {
    /// The record whose successor to read next; `None` when the walk is over (a head
    /// reached, a cycle found and reported, or [`MAX_CHAIN`] records followed).
    pub(crate) fn next(&mut self, found: &mut Findings<'_>) -> Option<RecordId> {
        let at = self.at.take()?;
        if self.steps == MAX_CHAIN {
            return None;
        }
        self.steps += 1;
        if !self.seen.insert(at) {
            found.found(
                Check::ChainCycle,
                format!(
                    "following superseded_by from here returns to {at}: the chain has no live head"
                ),
            );
            return None;
        }
        Some(at)
    }

    /// The `superseded_by` column of the record [`ChainWalk::next`] named (`None`: no row,
    /// or no successor).
    pub(crate) fn step(&mut self, successor: Option<String>) {
        self.at = successor.and_then(|s| RecordId::parse(&s));
    }
}

/// The check of `m`'s predecessor `p`, whose `superseded_by` column is `column` (`None`:
/// the record was deleted or purged since, and the head stays valid).
pub(crate) fn predecessor(
    m: &Memory,
    p: &RecordId,
    column: Option<Option<String>>,
    found: &mut Findings<'_>,
) {
    match column {
        None => {}
        Some(None) => found.found(
            Check::PredecessorNotSuperseded,
            format!("supersedes {p}, which is not superseded (a second live head)"),
        ),
        Some(Some(other)) if other != m.id.to_string() => found.found(
            Check::PredecessorOtherSuccessor,
            format!("supersedes {p}, which names {other} as its successor"),
        ),
        Some(Some(_)) => {}
    }
}
