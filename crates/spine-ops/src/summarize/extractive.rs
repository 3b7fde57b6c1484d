//! `builtin:extractive`: the offline summarizer (no network, no model, deterministic).
//!
//! The summary is the note's opening: its first sentences, in order, as many as fit in the
//! length bound (the first one cut on a word boundary when it alone is too long).
//!
//! Why the lead and not sentence scoring (TextRank, TF-IDF centrality): a memory is a short
//! note written to state its point up front ("Use X for Y because Z", "Tests need the
//! postgres container"), and the lead is the strongest simple extractive baseline even on
//! longer text such as news. Scoring methods need many sentences to estimate centrality,
//! and on notes of two to five sentences they tend to pick a sentence out of its context
//! ("Because of that, it is disabled."), so the summary no longer reads on its own. The
//! lead keeps the order and the antecedents, is O(n), and gives the same answer every time.
//! No maintained Rust crate does this with Markdown-aware sentence splitting, so it is
//! written here (it is short).
//!
//! Markdown is common in memories: fenced code blocks are skipped (unless the note is only
//! code), heading, list and quote markers are dropped, and a heading or a list item counts
//! as a sentence of its own.

/// The model name that selects this summarizer (`SPINE_SUMMARY_MODEL`), stored as
/// summary_model.
pub const MODEL: &str = "builtin:extractive";

/// The lead of `content` within `max_chars` characters; empty only for empty content.
pub fn summarize(content: &str, max_chars: usize) -> String {
    let mut units = units(content, true);
    if units.is_empty() {
        // Only code: its first lines are still the best description available.
        units = units_of_code(content);
    }
    let mut out = String::new();
    let mut out_chars = 0;
    let mut last_heading = false;
    for unit in units {
        let joint = if out.is_empty() {
            ""
        } else if out.ends_with(TERMINAL) {
            " "
        } else if last_heading {
            ": "
        } else {
            ". "
        };
        let added = joint.chars().count() + unit.text.chars().count();
        if out_chars + added > max_chars {
            if out.is_empty() {
                out = super::bound_chars(&unit.text, max_chars);
            }
            break;
        }
        out.push_str(joint);
        out.push_str(&unit.text);
        out_chars += added;
        last_heading = unit.heading;
    }
    out
}

/// Characters that end a sentence (or a heading that needs no added colon).
const TERMINAL: &[char] = &['.', '!', '?', '…', ':', ';', '。', '！', '？'];

/// A sentence, heading or list item, in reading order.
#[derive(Debug, PartialEq)]
struct Unit {
    text: String,
    heading: bool,
}

/// The sentences of the prose of `content`: fenced code skipped when `skip_code`.
fn units(content: &str, skip_code: bool) -> Vec<Unit> {
    let mut out = Vec::new();
    let mut paragraph = String::new();
    let mut in_code = false;
    let flush = |paragraph: &mut String, out: &mut Vec<Unit>| {
        out.extend(
            sentences(paragraph).into_iter().map(|s| Unit { text: s.to_owned(), heading: false }),
        );
        paragraph.clear();
    };
    for line in content.lines() {
        let line = line.trim();
        if line.starts_with("```") || line.starts_with("~~~") {
            flush(&mut paragraph, &mut out);
            in_code = !in_code;
            continue;
        }
        if in_code && skip_code {
            continue;
        }
        if line.is_empty() {
            flush(&mut paragraph, &mut out);
            continue;
        }
        let (text, block) = strip_markers(line);
        if text.is_empty() {
            continue;
        }
        match block {
            Block::Heading => {
                flush(&mut paragraph, &mut out);
                out.push(Unit { text: collapse(text), heading: true });
            }
            Block::Item => {
                flush(&mut paragraph, &mut out);
                paragraph.push_str(text);
            }
            Block::Text => {
                if !paragraph.is_empty() {
                    paragraph.push(' ');
                }
                paragraph.push_str(text);
            }
        }
    }
    flush(&mut paragraph, &mut out);
    out
}

/// Every non-empty line, code included, as sentences (a note that is only code).
fn units_of_code(content: &str) -> Vec<Unit> {
    let fences = |l: &&str| !(l.trim().starts_with("```") || l.trim().starts_with("~~~"));
    let text: Vec<&str> = content.lines().filter(fences).collect();
    units(&text.join("\n"), false)
}

/// What a line starts.
#[derive(Debug, PartialEq)]
enum Block {
    Heading,
    Item,
    Text,
}

/// The line without its Markdown block markers (`#`, `>`, `-`, `*`, `+`, `1.`, `[ ]`).
fn strip_markers(line: &str) -> (&str, Block) {
    let mut s = line;
    while let Some(rest) = s.strip_prefix('>') {
        s = rest.trim_start();
    }
    let hashes = s.chars().take_while(|&c| c == '#').count();
    if (1..=6).contains(&hashes) && s[hashes..].starts_with(' ') {
        return (s[hashes..].trim().trim_end_matches('#').trim_end(), Block::Heading);
    }
    let digits = s.chars().take_while(char::is_ascii_digit).count();
    let item = if let Some(rest) = ["- ", "* ", "+ "].iter().find_map(|m| s.strip_prefix(m)) {
        Some(rest)
    } else if digits > 0 && (s[digits..].starts_with(". ") || s[digits..].starts_with(") ")) {
        Some(&s[digits + 2..])
    } else {
        None
    };
    match item {
        Some(rest) => {
            let rest = rest.trim_start();
            let rest =
                ["[ ] ", "[x] ", "[X] "].iter().find_map(|m| rest.strip_prefix(m)).unwrap_or(rest);
            (rest.trim(), Block::Item)
        }
        None => (s, Block::Text),
    }
}

