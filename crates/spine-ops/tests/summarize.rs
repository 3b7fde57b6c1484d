//! The summarize sweep in-process with the built-in extractive summarizer: selection by
//! scope, age and limit, the dry run, a stop between records, the byte bound. The chat
//! provider is driven end to end by the binary's tests (a fake server on a real socket).

use std::sync::Arc;

use spine_core::{Scope, SummarySource, Timestamp};
use spine_ops::Silent;
use spine_ops::stop::{Interrupt, Never, Stopped};
use spine_ops::summarize::{MissingSummaries, Provider, Report, Sweep, summarize_missing};
use spine_store::{SqliteStore, Store};

use super::{NOW, SCOPE, at, put, record, store};

fn sweep(created_at_or_before: Timestamp, limit: u64, dry_run: bool) -> Sweep {
    Sweep {
        which: MissingSummaries {
            scope: Some(Scope::parse("scope", SCOPE).unwrap()),
            created_at_or_before,
        },
        limit,
        older_than: None,
        dry_run,
        max_summary_bytes: 512,
    }
}

fn run(s: &SqliteStore, sweep: &Sweep, stop: &dyn Interrupt) -> Report {
    let (summarizer, endpoint) = Provider::Extractive { max_chars: 40 }.summarizer().unwrap();
    assert_eq!(endpoint, None, "the built-in summarizer sends nothing");
    summarize_missing(s, sweep, summarizer, endpoint, stop, &mut Silent).unwrap()
}

#[test]
fn the_sweep_takes_the_oldest_records_in_the_age_range_up_to_the_limit() {
    let (_d, s) = store();
    let notes = [
        "The deploy pipeline rebuilds every image when the lockfile changes. It is slow.",
        "Use rustls instead of native-tls in every crate.",
        "Tabs are forbidden in Makefiles of this repo except for recipes.",
        "Too new to be swept by the age cut-off.",
    ];
    let mut ids = vec![];
    for (i, n) in notes.iter().enumerate() {
        let m = record(n, 10 + i as i64);
        put(&s, &m, &[1.0]);
        ids.push(m.id);
    }
    let mut client = record("Has a client summary already.", 1);
    client.summary = "client summary".into();
    client.summary_source = SummarySource::Client;
    put(&s, &client, &[1.0]);

    let dry = run(&s, &sweep(at(12), 0, true), &Never);
    assert_eq!((dry.eligible, dry.selected, dry.summarized), (3, 3, 0));
    assert_eq!(s.get_many(&ids).unwrap()[0].summary_source, SummarySource::None);

    let two = run(&s, &sweep(at(12), 2, false), &Never);
    assert_eq!((two.eligible, two.selected, two.summarized, two.exit_code()), (3, 2, 2, 0));
    let got = s.get_many(&ids).unwrap();
    assert_eq!(
        got.iter().map(|m| m.summary_source).collect::<Vec<_>>(),
        [SummarySource::Auto, SummarySource::Auto, SummarySource::None, SummarySource::None]
    );
    assert!(got[0].summary.chars().count() <= 40, "{}", got[0].summary);
    assert_eq!(got[0].summary_model, "builtin:extractive");
    assert_eq!(got[0].summary_egress_at, None, "nothing left the process");
    assert_eq!(s.get_many(&[client.id]).unwrap()[0].summary, "client summary");

    let rest = run(&s, &sweep(at(NOW), 0, false), &Never);
    assert_eq!((rest.selected, rest.summarized), (2, 2));
}

#[test]
fn a_stop_between_records_leaves_the_rest_untouched_and_says_why() {
    let (_d, s) = store();
    let m = record("Never reached because the run was interrupted first.", 1);
    put(&s, &m, &[1.0]);
    let report = run(&s, &sweep(at(NOW), 0, false), &Stopped::Signal(2));
    assert_eq!((report.selected, report.summarized, report.not_reached), (1, 0, 1));
    assert_eq!((report.stopped, report.exit_code()), (Some("interrupted"), 130));
    assert_eq!(s.get_many(&[m.id]).unwrap()[0].summary_source, SummarySource::None);
}

#[test]
fn a_record_with_nothing_to_summarize_is_a_failure_of_that_record_only() {
    let (_d, s) = store();
    let blank = record("   \n\t  ", 1);
    let fine = record("Use rustls instead of native-tls.", 2);
    put(&s, &blank, &[1.0]);
    put(&s, &fine, &[1.0]);
    let (summarizer, _) = Provider::Extractive { max_chars: 280 }.summarizer().unwrap();
    let report = summarize_missing(
        &s,
        &sweep(at(NOW), 0, false),
        Arc::clone(&summarizer),
        None,
        &Never,
        &mut Silent,
    )
    .unwrap();
    assert_eq!((report.summarized, report.failed, report.exit_code()), (1, 1, 1));
    assert_eq!(report.failures[0].id, blank.id.to_string());
}
