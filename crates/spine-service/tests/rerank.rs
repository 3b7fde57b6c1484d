//! The reranker (SPEC search_memory rule 5, search_discovery, `relevance`) against a local
//! provider speaking the HTTP rerank API over a loopback socket, the real store and the
//! real model. The provider scores a document by the marker word it contains, so the
//! expected order is exact: the default order, stably sorted by that probability.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use axum::http::header::CONTENT_TYPE;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use spine_service::Service;
use spine_service::rerank::{HttpReranker, RerankConfig, RerankError, Reranker};
use spine_testkit::provider::FakeProvider;

use crate::common::*;

const SCOPE: &str = "run1:project:spine";
const DISC: &str = "discovery:repo:spine";
const QUERY: &str = "how is the database connection pool configured";

/// Contents in store order: most near the query carry no marker, so reranking moves them.
const CONTENTS: [&str; 6] = [
    "The database connection pool is configured with max_connections = 16 in config/db.toml.",
    "Connection pool timeouts for the database are set to 30 seconds. SILVERMARK",
    "We size the database pool per worker; see the pool configuration notes.",
    "Release notes are written by hand before tagging a version. GOLDMARK",
    "Database connection pool: reuse connections, never open one per request. GOLDMARK",
    "The CI pipeline caches the cargo registry between runs.",
];

/// The provider's probability for a document.
fn probability(doc: &str) -> f64 {
    if doc.contains("GOLDMARK") {
        0.9
    } else if doc.contains("SILVERMARK") {
        0.6
    } else {
        0.2
    }
}

/// The provider's raw logit for a document (for the logits answer).
fn logit(doc: &str) -> f64 {
    if doc.contains("GOLDMARK") {
        3.0
    } else if doc.contains("SILVERMARK") {
        0.5
    } else {
        -2.0
    }
}

