//! The extract-before-delete gate of `spine-review purge` (SPEC "Operator commands"): a
//! record may be deleted for good only after `spine export` wrote it out, as it is now.
//!
//! `spine export` records each record it writes, with a digest of it, in the `exported`
//! table (migration 7). The gate passes a record whose current digest equals the exported
//! one, so a record edited after its export must be exported again. The digest leaves out
//! the access statistics (`access_count`, `last_accessed_at`): reading a record is not a
//! change worth re-exporting for.

use rusqlite::params;
use sha2::{Digest, Sha256};
use spine_core::{EpochSeconds, Memory, RecordId};

use crate::sqlite::decode;
use crate::{Result, SqliteStore, StoreError};

impl SqliteStore {
    /// The gate's digest of `m`: SHA-256 (hex) of its JSON without the access statistics,
    /// keys sorted.
    pub fn record_digest(m: &Memory) -> Result<String> {
        let mut v = serde_json::to_value(m).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        if let Some(o) = v.as_object_mut() {
            o.remove("access_count");
            o.remove("last_accessed_at");
        }
        let canonical =
            serde_json::to_string(&v).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        Ok(Sha256::digest(canonical.as_bytes()).iter().map(|b| format!("{b:02x}")).collect())
    }

    /// Records that `records` were written to `file` at `at`, as they are now.
    pub fn mark_exported(&self, records: &[Memory], file: &str, at: EpochSeconds) -> Result<()> {
        let mut conn = self.lock();
        let tx = conn.transaction()?;
        {
            let mut stmt = tx.prepare_cached(
                "INSERT INTO exported (id, digest, exported_at, file) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT(id) DO UPDATE SET digest = excluded.digest,
                    exported_at = excluded.exported_at, file = excluded.file",
            )?;
            for m in records {
                stmt.execute(params![
                    m.id.to_string(),
                    Self::record_digest(m)?,
                    at.as_secs(),
                    file
                ])?;
            }
        }
        tx.commit()?;
        Ok(())
    }

    /// For each of `ids`, whether the record exists and was exported as it is now.
    pub fn exported_unchanged(&self, ids: &[RecordId]) -> Result<Vec<bool>> {
        let conn = self.lock();
        let mut stmt = conn.prepare_cached(
            "SELECT m.body, e.digest FROM memories m JOIN exported e ON e.id = m.id
             WHERE m.id = ?1",
        )?;
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            let row: Option<(String, String)> = stmt
                .query_row([id.to_string()], |r| Ok((r.get(0)?, r.get(1)?)))
                .map(Some)
                .or_else(|e| match e {
                    rusqlite::Error::QueryReturnedNoRows => Ok(None),
                    e => Err(e),
                })?;
            out.push(match row {
                Some((body, digest)) => Self::record_digest(&decode(&body)?)? == digest,
                None => false,
            });
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use spine_core::{Caller, Category, Scope, ShortId, Source, Timestamp};

    use super::*;
    use crate::{Access, Embedding, Store};

    fn record(content: &str) -> Memory {
        Memory::new(
            ShortId::mint(),
            content.into(),
            Scope::parse("scope", "a:project:x").unwrap(),
            Source::UserSaid,
            Category::Decision,
            &Caller::anonymous(),
            Timestamp::from_micros(1_800_000_000_000_000),
        )
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
