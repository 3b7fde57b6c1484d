//! The in-memory search index: what vector search needs of every record, laid out in
//! columns, and the vectors quantised twice (1-bit and int8) in contiguous arrays.
//!
//! SQLite stays the single source of truth; this is a derived structure, rebuilt from it at
//! any time and kept current through the `changes` log (see `sqlite/sync.rs`).
//!
//! A search runs in three stages, each exact about *which* records may be returned and
//! approximate only about their order until the last:
//!
//! 1. **Filter + 1-bit scan.** Every slot is checked against the hard pre-filters (owner
//!    predicate, scope, tags AND, categories OR / NOT, created window, kind, vector model);
//!    each passing record gets the Hamming distance between its sign code and the query's
//!    (48 bytes per 384-dim record, so 1M records scan in a few milliseconds on two cores).
//!    Signs are taken after subtracting the space's mean vector: sentence embeddings share
//!    a common direction, and centring makes every bit informative.
//! 2. **int8 re-scoring** of the best [`shortlist_size`] by Hamming distance (of any state
//!    and, separately, of the active ones): a SIMD int8 dot product with per-vector scales.
//! 3. **Exact f32 re-scoring** of the best few by int8 (done by the caller, which reads the
//!    stored f32 vectors from SQLite): the reported score is the exact cosine.
//!
//! When few records pass the filters, stage 2 sees all of them and the result is what an
//! exact scan returns except where int8 error reorders records within ~1e-3 of the cut.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use rayon::prelude::*;
use simsimd::SpatialSimilarity;
use spine_core::{RecordId, StateMarkers};

use crate::predicate::{self, Cond};
use crate::{Access, Filter, NearestQuery};

mod space;

use space::{Space, hamming, quantise};

/// "No value" in an interned column.
const NONE: u32 = u32::MAX;

/// The use count of an interned string that is never released: an embedder's id, which
/// keys its vector space in `Index::spaces` (a released id is given to the next new
/// string, and a space must not change its name).
const PINNED: u32 = u32::MAX;

/// Slots per parallel work item; an index of at most one chunk is searched on the calling
/// thread.
const CHUNK: usize = 16 * 1024;

/// Stage 1's histograms of Hamming distances (of every passing record, of the active ones)
/// and how many records passed.
type Histograms = (Vec<usize>, Vec<usize>, usize);

/// Stage 1's per-slot word: the Hamming distance, with [`ACTIVE`] set for records the gate
/// lets through; [`FILTERED`] for slots that did not pass the filters.
const ACTIVE: u16 = 1 << 15;
const FILTERED: u16 = u16::MAX;

/// Widest vector the index takes: its Hamming distances must fit beside [`ACTIVE`].
const MAX_DIMS: usize = (ACTIVE - 1) as usize;

/// Records re-scored by int8 after the 1-bit scan, for `need` results out of `n` that
/// passed the filters: generous for small needs, and at least 2% of the candidates so large
/// filtered sets keep their recall (measured against an exact scan on real MiniLM vectors
/// at 100k and 1M records; docs/performance.md, "Search at scale").
pub(crate) fn shortlist_size(need: usize, n: usize) -> usize {
    (need * 40).max(2_000).max(n / 50)
}

/// Records re-scored exactly (f32, from SQLite) for `need` results.
pub(crate) fn rescore_size(need: usize) -> usize {
    (need * 2).max(need + 32)
}

/// One record as read from SQLite.
#[derive(Debug, Clone)]
pub(crate) struct Row {
    pub rowid: i64,
    pub id: RecordId,
    pub owner: Option<String>,
    pub shared: bool,
    pub scope: String,
    pub category: String,
    pub kind: Option<String>,
    pub created_at: i64,
    pub markers: StateMarkers,
    pub tags: Vec<String>,
    /// (embedder id, vector), when the record has one.
    pub vector: Option<(String, Vec<f32>)>,
}

/// A record the index proposes for exact re-scoring.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Proposal {
    pub rowid: i64,
    pub id: RecordId,
    pub markers: StateMarkers,
}

