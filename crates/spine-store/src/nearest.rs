//! How both engines answer [`crate::Store::nearest`] from the candidates they scored
//! exactly: best first (score descending, then id descending), the union of the `any`
//! nearest of every state and the `active` nearest active ones, each active one with its
//! record (read in the engine's snapshot).

use spine_core::{RecordId, StateMarkers};

use crate::{Body, NearestQuery, Neighbour, Result};

/// A candidate with its exact cosine to the query; `record` is what the engine needs to
/// read its record (a rowid, or the payload it already holds).
pub(crate) struct Scored<R> {
    pub(crate) score: f32,
    pub(crate) id: RecordId,
    pub(crate) markers: StateMarkers,
    pub(crate) record: R,
}

/// The neighbours `q` asks for among `scored` (each id once), reading the record of each
/// active one through `read`.
pub(crate) fn neighbours<R>(
    q: &NearestQuery<'_>,
    mut scored: Vec<Scored<R>>,
    mut read: impl FnMut(R) -> Result<Body>,
) -> Result<Vec<Neighbour>> {
    scored.sort_by(|a, b| b.score.total_cmp(&a.score).then_with(|| b.id.cmp(&a.id)));
    let (mut seen, mut seen_active) = (0, 0);
    let mut out = Vec::new();
    for s in scored {
        let states = s.markers.derive(q.now);
        let active = states.is_empty();
        let wanted = seen < q.any || (active && seen_active < q.active);
        seen += 1;
        seen_active += usize::from(active);
        if wanted {
            let record = if active { Some(read(s.record)?) } else { None };
            out.push(Neighbour { id: s.id, score: s.score, states, record });
        }
    }
    Ok(out)
}
