//! The eval corpus: documented public functions of the crates in [`CRATES`], at their
//! `Cargo.lock` versions, read from cargo's registry source cache, as (query, document)
//! pairs (the method is in `eval.rs`).

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use rand::SeedableRng;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use spine_core::Limits;

/// The crates the corpus is drawn from, each at its version in `Cargo.lock`: well-documented
/// libraries of different domains (parsing, regular expressions, SQL, async I/O, HTTP, CLI,
/// dates, URLs, collections, tracing, bytes, TLS, UUIDs, iterators).
pub const CRATES: &[&str] = &[
    "serde_json",
    "regex-syntax",
    "regex-automata",
    "aho-corasick",
    "memchr",
    "rusqlite",
    "tokio",
    "hyper",
    "http",
    "reqwest",
    "clap_builder",
    "chrono",
    "url",
    "indexmap",
    "itertools",
    "tracing-core",
    "bytes",
    "rustls",
    "uuid",
];

/// More crates for `spine-bench corpus` (the end-to-end benchmarks' documents), which needs
/// more 460-character documents than [`CRATES`] make; the eval uses [`CRATES`] only.
pub const MORE_CRATES: &[&str] = &[
    "aws-lc-rs",
    "axum",
    "base64",
    "candle-core",
    "candle-nn",
    "futures-util",
    "h2",
    "half",
    "hashbrown",
    "hyper-util",
    "idna",
    "jsonwebtoken",
    "lru",
    "mio",
    "num-traits",
    "postgres-types",
    "nom",
    "p256",
    "parking_lot",
    "prost",
    "quinn",
    "rand",
    "rayon",
    "regex",
    "rmcp",
    "ring",
    "rsa",
    "rustix",
    "rustls-webpki",
    "schemars",
    "serde",
    "smallvec",
    "syn",
    "tokenizers",
    "tokio-postgres",
    "tokio-util",
    "tower",
    "tower-http",
    "tracing",
    "tracing-subscriber",
    "winnow",
    "zerocopy",
];

/// Seed of the document sample.
pub const SEED: u64 = 2019;
/// Fewest words in a query.
pub const MIN_QUERY_WORDS: usize = 4;
/// Fewest non-blank lines of a document.
pub const MIN_CODE_LINES: usize = 4;
/// One query and its relevant document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pair {
    /// First sentence of the doc comment.
    pub query: String,
    /// The function without its doc comment.
    pub code: String,
    /// 1-based line of the signature.
    pub line: usize,
}

/// One crate of the corpus.
pub struct CrateSource {
    pub name: &'static str,
    pub version: String,
    /// Functions kept from it (after de-duplication).
    pub kept: usize,
    /// Of those, sampled.
    pub sampled: usize,
}

/// The registry packages of a `Cargo.lock`: name → versions.
fn locked_versions(lock: &str) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for block in lock.split("[[package]]").skip(1) {
        let field = |key: &str| {
            block.lines().find_map(|l| {
                l.strip_prefix(key)
                    .and_then(|r| r.trim().strip_prefix('='))
                    .map(|v| v.trim().trim_matches('"').to_owned())
            })
        };
        let (Some(name), Some(version), Some(source)) =
            (field("name "), field("version "), field("source "))
        else {
            continue;
        };
        if source.starts_with("registry+") || source.starts_with("sparse+") {
            out.entry(name).or_default().push(version);
        }
    }
    out
}

/// Numeric ordering key of a version (`1.10.0` after `1.9.3`).
fn version_key(v: &str) -> Vec<u64> {
    v.split(['.', '-', '+']).map(|p| p.parse().unwrap_or(0)).collect()
}