/// The filter with its strings resolved to interned ids; `None` when nothing can match.
#[derive(Default)]
struct Compiled {
    /// `Cond::Readable`: the owner's id (`NONE` when the owner has no record) and whether
    /// shared records pass; `None` for the operator.
    readable: Option<(u32, bool)>,
    scope: Option<u32>,
    tags: Vec<u32>,
    categories_any: Option<Vec<u32>>,
    categories_none: Vec<u32>,
    created_after: Option<i64>,
    created_before: Option<i64>,
    windowed_only: bool,
    exclude_archived_superseded: bool,
    kind: Option<u32>,
    /// The embedder whose vector a record must have; `None`: any record, with or without.
    model: Option<u32>,
    exclude: Option<RecordId>,
}

/// The index. Slots are reused after deletions; `live[slot]` says whether one is in use.
#[derive(Default)]
pub(crate) struct Index {
    /// The change-log sequence number this index reflects; `None` until first loaded.
    pub synced: Option<i64>,
    /// Set during a full load, which re-centres once at the end instead of as it grows.
    pub bulk_loading: bool,
    strings: HashMap<Box<str>, u32>,
    /// Interned strings by id (empty: released).
    names: Vec<Box<str>>,
    /// How many column values hold each interned string; at none the string is released
    /// and its id reused. Before, every owner, scope and tag ever written stayed interned:
    /// an hour of updates with a fresh tag each interned ~70,000 strings no record held,
    /// and each scope listing scanned an array as long as all of them (docs/reliability.md,
    /// "Soak").
    uses: Vec<u32>,
    /// Released ids, for the next new strings.
    free_names: Vec<u32>,
    slot_of: HashMap<i64, u32>,
    free: Vec<u32>,
    live: Vec<bool>,
    rowid: Vec<i64>,
    id: Vec<RecordId>,
    owner: Vec<u32>,
    shared: Vec<bool>,
    scope: Vec<u32>,
    category: Vec<u32>,
    kind: Vec<u32>,
    created_at: Vec<i64>,
    markers: Vec<StateMarkers>,
    tags: Vec<Box<[u32]>>,
    model: Vec<u32>,
    spaces: HashMap<u32, Space>,
    /// `scopes` answers by (access, filter), dropped on every change: cross-spine searches
    /// ask for the same coverage again and again between writes.
    /// Behind its own lock: searches read the index side by side.
    scopes_cache: Mutex<HashMap<String, Vec<String>>>,
}

impl Index {
    /// Records in the index.
    pub fn len(&self) -> usize {
        self.slot_of.len()
    }

    /// The id of `s`, counted as one more use of it.
    fn intern(&mut self, s: &str) -> u32 {
        if let Some(&id) = self.strings.get(s) {
            let uses = &mut self.uses[id as usize];
            if *uses != PINNED {
                *uses += 1;
            }
            return id;
        }
        let id = match self.free_names.pop() {
            Some(id) => {
                self.names[id as usize] = s.into();
                self.uses[id as usize] = 1;
                id
            }
            None => {
                let id = u32::try_from(self.names.len())
                    .ok()
                    .filter(|&id| id != NONE)
                    .expect("fewer than 2^32 - 1 distinct strings");
                self.names.push(s.into());
                self.uses.push(1);
                id
            }
        };
        self.strings.insert(s.into(), id);
        id
    }

    /// The id of `s`, never released.
    fn pin(&mut self, s: &str) -> u32 {
        let id = self.intern(s);
        self.uses[id as usize] = PINNED;
        id
    }

    /// One use fewer of the interned string `id` (`NONE`: no value, nothing to release).
    fn release(&mut self, id: u32) {
        if id == NONE || self.uses[id as usize] == PINNED {
            return;
        }
        let uses = &mut self.uses[id as usize];
        *uses -= 1;
        if *uses == 0 {
            let name = std::mem::take(&mut self.names[id as usize]);
            self.strings.remove(&name);
            self.free_names.push(id);
        }
    }

