//! Records' lexical terms as BM25 reads them ([`TermCounts`]), and the service's cache of
//! them ([`TermCache`]).

use std::hash::BuildHasher;
use std::sync::{Arc, Mutex};

use lru::LruCache;
use spine_core::{Error, RecordId};
use spine_store::Body;

use crate::store_error;

/// The memory a [`TermCache`] may hold ([`TermCounts::cached_bytes`]: 12 bytes a distinct
/// term and ~130 a record): ~30,000 records of 2,000-character notes (~150 distinct terms
/// each), ~100,000 short ones.
///
/// Bounded by bytes, not records: at 8,192 records, a store of 10,000 Debian descriptions
/// tokenised part of each search's pool again (a visible share of the server's CPU outside
/// the embedder, `perf`; docs/performance.md, "The lexical step on a store larger than the
/// term cache"), while 8,192 long notes and 8,192 one-liners differ many times over in
/// memory.
pub const TERM_CACHE_BYTES: usize = 64 << 20;

/// A record's lexical terms as BM25 reads them: how many there are, and how often each
/// distinct one occurs, by the term's 64-bit hash ([`term_hash`]).
///
/// Hashes in one flat sorted array are what makes BM25 cheap: a pool of ~200 records is
/// looked up for every query term, and comparing strings meant a cache miss per comparison
/// (each `String` on the heap). Two distinct terms share a 64-bit hash with a chance of
/// about 2⁻⁶⁴ per pair; such a pair would count as one term.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TermCounts {
    /// The number of terms (the document length).
    pub(super) len: usize,
    /// Each distinct term's hash, sorted.
    hashes: Box<[u64]>,
    /// The count of the term at the same place in `hashes`.
    counts: Box<[u32]>,
}

/// The hash [`TermCounts`] keys a term by: foldhash with a fixed seed (the counts live in
/// memory only, so the seed need not be secret; nothing is gained by colliding on purpose
/// that writing the other term would not give).
pub fn term_hash(term: &str) -> u64 {
    const TERM_HASH: foldhash::fast::FixedState =
        foldhash::fast::FixedState::with_seed(0x5350_494e_455f_4c58);
    TERM_HASH.hash_one(term)
}

impl TermCounts {
    /// The counts of `terms`.
    pub fn new(terms: &[String]) -> Self {
        Self::of_hashes(terms.iter().map(|t| term_hash(t)).collect())
    }

    /// The counts of a record's terms: those of `spine_core::lexical::record_terms` of its
    /// content, summary and tags, hashed as they are found (no string per term).
    pub fn of_record(content: &str, summary: &str, tags: &[String]) -> Self {
        let mut hashes = Vec::with_capacity(content.len() / 6);
        spine_core::lexical::for_each_record_term(content, summary, tags, |t| {
            hashes.push(term_hash(t));
        });
        Self::of_hashes(hashes)
    }

    fn of_hashes(mut all: Vec<u64>) -> Self {
        all.sort_unstable();
        let runs = || all.chunk_by(|a, b| a == b);
        // Cached for many searches: no spare capacity (collected straight into boxes).
        TermCounts {
            len: all.len(),
            hashes: runs().map(|run| run[0]).collect(),
            counts: runs().map(|run| run.len() as u32).collect(),
        }
    }

    /// How often the term whose [`term_hash`] is `hash` occurs.
    pub fn count(&self, hash: u64) -> u32 {
        self.hashes.binary_search(&hash).map_or(0, |i| self.counts[i])
    }

    /// What these counts cost a [`TermCache`]: their arrays, and a fixed share for the
    /// struct, its `Arc` and the cache's entry (key, links, table slot).
    pub fn cached_bytes(&self) -> usize {
        const ENTRY: usize = 128;
        ENTRY + self.hashes.len() * (size_of::<u64>() + size_of::<u32>())
    }
}

