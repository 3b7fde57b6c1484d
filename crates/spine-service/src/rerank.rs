//! The reranker (SPEC search_memory rule 5, search_discovery): a provider's probability that
//! each hit answers the query, used to reorder the hits of the default order.
//!
//! [`Reranker`] is the one trait; [`HttpReranker`] speaks the common HTTP rerank API served
//! by Hugging Face TEI, Jina and Cohere-compatible gateways; [`RerankConfig`] reads its
//! settings (`SPINE_SEARCH_RANKER=jev`, `SPINE_RERANK_*`).
//!
//! Key design decision: a reranker can only reorder. [`Service::apply_reranker`] keeps every
//! hit, sorts stably (ties keep the default order) and, on any failure of the provider,
//! keeps the default order and sets no `relevance` — search never fails because of it.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use spine_embed::http::{ApiKey, blocking_client, post_json};

use crate::Service;

/// Scores documents against a query.
pub trait Reranker: Send + Sync {
    /// One probability in 0..=1 per document, in the order of `documents`, that the
    /// document answers `query`.
    fn rerank(&self, query: &str, documents: &[&str]) -> Result<Vec<f32>, RerankError>;
}

/// Why a rerank attempt failed. Every one of them falls back to the default order.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RerankError {
    /// The provider did not answer within the timeout.
    #[error("the rerank provider did not answer within {0:?}")]
    Timeout(Duration),
    /// Connecting, sending or reading failed.
    #[error("the rerank request failed: {0}")]
    Transport(#[source] reqwest::Error),
    /// The provider answered with a non-success status.
    #[error("the rerank provider answered HTTP {status}: {body}")]
    Status {
        /// HTTP status code.
        status: u16,
        /// Start of the response body.
        body: String,
    },
    /// The answer is neither response shape, or carries a score that is not a number.
    #[error("the rerank provider's answer is not a rerank response: {0}")]
    Malformed(String),
    /// The answer does not score each document exactly once.
    #[error("the rerank provider scored {got} results for {expected} documents")]
    WrongCount {
        /// Documents sent.
        expected: usize,
        /// Distinct in-range indices (or probabilities) received.
        got: usize,
    },
    /// The HTTP client could not be set up.
    #[error("the rerank client could not be built: {0}")]
    Client(String),
}

/// Default time a rerank request may take before search falls back to the default order.
pub const DEFAULT_RERANK_TIMEOUT: Duration = Duration::from_secs(5);

/// Settings of the HTTP reranker. `Debug` never shows the key ([`ApiKey`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RerankConfig {
    /// Base URL of the provider (http or https, no trailing `/`); requests go to
    /// `{url}/rerank`. A URL that already ends in `/rerank` is used as it is.
    pub url: String,
    /// Model name sent as `model`; omitted when `None` (TEI serves one model).
    pub model: Option<String>,
    /// Sent as `Authorization: Bearer <key>` when set.
    pub api_key: Option<ApiKey>,
    /// Longest a request may take (default [`DEFAULT_RERANK_TIMEOUT`]).
    pub timeout: Duration,
}

impl RerankConfig {
    /// A configuration for `url` with no model, no key and the default timeout.
    pub fn new(url: impl Into<String>) -> Self {
        RerankConfig {
            url: url.into(),
            model: None,
            api_key: None,
            timeout: DEFAULT_RERANK_TIMEOUT,
        }
    }

    /// Checks the URL: http or https, parseable.
    pub fn check(&self) -> Result<(), String> {
        endpoint(&self.url).map(|_| ())
    }
}

/// `{url}/rerank` (or `url` itself when it already names the endpoint), http or https only
/// (`spine_embed::http::endpoint`, the rule of every outbound model call).
fn endpoint(url: &str) -> Result<reqwest::Url, String> {
    spine_embed::http::endpoint(url, "", "rerank").map_err(|e| format!("the rerank URL {e}"))
}

/// A reranker behind the common HTTP rerank API.
///
/// Sends `POST {url}/rerank` with `{"query", "documents", "texts", "model"?, "top_n",
/// "return_documents": false}` (`documents` for Cohere/Jina, `texts` for TEI) and accepts
/// either answer: TEI's `[{"index", "score"}]` or Cohere/Jina's
/// `{"results": [{"index", "relevance_score"}]}`, in any order. When any score of an answer
/// lies outside 0..=1 the provider sent raw logits, and every score of that answer is mapped
/// with the logistic function `1 / (1 + e^-x)` (mapping all of them keeps the order).
pub struct HttpReranker {
    endpoint: reqwest::Url,
    model: Option<String>,
    api_key: Option<ApiKey>,
    timeout: Duration,
    client: reqwest::blocking::Client,
}