    /// Releases the strings the record in `slot` holds.
    fn release_slot(&mut self, slot: usize) {
        let held = [self.owner[slot], self.scope[slot], self.category[slot], self.kind[slot]];
        for id in held.into_iter().chain(std::mem::take(&mut self.tags[slot])) {
            self.release(id);
        }
        (self.owner[slot], self.scope[slot], self.category[slot], self.kind[slot]) =
            (NONE, NONE, NONE, NONE);
    }

    fn lookup(&self, s: &str) -> Option<u32> {
        self.strings.get(s).copied()
    }

    /// Inserts or replaces the record at `row.rowid`.
    pub fn upsert(&mut self, row: Row) {
        self.scopes_cache.get_mut().unwrap_or_else(PoisonError::into_inner).clear();
        let slot = match self.slot_of.get(&row.rowid) {
            Some(&s) => s as usize,
            None => {
                let s = match self.free.pop() {
                    Some(s) => s as usize,
                    None => {
                        let s = self.live.len();
                        self.live.push(false);
                        self.rowid.push(0);
                        self.id.push(row.id);
                        self.owner.push(NONE);
                        self.shared.push(false);
                        self.scope.push(NONE);
                        self.category.push(NONE);
                        self.kind.push(NONE);
                        self.created_at.push(0);
                        self.markers.push(row.markers);
                        self.tags.push(Box::default());
                        self.model.push(NONE);
                        s
                    }
                };
                self.slot_of.insert(row.rowid, s as u32);
                s
            }
        };
        // The new values are interned before the old ones are released, so a string the
        // record keeps is never released and interned again under another id.
        let owner = row.owner.as_deref().map_or(NONE, |o| self.intern(o));
        let scope = self.intern(&row.scope);
        let category = self.intern(&row.category);
        let kind = row.kind.as_deref().map_or(NONE, |k| self.intern(k));
        let mut tags: Vec<u32> = Vec::with_capacity(row.tags.len());
        for t in &row.tags {
            let id = self.intern(t);
            match tags.contains(&id) {
                true => self.release(id),
                false => tags.push(id),
            }
        }
        tags.sort_unstable();
        if self.live[slot] {
            self.release_slot(slot);
        }
        self.live[slot] = true;
        self.rowid[slot] = row.rowid;
        self.id[slot] = row.id;
        (self.owner[slot], self.scope[slot], self.category[slot], self.kind[slot]) =
            (owner, scope, category, kind);
        self.shared[slot] = row.shared;
        self.created_at[slot] = row.created_at;
        self.markers[slot] = row.markers;
        self.tags[slot] = tags.into_boxed_slice();
        self.model[slot] = NONE;
        if let Some((model, v)) = row.vector {
            let model = self.pin(&model);
            let slots = self.live.len();
            let space = self.spaces.entry(model).or_insert_with(|| Space::new(v.len()));
            if space.dims == v.len() && v.len() <= MAX_DIMS {
                space.grow(slots);
                space.set(slot, &v);
                self.model[slot] = model;
                if !self.bulk_loading
                    && space.encoded >= 1000
                    && space.encoded >= 2 * space.centred_at.max(1)
                {
                    self.recentre(model);
                }
            }
        }
    }

    /// Removes the record at `rowid`, if indexed.
    pub fn remove(&mut self, rowid: i64) {
        self.scopes_cache.get_mut().unwrap_or_else(PoisonError::into_inner).clear();
        if let Some(slot) = self.slot_of.remove(&rowid) {
            self.release_slot(slot as usize);
            self.live[slot as usize] = false;
            self.model[slot as usize] = NONE;
            self.free.push(slot);
        }
    }

    /// Re-centres the sign codes of `model` on the mean of its current vectors.
    pub fn recentre(&mut self, model: u32) {
        let slots: Vec<usize> =
            (0..self.live.len()).filter(|&s| self.live[s] && self.model[s] == model).collect();
        if let Some(space) = self.spaces.get_mut(&model) {
            space.recentre(&slots);
            space.encoded = slots.len();
        }
    }