fn logistic(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

// ---------- the local provider ----------

/// How the local provider answers `POST /rerank`.
#[derive(Clone, Copy)]
enum Answer {
    /// TEI: `[{"index", "score"}]`, best first, read from `texts`.
    Tei,
    /// Cohere/Jina: `{"results": [{"index", "relevance_score"}]}`, best first, read from
    /// `documents`.
    Cohere,
    /// TEI shape with raw logits.
    Logits,
    /// TEI shape, every document the same score.
    Flat,
    /// HTTP 500.
    ServerError,
    /// A cut-off JSON body with status 200.
    Malformed,
    /// TEI shape with the last result missing.
    OneShort,
    /// TEI shape after a delay.
    Slow(Duration),
}

/// The local provider: every request answered as `answer` says.
struct Provider {
    fake: FakeProvider<()>,
    url: String,
}

impl Provider {
    fn requests(&self) -> usize {
        self.fake.seen().len()
    }

    fn last(&self) -> (Option<String>, Value) {
        let s = self.fake.seen().pop().expect("the provider was called");
        (s.authorization, s.body)
    }
}

/// Starts a provider on a loopback port, on a thread and runtime of its own.
fn provider(answer: Answer) -> Provider {
    let fake = FakeProvider::start("/rerank", move |_, body| rerank(answer, body));
    if let Answer::Slow(d) = answer {
        fake.then_hang(d);
    }
    Provider { url: fake.url(), fake }
}

/// The provider's answer to `body`, in the wire shape `answer` names.
fn rerank(answer: Answer, body: &Value) -> Response {
    let field = if matches!(answer, Answer::Cohere) { "documents" } else { "texts" };
    let docs: Vec<String> =
        body[field].as_array().unwrap().iter().map(|d| d.as_str().unwrap().to_owned()).collect();
    let score = |d: &str| match answer {
        Answer::Logits => logit(d),
        Answer::Flat => 0.5,
        _ => probability(d),
    };
    // Providers answer best first, not in input order.
    let mut scored: Vec<(usize, f64)> =
        docs.iter().enumerate().map(|(i, d)| (i, score(d))).collect();
    scored.sort_by(|a, b| b.1.total_cmp(&a.1));
    let tei = |scored: &[(usize, f64)]| {
        axum::Json(scored.iter().map(|(i, s)| json!({"index": i, "score": s})).collect::<Vec<_>>())
            .into_response()
    };
    match answer {
        Answer::Tei | Answer::Logits | Answer::Flat => tei(&scored),
        Answer::Cohere => axum::Json(json!({
            "id": "r-1",
            "results": scored
                .iter()
                .map(|(i, s)| json!({"index": i, "relevance_score": s}))
                .collect::<Vec<_>>(),
            "meta": {"billed_units": {"search_units": 1}},
        }))
        .into_response(),
        Answer::ServerError => {
            (StatusCode::INTERNAL_SERVER_ERROR, "model not loaded").into_response()
        }
        Answer::Malformed => {
            ([(CONTENT_TYPE, "application/json")], r#"{"results": [{"index": 0,"#).into_response()
        }
        Answer::OneShort => tei(&scored[..scored.len() - 1]),
        // The delay is the fake's hang (`provider`).
        Answer::Slow(_) => tei(&scored),
    }
}

// ---------- helpers ----------

fn config(p: &Provider) -> RerankConfig {
    RerankConfig::new(p.url.clone())
}

fn reranking(e: &Env, config: RerankConfig) -> Service {
    e.service.clone().with_reranker(Arc::new(HttpReranker::new(config).unwrap()))
}

fn seed(e: &Env) {
    for c in CONTENTS {
        e.service
            .store_memory(
                &anon(),
                args(json!({"content": c, "scope": SCOPE, "source": "user-said", "category": "decision"})),
            )
            .unwrap();
    }
}

fn seed_discoveries(e: &Env) {
    for c in CONTENTS {
        e.service
            .store_discovery(
                &anon(),
                args(json!({
                    "content": c, "kind": "fact", "scope": DISC,
                    "citations": [{"kind": "file", "ref": "config/db.toml"}],
                })),
            )
            .unwrap();
    }
}

fn search(s: &Service, k: u64) -> Value {
    let a = json!({"query": QUERY, "scope": SCOPE, "k": k});
    serde_json::to_value(s.search_memory(&anon(), args(a)).unwrap()).unwrap()
}

fn search_discovery(s: &Service) -> Value {
    let a = json!({"query": QUERY, "scope": DISC});
    serde_json::to_value(s.search_discovery(&anon(), args(a)).unwrap()).unwrap()
}

/// One hit: its content and `relevance` (None when absent).
#[derive(Debug, Clone, PartialEq)]
struct Hit {
    content: String,
    relevance: Option<f64>,
}

fn hits(v: &Value, key: &str) -> Vec<Hit> {
    v[key]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| Hit {
            content: m["content"].as_str().unwrap().to_owned(),
            relevance: m.get("relevance").map(|r| r.as_f64().unwrap()),
        })
        .collect()
}

fn contents(h: &[Hit]) -> Vec<String> {
    h.iter().map(|h| h.content.clone()).collect()
}

/// The default order stably sorted by `prob`, descending.
fn expected(default: &[Hit], prob: impl Fn(&str) -> f64) -> Vec<String> {
    let mut order = contents(default);
    order.sort_by(|a, b| prob(b).total_cmp(&prob(a)));
    order
}

/// Every hit carries `relevance` equal to `prob` of its content (within f32 precision).
fn assert_relevance(h: &[Hit], prob: impl Fn(&str) -> f64) {
    for hit in h {
        let r = hit.relevance.unwrap_or_else(|| panic!("no relevance on {hit:?}"));
        assert!((0.0..=1.0).contains(&r), "{hit:?}");
        assert!((r - prob(&hit.content)).abs() < 1e-6, "{hit:?}");
    }
}

fn assert_default_without_relevance(got: &[Hit], default: &[Hit]) {
    assert_eq!(contents(got), contents(default));
    assert!(got.iter().all(|h| h.relevance.is_none()), "{got:?}");
}

// ---------- search_memory ----------

#[test]
fn ranker_off_leaves_the_default_order_without_relevance() {
    let e = env();
    seed(&e);
    let v = search(&e.service, 0);
    assert_eq!(v["memories"].as_array().unwrap().len(), CONTENTS.len());
    for m in v["memories"].as_array().unwrap() {
        assert!(m.get("relevance").is_none(), "{m}");
        assert!(m.get("score").is_some(), "{m}");
    }
}

#[test]
fn tei_answer_reorders_hits_by_probability_with_ties_in_default_order() {
    let e = env();
    seed(&e);
    let default = hits(&search(&e.service, 0), "memories");
    let want = expected(&default, probability);
    assert_ne!(want, contents(&default), "the seed must be one reranking changes");

    let p = provider(Answer::Tei);
    let got = hits(&search(&reranking(&e, config(&p)), 0), "memories");
    // No hit is filtered: the same records, reordered.
    assert_eq!(contents(&got), want);
    assert_relevance(&got, probability);
    assert_eq!(p.requests(), 1);
}

#[test]
fn cohere_answer_reorders_hits_the_same_way() {
    let e = env();
    seed(&e);
    let default = hits(&search(&e.service, 0), "memories");
    let p = provider(Answer::Cohere);
    let got = hits(&search(&reranking(&e, config(&p)), 0), "memories");
    assert_eq!(contents(&got), expected(&default, probability));
    assert_relevance(&got, probability);
}

#[test]
fn logits_are_mapped_with_the_logistic_function() {
    let e = env();
    seed(&e);
    let default = hits(&search(&e.service, 0), "memories");
    let p = provider(Answer::Logits);
    let got = hits(&search(&reranking(&e, config(&p)), 0), "memories");
    assert_eq!(contents(&got), expected(&default, logit));
    assert_relevance(&got, |d| logistic(logit(d)));
}

#[test]
fn equal_probabilities_keep_the_default_order() {
    let e = env();
    seed(&e);
    let default = hits(&search(&e.service, 0), "memories");
    let p = provider(Answer::Flat);
    let got = hits(&search(&reranking(&e, config(&p)), 0), "memories");
    assert_eq!(contents(&got), contents(&default));
    assert_relevance(&got, |_| 0.5);
}

#[test]
fn only_the_k_hits_of_the_default_order_are_reranked() {
    let e = env();
    seed(&e);
    let default = hits(&search(&e.service, 3), "memories");
    assert_eq!(default.len(), 3);
    let p = provider(Answer::Tei);
    let got = hits(&search(&reranking(&e, config(&p)), 3), "memories");
    assert_eq!(contents(&got), expected(&default, probability));
    let (_, body) = p.last();
    let sent: Vec<&str> =
        body["documents"].as_array().unwrap().iter().map(|d| d.as_str().unwrap()).collect();
    assert_eq!(sent, contents(&default));
}

#[test]
fn request_carries_query_documents_texts_model_and_bearer_key() {
    let e = env();
    seed(&e);
    let default = hits(&search(&e.service, 0), "memories");
    let p = provider(Answer::Tei);
    let c = RerankConfig {
        model: Some("BAAI/bge-reranker-base".into()),
        api_key: spine_embed::http::ApiKey::new("sekrit"),
        ..config(&p)
    };
    search(&reranking(&e, c), 0);
    let (authorization, body) = p.last();
    assert_eq!(authorization.as_deref(), Some("Bearer sekrit"));
    // The document is the record's content, in the default order.
    let docs: Vec<Value> = contents(&default).into_iter().map(Value::from).collect();
    assert_eq!(
        body,
        json!({
            "query": QUERY,
            "documents": docs,
            "texts": docs,
            "model": "BAAI/bge-reranker-base",
            "top_n": CONTENTS.len(),
            "return_documents": false,
        })
    );
}

#[test]
fn request_without_key_or_model_sends_neither() {
    let e = env();
    seed(&e);
    let p = provider(Answer::Tei);
    search(&reranking(&e, config(&p)), 0);
    let (authorization, body) = p.last();
    assert_eq!(authorization, None);
    assert!(body.get("model").is_none(), "{body}");
}

#[test]
fn provider_failures_keep_the_default_order_without_relevance() {
    let e = env();
    seed(&e);
    let default = hits(&search(&e.service, 0), "memories");
    for answer in [Answer::ServerError, Answer::Malformed, Answer::OneShort] {
        let p = provider(answer);
        let got = hits(&search(&reranking(&e, config(&p)), 0), "memories");
        assert_default_without_relevance(&got, &default);
        assert_eq!(p.requests(), 1);
    }
}

#[test]
fn a_provider_slower_than_the_timeout_keeps_the_default_order() {
    let e = env();
    seed(&e);
    let default = hits(&search(&e.service, 0), "memories");
    let p = provider(Answer::Slow(Duration::from_secs(5)));
    let c = RerankConfig { timeout: Duration::from_millis(300), ..config(&p) };
    let service = reranking(&e, c);
    let started = Instant::now();
    let got = hits(&search(&service, 0), "memories");
    assert!(started.elapsed() < Duration::from_secs(3), "{:?}", started.elapsed());
    assert_default_without_relevance(&got, &default);
}

#[test]
fn an_unreachable_provider_keeps_the_default_order() {
    let e = env();
    seed(&e);
    let default = hits(&search(&e.service, 0), "memories");
    // A port nothing listens on: bind one, then free it.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let got = hits(
        &search(&reranking(&e, RerankConfig::new(format!("http://127.0.0.1:{port}"))), 0),
        "memories",
    );
    assert_default_without_relevance(&got, &default);
}

