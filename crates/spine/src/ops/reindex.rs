//! `spine reindex`: the printed summary; the re-embedding itself (batched, resumable,
//! catching records written behind it) is [`spine_ops::reindex`].

use anyhow::Result;
use spine_embed::Embedder;
use spine_ops::OperatorStore;

use super::{Progress, count};

/// Re-embeds `store` with `embedder`, `batch` records per call, and prints what it did.
/// Blocking.
pub fn run(store: &dyn OperatorStore, embedder: &dyn Embedder, batch: usize) -> Result<()> {
    let report = spine_ops::reindex::reindex(store, embedder, batch, &mut Progress::default())?;
    if report.nothing_to_do() {
        println!("nothing to re-embed: every record already has a {} vector", report.model);
    } else {
        println!(
            "re-embedded {} with {} in {:.1} s ({:.0} records/s)",
            count(report.reembedded, "record"),
            report.model,
            report.seconds,
            report.per_second()
        );
    }
    if report.vanished > 0 {
        println!("{} record(s) were deleted while reindexing", report.vanished);
    }
    let stamps: Vec<String> = report.models.iter().map(|(m, c)| format!("{m}: {c}")).collect();
    println!("vectors in the store by embedder: {}", stamps.join(", "));
    Ok(())
}
