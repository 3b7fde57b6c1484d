use super::*;

#[test]
fn a_search_on_the_pool_proposes_what_one_on_the_calling_thread_does() {
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};
    use spine_core::{EpochSeconds, Timestamp};

    let mut rng = StdRng::seed_from_u64(3);
    let mut index = Index::default();
    // Two chunks and a bit, some archived, some expired, in two scopes.
    for rowid in 0..(2 * CHUNK + 100) as i64 {
        let markers = StateMarkers {
            archived: rng.random_ratio(1, 10),
            superseded: false,
            not_before: None,
            not_after: rng.random_ratio(1, 10).then(|| EpochSeconds::from_secs(10)),
        };
        index.upsert(Row {
            rowid,
            id: RecordId::mint(),
            owner: None,
            shared: false,
            scope: ["a:project:x", "a:project:y"][rng.random_range(0..2)].into(),
            category: "decision".into(),
            kind: None,
            created_at: rowid,
            markers,
            tags: vec![],
            vector: Some(("m".into(), (0..16).map(|_| rng.random::<f32>() - 0.5).collect())),
        });
    }
    index.recentre_all();
    let access = Access::operator();
    let filter = Filter::new(crate::ScopeFilter::All);
    for _ in 0..5 {
        let vector: Vec<f32> = (0..16).map(|_| rng.random::<f32>() - 0.5).collect();
        let q = NearestQuery {
            access: &access,
            filter: &filter,
            model: "m",
            vector: &vector,
            now: Timestamp::from_micros(20_000_000),
            any: 10,
            active: 120,
            exclude: None,
        };
        let ids = |v: Vec<Proposal>| v.iter().map(|p| p.rowid).collect::<Vec<_>>();
        let (on_pool, here) = (ids(index.propose_on(&q, true)), ids(index.propose_on(&q, false)));
        assert!(on_pool.len() >= 240, "{}", on_pool.len());
        assert_eq!(on_pool, here);
    }
}

#[test]
fn shortlist_grows_with_need_and_candidates() {
    assert_eq!(shortlist_size(8, 10), 2_000);
    assert_eq!(shortlist_size(100, 10), 4_000);
    assert_eq!(shortlist_size(8, 1_000_000), 20_000);
    assert_eq!(rescore_size(8), 40);
    assert_eq!(rescore_size(1000), 2000);
}

/// A string no record holds any more is released, and its id given to the next new string
/// without a record that held the old one matching the new: an hour of updates, each with
/// a fresh tag, leaves the strings the live records hold and no more.
#[test]
fn strings_no_record_holds_are_released_and_their_ids_reused() {
    let row = |rowid: i64, scope: &str, tags: &[&str]| Row {
        rowid,
        id: RecordId::mint(),
        owner: Some("alice".into()),
        shared: false,
        scope: scope.into(),
        category: "decision".into(),
        kind: None,
        created_at: rowid,
        markers: StateMarkers {
            archived: false,
            superseded: false,
            not_before: None,
            not_after: None,
        },
        tags: tags.iter().map(|t| t.to_string()).collect(),
        vector: Some(("m".into(), vec![1.0, 0.0])),
    };
    let mut index = Index::default();
    index.upsert(row(1, "a:project:x", &["load", "v0"]));
    index.upsert(row(2, "a:project:y", &["load", "load"]));
    for v in 1..1000 {
        index.upsert(row(1, "a:project:x", &["load", &format!("v{v}")]));
    }
    let mut held: Vec<&str> = index.strings.keys().map(|s| &**s).collect();
    held.sort_unstable();
    assert_eq!(held, ["a:project:x", "a:project:y", "alice", "decision", "load", "m", "v999"]);
    assert!(index.names.len() <= 8, "ids reused: {}", index.names.len());

    // A tag released and its id taken by a new one: only the record holding it matches.
    index.upsert(row(1, "a:project:x", &["load"]));
    index.upsert(row(3, "a:project:z", &["fresh"]));
    let access = Access::operator();
    let tagged = |tag: &str| {
        let mut f = Filter::new(crate::ScopeFilter::All);
        f.tags_all = vec![tag.into()];
        index.scopes(&access, &f)
    };
    assert_eq!(tagged("fresh"), ["a:project:z"]);
    assert!(tagged("v999").is_empty());
    assert_eq!(tagged("load"), ["a:project:x", "a:project:y"]);

    // Removing every record leaves only the embedder's id, which keys its vectors.
    for rowid in [1, 2, 3] {
        index.remove(rowid);
    }
    assert_eq!(index.strings.keys().map(|s| &**s).collect::<Vec<_>>(), ["m"]);
    index.upsert(row(4, "a:project:x", &[]));
    assert_eq!(index.len(), 1);
}