/// Abbreviations whose final dot does not end a sentence (lowercase, without that dot).
const ABBREVIATIONS: &[&str] =
    &["e.g", "i.e", "etc", "vs", "cf", "approx", "incl", "mr", "mrs", "ms", "dr", "no", "fig"];

/// The sentences of a paragraph, whitespace collapsed. A sentence ends at `.`, `!`, `?` or
/// `…` (with any closing quotes or brackets) followed by whitespace and a character that is
/// not a lowercase letter, unless the word is a known abbreviation; or at a CJK full stop.
fn sentences(paragraph: &str) -> Vec<String> {
    let text = collapse(paragraph);
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    let mut out = Vec::new();
    let mut start = 0;
    let mut i = 0;
    while i < chars.len() {
        let (_, c) = chars[i];
        let cjk = matches!(c, '。' | '！' | '？');
        if !(cjk || matches!(c, '.' | '!' | '?' | '…')) {
            i += 1;
            continue;
        }
        // The whole run of terminators and closers.
        let mut end = i + 1;
        while end < chars.len()
            && matches!(
                chars[end].1,
                '.' | '!' | '?' | '…' | '"' | '\'' | '”' | '’' | ')' | ']' | '。' | '！' | '？'
            )
        {
            end += 1;
        }
        let byte_end = chars.get(end).map_or(text.len(), |&(b, _)| b);
        let boundary = cjk
            || match chars.get(end) {
                None => true,
                Some(&(_, ' ')) => {
                    let lowercase_next = chars.get(end + 1).is_some_and(|&(_, n)| n.is_lowercase());
                    let abbreviation = c == '.' && is_abbreviation(&text[start..chars[i].0]);
                    !(lowercase_next || abbreviation)
                }
                Some(_) => false,
            };
        if boundary {
            let sentence = text[start..byte_end].trim();
            if !sentence.is_empty() {
                out.push(sentence.to_owned());
            }
            start = byte_end;
        }
        i = end;
    }
    let rest = text[start..].trim();
    if !rest.is_empty() {
        out.push(rest.to_owned());
    }
    out
}

/// Whether the last word of `before` (the text up to a dot) is an abbreviation or an
/// initial ("J.").
fn is_abbreviation(before: &str) -> bool {
    let word = before.rsplit(' ').next().unwrap_or("").trim_start_matches(['(', '"', '\'']);
    let lower = word.to_lowercase();
    ABBREVIATIONS.contains(&lower.as_str())
        || (word.chars().count() == 1 && word.chars().all(char::is_uppercase))
}

/// Runs of whitespace (newlines included) as one space, trimmed.
fn collapse(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_note_is_its_own_summary() {
        let note = "Integration tests need the postgres container running.";
        assert_eq!(summarize(note, 280), note);
        assert_eq!(summarize("  one\n  line  ", 280), "one line");
    }

    #[test]
    fn the_lead_sentences_that_fit_are_kept_in_order() {
        let note = "Use rustls, not OpenSSL. The CI image has no libssl. \
                    Switching back breaks the musl build, which ships to customers.";
        assert_eq!(summarize(note, 60), "Use rustls, not OpenSSL. The CI image has no libssl.");
        assert_eq!(summarize(note, 30), "Use rustls, not OpenSSL.");
    }

    #[test]
    fn a_long_first_sentence_is_cut_on_a_word_boundary() {
        let note = "The deployment pipeline rebuilds every container image from scratch \
                    whenever the lockfile changes, which takes twenty minutes.";
        let s = summarize(note, 50);
        assert!(s.chars().count() <= 50, "{s}");
        assert_eq!(s, "The deployment pipeline rebuilds every container…");
    }

    #[test]
    fn abbreviations_versions_and_paths_do_not_end_sentences() {
        let got = sentences(
            "Pin deps, e.g. serde 1.0.200 in Cargo.toml. Dr. Smith agreed. See src/main.rs for it.",
        );
        assert_eq!(
            got,
            [
                "Pin deps, e.g. serde 1.0.200 in Cargo.toml.",
                "Dr. Smith agreed.",
                "See src/main.rs for it."
            ]
        );
        assert_eq!(
            sentences("Why? Because \"it broke.\" Then x"),
            ["Why?", "Because \"it broke.\"", "Then x"]
        );
        assert_eq!(sentences("构建很慢。请使用缓存。"), ["构建很慢。", "请使用缓存。"]);
    }

    #[test]
    fn markdown_headings_lists_and_code_are_handled() {
        let note = "## Deploy\n\nRun `make deploy` from main.\n\n```sh\nmake deploy\n```\n\n\
                    - needs VPN\n- takes 5 minutes\n";
        assert_eq!(
            summarize(note, 280),
            "Deploy: Run `make deploy` from main. needs VPN. takes 5 minutes"
        );
        assert_eq!(summarize(note, 40), "Deploy: Run `make deploy` from main.");
    }

    #[test]
    fn a_note_that_is_only_code_is_summarized_from_its_code() {
        let note = "```\ncargo test -p spine --test summarize\n```";
        assert_eq!(summarize(note, 280), "cargo test -p spine --test summarize");
    }

    #[test]
    fn empty_content_has_no_summary() {
        assert_eq!(summarize("", 280), "");
        assert_eq!(summarize(" \n\n ", 280), "");
    }

    #[test]
    fn deterministic() {
        let note = "A. B c. D e f? G!";
        assert_eq!(summarize(note, 280), summarize(note, 280));
    }
}
