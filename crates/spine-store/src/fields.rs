//! A result row read by position, the same way on both engines, and the records the store
//! reads from rows. Each engine's SQL selects the columns in the order a reader here names
//! them; the record is made from them once, so a row becomes the same record on either.

use spine_core::{EpochSeconds, ShortId, StateMarkers, Timestamp};

use crate::codec::{blob_to_vec, decode, parse_id};
use crate::{
    Check, ConsolidationCandidate, ConsolidationGroup, ExpiredRecord, IdempotencyEntry,
    PurgeCandidate, Result, StateCounts, StoreError, StoredRecord, StoredVector, SummaryCandidate,
    VectorStamp, Violation, record_digest,
};

/// One result row's columns by position (from 0), as the engine's client reads them.
pub(crate) trait Fields {
    fn text(&self, i: usize) -> Result<String>;
    fn text_opt(&self, i: usize) -> Result<Option<String>>;
    fn int(&self, i: usize) -> Result<i64>;
    fn int_opt(&self, i: usize) -> Result<Option<i64>>;
    fn flag(&self, i: usize) -> Result<bool>;
    /// A vector column as stored bytes (4 little-endian bytes a value); `None` for none.
    fn vector_bytes(&self, i: usize) -> Result<Option<Vec<u8>>>;
}

/// A count column (NULL, as SQLite's `SUM` over nothing gives, reads 0).
fn count(r: &impl Fields, i: usize) -> Result<u64> {
    Ok(r.int_opt(i)?.map_or(0, |n| n as u64))
}

/// The state markers in the four columns from `at`: archived (flag), superseded (flag),
/// not_before and not_after (seconds).
pub(crate) fn markers(r: &impl Fields, at: usize) -> Result<StateMarkers> {
    let time = |i: usize| Ok::<_, StoreError>(r.int_opt(i)?.map(EpochSeconds::from_secs));
    Ok(StateMarkers {
        archived: r.flag(at)?,
        superseded: r.flag(at + 1)?,
        not_before: time(at + 2)?,
        not_after: time(at + 3)?,
    })
}

impl StateCounts {
    /// Columns: scope, records, active, archived, superseded, expired, scheduled.
    pub(crate) fn read(r: &impl Fields) -> Result<Self> {
        let (records, active) = (count(r, 1)?, count(r, 2)?);
        Ok(StateCounts {
            scope: r.text(0)?,
            records,
            active,
            hidden: records - active,
            archived: count(r, 3)?,
            superseded: count(r, 4)?,
            expired: count(r, 5)?,
            scheduled: count(r, 6)?,
        })
    }
}

impl VectorStamp {
    /// Columns: model, dims, vectors.
    pub(crate) fn read(r: &impl Fields) -> Result<Self> {
        Ok(VectorStamp { model: r.text(0)?, dims: r.int(1)? as usize, vectors: count(r, 2)? })
    }
}

impl ConsolidationGroup {
    /// Columns: scope, owner, visibility, model, records.
    pub(crate) fn read(r: &impl Fields) -> Result<Self> {
        Ok(ConsolidationGroup {
            scope: r.text(0)?,
            owner: r.text(1)?,
            visibility: r.text(2)?,
            model: r.text(3)?,
            records: count(r, 4)?,
        })
    }
}

impl ConsolidationCandidate {
    /// Columns: body, vec. `None` when the payload does not decode (verify reports it).
    pub(crate) fn read(r: &impl Fields) -> Result<Option<Self>> {
        let Ok(record) = decode(&r.text(0)?) else { return Ok(None) };
        let digest = record_digest(&record)?;
        let vector = blob_to_vec(&r.vector_bytes(1)?.unwrap_or_default());
        Ok(Some(ConsolidationCandidate { record, vector, digest }))
    }
}

impl Violation {
    /// A shared short id. Columns: id, short_id, scope, how many records share it.
    pub(crate) fn duplicate_short_id(r: &impl Fields) -> Result<Self> {
        Ok(Violation {
            id: r.text(0)?,
            short_id: r.text(1)?,
            scope: r.text(2)?,
            check: Check::DuplicateShortId,
            detail: format!(
                "{} records share this short_id; it resolves to none of them",
                r.int(3)?
            ),
        })
    }
}

impl PurgeCandidate {
    /// A selected record without its verdict, its states at `now`. Columns: id, short_id,
    /// scope, category, created_at, the four state markers ([`markers`]), the export file.
    pub(crate) fn read(r: &impl Fields, now: Timestamp) -> Result<Self> {
        Ok(PurgeCandidate {
            id: parse_id(&r.text(0)?)?,
            short_id: r.text(1)?,
            scope: r.text(2)?,
            category: r.text(3)?,
            created_at: Timestamp::from_micros(r.int(4)?),
            states: markers(r, 5)?.derive(now),
            exported_to: r.text_opt(9)?,
            refused: None,
        })
    }
}

impl ExpiredRecord {
    /// Columns: rowid, id, short_id, scope, not_after.
    pub(crate) fn read(r: &impl Fields) -> Result<Self> {
        Ok(ExpiredRecord {
            rowid: r.int(0)?,
            id: parse_id(&r.text(1)?)?,
            short_id: r.text(2)?,
            scope: r.text(3)?,
            not_after: EpochSeconds::from_secs(r.int(4)?),
        })
    }
}

impl SummaryCandidate {
    /// Columns: id, created_at, content.
    pub(crate) fn read(r: &impl Fields) -> Result<Self> {
        Ok(SummaryCandidate {
            id: parse_id(&r.text(0)?)?,
            created_at: Timestamp::from_micros(r.int(1)?),
            content: r.text(2)?,
        })
    }
}

impl StoredRecord {
    /// Columns: rowid, id, body, model, dims, vec (model and vec NULL: no vector).
    pub(crate) fn read(r: &impl Fields) -> Result<Self> {
        let vector = match (r.text_opt(3)?, r.vector_bytes(5)?) {
            (Some(model), Some(data)) => {
                Some(StoredVector { model, dims: r.int_opt(4)?.unwrap_or(0) as usize, data })
            }
            _ => None,
        };
        Ok(StoredRecord { rowid: r.int(0)?, id: r.text(1)?, body: r.text(2)?, vector })
    }
}

impl IdempotencyEntry {
    /// The entry under `key`. Columns: fingerprint, id, short_id.
    pub(crate) fn read(key: &str, r: &impl Fields) -> Result<Self> {
        let short = r.text(2)?;
        Ok(IdempotencyEntry {
            key: key.to_owned(),
            fingerprint: r.text(0)?,
            id: parse_id(&r.text(1)?)?,
            short_id: ShortId::parse(&short)
                .ok_or_else(|| StoreError::Corrupt(format!("bad short id {short}")))?,
        })
    }
}
