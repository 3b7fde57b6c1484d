//! The in-memory search index behind `Store::nearest`:
//! - its filters are exactly the SQL filters (`list` is the reference), and SQLite's and
//!   PostgreSQL's renderings of the read predicate select the same records under every gate;
//!   PostgreSQL's scope listing (the read rule probed one alternative at a time) agrees too;
//! - its order is the exact cosine order when every candidate is re-scored;
//! - its quantised stages keep recall@10 against an exact scan at or above 0.99, and a
//!   search's pool of 120 active records at or above 0.95;
//! - it follows writes made by this process and by any other on the same file, including
//!   after falling behind the change log.

use std::collections::{HashMap, HashSet};

use rand::rngs::StdRng;
use rand::seq::IndexedRandom;
use rand::{Rng, SeedableRng};
use spine_core::{
    Caller, Category, DiscoveryKind, EpochSeconds, Memory, RecordId, Scope, ShortId, Source,
    Timestamp, Visibility,
};
use spine_store::{
    Access, Embedding, Filter, Gate, NearestQuery, Neighbour, Page, PgStore, ScopeFilter,
    Selection, SqliteStore, Store,
};

const MODEL: &str = "test:model";
const NOW_S: i64 = 1_800_000_000;

fn now() -> Timestamp {
    Timestamp::from_micros(NOW_S * 1_000_000)
}

/// An anonymous decision in `scope`, created now.
fn record(scope: &str) -> Memory {
    spine_testkit::records::record(scope, "r", "", NOW_S)
}

fn unit(v: Vec<f32>) -> Vec<f32> {
    let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    v.into_iter().map(|x| x / n).collect()
}

fn gaussian(rng: &mut StdRng) -> f32 {
    // Box–Muller.
    let (u, v): (f32, f32) = (rng.random_range(1e-7..1.0), rng.random());
    (-2.0 * u.ln()).sqrt() * (std::f32::consts::TAU * v).cos()
}

const SCOPES: [&str; 3] = ["a:project:x", "a:project:y", "b:repo:z"];
const TAGS: [&str; 4] = ["db", "api", "ops", "ui"];
const CATEGORIES: [Category; 5] = [
    Category::Decision,
    Category::Preference,
    Category::Convention,
    Category::Gotcha,
    Category::Discovery,
];

/// A record with every indexed field drawn at random.
fn random_record(rng: &mut StdRng) -> Memory {
    let owner = ["", "alice", "bob"][rng.random_range(0..3)];
    let caller =
        if owner.is_empty() { Caller::anonymous() } else { Caller::authenticated(owner, owner) };
    let category = *CATEGORIES.choose(rng).unwrap();
    let created = Timestamp::from_micros((NOW_S - rng.random_range(0..1000)) * 1_000_000);
    let mut m = Memory::new(
        ShortId::mint(),
        "record".into(),
        Scope::parse("scope", SCOPES.choose(rng).unwrap()).unwrap(),
        Source::UserSaid,
        category,
        &caller,
        created,
    );
    if rng.random_bool(0.1) {
        m.owner = None; // a legacy record: no reader matches it
    }
    if rng.random_bool(0.4) {
        m.visibility = Visibility::Shared;
    }
    m.tags = TAGS.iter().filter(|_| rng.random_bool(0.4)).map(|t| (*t).to_owned()).collect();
    let near = |rng: &mut StdRng| Some(EpochSeconds::from_secs(NOW_S + rng.random_range(-2..=2)));
    if rng.random_bool(0.2) {
        m.not_before = near(rng);
    }
    if rng.random_bool(0.2) {
        m.not_after = near(rng);
    }
    if rng.random_bool(0.1) {
        m.archived_at = Some(EpochSeconds::from_secs(NOW_S - 5));
    }
    if rng.random_bool(0.1) {
        m.superseded_by = Some(RecordId::mint());
    }
    if category == Category::Discovery {
        m.kind = Some(if rng.random_bool(0.5) { DiscoveryKind::Map } else { DiscoveryKind::Fact });
    }
    m
}

