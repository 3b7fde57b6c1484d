//! A scripted model provider (embeddings, chat completions, rerank) on a real loopback
//! socket, for the outbound HTTP clients' tests.
//!
//! The fake speaks the provider's real wire protocol through an `answer` function the test
//! gives; this module does what every such fake needs: the server on its own thread and
//! runtime (the clients under test may be blocking, which must not run inside a runtime),
//! the record of every request, a queue of scripted replies, and the replies common to all
//! providers (an error status, a 429 with `Retry-After`, a delay, a hang).

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// One request as the fake saw it.
#[derive(Debug, Clone)]
pub struct Seen {
    /// The request path.
    pub path: String,
    /// The `Authorization` header, if any.
    pub authorization: Option<String>,
    /// The JSON body.
    pub body: Value,
}

/// What the fake does with the next request.
pub enum Reply<A> {
    /// The provider-specific reply `A`, turned into a response by the `answer` function.
    Answer(A),
    /// This status with an OpenAI-style JSON error body (`scripted <status>`).
    Status(u16),
    /// 429 with a `Retry-After` header of this many seconds.
    TooManyWithRetryAfter(u64),
    /// Wait this long, then answer by default.
    Delay(Duration),
}

struct Script<A> {
    replies: Mutex<VecDeque<Reply<A>>>,
    /// Once the scripted replies run out, every request waits this long first.
    hang: Mutex<Option<Duration>>,
    seen: Mutex<Vec<Seen>>,
}

type Answer<A> = dyn Fn(Option<A>, &Value) -> Response + Send + Sync;

struct Shared<A> {
    script: Script<A>,
    answer: Box<Answer<A>>,
}

/// A fake provider answering `POST` on one path.
pub struct FakeProvider<A> {
    addr: SocketAddr,
    shared: Arc<Shared<A>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl<A: Send + 'static> FakeProvider<A> {
    /// Starts a fake answering `POST path` on a free loopback port. `answer(reply, body)`
    /// builds the response to a request: `Some(a)` for a scripted [`Reply::Answer`], `None`
    /// for the default answer (no scripted reply left, or after a [`Reply::Delay`]).
    pub fn start(
        path: &str,
        answer: impl Fn(Option<A>, &Value) -> Response + Send + Sync + 'static,
    ) -> Self {
        let shared = Arc::new(Shared {
            script: Script {
                replies: Mutex::new(VecDeque::new()),
                hang: Mutex::new(None),
                seen: Mutex::new(Vec::new()),
            },
            answer: Box::new(answer),
        });
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind loopback");
        listener.set_nonblocking(true).expect("non-blocking listener");
        let addr = listener.local_addr().expect("local address");
        let state = shared.clone();
        let path = path.to_owned();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("test runtime");
            rt.block_on(async move {
                let app = axum::Router::new()
                    .route(&path, axum::routing::post(handle::<A>))
                    .with_state(state);
                let listener = tokio::net::TcpListener::from_std(listener).expect("listener");
                axum::serve(listener, app).await.expect("serve");
            });
        });
        FakeProvider { addr, shared }
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Queues replies for the next requests, in order.
    pub fn then(&self, replies: impl IntoIterator<Item = Reply<A>>) {
        lock(&self.shared.script.replies).extend(replies);
    }

    /// Once the scripted replies are used up, every request waits `d` before its answer.
    pub fn then_hang(&self, d: Duration) {
        *lock(&self.shared.script.hang) = Some(d);
    }

    /// Every request so far, in arrival order.
    pub fn seen(&self) -> Vec<Seen> {
        lock(&self.shared.script.seen).clone()
    }
}

async fn handle<A: Send + 'static>(
    State(shared): State<Arc<Shared<A>>>,
    uri: Uri,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    let authorization =
        headers.get("authorization").and_then(|v| v.to_str().ok()).map(str::to_owned);
    lock(&shared.script.seen).push(Seen {
        path: uri.path().to_owned(),
        authorization,
        body: body.clone(),
    });
    let reply = lock(&shared.script.replies).pop_front();
    match reply {
        Some(Reply::Answer(a)) => (shared.answer)(Some(a), &body),
        Some(Reply::Status(code)) => {
            let status = StatusCode::from_u16(code).expect("a status code");
            let error = json!({"error": {"message": format!("scripted {code}"), "type": "test"}});
            (status, Json(error)).into_response()
        }
        Some(Reply::TooManyWithRetryAfter(secs)) => (
            StatusCode::TOO_MANY_REQUESTS,
            [("retry-after", secs.to_string())],
            Json(json!({"error": {"message": "slow down"}})),
        )
            .into_response(),
        Some(Reply::Delay(d)) => {
            tokio::time::sleep(d).await;
            (shared.answer)(None, &body)
        }
        None => {
            let hang = *lock(&shared.script.hang);
            if let Some(d) = hang {
                tokio::time::sleep(d).await;
            }
            (shared.answer)(None, &body)
        }
    }
}
