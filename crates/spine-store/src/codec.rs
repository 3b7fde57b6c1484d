//! How a record and a vector are written as bytes, the same on every engine: the payload is
//! the record's JSON, a vector its f32 values little-endian.

use spine_core::Memory;

use crate::{Result, StoreError};

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
    b.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}