impl fmt::Debug for HttpReranker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpReranker")
            .field("endpoint", &self.endpoint.as_str())
            .field("model", &self.model)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl HttpReranker {
    /// A reranker for `config`. Safe to call on an async runtime's thread.
    pub fn new(config: RerankConfig) -> Result<Self, RerankError> {
        let endpoint = endpoint(&config.url).map_err(RerankError::Client)?;
        let client = blocking_client(config.timeout).map_err(RerankError::Client)?;
        Ok(HttpReranker {
            endpoint,
            model: config.model,
            api_key: config.api_key,
            timeout: config.timeout,
            client,
        })
    }
}

/// The request body, understood by TEI (`texts`) and Cohere/Jina (`documents`).
#[derive(Serialize)]
struct RerankRequest<'a> {
    query: &'a str,
    documents: &'a [&'a str],
    texts: &'a [&'a str],
    #[serde(skip_serializing_if = "Option::is_none")]
    model: Option<&'a str>,
    top_n: usize,
    return_documents: bool,
}

/// Either response shape.
#[derive(Deserialize)]
#[serde(untagged)]
enum RerankResponse {
    /// Hugging Face TEI.
    Tei(Vec<ScoredIndex>),
    /// Cohere / Jina and compatible gateways.
    Results { results: Vec<ScoredIndex> },
}

#[derive(Deserialize)]
struct ScoredIndex {
    index: usize,
    #[serde(alias = "relevance_score")]
    score: f64,
}

impl Reranker for HttpReranker {
    fn rerank(&self, query: &str, documents: &[&str]) -> Result<Vec<f32>, RerankError> {
        if documents.is_empty() {
            return Ok(Vec::new());
        }
        let body = RerankRequest {
            query,
            documents,
            texts: documents,
            model: self.model.as_deref(),
            top_n: documents.len(),
            return_documents: false,
        };
        let answer = post_json(&self.client, self.endpoint.clone(), self.api_key.as_ref(), &body)
            .map_err(|e| {
            if e.is_timeout() {
                RerankError::Timeout(self.timeout)
            } else {
                RerankError::Transport(e)
            }
        })?;
        if !answer.status.is_success() {
            let text = String::from_utf8_lossy(&answer.body);
            let body: String = text.chars().take(200).collect();
            return Err(RerankError::Status { status: answer.status.as_u16(), body });
        }
        probabilities(&answer.body, documents.len())
    }
}

/// The probabilities in a response body, one per document in input order.
fn probabilities(body: &[u8], expected: usize) -> Result<Vec<f32>, RerankError> {
    let results = match serde_json::from_slice(body) {
        Ok(RerankResponse::Tei(r) | RerankResponse::Results { results: r }) => r,
        Err(e) => return Err(RerankError::Malformed(e.to_string())),
    };
    let mut scores: Vec<Option<f64>> = vec![None; expected];
    for r in &results {
        if !r.score.is_finite() {
            return Err(RerankError::Malformed(format!(
                "the score of document {} is {}",
                r.index, r.score
            )));
        }
        match scores.get_mut(r.index) {
            Some(slot @ None) => *slot = Some(r.score),
            // An index out of range or twice: the answer is not about these documents.
            _ => return Err(RerankError::WrongCount { expected, got: results.len() }),
        }
    }
    let scores: Vec<f64> = scores.into_iter().flatten().collect();
    if scores.len() != expected {
        return Err(RerankError::WrongCount { expected, got: scores.len() });
    }
    let logits = scores.iter().any(|s| !(0.0..=1.0).contains(s));
    let probability = |s: f64| if logits { logistic(s) } else { s };
    Ok(scores.into_iter().map(|s| probability(s) as f32).collect())
}