fn random_filter(rng: &mut StdRng) -> Filter {
    let scope = if rng.random_bool(0.5) {
        ScopeFilter::All
    } else {
        ScopeFilter::One(Scope::parse("scope", SCOPES.choose(rng).unwrap()).unwrap())
    };
    let mut f = Filter::new(scope);
    f.tags_all = TAGS.iter().filter(|_| rng.random_bool(0.2)).map(|t| (*t).to_owned()).collect();
    if rng.random_bool(0.3) {
        let names: Vec<String> = ["decision", "gotcha", "discovery", "no-such-category"]
            .iter()
            .filter(|_| rng.random_bool(0.5))
            .map(|c| (*c).to_owned())
            .collect();
        f.categories_any = Filter::categories_named(&names);
    }
    if rng.random_bool(0.3) {
        f.categories_none = vec![Category::Discovery];
    }
    if rng.random_bool(0.3) {
        f.created_after = Some(Timestamp::from_micros((NOW_S - 500) * 1_000_000));
    }
    if rng.random_bool(0.3) {
        f.created_before = Some(Timestamp::from_micros((NOW_S - 200) * 1_000_000));
    }
    f.windowed_only = rng.random_bool(0.1);
    f.exclude_archived_superseded = rng.random_bool(0.2);
    if rng.random_bool(0.2) {
        f.kind = Some([DiscoveryKind::Map, DiscoveryKind::Fact][rng.random_range(0..2)]);
    }
    f
}

fn random_gate(rng: &mut StdRng) -> Gate {
    match rng.random_range(0..7) {
        0 => Gate::Off,
        1 => Gate::ActiveAt(now()),
        2 => Gate::ScheduledAt(now()),
        3 => Gate::ExpiredAt(now()),
        4 => Gate::ScheduledOrExpiredAt(now()),
        5 => Gate::Archived,
        _ => Gate::Superseded,
    }
}

fn random_access(rng: &mut StdRng) -> Access {
    match rng.random_range(0..4) {
        0 => Access::read(&Caller::anonymous()),
        1 => Access::read(&Caller::authenticated("alice", "alice")),
        2 => Access::owned(&Caller::authenticated("bob", "bob")),
        _ => Access::read(&Caller::authenticated("carol", "carol")),
    }
}

fn nearest(
    store: &SqliteStore,
    access: &Access,
    filter: &Filter,
    query: &[f32],
    any: usize,
    active: usize,
) -> Vec<Neighbour> {
    store
        .nearest(&NearestQuery {
            access,
            filter,
            model: MODEL,
            vector: query,
            now: now(),
            any,
            active,
            exclude: None,
        })
        .unwrap()
}

fn list_ids(store: &SqliteStore, access: &Access, filter: &Filter, gate: Gate) -> Vec<RecordId> {
    let sel = Selection { access, filter, gate };
    store.list(sel, Page::recent(None, 0, 100_000)).unwrap().into_iter().map(|m| m.id).collect()
}

/// Exact order: cosine descending, then id descending.
fn exact_order(
    ids: &[RecordId],
    vectors: &HashMap<RecordId, Vec<f32>>,
    q: &[f32],
) -> Vec<RecordId> {
    let mut scored: Vec<(f32, RecordId)> =
        ids.iter().map(|id| (spine_core::cosine(q, &vectors[id]), *id)).collect();
    scored.sort_by(|a, b| b.0.total_cmp(&a.0).then_with(|| b.1.cmp(&a.1)));
    scored.into_iter().map(|(_, id)| id).collect()
}

