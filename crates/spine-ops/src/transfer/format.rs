//! The export file format: what `spine export` writes and `spine import` reads back.
//!
//! Format version 2, one JSON document per line:
//!
//! ```text
//! {"header":{"format":"spine-export","version":2,"exported_at":"…","schema_version":1,"scope":null,"vectors":true}}
//! {"record":{…the stored record…},"vector":{"model":"builtin:all-MiniLM-L6-v2","dims":384,"f32le":"…"}}
//! {"audit":{"at":"…","actor":"…","owner":"…","lane":"mcp","client":"…","action":"store_memory","scope":"…","record_ids":["…"],"outcome":"ok","trace_id":""}}
//! {"end":{"records":1,"audit_events":1}}
//! ```
//!
//! The audit log's events follow the records, oldest first, with the fields `spine audit
//! --json` prints (`at` to the microsecond). Version 1 (no `audit` lines, no `audit_events`)
//! is still read.
//!
//! `record` is the stored payload byte for byte (the record's JSON with every SPEC key, and
//! any key a newer binary wrote), so export → import → export reproduces every record line
//! exactly. `vector` is absent with `--no-vectors` or when the record has none; `f32le` is
//! the standard base64 of the `dims` components as little-endian f32, the bytes the store
//! keeps. The `end` line tells a complete file from one cut short.
//!

use std::borrow::Cow;
use std::io::Write;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use spine_core::audit::Lane;
use spine_core::{Memory, RecordId, Timestamp};
use spine_store::{AuditEvent, StoredRecord, StoredVector};

/// The `format` of the header line.
pub const FORMAT: &str = "spine-export";
/// The format version this binary writes, and the newest it reads.
pub const FORMAT_VERSION: u32 = 2;

/// First line of an export.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Header {
    /// Always [`FORMAT`].
    pub format: String,
    /// [`FORMAT_VERSION`] of the writer.
    pub version: u32,
    /// When the export started (RFC 3339).
    pub exported_at: String,
    /// The record schema version of the writing binary (records keep their own stamps).
    pub schema_version: u32,
    /// The exported scope; `null` for every scope.
    pub scope: Option<String>,
    /// Whether vectors were written.
    pub vectors: bool,
}

/// Last line of an export.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct End {
    /// How many record lines precede it.
    pub records: u64,
    /// How many audit lines precede it (0 in a version 1 file).
    #[serde(default)]
    pub audit_events: u64,
}

/// An `audit` line: one event of the audit log, its fields as `spine audit --json` prints
/// them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct AuditLine {
    at: String,
    actor: String,
    owner: String,
    lane: String,
    client: String,
    action: String,
    scope: String,
    record_ids: Vec<String>,
    outcome: String,
    trace_id: String,
}

impl AuditLine {
    fn of(e: &AuditEvent) -> AuditLine {
        AuditLine {
            at: e.at.to_rfc3339(),
            actor: e.actor.clone(),
            owner: e.owner.clone(),
            lane: e.lane.as_str().to_owned(),
            client: e.client.clone(),
            action: e.action.clone(),
            scope: e.scope.clone(),
            record_ids: e.record_ids.iter().map(RecordId::to_string).collect(),
            outcome: e.outcome.clone(),
            trace_id: e.trace_id.clone(),
        }
    }

    fn event(self) -> Result<AuditEvent, String> {
        let at = Timestamp::parse_rfc3339(&self.at)
            .ok_or_else(|| format!("audit.at is not an RFC 3339 time: {:?}", self.at))?;
        let lane = Lane::parse(&self.lane)
            .ok_or_else(|| format!("audit.lane {:?} is no lane", self.lane))?;
        let record_ids = self
            .record_ids
            .iter()
            .map(|id| {
                RecordId::parse(id)
                    .ok_or_else(|| format!("audit.record_ids: {id:?} is no record id"))
            })
            .collect::<Result<_, _>>()?;
        Ok(AuditEvent {
            at,
            actor: self.actor,
            owner: self.owner,
            lane,
            client: self.client,
            action: self.action,
            scope: self.scope,
            record_ids,
            outcome: self.outcome,
            trace_id: self.trace_id,
        })
    }
}

