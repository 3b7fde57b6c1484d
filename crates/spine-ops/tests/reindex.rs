//! `reindex` in-process: the store's paging of records needing a vector, the resume after a
//! failed batch, records written behind the cursor, records deleted meanwhile, and the run
//! with nothing to do.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use spine_core::{Memory, RecordId};
use spine_embed::{EmbedError, Embedder};
use spine_ops::reindex::reindex;
use spine_ops::{Error, Silent};
use spine_store::{Access, Embedding, SqliteStore, Store};

use super::{put, record, store};

/// The stamp `put` writes (the old embedder).
const OLD: &str = "m";
const NEW: &str = "new";

/// The new embedder: answers `answer_first` calls, then fails; runs `during` on each call.
struct Scripted<'a> {
    calls: AtomicUsize,
    texts: AtomicUsize,
    answer_first: usize,
    during: Mutex<Box<dyn FnMut() + Send + 'a>>,
}

impl<'a> Scripted<'a> {
    fn new(answer_first: usize, during: impl FnMut() + Send + 'a) -> Self {
        Scripted {
            calls: AtomicUsize::new(0),
            texts: AtomicUsize::new(0),
            answer_first,
            during: Mutex::new(Box::new(during)),
        }
    }
}

impl Embedder for Scripted<'_> {
    fn model_id(&self) -> &str {
        NEW
    }
    fn dims(&self) -> usize {
        2
    }
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        if self.calls.fetch_add(1, Ordering::SeqCst) >= self.answer_first {
            return Err(EmbedError::Load("scripted failure".into()));
        }
        (self.during.lock().unwrap())();
        self.texts.fetch_add(texts.len(), Ordering::SeqCst);
        Ok(texts.iter().map(|_| vec![0.0, 1.0]).collect())
    }
}

fn records(s: &SqliteStore, n: usize) -> Vec<Memory> {
    let out: Vec<Memory> = (0..n).map(|i| record(&format!("note {i}"), i as i64)).collect();
    for m in &out {
        put(s, m, &[1.0, 0.0]);
    }
    out
}

fn models(s: &SqliteStore) -> Vec<(String, u64)> {
    s.embedder_models().unwrap()
}

#[test]
fn the_store_pages_records_needing_embedding_by_id() {
    let (_d, s) = store();
    let written = records(&s, 5);
    assert!(s.needing_embedding(OLD, None, 10).unwrap().is_empty());
    let all = s.needing_embedding(NEW, None, 10).unwrap();
    assert_eq!(all.len(), 5);
    let mut sorted = all.clone();
    sorted.sort_by_key(|(id, _)| id.to_string());
    assert_eq!(all, sorted, "ordered by id");
    let mut contents: Vec<&str> = all.iter().map(|(_, c)| c.as_str()).collect();
    contents.sort();
    let mut notes: Vec<&str> = written.iter().map(|m| m.content.as_str()).collect();
    notes.sort();
    assert_eq!(contents, notes);

    let first = s.needing_embedding(NEW, None, 2).unwrap();
    let next = s.needing_embedding(NEW, Some(first[1].0), 2).unwrap();
    assert_eq!([first.clone(), next].concat(), all[..4].to_vec());

    let v = vec![1.0f32; 16];
    assert!(s.set_vector(&first[0].0, Embedding { model: NEW, vector: &v }).unwrap());
    assert!(!s.set_vector(&RecordId::mint(), Embedding { model: NEW, vector: &v }).unwrap());
    assert_eq!(models(&s), [(OLD.to_owned(), 4), (NEW.to_owned(), 1)]);
    assert_eq!(s.vector(&first[0].0, NEW).unwrap(), Some(v));
    assert_eq!(s.vector(&first[0].0, OLD).unwrap(), None);
    let left = s.needing_embedding(NEW, None, 10).unwrap();
    assert_eq!(left.len(), 4);
    assert!(left.iter().all(|(id, _)| *id != first[0].0));
    assert_eq!(s.needing_embedding(OLD, None, 10).unwrap().len(), 1);
}

