//! The summarize sweep in-process with the chat summarizer against a fake OpenAI-compatible
//! server on a real socket: the requests, retries after 503 and a timeout, an empty answer
//! failing its record only, a refusing provider stopping the run, a record edited meanwhile
//! keeping its edit, and the length bound.

use std::time::{Duration, Instant};

use axum::Json;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use spine_core::{Caller, Memory, RecordId, SummarySource, Timestamp};
use spine_ops::Silent;
use spine_ops::stop::Never;
use spine_ops::summarize::chat::ChatConfig;
use spine_ops::summarize::{MissingSummaries, Provider, Report, Sweep, summarize_missing};
use spine_store::{Access, SqliteStore, Store};
use spine_testkit::provider::{FakeProvider, Reply};

use super::{NOW, at, put, record, store};

/// The chat-specific replies (the shared ones are in `spine_testkit::provider`).
enum Answer {
    /// 200 with this assistant message.
    Say(String),
    /// Run this first (e.g. edit the record), then answer by default.
    Before(Box<dyn FnOnce() + Send>),
}

type Fake = FakeProvider<Answer>;

const NOTES: [&str; 4] = [
    "Integration tests need the postgres container running. Start it with make db.",
    "Prefer snake_case names for database columns; the ORM maps them.",
    "Release notes are generated from conventional commits by the release job.",
    "The parser rejects tabs inside YAML anchors, so indent with spaces.",
];

/// The default answer: a recognisable summary of the note, padded with whitespace the
/// sweep must strip.
fn default_summary(note: &str) -> String {
    format!(
        "  \n Summary of: {}  \n",
        note.split_whitespace().take(4).collect::<Vec<_>>().join(" ")
    )
}

fn chat_answer(content: &str) -> Response {
    Json(json!({
        "id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": "fake",
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": content}}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
    }))
    .into_response()
}

fn fake() -> Fake {
    FakeProvider::start("/v1/chat/completions", |answer, body: &Value| {
        let note = body["messages"][1]["content"].as_str().unwrap_or_default();
        match answer {
            Some(Answer::Say(s)) => chat_answer(&s),
            Some(Answer::Before(f)) => {
                f();
                chat_answer(&default_summary(note))
            }
            None => chat_answer(&default_summary(note)),
        }
    })
}

fn say(s: &str) -> Reply<Answer> {
    Reply::Answer(Answer::Say(s.to_owned()))
}

/// The chat settings for `fake`, retrying quickly.
fn config(fake: &Fake) -> ChatConfig {
    ChatConfig { backoff: Duration::from_millis(10), ..ChatConfig::new(fake.url(), "m") }
}

/// Records of `notes`, oldest first.
fn seed(s: &SqliteStore, notes: &[&str]) -> Vec<RecordId> {
    notes
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let m = record(n, 10 + i as i64);
            put(s, &m, &[1.0]);
            m.id
        })
        .collect()
}

/// Summarizes every record without a summary with `provider`.
fn sweep_with(s: &SqliteStore, provider: Provider) -> Report {
    let sweep = Sweep {
        which: MissingSummaries { scope: None, created_at_or_before: at(NOW) },
        limit: 0,
        older_than: None,
        dry_run: false,
        max_summary_bytes: 2048,
    };
    let (summarizer, endpoint) = provider.summarizer().unwrap();
    summarize_missing(s, &sweep, summarizer, endpoint, &Never, &mut Silent).unwrap()
}

fn sweep(s: &SqliteStore, config: ChatConfig) -> Report {
    sweep_with(s, Provider::Chat(config))
}

fn now() -> Timestamp {
    let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap();
    Timestamp::from_micros(t.as_micros() as i64)
}

fn records(s: &SqliteStore, ids: &[RecordId]) -> Vec<Memory> {
    s.get_many(ids).unwrap()
}

#[test]
fn a_chat_model_summarizes_oldest_first_retrying_a_transient_failure() {
    let (_d, s) = store();
    let ids = seed(&s, &NOTES);
    let fake = fake();
    fake.then([Reply::Status(503)]);
    let started = now();
    let key = spine_embed::http::ApiKey::new("sk-test-summaries");
    let report = sweep(
        &s,
        ChatConfig {
            model: "qwen2.5:0.5b".into(),
            api_key: key,
            base_url: format!("{}/v1", fake.url()),
            ..config(&fake)
        },
    );
    let finished = now();
    assert_eq!((report.summarized, report.exit_code()), (4, 0));
    assert_eq!(report.endpoint, Some(format!("{}/v1/chat/completions", fake.url())));
    assert!(!format!("{report:?}").contains("sk-test"), "the key is never shown");

    let seen = fake.seen();
    assert_eq!(seen.len(), 5, "one retry, then one request per record");
    for r in &seen {
        assert_eq!(r.path, "/v1/chat/completions");
        assert_eq!(r.authorization.as_deref(), Some("Bearer sk-test-summaries"));
        assert_eq!(r.body["model"], "qwen2.5:0.5b");
        assert_eq!(r.body["stream"], false);
        let messages = r.body["messages"].as_array().unwrap();
        assert_eq!(messages.len(), 2);
        assert_eq!(messages[0]["role"], "system");
        assert!(messages[0]["content"].as_str().unwrap().contains("at most 280 characters"));
        assert_eq!(messages[1]["role"], "user");
    }
    // Oldest first, each record's content as the user message.
    let sent: Vec<&str> =
        seen[1..].iter().map(|r| r.body["messages"][1]["content"].as_str().unwrap()).collect();
    assert_eq!(sent, NOTES);
    for (m, note) in records(&s, &ids).iter().zip(NOTES) {
        let words = note.split_whitespace().take(4).collect::<Vec<_>>().join(" ");
        assert_eq!(m.summary, format!("Summary of: {words}"), "stripped and collapsed");
        assert_eq!(m.summary_source, SummarySource::Auto);
        assert_eq!(m.summary_model, "qwen2.5:0.5b");
        let egress = m.summary_egress_at.expect("an egress stamp on content sent out");
        assert!(started <= egress && egress <= finished, "{egress} not within the run");
        assert_eq!(m.content, note, "content untouched");
    }
}