    /// Re-centres every space (after a bulk load).
    pub fn recentre_all(&mut self) {
        let models: Vec<u32> = self.spaces.keys().copied().collect();
        for m in models {
            self.recentre(m);
        }
    }

    /// The read predicate (`crate::predicate`) over interned ids; `None` when nothing can
    /// pass (a value no record holds).
    fn compile(
        &self,
        access: &Access,
        f: &Filter,
        model: Option<&str>,
        exclude: Option<RecordId>,
    ) -> Option<Compiled> {
        let model = match model {
            Some(m) => Some(self.lookup(m)?),
            None => None,
        };
        let mut c = Compiled { model, exclude, ..Compiled::default() };
        for cond in predicate::conditions(access, f) {
            match cond {
                Cond::Readable { owner, shared } => {
                    let owner = self.lookup(&owner).unwrap_or(NONE);
                    if owner == NONE && !shared {
                        return None;
                    }
                    c.readable = Some((owner, shared));
                }
                Cond::Scope(scope) => c.scope = Some(self.lookup(&scope)?),
                Cond::Tags(tags) => {
                    c.tags = tags.iter().map(|t| self.lookup(t)).collect::<Option<_>>()?
                }
                Cond::CategoryIn(any) => {
                    let known: Vec<u32> =
                        any.iter().filter_map(|c| self.lookup(c.as_str())).collect();
                    if known.is_empty() {
                        return None;
                    }
                    c.categories_any = Some(known);
                }
                Cond::CategoryNotIn(none) => {
                    c.categories_none =
                        none.iter().filter_map(|c| self.lookup(c.as_str())).collect()
                }
                Cond::CreatedFrom(t) => c.created_after = Some(t),
                Cond::CreatedBefore(t) => c.created_before = Some(t),
                Cond::Windowed => c.windowed_only = true,
                Cond::Current => c.exclude_archived_superseded = true,
                Cond::Kind(k) => c.kind = Some(self.lookup(k.as_str())?),
                // The gate is applied per slot by the caller (`propose`'s `is_active`); a
                // filter never selects by state otherwise (only a purge does, in SQL).
                Cond::State(_) | Cond::AnyState(_) => {}
            }
        }
        Some(c)
    }

    /// Whether `slot` passes the compiled predicate: the SQL renderings' conditions over
    /// interned ids (the parity test holds them together).
    #[inline]
    fn passes(&self, c: &Compiled, s: usize) -> bool {
        if !self.live[s] || c.model.is_some_and(|m| m != self.model[s]) {
            return false;
        }
        let owner = self.owner[s];
        if let Some((reader, shared)) = c.readable
            && (owner == NONE || !(owner == reader || (shared && self.shared[s])))
        {
            return false;
        }
        if c.scope.is_some_and(|sc| sc != self.scope[s]) {
            return false;
        }
        let category = self.category[s];
        if c.categories_any.as_ref().is_some_and(|any| !any.contains(&category))
            || c.categories_none.contains(&category)
        {
            return false;
        }
        let created = self.created_at[s];
        if c.created_after.is_some_and(|t| created < t)
            || c.created_before.is_some_and(|t| created >= t)
        {
            return false;
        }
        let m = &self.markers[s];
        if c.windowed_only && m.not_before.is_none() && m.not_after.is_none() {
            return false;
        }
        if c.exclude_archived_superseded && (m.archived || m.superseded) {
            return false;
        }
        if c.kind.is_some_and(|k| k != self.kind[s]) {
            return false;
        }
        if !c.tags.iter().all(|t| self.tags[s].binary_search(t).is_ok()) {
            return false;
        }
        c.exclude.is_none_or(|x| x != self.id[s])
    }

