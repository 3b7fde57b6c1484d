//! SPEC "Limits": every bound, its default, its environment override, and the check that
//! enforces it.

use crate::{Citation, Error, Hint};

/// Maximum bytes of one id argument (SPEC Limits: archive/restore/supersede entries).
pub const MAX_ID_BYTES: usize = 256;

/// Upper bound of `k` and every `limit` (SPEC Limits).
pub const MAX_PAGE: u64 = 1000;
/// Default `k` of search_memory / search_discovery / related_memories.
pub const DEFAULT_K: u64 = 8;
/// Default `limit` of list_memory / list_scheduled.
pub const DEFAULT_LIST_LIMIT: u64 = 20;
/// Default `limit` of the Connect API's ListMemories (SPEC list_memory: "on the Connect
/// lane an unset limit resolves to 1000").
pub const CONNECT_LIST_LIMIT: u64 = 1000;
/// Default `limit` of list_tags.
pub const DEFAULT_TAGS_LIMIT: u64 = 100;
/// Default longest auto summary, in characters (SPEC Limits: `SERVICE_SUMMARY_MAX_CHARS`,
/// default 280; `spine summarize-missing --summary-max-chars`).
pub const DEFAULT_SUMMARY_CHARS: usize = 280;
/// Ids per archive / restore call: archive_memory and restore_memory (SPEC Limits), the
/// Connect API's ArchiveMemory / RestoreMemory, and `spine spine-review archive|restore`.
pub const MAX_BATCH_IDS: usize = 1000;
/// Citations per record.
pub const MAX_CITATIONS: usize = 50;
/// Bytes of one citation excerpt (16 KiB).
pub const MAX_EXCERPT_BYTES: usize = 16 * 1024;
/// Bytes of a citation's `ref`, `locator` or `pin` (ours; SPEC does not bound them).
pub const MAX_CITATION_FIELD_BYTES: usize = 4096;
/// Bytes of each context field (repo, workspace, worktree_path, base_dir); ours.
pub const MAX_CONTEXT_BYTES: usize = 4096;
/// Discovery content (64 KiB).
pub const MAX_DISCOVERY_CONTENT_BYTES: usize = 64 * 1024;
/// Rule content (8 KiB).
pub const MAX_RULE_CONTENT_BYTES: usize = 8 * 1024;
/// Rule summary bytes (one physical line).
pub const MAX_RULE_SUMMARY_BYTES: usize = 256;
/// list_rules: most rules listed per scope (with `scopes`) or in total (without).
pub const MAX_RULES_LISTED: usize = 1000;
/// list_rules: a scope holding more rules than this earns an `advisory`.
pub const RULES_ADVISORY_ABOVE: usize = 50;
/// Bytes of a search query (ours: the embedder reads 256 tokens; this bounds the work).
pub const MAX_QUERY_BYTES: usize = 16 * 1024;

/// The configurable limits: [`Limits::default`] is the SPEC's; the binary takes each as a
/// flag or its `SPINE_MEMORY_*` variable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// `SPINE_MEMORY_MAX_CONTENT_BYTES`, default 65536.
    pub max_content_bytes: usize,
    /// `SPINE_MEMORY_MAX_TAGS`, default 128.
    pub max_tags: usize,
    /// `SPINE_MEMORY_MAX_TAG_BYTES`, default 128.
    pub max_tag_bytes: usize,
    /// `SPINE_MEMORY_MAX_SUMMARY_BYTES`, default 512.
    pub max_summary_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_content_bytes: 65536,
            max_tags: 128,
            max_tag_bytes: 128,
            max_summary_bytes: 512,
        }
    }
}

impl Limits {
    /// Memory content: required, non-blank, at most `max_content_bytes`.
    pub fn check_content(&self, content: &str) -> Result<(), Error> {
        check_content_bytes(content, self.max_content_bytes)
    }

    /// Tags: at most `max_tags`, each non-blank, one line, at most `max_tag_bytes`.
    pub fn check_tags(&self, field: &str, tags: &[String]) -> Result<(), Error> {
        if tags.len() > self.max_tags {
            return Err(Error::invalid(
                field,
                Hint::TooMany,
                format!("{} tags given; at most {} per record", tags.len(), self.max_tags),
            ));
        }
        for (i, tag) in tags.iter().enumerate() {
            let f = format!("{field}[{i}]");
            if tag.trim().is_empty() {
                return Err(Error::invalid(f, Hint::Blank, "a tag must not be blank"));
            }
            if tag.len() > self.max_tag_bytes {
                return Err(Error::invalid(
                    f,
                    Hint::TooLong,
                    format!("tag is {} bytes; at most {}", tag.len(), self.max_tag_bytes),
                ));
            }
            if tag.chars().any(char::is_control) {
                return Err(Error::invalid(
                    f,
                    Hint::InvalidValue,
                    "a tag must not contain control characters",
                ));
            }
        }
        Ok(())
    }

    /// Client summary: at most `max_summary_bytes` (empty = none).
    pub fn check_summary(&self, summary: &str) -> Result<(), Error> {
        if summary.len() > self.max_summary_bytes {
            return Err(Error::invalid(
                "summary",
                Hint::TooLong,
                format!("summary is {} bytes; at most {}", summary.len(), self.max_summary_bytes),
            ));
        }
        Ok(())
    }
}

/// Content bound shared by every record kind: non-blank and at most `max` bytes.
pub fn check_content_bytes(content: &str, max: usize) -> Result<(), Error> {
    check_text("content", content, max)
}

