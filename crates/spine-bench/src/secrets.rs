//! `spine-bench secrets`: the credential detector (`--secrets`) measured — false positives on
//! two corpora that hold no credentials (every Debian package description of the prose eval,
//! every documented function of the code eval's crates) and detection on
//! [`FAKE_CREDENTIALS`], each alone and embedded in a sentence of prose.

use anyhow::Result;
use spine_core::Limits;
use spine_core::secrets::{FAKE_CREDENTIALS, find_secrets};

use crate::corpus::{CRATES, MORE_CRATES, corpus_of};

/// Prints each corpus's false positives (what was taken for what) and the detection rate.
pub fn run() -> Result<()> {
    let (prose, read, _) = crate::prose::pairs(usize::MAX)?;
    let prose: Vec<String> = prose.into_iter().flat_map(|p| [p.query, p.code]).collect();
    report(&format!("Debian package descriptions ({read} packages)"), &prose);

    let limits = Limits::default();
    let crates = [CRATES, MORE_CRATES].concat();
    let available = corpus_of(&crates, 0, &limits)?.available;
    let code: Vec<String> = corpus_of(&crates, available, &limits)?
        .sample
        .into_iter()
        .flat_map(|p| [p.query, p.code])
        .collect();
    report(&format!("documented functions of {} crates", crates.len()), &code);

    let mut found = 0;
    let mut total = 0;
    for (text, slug) in FAKE_CREDENTIALS {
        for framed in [text.to_string(), format!("For the record: {text} (rotated monthly).")] {
            total += 1;
            let hit = find_secrets(&framed).first().is_some_and(|f| f.slug == *slug);
            if hit {
                found += 1;
            } else {
                println!("  missed {slug}: {framed}");
            }
        }
    }
    println!("detection: {found} of {total} fake credentials found as their kind");
    Ok(())
}

fn report(name: &str, texts: &[String]) {
    let bytes: usize = texts.iter().map(String::len).sum();
    let mut flagged = 0;
    for t in texts {
        let found = find_secrets(t);
        if let Some(f) = found.first() {
            flagged += 1;
            let around: String = t[f.span.clone()].chars().take(80).collect();
            println!("  false positive ({}): {around:?}", f.slug);
        }
    }
    println!(
        "{name}: {} texts, {:.1} MB: {flagged} false positives",
        texts.len(),
        bytes as f64 / 1e6
    );
}