/// The header line, as written.
#[derive(Serialize)]
pub(super) struct HeaderLine<'a> {
    pub(super) header: &'a Header,
}

/// The end line, as written.
#[derive(Serialize)]
pub(super) struct EndLine {
    pub(super) end: End,
}

/// The `vector` of a record line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct VectorLine {
    model: String,
    dims: usize,
    f32le: String,
}

/// One line of an export, parsed.
#[derive(Debug)]
pub enum Line<'a> {
    /// The header.
    Header(Header),
    /// A record: its payload as written, decoded, and its vector (embedder id, components).
    Record {
        /// The payload as written.
        body: &'a str,
        /// The payload decoded.
        memory: Box<Memory>,
        /// The vector: embedder id and components.
        vector: Option<(String, Vec<f32>)>,
    },
    /// An event of the audit log.
    Audit(Box<AuditEvent>),
    /// The end.
    End(End),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLine<'a> {
    #[serde(default)]
    header: Option<Header>,
    #[serde(borrow, default)]
    record: Option<&'a RawValue>,
    #[serde(default)]
    vector: Option<VectorLine>,
    #[serde(default)]
    audit: Option<AuditLine>,
    #[serde(default)]
    end: Option<End>,
}

/// Parses one line of an export file; the error says what is wrong with it.
pub fn parse_line(line: &str) -> Result<Line<'_>, String> {
    let raw: RawLine<'_> =
        serde_json::from_str(line).map_err(|e| format!("not a line of a spine export ({e})"))?;
    match (raw.header, raw.record, raw.end, raw.vector, raw.audit) {
        (None, None, None, None, Some(a)) => Ok(Line::Audit(Box::new(a.event()?))),
        (Some(h), None, None, None, None) => Ok(Line::Header(h)),
        (None, Some(record), None, vector, None) => {
            let body = record.get();
            let memory: Memory = serde_json::from_str(body)
                .map_err(|e| format!("the record is not a valid Spine record ({e})"))?;
            let vector = vector.map(decode_vector).transpose()?;
            Ok(Line::Record { body, memory: Box::new(memory), vector })
        }
        (None, None, Some(end), None, None) => Ok(Line::End(end)),
        _ => Err(ONE_OF.into()),
    }
}

const ONE_OF: &str =
    "a line holds exactly one of `header`, `record` (with an optional `vector`), `audit` or `end`";

/// Writes one audit line.
pub(super) fn write_audit(w: &mut (impl Write + ?Sized), e: &AuditEvent) -> std::io::Result<()> {
    #[derive(Serialize)]
    struct Wrapped {
        audit: AuditLine,
    }
    write_json_line(w, &Wrapped { audit: AuditLine::of(e) })
}

fn decode_vector(v: VectorLine) -> Result<(String, Vec<f32>), String> {
    if v.model.trim().is_empty() {
        return Err("vector.model is empty".into());
    }
    let bytes =
        STANDARD.decode(&v.f32le).map_err(|e| format!("vector.f32le is not base64 ({e})"))?;
    if v.dims == 0 || v.dims.checked_mul(4) != Some(bytes.len()) {
        return Err(format!(
            "vector.f32le holds {} bytes where {} dims need {}",
            bytes.len(),
            v.dims,
            v.dims.saturating_mul(4)
        ));
    }
    let vector = bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]));
    Ok((v.model, vector.collect()))
}

/// Writes one record line.
pub(super) fn write_record(w: &mut (impl Write + ?Sized), r: &StoredRecord) -> std::io::Result<()> {
    // A stored payload is compact JSON (serde or SQLite's json functions). Were a raw line
    // break ever in one, it could only sit between tokens (JSON strings escape them), where
    // a space means the same.
    let body = match r.body.contains(['\n', '\r']) {
        true => Cow::Owned(r.body.replace(['\n', '\r'], " ")),
        false => Cow::Borrowed(r.body.as_str()),
    };
    w.write_all(b"{\"record\":")?;
    w.write_all(body.as_bytes())?;
    if let Some(StoredVector { model, dims, data }) = &r.vector {
        let v = VectorLine { model: model.clone(), dims: *dims, f32le: STANDARD.encode(data) };
        w.write_all(b",\"vector\":")?;
        serde_json::to_writer(&mut *w, &v)?;
    }
    w.write_all(b"}\n")
}

