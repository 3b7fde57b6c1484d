//! Near-duplicate warnings on write: store_memory, schedule_memory and supersede_memory
//! report the live records of the same scope that say nearly the same as the record just
//! written, so the agent can supersede instead of piling up copies. The write itself is
//! never refused (a peer that refuses near-duplicates silently drops real, distinct notes
//! that happen to be phrased alike).

use spine_core::{Caller, Error, Memory, RecordId};
use spine_store::{Access, Filter, NearestQuery, ScopeFilter};

use crate::Service;
use crate::views::Similar;

/// Near-duplicates reported at most.
pub const MAX_SIMILAR: usize = 3;
/// The default cosine at or above which a live record counts as a near-duplicate.
pub const DEFAULT_SIMILAR_THRESHOLD: f32 = 0.92;
/// Characters of a near-duplicate's text shown when it has no summary.
const SHOWN_CHARS: usize = 200;

impl Service {
    /// The live records of `m`'s scope that `caller` can read, other than `exclude`, at
    /// cosine `similar_threshold` or above to `vector` (the embedding of `m`'s content),
    /// most similar first; and the note that goes with them. `(None, None)` when there are
    /// none or the check is off.
    pub(crate) fn similar(
        &self,
        caller: &Caller,
        m: &Memory,
        vector: &[f32],
        exclude: &[RecordId],
    ) -> Result<(Option<Vec<Similar>>, Option<String>), Error> {
        let Some(threshold) = self.similar_threshold else { return Ok((None, None)) };
        let access = Access::read(caller);
        let filter = Filter::new(ScopeFilter::One(m.scope.clone()));
        let hits = self.retrieve(&NearestQuery {
            access: &access,
            filter: &filter,
            model: self.embedder.model_id(),
            vector,
            now: self.clock.now(),
            any: 0,
            active: MAX_SIMILAR + exclude.len(),
            exclude: None,
        })?;
        let found: Vec<Similar> = hits
            .hits
            .into_iter()
            .filter(|(score, r)| *score >= threshold && r.id != m.id && !exclude.contains(&r.id))
            .take(MAX_SIMILAR)
            .map(|(score, r)| Similar {
                id: r.id,
                short_id: r.short_id.clone(),
                score,
                summary: match r.summary.is_empty() {
                    false => r.summary.clone(),
                    true => shown(&r.content),
                },
            })
            .collect();
        if found.is_empty() {
            return Ok((None, None));
        }
        let ids: Vec<&str> = found.iter().map(|s| s.short_id.as_str()).collect();
        let note = format!(
            "Stored. {} live record{} in {} say{} nearly the same ({}). If this one corrects or \
             replaces {}, call supersede_memory with it as the target so recall shows only the \
             current version; if they are distinct facts, keep both.",
            found.len(),
            if found.len() == 1 { "" } else { "s" },
            m.scope,
            if found.len() == 1 { "s" } else { "" },
            ids.join(", "),
            if found.len() == 1 { "it" } else { "one of them" },
        );
        Ok((Some(found), Some(note)))
    }
}

impl Service {
    /// The contents of `caller`'s own records in `scope` that carry `tag`, in any state
    /// (archived and superseded included): what an importer checks so that running it again
    /// stores nothing twice, even what was archived since.
    pub fn own_contents_tagged(
        &self,
        caller: &Caller,
        scope: &spine_core::Scope,
        tag: &str,
    ) -> Result<std::collections::HashSet<String>, Error> {
        use spine_store::{Cursor, Gate, Page, Selection};
        let access = Access::owned(caller);
        let mut filter = Filter::new(ScopeFilter::One(scope.clone()));
        filter.tags_all = vec![tag.to_owned()];
        let mut out = std::collections::HashSet::new();
        let mut cursor: Option<Cursor> = None;
        loop {
            let page = self
                .store
                .list(
                    Selection { access: &access, filter: &filter, gate: Gate::Off },
                    Page::recent(cursor, 0, 500),
                )
                .map_err(crate::store_error)?;
            let Some(last) = page.last() else { break };
            cursor = Some(Cursor { created_at: last.created_at, id: last.id });
            let full = page.len() < 500;
            out.extend(page.into_iter().map(|m| m.content));
            if full {
                break;
            }
        }
        Ok(out)
    }
}

/// `text` on one line, at most [`SHOWN_CHARS`] characters.
fn shown(text: &str) -> String {
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    match flat.char_indices().nth(SHOWN_CHARS) {
        Some((cut, _)) => format!("{}…", &flat[..cut]),
        None => flat,
    }
}
