//! The natural-language corpus of `spine-bench eval prose`: Debian package descriptions.
//!
//! The query is a package's one-line synopsis ("Real-time strategy game of ancient
//! warfare"), the one relevant document its long description: prose written by people,
//! paragraphs of a few hundred characters, as agents' notes are. Read from apt's English
//! translation index of Debian main (`*_main_i18n_Translation-en*` under
//! `/var/lib/apt/lists`, decompressed by `apt-helper cat-file`); images that set
//! `Acquire::Languages "none"` fetch it once with
//! `apt-get update -o Acquire::Languages=en`. `SPINE_BENCH_TRANSLATIONS=FILE` reads that index
//! from an uncompressed copy instead (for machines without apt, such as the device kit's).
//!
//! Kept: descriptions of [`MIN_BYTES`]..=[`MAX_BYTES`] bytes whose synopsis has at least
//! three words; a synopsis or a first paragraph seen before (families of packages sharing
//! one description, `foo` and `foo-data`) is dropped, so every query has one document that
//! answers it. A seeded shuffle picks the sample, as for the code corpus.

use std::collections::HashSet;
use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context, Result, bail};
use rand::SeedableRng;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;

use crate::corpus::{Pair, SEED};

/// Shortest long description kept.
pub const MIN_BYTES: usize = 200;
/// Longest long description kept (about twice the model's 256 tokens of prose).
pub const MAX_BYTES: usize = 2000;

/// `n` synopsis/description pairs (`usize::MAX`: all kept), with how many packages were read
/// and how many were kept.
pub fn pairs(n: usize) -> Result<(Vec<Pair>, usize, usize)> {
    let bytes = index_bytes(std::env::var_os("SPINE_BENCH_TRANSLATIONS"))?;
    select(&String::from_utf8_lossy(&bytes), n)
}

/// The translation index: the uncompressed `file` when given (`SPINE_BENCH_TRANSLATIONS`),
/// else apt's own copy, decompressed by `apt-helper cat-file`.
fn index_bytes(file: Option<std::ffi::OsString>) -> Result<Vec<u8>> {
    if let Some(file) = file {
        return std::fs::read(&file)
            .with_context(|| format!("reading SPINE_BENCH_TRANSLATIONS {file:?}"));
    }
    let path = translation_index()?;
    let out = Command::new("/usr/lib/apt/apt-helper")
        .arg("cat-file")
        .arg(&path)
        .output()
        .context("running apt-helper cat-file")?;
    if !out.status.success() {
        bail!("apt-helper cat-file {} failed", path.display());
    }
    Ok(out.stdout)
}

/// [`pairs`] from the index's `text`.
fn select(text: &str, n: usize) -> Result<(Vec<Pair>, usize, usize)> {
    let (mut read, mut kept) = (0, Vec::new());
    let (mut synopses, mut firsts) = (HashSet::new(), HashSet::new());
    for stanza in text.split("\n\n") {
        let Some((synopsis, body)) = description(stanza) else { continue };
        read += 1;
        let first = body.split("\n\n").next().unwrap_or_default().to_owned();
        let fresh_synopsis = synopses.insert(synopsis.to_lowercase());
        let fresh_first = firsts.insert(first);
        if fresh_synopsis
            && fresh_first
            && (MIN_BYTES..=MAX_BYTES).contains(&body.len())
            && synopsis.split_whitespace().count() >= 3
        {
            kept.push(Pair { query: synopsis, code: body, line: 0 });
        }
    }
    let available = kept.len();
    if n != usize::MAX && available < n {
        bail!("only {available} descriptions qualify; ask for at most that many");
    }
    kept.shuffle(&mut StdRng::seed_from_u64(SEED));
    kept.truncate(n);
    Ok((kept, read, available))
}

/// The English translation index of Debian main in apt's lists.
fn translation_index() -> Result<PathBuf> {
    let dir = std::fs::read_dir("/var/lib/apt/lists").context("reading /var/lib/apt/lists")?;
    let mut found: Vec<PathBuf> = dir
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
            name.contains("_main_i18n_Translation-en")
                && !name.contains("security")
                && !name.contains("-updates")
        })
        .collect();
    found.sort();
    found.into_iter().next().context(
        "no Debian English descriptions in /var/lib/apt/lists: run \
         `apt-get update -o Acquire::Languages=en` once",
    )
}

/// The synopsis and the long description (paragraphs joined by a blank line, lines by
/// spaces) of one stanza, if it has both.
fn description(stanza: &str) -> Option<(String, String)> {
    let mut lines = stanza.lines().skip_while(|l| !l.starts_with("Description-en:"));
    let synopsis = lines.next()?.strip_prefix("Description-en:")?.trim().to_owned();
    let mut paragraphs: Vec<String> = vec![String::new()];
    for line in lines.take_while(|l| l.starts_with(' ')) {
        let line = line.trim();
        if line == "." {
            paragraphs.push(String::new());
            continue;
        }
        let p = paragraphs.last_mut().expect("never empty");
        if !p.is_empty() {
            p.push(' ');
        }
        p.push_str(line);
    }
    paragraphs.retain(|p| !p.is_empty());
    let body = paragraphs.join("\n\n");
    (!synopsis.is_empty() && !body.is_empty()).then_some((synopsis, body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stanza_becomes_its_synopsis_and_paragraphs() {
        let stanza = "Package: 0ad-data\nDescription-md5: 26\nDescription-en: Strategy game (data)\n \
                      0 A.D. is a game.\n It is free.\n .\n This package has data.";
        assert_eq!(
            description(stanza),
            Some((
                "Strategy game (data)".to_owned(),
                "0 A.D. is a game. It is free.\n\nThis package has data.".to_owned()
            ))
        );
        assert_eq!(description("Package: x\nDescription-md5: 1"), None);
    }

    #[test]
    fn an_index_file_given_is_read_instead_of_apts() {
        let long = " A paragraph long enough to be kept as a document of the corpus.".repeat(5);
        let stanza = |name: &str, synopsis: &str, body: &str| {
            format!("Package: {name}\nDescription-md5: 1\nDescription-en: {synopsis}\n{body}")
        };
        let text = [
            stanza("a", "First kept package here", &format!("{long} one")),
            stanza("b", "Second kept package here", &format!("{long} two")),
            stanza("c", "Too short a description", " Short."),
            stanza("d", "Two words", &format!("{long} four")),
        ]
        .join("\n\n");
        let file = std::env::temp_dir().join(format!("spine-bench-{}.txt", std::process::id()));
        std::fs::write(&file, &text).unwrap();
        let bytes = index_bytes(Some(file.clone().into_os_string())).unwrap();
        std::fs::remove_file(&file).unwrap();
        assert_eq!(bytes, text.as_bytes());
        let (pairs, read, kept) = select(&text, usize::MAX).unwrap();
        assert_eq!((read, kept), (4, 2));
        let mut synopses: Vec<&str> = pairs.iter().map(|p| p.query.as_str()).collect();
        synopses.sort();
        assert_eq!(synopses, ["First kept package here", "Second kept package here"]);
        assert!(select(&text, 3).unwrap_err().to_string().contains("only 2 descriptions"));
        let missing = index_bytes(Some(file.into_os_string())).unwrap_err();
        assert!(format!("{missing:#}").contains("SPINE_BENCH_TRANSLATIONS"), "{missing:#}");
    }
}