/// An LRU cache of records' lexical term counts, one entry per record id holding the counts
/// of one version of it (by a hash of its stored payload), shared by the searches of one
/// service.
///
/// Tokenising a pool of a hundred records (splitting, lower-casing, stemming) is most of what
/// the lexical step costs, and a scope that is searched is searched again; keyed by the
/// payload as stored, a cached record is not even decoded. Invariant: cached counts are
/// exactly those of `spine_core::lexical::record_terms` of the record's content, summary and
/// tags — an edited record has another payload and is tokenised afresh (so is one whose
/// access count a `get_memory` bumped, once) — so the cache never changes a result.
///
/// One entry per id, not per (id, payload): keyed by both, every edit and every touch left
/// the old version's counts behind until the budget pushed them out, and an hour of the
/// working-agent mix over 5,000 records filled the whole budget with versions no search
/// would ask for again (docs/reliability.md, "Soak"). The newer version replaces the older.
///
/// A search takes the lock twice for its whole pool (look up, then add what was missing),
/// not once per record: under 50 concurrent searches, one lock taken per pool record was
/// ~200 hand-overs of the same cache lines per search.
pub struct TermCache {
    cache: Mutex<Lru>,
    /// Hashes payloads: foldhash, seeded per process (not a fixed seed, so that nobody can
    /// write a payload that collides with another on purpose).
    payload: foldhash::fast::RandomState,
}

/// The counts of one version of a record: the hash of its stored payload, and its counts.
type Version = (u64, Arc<TermCounts>);

/// The least recently used entries go first, until the rest fits `budget` bytes
/// ([`TermCounts::cached_bytes`]).
struct Lru {
    entries: LruCache<RecordId, Version>,
    bytes: usize,
    budget: usize,
}

impl Lru {
    fn new(budget: usize) -> Self {
        Lru { entries: LruCache::unbounded(), bytes: 0, budget }
    }

    fn insert(&mut self, id: RecordId, version: Version) {
        self.bytes += version.1.cached_bytes();
        // Another version of the record, or two searches that missed it at once: the
        // second replaces the first.
        if let Some((_, old)) = self.entries.put(id, version) {
            self.bytes -= old.cached_bytes();
        }
        while self.bytes > self.budget {
            let Some((_, (_, old))) = self.entries.pop_lru() else { break };
            self.bytes -= old.cached_bytes();
        }
    }

    fn remove(&mut self, id: &RecordId) {
        if let Some((_, old)) = self.entries.pop(id) {
            self.bytes -= old.cached_bytes();
        }
    }

    /// The counts of `id` when the cache holds the version whose payload hash is `payload`.
    fn get(&mut self, id: &RecordId, payload: u64) -> Option<Arc<TermCounts>> {
        self.entries.get(id).filter(|(hash, _)| *hash == payload).map(|(_, t)| t.clone())
    }
}

impl Default for TermCache {
    fn default() -> Self {
        TermCache::with_budget(TERM_CACHE_BYTES)
    }
}

impl TermCache {
    /// A cache that holds at most `budget` bytes of term counts.
    pub fn with_budget(budget: usize) -> Self {
        TermCache {
            cache: Mutex::new(Lru::new(budget)),
            payload: foldhash::fast::RandomState::default(),
        }
    }

    /// Drops the counts of `id`, a record this service deleted (those deleted elsewhere, by
    /// another node or an operator command, age out as the least recently used).
    pub fn forget(&self, id: &RecordId) {
        self.cache.lock().unwrap_or_else(|p| p.into_inner()).remove(id);
    }