#[test]
fn an_interrupted_reindex_keeps_its_batches_and_the_next_run_continues() {
    let (_d, s) = store();
    records(&s, 5);
    let broken = Scripted::new(1, || {});
    let e = reindex(&s, &broken, 2, &mut Silent).unwrap_err();
    let Error::Embed(message) = e else { panic!("expected Embed, got {e:?}") };
    assert!(message.contains("scripted failure"), "{message}");
    assert!(message.contains("2 records were re-embedded before it"), "{message}");
    assert!(message.contains("run `spine reindex` again"), "{message}");
    assert_eq!(models(&s), [(OLD.to_owned(), 3), (NEW.to_owned(), 2)]);

    // Resumed: only the 3 records left, in ceil(3 / 2) calls.
    let resumed = Scripted::new(usize::MAX, || {});
    let report = reindex(&s, &resumed, 2, &mut Silent).unwrap();
    assert_eq!(resumed.calls.load(Ordering::SeqCst), 2);
    assert_eq!(resumed.texts.load(Ordering::SeqCst), 3);
    assert_eq!((report.reembedded, report.vanished, report.model.as_str()), (3, 0, NEW));
    assert!(!report.nothing_to_do());
    assert_eq!(report.models, [(NEW.to_owned(), 5)]);

    let idle = reindex(&s, &Scripted::new(usize::MAX, || {}), 2, &mut Silent).unwrap();
    assert!(idle.nothing_to_do(), "{idle:?}");
}

#[test]
fn records_written_behind_the_cursor_are_caught_by_a_final_pass() {
    let (_d, s) = store();
    // Minted first, so its id sorts before every other; written while the run is past it.
    let early = record("written behind the cursor", 0);
    let later = records(&s, 3);
    assert!(later.iter().all(|m| m.id.to_string() > early.id.to_string()), "sorts first");
    let mut pending = Some(early.clone());
    let embedder = Scripted::new(usize::MAX, || {
        if let Some(m) = pending.take() {
            put(&s, &m, &[1.0, 0.0]);
        }
    });
    let report = reindex(&s, &embedder, 1, &mut Silent).unwrap();
    assert_eq!(report.reembedded, 4, "{report:?}");
    assert_eq!(s.vector(&early.id, NEW).unwrap(), Some(vec![0.0, 1.0]));
    assert_eq!(models(&s), [(NEW.to_owned(), 4)]);
}

#[test]
fn records_deleted_while_reindexing_are_counted_as_vanished() {
    let (_d, s) = store();
    let written = records(&s, 2);
    let mut ids: Vec<RecordId> = written.iter().map(|m| m.id).collect();
    ids.sort_by_key(|id| id.to_string());
    let last = ids[1];
    let mut deleted = false;
    let embedder = Scripted::new(usize::MAX, || {
        if !deleted {
            deleted = s.delete(&Access::operator(), &last).unwrap();
        }
    });
    let report = reindex(&s, &embedder, 2, &mut Silent).unwrap();
    assert_eq!((report.reembedded, report.vanished), (1, 1), "{report:?}");
    assert!(!report.nothing_to_do());
    assert_eq!(report.models, [(NEW.to_owned(), 1)]);
}

#[test]
fn an_embedder_answering_the_wrong_number_of_vectors_stops_the_run() {
    struct Short;
    impl Embedder for Short {
        fn model_id(&self) -> &str {
            NEW
        }
        fn dims(&self) -> usize {
            2
        }
        fn embed(&self, _: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
            Ok(vec![vec![0.0, 1.0]])
        }
    }
    let (_d, s) = store();
    records(&s, 2);
    let e = reindex(&s, &Short, 2, &mut Silent).unwrap_err();
    assert!(e.to_string().contains("returned 1 vectors for 2 texts"), "{e}");
    assert_eq!(models(&s), [(OLD.to_owned(), 2)], "nothing written");
}
