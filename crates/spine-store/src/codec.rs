//! How a record, an id and a vector are written, the same on every engine: the payload is
//! the record's JSON, an id its text, a vector its f32 values little-endian.

use spine_core::{EpochSeconds, Memory, RecordId};

use crate::{Result, StoreError};

/// A stored id read back; one that does not parse is corrupt.
pub(crate) fn parse_id(id: &str) -> Result<RecordId> {
    RecordId::parse(id).ok_or_else(|| StoreError::Corrupt(format!("bad id {id}")))
}

/// A time in whole seconds as its column holds it.
pub(crate) fn secs(v: Option<EpochSeconds>) -> Option<i64> {
    v.map(EpochSeconds::as_secs)
}

/// A stored payload read back; a payload that does not decode is corrupt.
pub(crate) fn decode(body: &str) -> Result<Memory> {
    serde_json::from_str(body).map_err(|e| StoreError::Corrupt(e.to_string()))
}

/// A record's payload.
pub(crate) fn encode(m: &Memory) -> Result<String> {
    serde_json::to_string(m).map_err(|e| StoreError::Corrupt(e.to_string()))
}

/// A vector as stored bytes (4 per value, little-endian).
pub(crate) fn vec_to_blob(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Stored bytes as a vector (a trailing partial value is dropped; `check_vector` reports it).
pub(crate) fn blob_to_vec(b: &[u8]) -> Vec<f32> {
    let mut v = Vec::with_capacity(b.len() / 4);
    blob_into(b, &mut v);
    v
}

/// [`blob_to_vec`] into `out`, replacing what it held (a search re-scoring many stored
/// vectors reuses one buffer).
pub(crate) fn blob_into(b: &[u8], out: &mut Vec<f32>) {
    out.clear();
    out.extend(b.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])));
}