/// A reranker that breaks the trait's contract.
struct Broken(Vec<f32>);

impl Reranker for Broken {
    fn rerank(&self, _: &str, _: &[&str]) -> Result<Vec<f32>, RerankError> {
        Ok(self.0.clone())
    }
}

#[test]
fn a_reranker_breaking_its_contract_keeps_the_default_order() {
    let e = env();
    seed(&e);
    let default = hits(&search(&e.service, 0), "memories");
    let n = CONTENTS.len();
    for probs in [vec![0.5; n - 1], vec![0.5; n + 1], vec![1.5; n], vec![f32::NAN; n]] {
        let service = e.service.clone().with_reranker(Arc::new(Broken(probs)));
        let got = hits(&search(&service, 0), "memories");
        assert_default_without_relevance(&got, &default);
    }
}

#[test]
fn no_hits_means_no_rerank_request() {
    let e = env();
    let p = provider(Answer::Tei);
    let v = search(&reranking(&e, config(&p)), 0);
    assert!(v["memories"].as_array().unwrap().is_empty());
    assert_eq!(p.requests(), 0);
}

// ---------- search_discovery ----------

#[test]
fn search_discovery_reorders_the_vector_order_by_probability() {
    let e = env();
    seed_discoveries(&e);
    let default = hits(&search_discovery(&e.service), "discoveries");
    assert!(default.iter().all(|h| h.relevance.is_none()));
    let want = expected(&default, probability);
    assert_ne!(want, contents(&default));

    let p = provider(Answer::Cohere);
    let got = hits(&search_discovery(&reranking(&e, config(&p))), "discoveries");
    assert_eq!(contents(&got), want);
    assert_relevance(&got, probability);
}