    /// The term counts of each record `(id, stored payload)`, in order: from the cache, or
    /// tokenised now (decoding the body) and added to it.
    pub fn terms(&self, records: &[(RecordId, &Body)]) -> Result<Vec<Arc<TermCounts>>, Error> {
        let keys: Vec<(RecordId, u64)> =
            records.iter().map(|(id, body)| (*id, self.payload.hash_one(body.raw()))).collect();
        let lock = || self.cache.lock().unwrap_or_else(|p| p.into_inner());
        let cached: Vec<Option<Arc<TermCounts>>> = {
            let mut cache = lock();
            keys.iter().map(|(id, payload)| cache.get(id, *payload)).collect()
        };
        let mut added = Vec::new();
        let counts = cached
            .into_iter()
            .zip(records.iter().zip(&keys))
            .map(|(hit, ((_, body), key))| match hit {
                Some(t) => Ok(t),
                None => {
                    let m = body.memory().map_err(store_error)?;
                    let t = Arc::new(TermCounts::of_record(&m.content, &m.summary, &m.tags));
                    added.push((*key, t.clone()));
                    Ok(t)
                }
            })
            .collect::<Result<Vec<_>, Error>>()?;
        if !added.is_empty() {
            let mut cache = lock();
            for ((id, payload), t) in added {
                cache.insert(id, (payload, t));
            }
        }
        Ok(counts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn terms(s: &str) -> TermCounts {
        TermCounts::new(&spine_core::lexical::terms(s))
    }

    #[test]
    fn term_counts_are_the_occurrences_of_each_term() {
        let text = "parse_config reads the config file; the config file is parse_config's input";
        let all = spine_core::lexical::terms(text);
        let c = TermCounts::new(&all);
        assert_eq!(c.len, all.len());
        for t in &all {
            let n = all.iter().filter(|x| *x == t).count();
            assert_eq!(c.count(term_hash(t)) as usize, n, "{t}");
        }
        assert!(c.count(term_hash("config")) >= 2);
        assert_eq!(c.count(term_hash("absent")), 0);
        assert_eq!(TermCounts::new(&[]).count(term_hash("x")), 0);
    }

    #[test]
    fn the_cache_drops_the_least_recently_used_counts_beyond_its_budget() {
        let counts = |text: &str| Arc::new(terms(text));
        let (a, b, c) = (counts("alpha beta"), counts("gamma delta"), counts("epsilon zeta"));
        let each = a.cached_bytes();
        assert_eq!(b.cached_bytes(), each);
        // Room for two entries, not three.
        let mut lru = Lru::new(2 * each + each / 2);
        let (ka, kb, kc) = (RecordId::mint(), RecordId::mint(), RecordId::mint());
        lru.insert(ka, (1, a.clone()));
        lru.insert(kb, (1, b));
        assert_eq!(lru.bytes, 2 * each);
        assert!(lru.get(&ka, 1).is_some(), "a is now the most recently used");
        lru.insert(kc, (1, c));
        assert_eq!(lru.bytes, 2 * each);
        assert!(lru.get(&kb, 1).is_none(), "b was the least recently used");
        assert!(lru.get(&ka, 1).is_some() && lru.get(&kc, 1).is_some());
        // The same key again replaces its entry; the bytes are counted once.
        lru.insert(ka, (1, a));
        assert_eq!((lru.entries.len(), lru.bytes), (2, 2 * each));
        // A budget of nothing holds nothing.
        let mut none = Lru::new(0);
        none.insert(RecordId::mint(), (1, counts("one")));
        assert_eq!((none.entries.len(), none.bytes), (0, 0));
    }

    /// Each new version of a record (an edit, a touch) replaces the one cached before: a
    /// record edited a thousand times holds one entry, and only its newest version hits.
    #[test]
    fn the_cache_holds_one_version_of_each_record() {
        let mut lru = Lru::new(TERM_CACHE_BYTES);
        let id = RecordId::mint();
        for version in 0..1000 {
            lru.insert(id, (version, Arc::new(terms(&format!("note edited {version} times")))));
        }
        assert_eq!(lru.entries.len(), 1);
        let newest = lru.get(&id, 999).expect("the newest version");
        assert_eq!(lru.bytes, newest.cached_bytes());
        assert!(lru.get(&id, 998).is_none(), "an older version is a miss");
        lru.remove(&id);
        assert_eq!((lru.entries.len(), lru.bytes), (0, 0), "a deleted record's counts go");
    }

    #[test]
    fn cached_bytes_grow_with_the_distinct_terms() {
        let one = terms("alpha alpha alpha");
        let two = terms("alpha beta");
        assert_eq!(two.cached_bytes() - one.cached_bytes(), 12);
    }

    #[test]
    fn a_record_is_counted_as_its_record_terms() {
        let (content, summary) = ("Parsing HTTPRequest in lib.rs, v0.11.1 ", "The parser");
        let tags = ["http".to_owned(), "parser_v2".to_owned()];
        assert_eq!(
            TermCounts::of_record(content, summary, &tags),
            TermCounts::new(&spine_core::lexical::record_terms(content, summary, &tags))
        );
    }
}
