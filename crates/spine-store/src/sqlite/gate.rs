//! The extract-before-delete gate of `spine-review purge` (SPEC "Operator commands"): a
//! record may be deleted for good only after `spine export` wrote it out, as it is now.
//!
//! `spine export` records each record it writes, with a digest of it, in the `exported`
//! table (migration 7). The gate passes a record whose current digest equals the exported
//! one, so a record edited after its export must be exported again. The digest leaves out
//! the access statistics (`access_count`, `last_accessed_at`): reading a record is not a
//! change worth re-exporting for.

//!
//! The gate's methods are part of [`crate::TransferStore`] (`sqlite/transfer.rs`); the digest
//! is [`crate::record_digest`]. This file holds the gate's tests.

#[cfg(test)]
mod tests {
    use spine_core::{Caller, Timestamp};

    use spine_core::{EpochSeconds, Memory, RecordId};

    use crate::{Access, Embedding, SqliteStore, Store, TransferStore};

    fn record(content: &str) -> Memory {
        spine_testkit::records::record("a:project:x", content, "", 1_800_000_000)
    }

    #[test]
    fn only_records_exported_as_they_are_now_pass() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path()).unwrap();
        let (a, b) = (record("a"), record("b"));
        for m in [&a, &b] {
            store.insert(m, Embedding { model: "m", vector: &[1.0] }).unwrap();
        }
        let missing = RecordId::mint();
        let ids = [a.id, b.id, missing];
        assert_eq!(store.exported_unchanged(&ids).unwrap(), vec![false, false, false]);
        store
            .mark_exported(std::slice::from_ref(&a), "out.jsonl", EpochSeconds::from_secs(1))
            .unwrap();
        assert_eq!(store.exported_unchanged(&ids).unwrap(), vec![true, false, false]);

        // Reading (access statistics) keeps the gate open; an edit closes it.
        store.touch(&a.id, Timestamp::from_micros(1_800_000_100_000_000)).unwrap();
        assert!(store.exported_unchanged(&ids).unwrap()[0]);
        let mut edited = a.clone();
        edited.content = "a, edited".into();
        store.replace(&Access::owned(&Caller::anonymous()), &edited, None).unwrap();
        assert!(!store.exported_unchanged(&ids).unwrap()[0]);
        store.mark_exported(&[edited], "again.jsonl", EpochSeconds::from_secs(2)).unwrap();
        assert!(store.exported_unchanged(&ids).unwrap()[0]);
    }
}