/// An id argument named `field`, whatever it turns out to name (`IdRef::parse`, and each
/// entry `field[i]` of archive/restore's and supersede_memory's id lists): non-blank and at
/// most [`MAX_ID_BYTES`].
pub fn check_id_text(field: &str, input: &str) -> Result<(), Error> {
    check_text(field, input, MAX_ID_BYTES)
}

/// A text argument named `field` (a record's content, a search query): non-blank and at
/// most `max` bytes.
pub fn check_text(field: &str, text: &str, max: usize) -> Result<(), Error> {
    if text.trim().is_empty() {
        return Err(Error::invalid(field, Hint::Blank, format!("{field} must not be blank")));
    }
    if text.len() > max {
        return Err(Error::invalid(
            field,
            Hint::TooLong,
            format!("{field} is {} bytes; at most {max}", text.len()),
        ));
    }
    Ok(())
}

/// Citations: at most 50; `ref` non-blank; excerpt at most 16 KiB.
pub fn check_citations(citations: &[Citation]) -> Result<(), Error> {
    if citations.len() > MAX_CITATIONS {
        return Err(Error::invalid(
            "citations",
            Hint::TooMany,
            format!("{} citations given; at most {MAX_CITATIONS}", citations.len()),
        ));
    }
    for (i, c) in citations.iter().enumerate() {
        if c.reference.trim().is_empty() {
            return Err(Error::invalid(
                format!("citations[{i}].ref"),
                Hint::Blank,
                "ref must not be blank",
            ));
        }
        for (name, value) in [("ref", &c.reference), ("locator", &c.locator), ("pin", &c.pin)] {
            if value.len() > MAX_CITATION_FIELD_BYTES {
                return Err(Error::invalid(
                    format!("citations[{i}].{name}"),
                    Hint::TooLong,
                    format!("{name} is {} bytes; at most {MAX_CITATION_FIELD_BYTES}", value.len()),
                ));
            }
        }
        if c.excerpt.len() > MAX_EXCERPT_BYTES {
            return Err(Error::invalid(
                format!("citations[{i}].excerpt"),
                Hint::TooLong,
                format!(
                    "excerpt is {} bytes; at most {MAX_EXCERPT_BYTES} (16 KiB)",
                    c.excerpt.len()
                ),
            ));
        }
    }
    Ok(())
}

/// Context fields (repo, workspace, worktree_path, base_dir): at most 4096 bytes each.
pub fn check_context(field: &str, value: &str) -> Result<(), Error> {
    if value.len() > MAX_CONTEXT_BYTES {
        return Err(Error::invalid(
            field,
            Hint::TooLong,
            format!("{field} is {} bytes; at most {MAX_CONTEXT_BYTES}", value.len()),
        ));
    }
    Ok(())
}

/// SPEC: `k`/`limit` — absent or 0 resolves to `default`; above 1000 is out_of_range.
pub fn resolve_page(field: &str, value: Option<u64>, default: u64) -> Result<usize, Error> {
    match value.unwrap_or(0) {
        0 => Ok(default as usize),
        n if n > MAX_PAGE => Err(Error::invalid(
            field,
            Hint::OutOfRange,
            format!("{field} is {n}; the maximum is {MAX_PAGE} (0 means the default, {default})"),
        )),
        n => Ok(n as usize),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::CitationKind;

    #[test]
    fn k_zero_resolves_to_default_and_1000_is_the_maximum() {
        assert_eq!(resolve_page("k", Some(0), DEFAULT_K).unwrap(), 8);
        assert_eq!(resolve_page("k", None, DEFAULT_K).unwrap(), 8);
        assert_eq!(resolve_page("k", Some(1), DEFAULT_K).unwrap(), 1);
        assert_eq!(resolve_page("k", Some(1000), DEFAULT_K).unwrap(), 1000);
    }

    #[test]
    fn k_above_1000_is_out_of_range() {
        let e = resolve_page("k", Some(1001), DEFAULT_K).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("k"));
        assert_eq!(e.hint, Some(Hint::OutOfRange));
    }

    #[test]
    fn content_at_limit_passes_and_one_more_byte_fails() {
        let l = Limits::default();
        assert!(l.check_content(&"x".repeat(65536)).is_ok());
        assert_eq!(l.check_content(&"x".repeat(65537)).unwrap_err().hint, Some(Hint::TooLong));
        assert_eq!(l.check_content(" \n").unwrap_err().hint, Some(Hint::Blank));
    }

    #[test]
    fn tags_bounds_at_n_and_n_plus_one() {
        let l = Limits::default();
        assert!(l.check_tags("tags", &vec!["t".into(); 128]).is_ok());
        assert_eq!(
            l.check_tags("tags", &vec!["t".into(); 129]).unwrap_err().hint,
            Some(Hint::TooMany)
        );
        assert!(l.check_tags("tags", &["x".repeat(128)]).is_ok());
        let e = l.check_tags("tags", &["ok".into(), "x".repeat(129)]).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("tags[1]"));
    }

    #[test]
    fn summary_bound() {
        let l = Limits::default();
        assert!(l.check_summary(&"s".repeat(512)).is_ok());
        assert!(l.check_summary(&"s".repeat(513)).is_err());
    }

    #[test]
    fn citation_bounds() {
        let c = Citation {
            kind: CitationKind::File,
            reference: "src/lib.rs".into(),
            locator: String::new(),
            pin: String::new(),
            excerpt: "e".repeat(MAX_EXCERPT_BYTES),
        };
        assert!(check_citations(&vec![c.clone(); 50]).is_ok());
        assert_eq!(check_citations(&vec![c.clone(); 51]).unwrap_err().hint, Some(Hint::TooMany));
        let mut long = c;
        long.excerpt.push('e');
        let e = check_citations(&[long]).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("citations[0].excerpt"));
    }
}
