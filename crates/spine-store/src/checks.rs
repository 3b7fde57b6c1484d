//! The invariant checks of `spine-review verify` on one stored row that every engine shares:
//! its indexed columns against its payload, its vector against the expectation. Both
//! engines' verify apply them, so a row is reported alike on each.

use spine_core::{EpochSeconds, Memory};

use crate::codec::blob_to_vec;
use crate::{Check, VectorExpectation};

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
