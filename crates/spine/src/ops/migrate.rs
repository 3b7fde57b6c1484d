//! `spine migrate`: advances every record's schema_version to this binary's (SPEC
//! Versioning 2–7).
//!
//! Migration steps are additive only: a later version only adds keys, each with a default.
//! So one step covers every older version: decode the payload with the current record type
//! (which fills each key added since with its default), re-encode it, stamp the current
//! version. A record stamped with the current version or a newer one is never rewritten (a
//! newer record keeps keys this binary does not know, and its stamp). A record whose
//! re-encoding would drop a key that holds a value is left as it is and reported: migration
//! never loses data.
//!
//! Batched by rowid, one transaction per batch: an interrupted run keeps what it did and the
//! next run finishes the rest; a run with nothing left to do changes nothing and says so.
//! Only payloads change (no indexed column), so running servers need no index update.

use anyhow::{Result, bail};
use clap::Args;
use spine_ops::OperatorStore;
use spine_ops::migrate::{MigrateReport, migrate};

use super::{OutputArgs, Progress, count};

/// `spine migrate`.
#[derive(Debug, Clone, Args)]
pub struct MigrateArgs {
    /// Records read and rewritten per transaction.
    #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub batch: u64,
    #[command(flatten)]
    pub out: OutputArgs,
}

/// `spine migrate` on `store`.
pub fn run(store: &dyn OperatorStore, args: &MigrateArgs) -> Result<()> {
    let report = migrate(store, args.batch as usize, &mut Progress::default())?;
    args.out.print(&report, || print_human(&report))?;
    if !report.kept.is_empty() {
        bail!(
            "{} could not be migrated without losing data (listed above); they are unchanged",
            count(report.kept.len() as u64, "record")
        );
    }
    Ok(())
}

fn print_human(r: &MigrateReport) {
    let v = r.schema_version;
    if r.migrated == 0 && r.kept.is_empty() {
        println!(
            "nothing to migrate: {} at schema version {v}{}",
            count(r.already_current, "record"),
            match r.newer {
                0 => String::new(),
                n => format!(", {} stamped newer (left as they are)", count(n, "record")),
            }
        );
    } else {
        println!(
            "migrated {} to schema version {v}; {} already current; {} stamped newer left as \
             they are",
            count(r.migrated, "record"),
            r.already_current,
            r.newer
        );
    }
    for k in &r.kept {
        println!("not migrated: {}: {}", k.id, k.reason);
    }
    let versions: Vec<String> = r.versions_after.iter().map(|(v, n)| format!("{v}: {n}")).collect();
    if !versions.is_empty() {
        println!("records by schema version: {}", versions.join(", "));
    }
}