#[test]
fn search_discovery_keeps_the_vector_order_when_the_provider_fails() {
    let e = env();
    seed_discoveries(&e);
    let default = hits(&search_discovery(&e.service), "discoveries");
    let p = provider(Answer::ServerError);
    let got = hits(&search_discovery(&reranking(&e, config(&p))), "discoveries");
    assert_default_without_relevance(&got, &default);
}

// ---------- HttpReranker ----------

#[test]
fn http_reranker_returns_probabilities_in_input_order() {
    for answer in [Answer::Tei, Answer::Cohere] {
        let p = provider(answer);
        let r = HttpReranker::new(config(&p)).unwrap();
        let got = r.rerank("q", &["plain", "a GOLDMARK", "a SILVERMARK"]).unwrap();
        assert_eq!(got, vec![0.2, 0.9, 0.6]);
    }
}

#[test]
fn http_reranker_errors_name_the_failure() {
    let p = provider(Answer::ServerError);
    let e = HttpReranker::new(config(&p)).unwrap().rerank("q", &["a"]).unwrap_err();
    assert!(matches!(e, RerankError::Status { status: 500, .. }), "{e}");
    assert!(e.to_string().contains("model not loaded"), "{e}");

    let p = provider(Answer::OneShort);
    let e = HttpReranker::new(config(&p)).unwrap().rerank("q", &["a", "b"]).unwrap_err();
    assert!(matches!(e, RerankError::WrongCount { expected: 2, got: 1 }), "{e}");

    let p = provider(Answer::Malformed);
    let e = HttpReranker::new(config(&p)).unwrap().rerank("q", &["a"]).unwrap_err();
    assert!(matches!(e, RerankError::Malformed(_)), "{e}");

    let p = provider(Answer::Slow(Duration::from_secs(5)));
    let c = RerankConfig { timeout: Duration::from_millis(200), ..config(&p) };
    let e = HttpReranker::new(c).unwrap().rerank("q", &["a"]).unwrap_err();
    assert!(matches!(e, RerankError::Timeout(_)), "{e}");
}

#[test]
fn http_reranker_can_be_built_and_dropped_on_an_async_runtime() {
    let p = provider(Answer::Tei);
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    let r = rt.block_on(async { HttpReranker::new(config(&p)).unwrap() });
    assert_eq!(r.rerank("q", &["GOLDMARK"]).unwrap(), vec![0.9]);
    rt.block_on(async move { drop(r) });
}

// ---------- settings (the flags are parsed and tested in the spine binary) ----------

#[test]
fn the_provider_url_must_be_http_or_https() {
    for ok in ["http://127.0.0.1:8081", "https://rerank.example.com/v1", "http://h/rerank"] {
        assert_eq!(RerankConfig::new(ok).check(), Ok(()), "{ok}");
    }
    for bad in ["ftp://h", "not a url", ""] {
        assert!(RerankConfig::new(bad).check().is_err(), "{bad}");
    }
}