#[test]
fn filters_match_the_sql_filters_and_full_rescoring_is_exact() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path()).unwrap();
    let mut rng = StdRng::seed_from_u64(11);
    let mut vectors = HashMap::new();
    let records: Vec<(Memory, Vec<f32>)> = (0..600)
        .map(|_| {
            let m = random_record(&mut rng);
            let v = unit((0..16).map(|_| gaussian(&mut rng)).collect());
            vectors.insert(m.id, v.clone());
            (m, v)
        })
        .collect();
    let items: Vec<(Memory, Embedding<'_>)> =
        records.iter().map(|(m, v)| (m.clone(), Embedding { model: MODEL, vector: v })).collect();
    store.insert_batch(&items).unwrap();
    // A record with another embedder's vector never matches.
    let other = random_record(&mut rng);
    store
        .insert(
            &spine_store::Access::operator(),
            &other,
            Embedding { model: "other:model", vector: &[1.0; 16] },
        )
        .unwrap();
    // The third rendering of the predicate: PostgreSQL's SQL over the same records, when a
    // server is at hand (CI always has one).
    let pg = spine_testkit::postgres::fresh_database().map(|db| {
        let pg = PgStore::connect(&db.url).unwrap();
        let mut all: Vec<(Memory, Vec<f32>)> = records.clone();
        all.push((other.clone(), vec![1.0; 16]));
        crate::import_records(&pg, &all, 200);
        (pg, db)
    });

    // The same database through a store whose index never loads: its scope listings are
    // SQL's, and its searches exact scans in SQL (`search_without_loading`).
    let cold = SqliteStore::open(dir.path()).unwrap();
    cold.search_without_loading();
    let mut checked = 0;
    for round in 0..300 {
        let access = random_access(&mut rng);
        let filter = random_filter(&mut rng);
        if let Some((pg, _)) = &pg {
            let gate = random_gate(&mut rng);
            let sorted = |mut ids: Vec<RecordId>| {
                ids.sort();
                ids
            };
            let on_pg: Vec<RecordId> = pg
                .list(
                    Selection { access: &access, filter: &filter, gate },
                    Page::recent(None, 0, 100_000),
                )
                .unwrap()
                .iter()
                .map(|m| m.id)
                .collect();
            assert_eq!(
                sorted(on_pg),
                sorted(list_ids(&store, &access, &filter, gate)),
                "round {round}: PostgreSQL and SQLite differ on {access:?} {filter:?} {gate:?}"
            );
        }
        let q = unit((0..16).map(|_| gaussian(&mut rng)).collect());
        // Scopes come from the index too: the same as the scopes of what SQL lists (every
        // record, with or without a vector of MODEL).
        let mut want_scopes: Vec<String> = store
            .list(
                Selection { access: &access, filter: &filter, gate: Gate::Off },
                Page::recent(None, 0, 100_000),
            )
            .unwrap()
            .into_iter()
            .map(|m| m.scope.as_str().to_owned())
            .collect();
        want_scopes.sort();
        want_scopes.dedup();
        assert_eq!(store.scopes(&access, &filter, 1000).unwrap(), want_scopes, "round {round}");
        // A store that never searched lists them through SQL instead (its index unloaded).
        assert_eq!(cold.scopes(&access, &filter, 1000).unwrap(), want_scopes, "round {round}");
        // PostgreSQL's scope listing probes the read rule one alternative at a time, as
        // SQLite's SQL does.
        if let Some((pg, _)) = &pg {
            assert_eq!(pg.scopes(&access, &filter, 1000).unwrap(), want_scopes, "round {round}");
        }
        // Only records with a vector from MODEL are searched (`other` never is).
        let with_vector = |ids: Vec<RecordId>| -> Vec<RecordId> {
            ids.into_iter().filter(|id| vectors.contains_key(id)).collect()
        };
        let all = with_vector(list_ids(&store, &access, &filter, Gate::Off));
        let active = with_vector(list_ids(&store, &access, &filter, Gate::ActiveAt(now())));
        let got = nearest(&store, &access, &filter, &q, 1000, 0);
        let got_ids: Vec<RecordId> = got.iter().map(|n| n.id).collect();
        assert_eq!(got_ids, exact_order(&all, &vectors, &q), "round {round}: {filter:?}");
        for n in &got {
            assert!((n.score - spine_core::cosine(&q, &vectors[&n.id])).abs() < 1e-6);
            let want: HashSet<_> = active.iter().collect();
            assert_eq!(n.states.is_empty(), want.contains(&n.id), "round {round}: states");
        }
        let got_active: Vec<RecordId> =
            nearest(&store, &access, &filter, &q, 0, 1000).iter().map(|n| n.id).collect();
        assert_eq!(got_active, exact_order(&active, &vectors, &q), "round {round}: active");
        // The scan answers as the index does: the same neighbours, scores, states, records.
        let (any, act) = (rng.random_range(0..20), rng.random_range(0..20));
        let via_index = nearest(&store, &access, &filter, &q, any, act);
        let scanned = nearest(&cold, &access, &filter, &q, any, act);
        assert_eq!(scanned.len(), via_index.len(), "round {round}: scan");
        for (s, i) in scanned.iter().zip(&via_index) {
            assert_eq!((s.id, &s.states, &s.record), (i.id, &i.states, &i.record), "round {round}");
            assert!((s.score - i.score).abs() < 1e-6);
        }
        checked += all.len();
    }
    assert!(checked > 5_000, "the random filters must select something: {checked}");
}

