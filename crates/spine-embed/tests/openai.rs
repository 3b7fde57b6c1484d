//! `OpenAiEmbedder` against a fake OpenAI-compatible server on a real loopback socket.
//!
//! The server speaks the real wire protocol (`POST /v1/embeddings`, `{"model", "input"}` →
//! `{"data": [{"index", "embedding"}]}`) and returns hashed bag-of-words vectors, so every
//! answer is checkable. It runs on its own thread with its own tokio runtime: the embedder
//! uses reqwest's blocking client, which must not run inside a runtime.

use std::time::{Duration, Instant};

use axum::Json;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use spine_embed::http::ApiKey;
use spine_embed::{CachedEmbedder, EmbedError, Embedder, OpenAiConfig, OpenAiEmbedder};
use spine_testkit::provider::FakeProvider;

/// The embeddings-specific replies (the shared ones are in `spine_testkit::provider`).
enum Answer {
    /// Vectors of this length.
    Dims(usize),
    /// 200 with a body that is not an embeddings answer.
    Garbage,
    /// 200 with one vector fewer than asked for.
    Short,
}

type Reply = spine_testkit::provider::Reply<Answer>;
type Fake = FakeProvider<Answer>;

const DIMS: usize = 16;

/// Hashed bag of words (FNV-1a of each lowercase alphanumeric word, modulo `dims`), not
/// normalised: the embedder must normalise it.
fn bag_of_words(text: &str, dims: usize) -> Vec<f32> {
    let mut v = vec![0f32; dims];
    for word in text.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()) {
        let mut h: u64 = 0xcbf29ce484222325;
        for b in word.to_lowercase().bytes() {
            h = (h ^ u64::from(b)).wrapping_mul(0x100000001b3);
        }
        v[(h % dims as u64) as usize] += 1.0;
    }
    v
}

fn unit(mut v: Vec<f32>) -> Vec<f32> {
    let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    v.iter_mut().for_each(|x| *x /= n);
    v
}

/// The OpenAI embeddings answer to `body`: hashed bag-of-words vectors, in reverse order
/// (the client must place vectors by `index`).
fn embeddings(answer: Option<Answer>, body: &Value) -> Response {
    let dims = match answer {
        None | Some(Answer::Short) => DIMS,
        Some(Answer::Dims(d)) => d,
        Some(Answer::Garbage) => return Json(json!({"nope": 1})).into_response(),
    };
    let mut inputs = body["input"].as_array().cloned().unwrap_or_default();
    if matches!(answer, Some(Answer::Short)) {
        inputs.pop();
    }
    let data: Vec<Value> = inputs
        .iter()
        .enumerate()
        .rev()
        .map(|(i, t)| {
            json!({"object": "embedding", "index": i,
                   "embedding": bag_of_words(t.as_str().unwrap(), dims)})
        })
        .collect();
    Json(json!({"object": "list", "data": data, "model": body["model"],
                "usage": {"prompt_tokens": 0, "total_tokens": 0}}))
    .into_response()
}

/// Starts the fake on a free loopback port.
fn fake() -> Fake {
    FakeProvider::start("/v1/embeddings", embeddings)
}

fn config(fake: &Fake) -> OpenAiConfig {
    OpenAiConfig { backoff: Duration::from_millis(10), ..OpenAiConfig::new(fake.url(), "fake-bow") }
}

fn provider_error(r: Result<Vec<Vec<f32>>, EmbedError>) -> String {
    match r {
        Err(EmbedError::Provider(m)) => m,
        other => panic!("expected a provider error, got {other:?}"),
    }
}

#[test]
fn batches_of_batch_size_keep_input_order() {
    let fake = fake();
    let e = OpenAiEmbedder::new(OpenAiConfig { batch_size: 4, ..config(&fake) }).unwrap();
    let texts: Vec<String> = (0..10).map(|i| format!("note {i} about topic{}", i * 7)).collect();
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let vectors = e.embed(&refs).unwrap();

    assert_eq!(vectors.len(), 10);
    for (t, v) in refs.iter().zip(&vectors) {
        assert_eq!(v, &unit(bag_of_words(t, DIMS)), "{t}");
    }
    let seen = fake.seen();
    assert_eq!(seen.len(), 3, "ceil(10 / 4) requests");
    let sizes: Vec<usize> =
        seen.iter().map(|s| s.body["input"].as_array().unwrap().len()).collect();
    assert_eq!(sizes, [4, 4, 2]);
    assert_eq!(seen[1].body["input"][0], "note 4 about topic28");
    assert!(seen.iter().all(|s| s.body["model"] == "fake-bow" && s.path == "/v1/embeddings"));
    assert_eq!(e.dims(), DIMS);
}

#[test]
fn default_batch_is_64() {
    let fake = fake();
    let e = OpenAiEmbedder::new(config(&fake)).unwrap();
    let texts: Vec<String> = (0..130).map(|i| format!("t{i}")).collect();
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    assert_eq!(e.embed(&refs).unwrap().len(), 130);
    let sizes: Vec<usize> =
        fake.seen().iter().map(|s| s.body["input"].as_array().unwrap().len()).collect();
    assert_eq!(sizes, [64, 64, 2]);
}