#[test]
fn an_empty_answer_is_a_failure_for_that_record_only() {
    let (_d, s) = store();
    let ids = seed(&s, &NOTES[..3]);
    let fake = fake();
    fake.then([say("ok"), say("  \n ")]);
    let report = sweep(&s, config(&fake));
    assert_eq!((report.summarized, report.failed, report.exit_code()), (2, 1, 1));
    assert_eq!(report.failures[0].id, ids[1].to_string());
    assert!(report.failures[0].error.contains("empty summary"), "{report:?}");
    assert_eq!(fake.seen()[0].authorization, None, "no key, no Authorization header");

    let got = records(&s, &ids);
    assert_eq!(got[0].summary, "ok");
    assert_eq!((got[1].summary.as_str(), got[1].summary_source), ("", SummarySource::None));
    assert_eq!(got[1].summary_egress_at, None);
    assert_eq!(got[2].summary_source, SummarySource::Auto);

    // The failed one is selected again by the next run.
    let again = sweep(&s, config(&fake));
    assert_eq!((again.selected, again.summarized, again.exit_code()), (1, 1, 0));
}

#[test]
fn a_slow_answer_times_out_and_is_retried() {
    let (_d, s) = store();
    let ids = seed(&s, &NOTES[..1]);
    let fake = fake();
    fake.then([Reply::Delay(Duration::from_secs(5))]);
    let started = Instant::now();
    let report = sweep(&s, ChatConfig { timeout: Duration::from_millis(500), ..config(&fake) });
    assert_eq!((report.summarized, report.exit_code()), (1, 0));
    assert!(started.elapsed() < Duration::from_secs(4), "{:?}", started.elapsed());
    assert_eq!(fake.seen().len(), 2);
    assert_eq!(records(&s, &ids)[0].summary_source, SummarySource::Auto);
}

#[test]
fn an_unusable_provider_stops_the_run() {
    let (_d, s) = store();
    let ids = seed(&s, &NOTES);
    let fake = fake();
    fake.then([say("first"), Reply::Status(401)]);
    let report = sweep(&s, config(&fake));
    assert_eq!(report.exit_code(), 1);
    assert!(report.error.as_deref().unwrap_or_default().contains("401"), "{report:?}");
    assert_eq!((report.summarized, report.not_reached), (1, 3));
    assert_eq!(fake.seen().len(), 2, "no request after the provider refused");
    let got = records(&s, &ids);
    assert_eq!(got.iter().filter(|m| m.summary_source == SummarySource::Auto).count(), 1);
}

#[test]
fn a_record_edited_while_being_summarized_keeps_the_edit() {
    let (d, s) = store();
    let ids = seed(&s, &NOTES[..2]);
    let fake = fake();
    // While the server "thinks" about the first record, a client rewrites it (as
    // update_memory does: the whole record replaced).
    let (dir, target) = (d.path().to_owned(), ids[0]);
    fake.then([Reply::Answer(Answer::Before(Box::new(move || {
        let store = SqliteStore::open(&dir).unwrap();
        let mut m = store.get_many(&[target]).unwrap().remove(0);
        m.content = "Rewritten meanwhile by a client.".into();
        assert!(
            store.replace(&Access::owned(&Caller::authenticated("a", "alice")), &m, None).unwrap()
        );
    })))]);
    let report = sweep(&s, config(&fake));
    assert_eq!((report.summarized, report.changed_meanwhile, report.exit_code()), (1, 1, 0));
    let got = records(&s, &ids);
    assert_eq!(got[0].content, "Rewritten meanwhile by a client.");
    assert_eq!(got[0].summary_source, SummarySource::None, "no summary of the old content");
    assert_eq!(got[1].summary_source, SummarySource::Auto);
}

#[test]
fn summaries_respect_max_chars() {
    let long = "The deployment pipeline rebuilds every container image from scratch whenever \
                the lockfile changes, which takes twenty minutes on the shared runners.";
    let (_d, s) = store();
    let ids = seed(&s, &[long, "Short note."]);
    let fake = fake();
    fake.then([say(&format!("{long} {long}"))]);
    sweep(&s, ChatConfig { max_chars: 40, ..config(&fake) });
    let system = fake.seen()[0].body["messages"][0]["content"].clone();
    assert!(system.as_str().unwrap().contains("at most 40 characters"), "{system}");
    let got = records(&s, &ids);
    assert_eq!(got[0].summary, "The deployment pipeline rebuilds every…");
    assert!(got[0].summary.chars().count() <= 40);

    // The built-in summarizer, on fresh records.
    let (_d, s) = store();
    let ids = seed(&s, &[long, "Short note. Second sentence here."]);
    sweep_with(&s, Provider::Extractive { max_chars: 20 });
    let got = records(&s, &ids);
    assert_eq!(got[0].summary, "The deployment…");
    assert_eq!(got[1].summary, "Short note.");
    assert!(got.iter().all(|m| m.summary.chars().count() <= 20));
}