#[test]
fn the_union_of_any_and_active_is_returned_best_first() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path()).unwrap();
    let anon = Caller::anonymous();
    let mut ids = vec![];
    // Cosines 1.0, 0.8, 0.6, 0.4 to the query [1, 0]; the two best are archived.
    for (i, x) in [1.0f32, 0.8, 0.6, 0.4].iter().enumerate() {
        let mut m = record("a:project:x");
        if i < 2 {
            m.archived_at = Some(EpochSeconds::from_secs(NOW_S - 1));
        }
        let v = [*x, (1.0 - x * x).sqrt()];
        store
            .insert(&spine_store::Access::operator(), &m, Embedding { model: MODEL, vector: &v })
            .unwrap();
        ids.push(m.id);
    }
    let access = Access::read(&anon);
    let filter = Filter::new(ScopeFilter::All);
    let got = nearest(&store, &access, &filter, &[1.0, 0.0], 1, 1);
    assert_eq!(got.iter().map(|n| n.id).collect::<Vec<_>>(), vec![ids[0], ids[2]]);
    assert_eq!(got[0].states, vec![spine_core::State::Archived]);
    assert!(got[1].states.is_empty());
    assert!(nearest(&store, &access, &filter, &[1.0, 0.0], 0, 0).is_empty(), "k = 0");
    let excluded = store
        .nearest(&NearestQuery {
            access: &access,
            filter: &filter,
            model: MODEL,
            vector: &[1.0, 0.0],
            now: now(),
            any: 4,
            active: 0,
            exclude: Some(ids[0]),
        })
        .unwrap();
    assert_eq!(excluded.iter().map(|n| n.id).collect::<Vec<_>>(), ids[1..].to_vec());
}

/// Clustered unit vectors around a shared direction, like sentence embeddings.
struct Clusters {
    shared: Vec<f32>,
    centres: Vec<Vec<f32>>,
}

impl Clusters {
    fn new(rng: &mut StdRng, dims: usize, n: usize) -> Self {
        let shared = (0..dims).map(|_| gaussian(rng) * 0.08).collect();
        let centres = (0..n).map(|_| unit((0..dims).map(|_| gaussian(rng)).collect())).collect();
        Clusters { shared, centres }
    }

    fn sample(&self, rng: &mut StdRng) -> Vec<f32> {
        let c = self.centres.choose(rng).unwrap();
        let noise = 0.9 / (c.len() as f32).sqrt();
        unit(c.iter().zip(&self.shared).map(|(x, s)| x + s + gaussian(rng) * noise).collect())
    }
}

#[test]
fn quantised_stages_keep_recall_at_10_against_an_exact_scan() {
    const DIMS: usize = 384;
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path()).unwrap();
    let mut rng = StdRng::seed_from_u64(5);
    let clusters = Clusters::new(&mut rng, DIMS, 200);
    let mut vectors = HashMap::new();
    // 12 000 records: six times the smallest shortlist, so the 1-bit stage cuts.
    for _ in 0..6 {
        let batch: Vec<(Memory, Vec<f32>)> =
            (0..2000).map(|_| (record("a:project:x"), clusters.sample(&mut rng))).collect();
        for (m, v) in &batch {
            vectors.insert(m.id, v.clone());
        }
        let items: Vec<(Memory, Embedding<'_>)> =
            batch.iter().map(|(m, v)| (m.clone(), Embedding { model: MODEL, vector: v })).collect();
        store.insert_batch(&items).unwrap();
    }
    let all: Vec<RecordId> = vectors.keys().copied().collect();
    let access = Access::read(&Caller::anonymous());
    let filter = Filter::new(ScopeFilter::All);
    let (mut hits, queries) = (0, 100);
    for _ in 0..queries {
        let q = clusters.sample(&mut rng);
        let want: HashSet<RecordId> =
            exact_order(&all, &vectors, &q).into_iter().take(10).collect();
        let got = nearest(&store, &access, &filter, &q, 0, 10);
        assert_eq!(got.len(), 10);
        hits += got.iter().filter(|n| want.contains(&n.id)).count();
    }
    let recall = hits as f64 / (10 * queries) as f64;
    assert!(recall >= 0.99, "recall@10 = {recall}");
    // A search's fusion pool: the 120 best active records beside the 10 best of any state.
    let (mut top, mut pool, queries) = (0, 0, 50);
    for _ in 0..queries {
        let q = clusters.sample(&mut rng);
        let want = exact_order(&all, &vectors, &q);
        let got: HashSet<RecordId> =
            nearest(&store, &access, &filter, &q, 10, 120).iter().map(|n| n.id).collect();
        top += want[..10].iter().filter(|id| got.contains(id)).count();
        pool += want[..120].iter().filter(|id| got.contains(id)).count();
    }
    let (top, pool) = (top as f64 / (10 * queries) as f64, pool as f64 / (120 * queries) as f64);
    // 0.976 with the shortlist at 40 times the need; at 20 times it falls to 0.92 here
    // (on 7,700 real descriptions 0.996 against 0.990), so the pool's tail pins it.
    assert!(top >= 0.99, "pool recall@10 = {top}");
    assert!(pool >= 0.95, "pool recall@120 = {pool}");
}