#[test]
fn vectors_are_normalised() {
    let fake = fake();
    let e = OpenAiEmbedder::new(config(&fake)).unwrap();
    for v in e.embed(&["alpha beta beta gamma", "one", "x y z x y z w"]).unwrap() {
        let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-6, "{norm}");
    }
}

#[test]
fn empty_input_makes_no_request() {
    let fake = fake();
    let e = OpenAiEmbedder::new(config(&fake)).unwrap();
    assert!(e.embed(&[]).unwrap().is_empty());
    assert!(fake.seen().is_empty());
}

#[test]
fn retries_500_and_429_then_succeeds() {
    let fake = fake();
    fake.then([Reply::Status(500), Reply::Status(429), Reply::Status(503)]);
    let e = OpenAiEmbedder::new(config(&fake)).unwrap();
    let v = e.embed(&["retry me"]).unwrap();
    assert_eq!(v[0], unit(bag_of_words("retry me", DIMS)));
    assert_eq!(fake.seen().len(), 4, "three failures, then the answer");
}

#[test]
fn gives_up_after_the_configured_retries() {
    let fake = fake();
    fake.then((0..10).map(|_| Reply::Status(502)));
    let e = OpenAiEmbedder::new(OpenAiConfig { retries: 2, ..config(&fake) }).unwrap();
    let msg = provider_error(e.embed(&["x"]));
    assert_eq!(fake.seen().len(), 3, "one attempt and two retries");
    assert!(msg.contains("502") && msg.contains("gave up after 3 attempts"), "{msg}");
}

#[test]
fn backoff_doubles_between_attempts() {
    let fake = fake();
    fake.then([Reply::Status(500), Reply::Status(500), Reply::Status(500)]);
    let backoff = Duration::from_millis(100);
    let e = OpenAiEmbedder::new(OpenAiConfig { backoff, ..config(&fake) }).unwrap();
    let started = Instant::now();
    e.embed(&["x"]).unwrap();
    // 100 + 200 + 400 ms of waiting.
    assert!(started.elapsed() >= Duration::from_millis(700), "{:?}", started.elapsed());
}

#[test]
fn retry_after_is_honoured_on_429() {
    let fake = fake();
    fake.then([Reply::TooManyWithRetryAfter(1)]);
    let e = OpenAiEmbedder::new(config(&fake)).unwrap();
    let started = Instant::now();
    e.embed(&["x"]).unwrap();
    assert!(started.elapsed() >= Duration::from_secs(1), "{:?}", started.elapsed());
    assert_eq!(fake.seen().len(), 2);
}

#[test]
fn no_retry_on_400() {
    let fake = fake();
    fake.then([Reply::Status(400), Reply::Answer(Answer::Dims(DIMS))]);
    let e = OpenAiEmbedder::new(config(&fake)).unwrap();
    let msg = provider_error(e.embed(&["bad request"]));
    assert_eq!(fake.seen().len(), 1);
    assert!(msg.contains("400") && msg.contains("scripted 400"), "{msg}");
}

#[test]
fn no_retry_on_401_or_404() {
    for code in [401, 404] {
        let fake = fake();
        fake.then([Reply::Status(code)]);
        let e = OpenAiEmbedder::new(config(&fake)).unwrap();
        let msg = provider_error(e.embed(&["x"]));
        assert_eq!(fake.seen().len(), 1, "{code}");
        assert!(msg.contains(&code.to_string()), "{msg}");
    }
}

#[test]
fn a_slow_server_times_out_and_is_retried() {
    let fake = fake();
    fake.then([Reply::Delay(Duration::from_secs(3)), Reply::Delay(Duration::from_secs(3))]);
    let e = OpenAiEmbedder::new(OpenAiConfig {
        timeout: Duration::from_millis(300),
        retries: 1,
        ..config(&fake)
    })
    .unwrap();
    let started = Instant::now();
    let msg = provider_error(e.embed(&["slow"]));
    assert!(started.elapsed() < Duration::from_secs(2), "{:?}", started.elapsed());
    assert!(msg.contains("timed out"), "{msg}");
    assert_eq!(fake.seen().len(), 2);

    // A timeout followed by a prompt answer succeeds.
    fake.then([Reply::Delay(Duration::from_secs(3))]);
    assert_eq!(e.embed(&["slow"]).unwrap().len(), 1);
}

#[test]
fn connection_refused_is_retried_then_reported() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let e = OpenAiEmbedder::new(OpenAiConfig {
        retries: 2,
        backoff: Duration::from_millis(10),
        ..OpenAiConfig::new(format!("http://127.0.0.1:{port}"), "m")
    })
    .unwrap();
    let msg = provider_error(e.embed(&["x"]));
    assert!(msg.contains("could not connect") && msg.contains("3 attempts"), "{msg}");
}