/// The directories cargo unpacks registry sources into, sorted.
fn registry_roots() -> Result<Vec<PathBuf>> {
    let home = match std::env::var_os("CARGO_HOME") {
        Some(h) => PathBuf::from(h),
        None => PathBuf::from(std::env::var_os("HOME").context("neither CARGO_HOME nor HOME")?)
            .join(".cargo"),
    };
    let src = home.join("registry").join("src");
    let mut roots: Vec<PathBuf> = std::fs::read_dir(&src)
        .with_context(|| format!("reading {}", src.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_dir())
        .collect();
    roots.sort();
    Ok(roots)
}

/// Every `.rs` file under `dir`, in sorted path order.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .map(|e| e.map(|e| e.path()))
        .collect::<std::io::Result<_>>()?;
    entries.sort();
    for p in entries {
        if p.is_dir() {
            rust_files(&p, out)?;
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
    Ok(())
}

/// Whether `line` (trimmed) starts a public function: `pub` then optional `const`, `async`,
/// `unsafe`, `extern "…"`, then `fn name`.
fn is_pub_fn(line: &str) -> bool {
    let Some(mut rest) = line.strip_prefix("pub ") else {
        return false;
    };
    loop {
        rest = rest.trim_start();
        if let Some(r) = ["const ", "async ", "unsafe "].iter().find_map(|q| rest.strip_prefix(q)) {
            rest = r;
        } else if let Some(r) = rest.strip_prefix("extern ") {
            let r = r.trim_start();
            rest = match r.strip_prefix('"').and_then(|r| r.split_once('"')) {
                Some((_, after)) => after,
                None => r,
            };
        } else {
            break;
        }
    }
    rest.strip_prefix("fn ")
        .is_some_and(|r| r.trim_start().starts_with(|c: char| c.is_alphabetic() || c == '_'))
}

/// Byte length of the UTF-8 character starting with `b`.
fn utf8_len(b: u8) -> usize {
    match b {
        0xF0..=0xFF => 4,
        0xE0..=0xEF => 3,
        0xC0..=0xDF => 2,
        _ => 1,
    }
}

/// If a comment, string, raw string or character literal starts at `i`, the offset just past
/// it; `None` otherwise.
fn skip_literal(s: &[u8], i: usize) -> Option<usize> {
    let at = |j: usize| s.get(j).copied().unwrap_or(0);
    let ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    match at(i) {
        b'/' if at(i + 1) == b'/' => {
            Some(s[i..].iter().position(|&b| b == b'\n').map_or(s.len(), |p| i + p))
        }
        b'/' if at(i + 1) == b'*' => {
            let (mut j, mut depth) = (i + 2, 1);
            while j < s.len() && depth > 0 {
                if at(j) == b'/' && at(j + 1) == b'*' {
                    depth += 1;
                    j += 2;
                } else if at(j) == b'*' && at(j + 1) == b'/' {
                    depth -= 1;
                    j += 2;
                } else {
                    j += 1;
                }
            }
            Some(j)
        }
        b'"' => {
            let mut j = i + 1;
            while j < s.len() && at(j) != b'"' {
                j += if at(j) == b'\\' { 2 } else { 1 };
            }
            Some(j + 1)
        }
        b'r' if (i == 0
            || !ident(at(i - 1))
            || (at(i - 1) == b'b' && (i < 2 || !ident(at(i - 2)))))
            && matches!(at(i + 1), b'"' | b'#') =>
        {
            let hashes = s[i + 1..].iter().take_while(|&&b| b == b'#').count();
            if at(i + 1 + hashes) != b'"' {
                return None;
            }
            let mut j = i + 2 + hashes;
            while j < s.len() {
                if at(j) == b'"'
                    && s[j + 1..].iter().take(hashes).filter(|&&b| b == b'#').count() == hashes
                {
                    return Some(j + 1 + hashes);
                }
                j += 1;
            }
            Some(s.len())
        }
        b'\'' => {
            if at(i + 1) == b'\\' {
                // '\n', '\'', '\u{…}'
                let mut j = i + 3;
                while j < s.len() && at(j) != b'\'' && j < i + 12 {
                    j += 1;
                }
                Some(j + 1)
            } else if at(i + 1) != 0 && at(i + 1 + utf8_len(at(i + 1))) == b'\'' {
                Some(i + 2 + utf8_len(at(i + 1)))
            } else {
                None // a lifetime or a label
            }
        }
        _ => None,
    }
}

/// The end (exclusive) of the function whose signature starts at `start`: just past the
/// brace closing its body. `None` for a signature without a body (`;`) or unbalanced text.
fn function_end(s: &[u8], start: usize) -> Option<usize> {
    let (mut i, mut nest, mut body) = (start, 0i32, 0i32);
    let mut in_body = false;
    while i < s.len() {
        if let Some(next) = skip_literal(s, i) {
            i = next;
            continue;
        }
        match s[i] {
            b'(' | b'[' if !in_body => nest += 1,
            b')' | b']' if !in_body => nest -= 1,
            b';' if !in_body && nest == 0 => return None,
            b'{' if in_body || nest == 0 => {
                in_body = true;
                body += 1;
            }
            b'}' if in_body => {
                body -= 1;
                if body == 0 {
                    return Some(i + 1);
                }
            }
            _ => {}
        }
        i += 1;
    }
    None
}

/// Markdown to plain text: `[text](url)` and `[text][ref]` become `text`; backticks and `*`
/// go; spacing collapses.
fn plain(md: &str) -> String {
    let mut out = String::with_capacity(md.len());
    let mut chars = md.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '`' | '*' | '[' => {}
            ']' => match chars.peek() {
                Some('(') => {
                    for d in chars.by_ref() {
                        if d == ')' {
                            break;
                        }
                    }
                }
                Some('[') => {
                    for d in chars.by_ref() {
                        if d == ']' {
                            break;
                        }
                    }
                }
                _ => {}
            },
            c => out.push(c),
        }
    }
    out.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The first sentence of a doc comment's first paragraph, without its final period, when it
/// has at least [`MIN_QUERY_WORDS`] words.
pub fn first_sentence(doc: &[String]) -> Option<String> {
    let first = doc.iter().map(|l| l.trim()).skip_while(|l| l.is_empty());
    let paragraph: Vec<&str> = first.take_while(|l| !l.is_empty()).collect();
    let head = paragraph.first()?;
    if head.starts_with('#') || head.starts_with("```") || head.starts_with('|') {
        return None;
    }
    let text = plain(&paragraph.join(" "));
    let words: Vec<&str> = text.split(' ').collect();
    let mut sentence = Vec::new();
    for w in words {
        sentence.push(w);
        let abbreviation = ["e.g.", "i.e.", "etc.", "vs.", "cf.", "approx.", "resp."]
            .iter()
            .any(|a| w.eq_ignore_ascii_case(a) || w.ends_with(&format!("({a}")));
        if !abbreviation && (w.ends_with('.') || w.ends_with('?') || w.ends_with('!')) {
            break;
        }
    }
    let s = sentence.join(" ");
    let s = s.trim_end_matches('.').trim();
    (s.split_whitespace().count() >= MIN_QUERY_WORDS).then(|| s.to_owned())
}

/// Whether a trimmed line is a doc comment (`///` or `//!`, but not a `////` rule).
fn is_doc_line(t: &str) -> bool {
    (t.starts_with("///") && !t.starts_with("////")) || t.starts_with("//!")
}

/// The documented public functions of one source file.
pub fn extract(text: &str) -> Vec<Pair> {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut doc: Vec<String> = Vec::new();
    let mut attr_depth = 0i32; // open brackets of an attribute spanning lines
    let mut macro_depth: Option<i32> = None; // brace depth inside a macro_rules! body
    let mut offset = 0;
    for (index, line) in text.split_inclusive('\n').enumerate() {
        let start = offset;
        offset += line.len();
        let t = line.trim();
        if let Some(d) = macro_depth.as_mut() {
            *d += line.matches('{').count() as i32 - line.matches('}').count() as i32;
            if *d <= 0 {
                macro_depth = None;
            }
            continue;
        }
        if t.starts_with("macro_rules!") {
            let d = line.matches('{').count() as i32 - line.matches('}').count() as i32;
            macro_depth = (d > 0 || !t.contains('}')).then_some(d);
            doc.clear();
            continue;
        }
        if attr_depth > 0 {
            attr_depth += t.matches('[').count() as i32 - t.matches(']').count() as i32;
            continue;
        }
        if let Some(d) = t.strip_prefix("///").filter(|_| is_doc_line(t)) {
            doc.push(d.strip_prefix(' ').unwrap_or(d).to_owned());
            continue;
        }
        if doc.is_empty() {
            continue;
        }
        if t.starts_with("#[") {
            attr_depth = t.matches('[').count() as i32 - t.matches(']').count() as i32;
            continue;
        }
        if is_pub_fn(t) && !line.contains('$') {
            let indent = line.len() - line.trim_start().len();
            if let Some(end) = function_end(bytes, start + indent)
                && let Some(query) = first_sentence(&doc)
            {
                let end = text[end..].find('\n').map_or(text.len(), |p| end + p);
                let code = text[start..end]
                    .lines()
                    .filter(|l| !is_doc_line(l.trim_start()))
                    .map(|l| {
                        let ws = l.len() - l.trim_start().len();
                        &l[ws.min(indent)..]
                    })
                    .collect::<Vec<_>>()
                    .join("\n");
                if code.lines().filter(|l| !l.trim().is_empty()).count() >= MIN_CODE_LINES {
                    out.push(Pair { query, code, line: index + 1 });
                }
            }
        }
        doc.clear();
    }
    out
}

/// `s` cut to at most `max` bytes, at a character boundary.
fn truncate(mut s: String, max: usize) -> String {
    if s.len() > max {
        let mut cut = max;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
    }
    s
}

/// The corpus: its crates and `n` pairs sampled from them (seeded), in walk order.
pub struct Corpus {
    pub sources: Vec<CrateSource>,
    pub sample: Vec<Pair>,
    /// Documented functions found.
    pub extracted: usize,
    /// Left after de-duplication.
    pub available: usize,
}

/// Builds the corpus and samples `n` pairs.
pub fn corpus(n: usize, limits: &Limits) -> Result<Corpus> {
    corpus_of(CRATES, n, limits)
}

/// [`corpus`] drawn from `crates` (each a package of `Cargo.lock`).
pub fn corpus_of(crates: &[&'static str], n: usize, limits: &Limits) -> Result<Corpus> {
    let lock_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../Cargo.lock");
    let lock = std::fs::read_to_string(&lock_path)
        .with_context(|| format!("reading {}", lock_path.display()))?;
    let locked = locked_versions(&lock);
    let roots = registry_roots()?;
    let mut sources = Vec::new();
    let mut pairs: Vec<(usize, Pair)> = Vec::new(); // (index in sources, pair)
    let (mut seen_queries, mut seen_code) = (HashSet::new(), HashSet::new());
    let mut extracted = 0;
    for &name in crates {
        let mut versions = locked.get(name).cloned().unwrap_or_default();
        versions.sort_by_key(|v| version_key(v));
        let Some(version) = versions.pop() else {
            bail!(
                "{name} is not a registry package in Cargo.lock; the eval's crate list needs updating"
            );
        };
        let dir_name = format!("{name}-{version}");
        let Some(src) = roots.iter().map(|r| r.join(&dir_name).join("src")).find(|p| p.is_dir())
        else {
            bail!("the sources of {dir_name} are not in cargo's registry cache; run `cargo fetch`");
        };
        let mut files = Vec::new();
        rust_files(&src, &mut files)?;
        let mut kept = 0;
        for f in files {
            let text =
                std::fs::read_to_string(&f).with_context(|| format!("reading {}", f.display()))?;
            for mut p in extract(&text) {
                extracted += 1;
                let key = p.query.to_lowercase();
                p.code = truncate(p.code, limits.max_content_bytes);
                if seen_queries.contains(&key) || seen_code.contains(&p.code) {
                    continue;
                }
                seen_queries.insert(key);
                seen_code.insert(p.code.clone());
                pairs.push((sources.len(), p));
                kept += 1;
            }
        }
        sources.push(CrateSource { name, version, kept, sampled: 0 });
    }
    let available = pairs.len();
    if n > available {
        bail!("asked for {n} documents; the corpus has {available}");
    }
    let mut order: Vec<usize> = (0..available).collect();
    order.shuffle(&mut StdRng::seed_from_u64(SEED));
    order.truncate(n);
    order.sort_unstable(); // walk order: crate, file, line
    let sample: Vec<Pair> = order
        .iter()
        .map(|&i| {
            sources[pairs[i].0].sampled += 1;
            pairs[i].1.clone()
        })
        .collect();
    Ok(Corpus { sources, sample, extracted, available })
}

/// `n` documents of 460 characters and a query each, for the end-to-end benchmarks
/// (`spine-bench corpus`, scripts/bench-sdk.py): whole functions of [`CRATES`] and
/// [`MORE_CRATES`] in a fixed random order, joined (most functions are shorter) and cut at
/// 460 characters; the query is the first function's (the first sentence of its doc
/// comment), so no two documents answer the same query.
pub fn documents(n: usize) -> Result<Vec<(String, String)>> {
    let limits = Limits::default();
    let crates = [CRATES, MORE_CRATES].concat();
    let available = corpus_of(&crates, 0, &limits)?.available;
    let mut all = corpus_of(&crates, available, &limits)?.sample;
    all.shuffle(&mut StdRng::seed_from_u64(SEED));
    let mut out = Vec::with_capacity(n);
    let mut pairs = all.into_iter();
    while out.len() < n {
        let Some(first) = pairs.next() else {
            bail!("the corpus makes only {} documents of 460 characters", out.len());
        };
        let mut doc = first.code;
        while doc.chars().count() < 460 {
            let Some(next) = pairs.next() else { break };
            doc.push_str("\n\n");
            doc.push_str(&next.code);
        }
        out.push((doc.chars().take(460).collect(), first.query));
    }
    Ok(out)
}

/// `n` real texts of the corpus (the queries: short sentences, quick to embed) for
/// `scale.rs`, which shapes benchmark vectors after their embeddings.
pub fn real_texts(n: usize) -> Result<Vec<String>> {
    Ok(corpus(n, &Limits::default())?.sample.into_iter().map(|p| p.query).collect())
}

#[cfg(test)]
mod tests;