    /// The distinct scopes of the records `access` may read that match `filter` (any state,
    /// with or without a vector), sorted.
    pub fn scopes(&self, access: &Access, filter: &Filter) -> Vec<String> {
        let key = format!("{access:?}|{filter:?}");
        let hit =
            self.scopes_cache.lock().unwrap_or_else(PoisonError::into_inner).get(&key).cloned();
        if let Some(hit) = hit {
            return hit;
        }
        let out = self.scan_scopes(access, filter);
        let mut cache = self.scopes_cache.lock().unwrap_or_else(PoisonError::into_inner);
        if cache.len() >= 64 {
            cache.clear();
        }
        cache.insert(key, out.clone());
        out
    }

    fn scan_scopes(&self, access: &Access, filter: &Filter) -> Vec<String> {
        let Some(c) = self.compile(access, filter, None, None) else {
            return vec![];
        };
        let slots = self.live.len();
        let seen: Vec<bool> = (0..slots.div_ceil(CHUNK))
            .into_par_iter()
            .map(|chunk| {
                let mut seen = vec![false; self.names.len()];
                for s in chunk * CHUNK..((chunk + 1) * CHUNK).min(slots) {
                    if self.passes(&c, s) {
                        seen[self.scope[s] as usize] = true;
                    }
                }
                seen
            })
            .reduce(
                || vec![false; self.names.len()],
                |mut a, b| {
                    a.iter_mut().zip(b).for_each(|(x, y)| *x |= y);
                    a
                },
            );
        let mut out: Vec<String> = seen
            .iter()
            .enumerate()
            .filter(|(_, s)| **s)
            .map(|(i, _)| self.names[i].to_string())
            .collect();
        out.sort_unstable();
        out
    }

    /// The records to re-score exactly for `p`: every record that can be among the
    /// `p.any` nearest of any state or the `p.active` nearest active ones, by the quantised
    /// stages; at most about `rescore_size` of each.
    pub fn propose(&self, p: &NearestQuery<'_>) -> Vec<Proposal> {
        // An index of one chunk is searched on the calling thread: handing a search of a few
        // thousand records to the rayon pool and back cost as much as the scan under load.
        self.propose_on(p, self.live.len() > CHUNK)
    }