#[test]
fn configured_dims_must_match() {
    let fake = fake();
    let e = OpenAiEmbedder::new(OpenAiConfig { dims: Some(8), ..config(&fake) }).unwrap();
    assert_eq!(e.dims(), 8);
    let msg = provider_error(e.embed(&["x"]));
    assert!(msg.contains("16 dimensions") && msg.contains("8 were configured"), "{msg}");
    assert_eq!(fake.seen().len(), 1, "a wrong length is not retried");

    let ok = OpenAiEmbedder::new(OpenAiConfig { dims: Some(DIMS), ..config(&fake) }).unwrap();
    assert_eq!(ok.embed(&["x"]).unwrap()[0].len(), DIMS);
}

#[test]
fn first_answer_fixes_dims() {
    let fake = fake();
    let e = OpenAiEmbedder::new(config(&fake)).unwrap();
    assert_eq!(e.dims(), 0, "unknown before the first answer");
    e.embed(&["first"]).unwrap();
    assert_eq!(e.dims(), DIMS);
    fake.then([Reply::Answer(Answer::Dims(12))]);
    let msg = provider_error(e.embed(&["second"]));
    assert!(msg.contains("12 dimensions") && msg.contains("16 were established"), "{msg}");
    assert_eq!(e.dims(), DIMS);
}

#[test]
fn api_key_is_sent_as_bearer_and_only_when_set() {
    let fake = fake();
    let with_key =
        OpenAiEmbedder::new(OpenAiConfig { api_key: ApiKey::new("sk-test-123"), ..config(&fake) })
            .unwrap();
    with_key.embed(&["x"]).unwrap();
    let without = OpenAiEmbedder::new(config(&fake)).unwrap();
    without.embed(&["x"]).unwrap();
    let seen = fake.seen();
    assert_eq!(seen[0].authorization.as_deref(), Some("Bearer sk-test-123"));
    assert_eq!(seen[1].authorization, None);
}

#[test]
fn base_url_with_or_without_v1() {
    let fake = fake();
    for base in [fake.url(), format!("{}/", fake.url()), format!("{}/v1", fake.url())] {
        let e =
            OpenAiEmbedder::new(OpenAiConfig { base_url: base.clone(), ..config(&fake) }).unwrap();
        assert_eq!(e.endpoint(), format!("{}/v1/embeddings", fake.url()));
        e.embed(&["x"]).unwrap();
    }
    assert!(fake.seen().iter().all(|s| s.path == "/v1/embeddings"));
    assert_eq!(fake.seen().len(), 3);
}

#[test]
fn model_id_names_the_protocol_and_model() {
    let fake = fake();
    let e = OpenAiEmbedder::new(OpenAiConfig { model: "nomic-embed-text".into(), ..config(&fake) })
        .unwrap();
    assert_eq!(e.model_id(), "openai:nomic-embed-text");
    e.embed(&["x"]).unwrap();
    assert_eq!(fake.seen()[0].body["model"], "nomic-embed-text");
}

#[test]
fn a_body_that_is_not_an_embeddings_answer_is_an_error_without_retry() {
    let fake = fake();
    fake.then([Reply::Answer(Answer::Garbage), Reply::Answer(Answer::Short)]);
    let e = OpenAiEmbedder::new(config(&fake)).unwrap();
    let msg = provider_error(e.embed(&["x"]));
    assert!(msg.contains("unexpected body") && msg.contains("nope"), "{msg}");
    let msg = provider_error(e.embed(&["x", "y"]));
    assert!(msg.contains("1 vectors for 2 texts"), "{msg}");
    assert_eq!(fake.seen().len(), 2);
}

#[test]
fn an_unknown_path_is_a_clear_error() {
    // A server that is not an embeddings endpoint: 404 from the fake's router.
    let fake = fake();
    let e = OpenAiEmbedder::new(OpenAiConfig {
        base_url: format!("{}/v1/embeddings/extra", fake.url()),
        ..config(&fake)
    })
    .unwrap();
    let msg = provider_error(e.embed(&["x"]));
    assert!(msg.contains("404"), "{msg}");
}

#[test]
fn cache_hit_avoids_a_request() {
    let fake = fake();
    let e = CachedEmbedder::new(OpenAiEmbedder::new(config(&fake)).unwrap());
    let first = e.embed_query("how are tests run?").unwrap();
    let second = e.embed_query("how are tests run?").unwrap();
    assert_eq!(first, second);
    assert_eq!(fake.seen().len(), 1, "the second query came from the cache");
    e.embed(&["how are tests run?", "another"]).unwrap();
    assert_eq!(fake.seen().len(), 2, "batches pass through");
    assert_eq!(e.model_id(), "openai:fake-bow");
    assert_eq!(e.stats().hits, 1);
}

#[test]
fn embedder_is_usable_from_inside_a_runtime_builder() {
    // Building inside a tokio runtime (as spine's main does) must not panic.
    let fake = fake();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let e = rt.block_on(async { OpenAiEmbedder::new(config(&fake)).unwrap() });
    assert_eq!(e.embed(&["x"]).unwrap().len(), 1);
}