/// The logistic function: a logit as a probability.
fn logistic(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

impl Service {
    /// SPEC search_memory rule 5 (and search_discovery): reorders `hits`, given in the
    /// default order, by the reranker's probability that each answers `query` — a stable
    /// sort, so ties keep the default order — and pairs each with its probability (the
    /// `relevance` of the hit). `document` gives the text scored: the record's content.
    ///
    /// No hit is dropped. With no reranker, or when the attempt fails (error, timeout, a
    /// wrong number of probabilities, one outside 0..=1), the hits keep the default order
    /// and carry no probability; a failure is logged as a warning.
    pub(crate) fn apply_reranker<T>(
        &self,
        query: &str,
        hits: Vec<T>,
        document: impl Fn(&T) -> &str,
    ) -> Vec<(T, Option<f32>)> {
        let Some(reranker) = self.reranker.as_ref().filter(|_| !hits.is_empty()) else {
            return hits.into_iter().map(|h| (h, None)).collect();
        };
        let documents: Vec<&str> = hits.iter().map(&document).collect();
        let _span =
            spine_core::otel_span!("rerank", spine.rerank.documents = documents.len()).entered();
        let probabilities = match reranker.rerank(query, &documents) {
            Ok(p) if p.len() != hits.len() => {
                Err(RerankError::WrongCount { expected: hits.len(), got: p.len() })
            }
            Ok(p) if p.iter().any(|x| !(0.0..=1.0).contains(x)) => Err(RerankError::Malformed(
                "the reranker returned a probability outside 0..1".into(),
            )),
            other => other,
        };
        match probabilities {
            Ok(p) => {
                let mut ranked: Vec<(T, f32)> = hits.into_iter().zip(p).collect();
                // `sort_by` is stable: equal probabilities keep the default order.
                ranked.sort_by(|a, b| b.1.total_cmp(&a.1));
                ranked.into_iter().map(|(h, p)| (h, Some(p))).collect()
            }
            Err(e) => {
                tracing::warn!(error = %e, "reranking failed; keeping the default order");
                hits.into_iter().map(|h| (h, None)).collect()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn probs(body: &str, n: usize) -> Result<Vec<f32>, RerankError> {
        probabilities(body.as_bytes(), n)
    }

    #[test]
    fn tei_answer_is_read_back_into_input_order() {
        let p = probs(r#"[{"index":1,"score":0.9},{"index":0,"score":0.2,"text":null}]"#, 2);
        assert_eq!(p.unwrap(), vec![0.2, 0.9]);
    }

    #[test]
    fn cohere_answer_is_read_back_into_input_order() {
        let body = r#"{"id":"x","results":[{"index":2,"relevance_score":1.0},
            {"index":0,"relevance_score":0.5},{"index":1,"relevance_score":0.0}],"meta":{}}"#;
        assert_eq!(probs(body, 3).unwrap(), vec![0.5, 0.0, 1.0]);
    }

    #[test]
    fn logits_map_every_score_of_the_answer_with_the_logistic_function() {
        let p = probs(r#"[{"index":0,"score":0.5},{"index":1,"score":-3.0}]"#, 2).unwrap();
        assert!((p[0] - 0.622_459_3).abs() < 1e-6, "{p:?}");
        assert!((p[1] - 0.047_425_87).abs() < 1e-6, "{p:?}");
    }

    #[test]
    fn missing_duplicate_or_out_of_range_indices_are_a_wrong_count() {
        for body in [
            r#"[{"index":0,"score":0.5}]"#,
            r#"[{"index":0,"score":0.5},{"index":0,"score":0.4}]"#,
            r#"[{"index":0,"score":0.5},{"index":2,"score":0.4}]"#,
            r#"[{"index":0,"score":0.5},{"index":1,"score":0.4},{"index":2,"score":0.1}]"#,
        ] {
            assert!(matches!(probs(body, 2), Err(RerankError::WrongCount { .. })), "{body}");
        }
    }

    #[test]
    fn other_shapes_are_malformed() {
        for body in ["{", "{}", r#"{"results":[{"index":0}]}"#, r#"[{"index":-1,"score":1}]"#] {
            assert!(matches!(probs(body, 1), Err(RerankError::Malformed(_))), "{body}");
        }
    }

    #[test]
    fn endpoint_appends_rerank_once() {
        assert_eq!(endpoint("http://h:8080").unwrap().as_str(), "http://h:8080/rerank");
        assert_eq!(endpoint("https://h/v1/").unwrap().as_str(), "https://h/v1/rerank");
        assert_eq!(endpoint("https://h/v1/rerank").unwrap().as_str(), "https://h/v1/rerank");
        assert!(endpoint("ftp://h").is_err());
        assert!(endpoint("not a url").is_err());
    }

    #[test]
    fn debug_never_shows_the_key() {
        let c = RerankConfig { api_key: ApiKey::new("sekrit"), ..RerankConfig::new("http://h") };
        assert!(!format!("{c:?}").contains("sekrit"));
    }
}