    /// [`Self::propose`], its stages spread over the rayon pool when `parallel`.
    fn propose_on(&self, p: &NearestQuery<'_>, parallel: bool) -> Vec<Proposal> {
        let Some(c) = self.compile(p.access, p.filter, Some(p.model), p.exclude) else {
            return vec![];
        };
        let Some(space) = c.model.and_then(|m| self.spaces.get(&m)) else {
            return vec![];
        };
        if p.vector.len() != space.dims || (p.any == 0 && p.active == 0) {
            return vec![];
        }
        let now_s = p.now.to_epoch_seconds();
        let is_active = |m: &StateMarkers| {
            !m.archived
                && !m.superseded
                && m.not_after.is_none_or(|na| now_s < na)
                && m.not_before.is_none_or(|nb| now_s >= nb)
        };
        let mut qsigns = vec![0u64; space.words];
        space.signs_into(p.vector, &mut qsigns);

        // Stage 1: filter and 1-bit distances, one u16 per slot (bit 15: active;
        // FILTERED: did not pass), with per-chunk histograms of the distances.
        let slots = self.live.len();
        let bins = space.dims + 1;
        let mut dist = vec![FILTERED; slots];
        let stage1 = |(chunk, out): (usize, &mut [u16])| {
            let (mut all, mut act, mut passed) = (vec![0usize; bins], vec![0usize; bins], 0);
            for (j, d) in out.iter_mut().enumerate() {
                let s = chunk * CHUNK + j;
                if self.passes(&c, s) {
                    let h = hamming(space.sign_code(s), &qsigns) as usize;
                    all[h] += 1;
                    passed += 1;
                    *d = h as u16;
                    if is_active(&self.markers[s]) {
                        act[h] += 1;
                        *d |= ACTIVE;
                    }
                }
            }
            (all, act, passed)
        };
        let empty = || (vec![0usize; bins], vec![0usize; bins], 0);
        let merge = |(mut a1, mut b1, n1): Histograms, (a2, b2, n2): Histograms| {
            a1.iter_mut().zip(a2).for_each(|(x, y)| *x += y);
            b1.iter_mut().zip(b2).for_each(|(x, y)| *x += y);
            (a1, b1, n1 + n2)
        };
        let (all, act, passed) = if parallel {
            dist.par_chunks_mut(CHUNK).enumerate().map(stage1).reduce(empty, merge)
        } else {
            dist.chunks_mut(CHUNK).enumerate().map(stage1).fold(empty(), merge)
        };

        // Keep the best `shortlist` of each kind by Hamming distance (ties at the cut kept).
        let need = p.any.max(p.active);
        let shortlist = shortlist_size(need, passed);
        let cut = |hist: &[usize], want: usize| -> Option<usize> {
            if want == 0 {
                return None;
            }
            let mut sum = 0;
            for (d, n) in hist.iter().enumerate() {
                sum += n;
                if sum >= shortlist {
                    return Some(d);
                }
            }
            Some(bins - 1)
        };
        let (cut_all, cut_act) = (cut(&all, p.any), cut(&act, p.active));
        let kept = |s: usize, d: u16| {
            if d == FILTERED {
                return None;
            }
            let (h, a) = ((d & !ACTIVE) as usize, d & ACTIVE != 0);
            let keep = cut_all.is_some_and(|t| h <= t) || (a && cut_act.is_some_and(|t| h <= t));
            keep.then_some((s as u32, a))
        };
        let survivors: Vec<(u32, bool)> = if parallel {
            dist.par_chunks(CHUNK)
                .enumerate()
                .flat_map_iter(|(chunk, ds)| {
                    ds.iter().enumerate().filter_map(move |(j, &d)| kept(chunk * CHUNK + j, d))
                })
                .collect()
        } else {
            // At most every record within either cut: the histograms say how many, so the
            // list is allocated once instead of grown (a few thousand entries a search).
            let within = |hist: &[usize], cut: Option<usize>| {
                cut.map_or(0, |t| hist[..=t].iter().sum::<usize>())
            };
            let mut out = Vec::with_capacity(within(&all, cut_all) + within(&act, cut_act));
            out.extend(dist.iter().enumerate().filter_map(|(s, &d)| kept(s, d)));
            out
        };

        // Stage 2: int8 scores, then the best of each kind for exact re-scoring.
        let (qcodes, qscale) = quantise(p.vector);
        let qnorm = p.vector.iter().map(|x| x * x).sum::<f32>().sqrt();
        let stage2 = |&(s, a): &(u32, bool)| {
            let su = s as usize;
            let dot = i8::dot(space.code(su), &qcodes).unwrap_or(0.0) as f32;
            let denom = space.norm[su] * qnorm;
            let cos = if denom > 0.0 { dot * space.scale[su] * qscale / denom } else { 0.0 };
            (cos, s, a)
        };
        let scored: Vec<(f32, u32, bool)> = if parallel {
            survivors.par_iter().with_min_len(1024).map(stage2).collect()
        } else {
            survivors.iter().map(stage2).collect()
        };
        let mut chosen: Vec<u32> = Vec::new();
        let mut pick = |mut list: Vec<(f32, u32, bool)>, want: usize| {
            if want == 0 {
                return;
            }
            let keep = rescore_size(want);
            if list.len() > keep {
                list.select_nth_unstable_by(keep, |a, b| b.0.total_cmp(&a.0));
                list.truncate(keep);
            }
            chosen.extend(list.iter().map(|&(_, s, _)| s));
        };
        let mut active = Vec::with_capacity(scored.len());
        active.extend(scored.iter().filter(|x| x.2).copied());
        pick(active, p.active);
        pick(scored, p.any);
        chosen.sort_unstable();
        chosen.dedup();
        chosen
            .into_iter()
            .map(|s| {
                let s = s as usize;
                Proposal { rowid: self.rowid[s], id: self.id[s], markers: self.markers[s] }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests;