#[test]
fn own_and_foreign_writes_reach_the_next_search() {
    let dir = tempfile::tempdir().unwrap();
    let a = SqliteStore::open(dir.path()).unwrap();
    let b = SqliteStore::open(dir.path()).unwrap();
    let anon = Caller::anonymous();
    let access = Access::read(&anon);
    let owned = Access::owned(&anon);
    let filter = Filter::new(ScopeFilter::All);
    let scores = |s: &SqliteStore| -> Vec<(RecordId, f32)> {
        let mut v: Vec<(RecordId, f32)> = nearest(s, &access, &filter, &[1.0, 0.0], 100, 0)
            .into_iter()
            .map(|n| (n.id, (n.score * 100.0).round() / 100.0))
            .collect();
        v.sort_by_key(|(id, _)| *id);
        v
    };
    let sorted = |mut v: Vec<(RecordId, f32)>| {
        v.sort_by_key(|(id, _)| *id);
        v
    };

    let one = record("a:project:x");
    a.insert(
        &spine_store::Access::operator(),
        &one,
        Embedding { model: MODEL, vector: &[1.0, 0.0] },
    )
    .unwrap();
    assert_eq!(scores(&a), vec![(one.id, 1.0)], "first load");

    // Own writes after the load: insert, replace with a new vector, archive.
    let two = record("a:project:x");
    a.insert(
        &spine_store::Access::operator(),
        &two,
        Embedding { model: MODEL, vector: &[0.0, 1.0] },
    )
    .unwrap();
    a.replace(&owned, &one, Some(Embedding { model: MODEL, vector: &[0.6, 0.8] })).unwrap();
    assert_eq!(scores(&a), sorted(vec![(one.id, 0.6), (two.id, 0.0)]));
    a.set_archived(&owned, &[two.id], Some(EpochSeconds::from_secs(NOW_S - 1))).unwrap();
    let states = nearest(&a, &access, &filter, &[1.0, 0.0], 100, 0);
    assert_eq!(states.iter().find(|n| n.id == two.id).unwrap().states.len(), 1, "archived seen");

    // Another connection (another process) writes: a new record, a re-embedded one, a delete.
    let three = record("a:project:x");
    b.insert(
        &spine_store::Access::operator(),
        &three,
        Embedding { model: MODEL, vector: &[0.8, 0.6] },
    )
    .unwrap();
    b.set_vector(&two.id, Embedding { model: MODEL, vector: &[1.0, 0.0] }).unwrap();
    b.delete(&owned, &one.id).unwrap();
    assert_eq!(scores(&a), sorted(vec![(two.id, 1.0), (three.id, 0.8)]));

    // A reader that fell behind the change log (pruned past it) reloads in full.
    let conn = rusqlite::Connection::open(a.path()).unwrap();
    let four = record("a:project:x");
    b.insert(
        &spine_store::Access::operator(),
        &four,
        Embedding { model: MODEL, vector: &[0.0, 1.0] },
    )
    .unwrap();
    b.delete(&owned, &three.id).unwrap();
    conn.execute("DELETE FROM changes WHERE seq < (SELECT max(seq) FROM changes)", []).unwrap();
    assert_eq!(scores(&a), sorted(vec![(two.id, 1.0), (four.id, 0.0)]));

    // Scopes (cross-spine coverage) follow foreign writes too, past the coverage cache.
    assert_eq!(a.scopes(&access, &filter, 10).unwrap(), vec!["a:project:x".to_owned()]);
    let elsewhere = record("b:project:new");
    b.insert(
        &spine_store::Access::operator(),
        &elsewhere,
        Embedding { model: MODEL, vector: &[0.0, -1.0] },
    )
    .unwrap();
    assert_eq!(
        a.scopes(&access, &filter, 10).unwrap(),
        vec!["a:project:x".to_owned(), "b:project:new".to_owned()]
    );
    b.delete(&owned, &elsewhere.id).unwrap();

    // A re-embedding with another model takes the record out of this model's searches.
    b.set_vector(&two.id, Embedding { model: "other:model", vector: &[1.0, 0.0] }).unwrap();
    assert_eq!(scores(&a), vec![(four.id, 0.0)]);
}