/// Writes `value` as one JSON line.
pub(super) fn write_json_line(
    w: &mut (impl Write + ?Sized),
    value: &impl Serialize,
) -> std::io::Result<()> {
    serde_json::to_writer(&mut *w, value)?;
    w.write_all(b"\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use spine_core::SCHEMA_VERSION;

    fn fuzz_config() -> ProptestConfig {
        let cases = std::env::var("SPINE_FUZZ_CASES").ok().and_then(|c| c.parse().ok());
        ProptestConfig {
            cases: cases.unwrap_or(2_000),
            failure_persistence: None,
            ..ProptestConfig::default()
        }
    }

    /// A valid record line with a vector, to mutate.
    fn valid_line() -> String {
        let vector = StoredVector { model: "m:1".into(), dims: 2, data: vec![0; 8] };
        let mut out = Vec::new();
        write_record(&mut out, &stored(BODY, Some(vector))).unwrap();
        String::from_utf8(out).unwrap().trim_end().to_owned()
    }

    proptest! {
        #![proptest_config(fuzz_config())]

        /// Fuzzing the JSONL import reader's line parser: arbitrary text, and a valid line with
        /// a span cut out, replaced or duplicated. No panic; an error says what is wrong in a
        /// bounded message.
        #[test]
        fn fuzz_parse_line(
            noise in prop_oneof![any::<String>(), "[{}\\[\\]\":,a-z0-9 ]{0,80}"],
            at in any::<prop::sample::Index>(),
            len in 0usize..40,
            how in 0u8..4,
        ) {
            let valid = valid_line();
            let line = match how {
                0 => noise.clone(),
                _ => {
                    let mut bytes = valid.clone().into_bytes();
                    let start = at.index(bytes.len());
                    let end = (start + len).min(bytes.len());
                    match how {
                        1 => { bytes.drain(start..end); }
                        2 => { bytes.splice(start..end, noise.bytes()); }
                        _ => { let span = bytes[start..end].to_vec(); bytes.splice(start..start, span); }
                    }
                    String::from_utf8_lossy(&bytes).into_owned()
                }
            };
            if let Err(e) = parse_line(&line) {
                prop_assert!(!e.is_empty() && e.len() < 1_000, "{}", e);
            }
        }
    }

    fn stored(body: &str, vector: Option<StoredVector>) -> StoredRecord {
        StoredRecord { rowid: 1, id: "x".into(), body: body.into(), vector }
    }

    const BODY: &str = r#"{"id":"0190f5a0-0000-7000-8000-000000000001","short_id":"ABCDEFGHJK","content":"c","scope":"a:project:x","source":"user-said","category":"decision","tags":[],"summary_source":"","actor":"","owner":"","visibility":"","created_at":"2027-01-15T08:00:00Z","access_count":0,"schema_version":1,"later_key":[1,2]}"#;

    #[test]
    fn a_record_line_carries_the_payload_byte_for_byte_and_the_vector_bytes() {
        let v = [0.25f32, -3.5, f32::MIN_POSITIVE];
        let data: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        let vector = StoredVector { model: "m:1".into(), dims: 3, data };
        let mut out = Vec::new();
        write_record(&mut out, &stored(BODY, Some(vector))).unwrap();
        let line = String::from_utf8(out).unwrap();
        assert!(line.ends_with("}\n") && line.matches('\n').count() == 1);
        let Line::Record { body, memory, vector } = parse_line(line.trim_end()).unwrap() else {
            panic!("a record line")
        };
        assert_eq!(body, BODY, "unknown keys and key order survive");
        assert_eq!(memory.content, "c");
        assert_eq!(vector, Some(("m:1".to_owned(), v.to_vec())));
    }

    #[test]
    fn a_payload_with_a_line_break_still_makes_one_line() {
        let body = BODY.replace(",\"content\"", ",\n\"content\"");
        let mut out = Vec::new();
        write_record(&mut out, &stored(&body, None)).unwrap();
        let line = String::from_utf8(out).unwrap();
        assert_eq!(line.matches('\n').count(), 1);
        assert!(matches!(parse_line(line.trim_end()), Ok(Line::Record { vector: None, .. })));
    }

    #[test]
    fn malformed_lines_say_what_is_wrong() {
        let cases = [
            ("{", "not a line of a spine export"),
            (r#"{"record":{"content":"no id"}}"#, "not a valid Spine record"),
            (r#"{"recrod":{}}"#, "unknown field"),
            ("{}", "exactly one of"),
            (r#"{"end":{"records":1},"record":{}}"#, "exactly one of"),
            (
                r#"{"end":{"records":1},"vector":{"model":"m","dims":1,"f32le":"AAAAAA=="}}"#,
                "exactly one of",
            ),
        ];
        for (line, needle) in cases {
            let e = parse_line(line).unwrap_err();
            assert!(e.contains(needle), "{line}: {e}");
        }
        let with = |v: &str| format!(r#"{{"record":{BODY},"vector":{v}}}"#);
        for (v, needle) in [
            (r#"{"model":"m","dims":2,"f32le":"AAAAAA=="}"#, "holds 4 bytes where 2 dims need 8"),
            (r#"{"model":"m","dims":0,"f32le":""}"#, "0 dims"),
            (r#"{"model":"m","dims":1,"f32le":"***"}"#, "not base64"),
            (r#"{"model":"","dims":1,"f32le":"AAAAAA=="}"#, "model is empty"),
        ] {
            let e = parse_line(&with(v)).unwrap_err();
            assert!(e.contains(needle), "{v}: {e}");
        }
    }

    #[test]
    fn header_and_end_round_trip() {
        let header = Header {
            format: FORMAT.into(),
            version: FORMAT_VERSION,
            exported_at: "2027-01-15T08:00:00Z".into(),
            schema_version: SCHEMA_VERSION,
            scope: None,
            vectors: true,
        };
        let line = serde_json::to_string(&HeaderLine { header: &header }).unwrap();
        assert!(matches!(parse_line(&line), Ok(Line::Header(h)) if h == header));
        let line =
            serde_json::to_string(&EndLine { end: End { records: 7, audit_events: 2 } }).unwrap();
        assert!(matches!(parse_line(&line), Ok(Line::End(End { records: 7, audit_events: 2 }))));
        // A version 1 end line has no audit count.
        let v1 = parse_line(r#"{"end":{"records":7}}"#);
        assert!(matches!(v1, Ok(Line::End(End { records: 7, audit_events: 0 }))));
    }

    #[test]
    fn audit_lines_round_trip_to_the_microsecond_and_bad_ones_are_named() {
        let e = AuditEvent {
            at: Timestamp::from_micros(1_765_000_000_123_456),
            actor: "alice@example.com".into(),
            owner: "alice@example.com".into(),
            lane: Lane::Connect,
            client: "connect-es/2".into(),
            action: "archive_memory".into(),
            scope: "a:project:x".into(),
            record_ids: vec![RecordId::parse("0190f5a0-0000-7000-8000-000000000001").unwrap()],
            outcome: "ok".into(),
            trace_id: "4bf92f3577b34da6a3ce929d0e0e4736".into(),
        };
        let mut out = Vec::new();
        write_audit(&mut out, &e).unwrap();
        let line = String::from_utf8(out).unwrap();
        assert!(line.ends_with('\n') && line.starts_with(r#"{"audit":{"at":"#), "{line}");
        assert!(matches!(parse_line(line.trim_end()), Ok(Line::Audit(back)) if *back == e));
        let bad = line.replace("\"connect\"", "\"carrier-pigeon\"");
        let err = parse_line(bad.trim_end()).unwrap_err();
        assert!(err.contains("audit.lane"), "{err}");
        let both = line.trim_end().replacen("{\"audit\"", "{\"end\":{\"records\":1},\"audit\"", 1);
        assert!(parse_line(&both).unwrap_err().contains("exactly one of"));
    }
}
