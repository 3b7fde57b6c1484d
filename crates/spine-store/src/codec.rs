//! How a record, an id and a vector are written, the same on every engine: the payload is
//! the record's JSON, an id its text, a vector its f32 values little-endian.

use std::cell::OnceCell;

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

/// A record's payload as read, decoded when first asked for: a search reads a pool of
/// records to rank and answers with a few of them, so the rest need never be decoded.
#[derive(Debug, Clone)]
pub struct Body {
    raw: String,
    memory: OnceCell<Memory>,
}

impl Body {
    pub(crate) fn new(raw: String) -> Self {
        Body { raw, memory: OnceCell::new() }
    }

    /// The payload as stored: the record's JSON. Equal payloads are the same record.
    pub fn raw(&self) -> &str {
        &self.raw
    }

    /// The record, decoded on the first call; a payload that does not decode is corrupt.
    pub fn memory(&self) -> Result<&Memory> {
        if let Some(m) = self.memory.get() {
            return Ok(m);
        }
        let m = decode(&self.raw)?;
        Ok(self.memory.get_or_init(|| m))
    }

    /// The record, decoded unless it was already.
    pub fn into_memory(self) -> Result<Memory> {
        match self.memory.into_inner() {
            Some(m) => Ok(m),
            None => decode(&self.raw),
        }
    }
}

impl PartialEq for Body {
    fn eq(&self, other: &Self) -> bool {
        self.raw == other.raw
    }
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

#[cfg(test)]
mod tests {
    use spine_core::{Caller, Category, Scope, ShortId, Source, Timestamp};

    use super::*;

    #[test]
    fn a_body_decodes_once_when_asked_and_a_corrupt_one_says_so() {
        let scope = Scope::parse("scope", "acme:project:api").unwrap();
        let m = Memory::new(
            ShortId::mint(),
            "pool record".into(),
            scope,
            Source::AgentInferred,
            Category::Decision,
            &Caller::anonymous(),
            Timestamp::from_micros(1),
        );
        let body = Body::new(encode(&m).unwrap());
        assert_eq!(body.raw(), encode(&m).unwrap());
        let first: *const Memory = body.memory().unwrap();
        assert_eq!(body.memory().unwrap(), &m);
        assert!(std::ptr::eq(first, body.memory().unwrap()), "decoded once");
        assert_eq!(body.clone().into_memory().unwrap(), m);
        assert_eq!(Body::new(encode(&m).unwrap()).into_memory().unwrap(), m);
        let corrupt = Body::new("{\"id\": 1".into());
        assert!(matches!(corrupt.memory(), Err(StoreError::Corrupt(_))));
        assert!(matches!(corrupt.into_memory(), Err(StoreError::Corrupt(_))));
    }
}
