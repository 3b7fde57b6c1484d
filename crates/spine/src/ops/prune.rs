//! `spine prune-expired`: the command line of `spine_ops::prune` (what is lapsed and how
//! the walk deletes it is said there, once): its flags, the preview's printing and the
//! progress bar. "Now" is taken once, when the command starts.

use std::time::Duration;

use anyhow::Result;
use clap::Args;
use spine_core::{Clock, SystemClock};
use spine_ops::OperatorStore;
use spine_ops::prune::{PruneReport, prune};

use super::{OutputArgs, Progress, count, parse_duration};
/// Records listed per scope in the human preview (`--json` lists all).
const SHOWN_PER_SCOPE: usize = 20;

/// `spine prune-expired`.
#[derive(Debug, Clone, Args)]
pub struct PruneArgs {
    /// Delete the records the preview lists (without it, nothing changes).
    #[arg(long)]
    pub apply: bool,
    /// Grace period: only records expired at least this long ago (e.g. 7d, 12h; 0 = every
    /// expired record).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, default_value = "0")]
    pub older_than: Duration,
    #[command(flatten)]
    pub out: OutputArgs,
}

/// `spine prune-expired` on `store`.
pub fn run(store: &dyn OperatorStore, args: &PruneArgs) -> Result<()> {
    let report =
        prune(store, args.apply, args.older_than, SystemClock.now(), &mut Progress::default())?;
    args.out.print(&report, || print_human(&report))
}

fn print_human(r: &PruneReport) {
    let grace = match r.older_than_secs {
        0 => String::new(),
        _ => format!(
            ", {} ago or more",
            humantime::format_duration(Duration::from_secs(r.older_than_secs))
        ),
    };
    let what = format!(
        "{} (not_after at or before {}{grace})",
        count(r.total, "expired record"),
        r.cutoff
    );
    if r.applied {
        println!("deleted {what}");
    } else if r.total == 0 {
        println!(
            "nothing to prune: no expired records (not_after at or before {}{grace})",
            r.cutoff
        );
    } else {
        println!(
            "preview: {what} would be deleted; nothing changed. Run again with --apply to delete them."
        );
    }
    for (scope, n) in &r.by_scope {
        println!("  {scope}: {n}");
        let mut shown = r.records.iter().filter(|e| &e.scope == scope).take(SHOWN_PER_SCOPE);
        for e in shown.by_ref() {
            println!("    {} {} expired {}", e.id, e.short_id, e.not_after);
        }
        if *n as usize > SHOWN_PER_SCOPE {
            println!(
                "    … and {} more (--json lists every record)",
                *n as usize - SHOWN_PER_SCOPE
            );
        }
    }
    if !r.changed_meanwhile.is_empty() {
        println!(
            "kept {}: changed or deleted since it was listed",
            count(r.changed_meanwhile.len() as u64, "record")
        );
        for e in &r.changed_meanwhile {
            println!("    {} {}", e.id, e.scope);
        }
    }
}
