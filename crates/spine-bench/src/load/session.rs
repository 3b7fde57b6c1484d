//! One MCP session over one kept-alive HTTP/1.1 connection, and the task that drives it.

use super::*;

/// One HTTP/1.1 connection to the server, kept alive: every request of a session goes over
/// the same socket. (reqwest's pool opened a new connection whenever the next request left
/// before the last one's connection was back in the pool: every fourth call, back to back.)
pub(super) struct Connection {
    sender: SendRequest<Full<Bytes>>,
    host: String,
}

impl Connection {
    pub(super) async fn open(uri: &Uri) -> Result<Connection> {
        if uri.scheme_str() != Some("http") {
            bail!("{uri}: only http:// URLs");
        }
        let host = uri.host().context("a host in the URL")?;
        let port = uri.port_u16().unwrap_or(80);
        let stream = TcpStream::connect((host.trim_matches(['[', ']']), port)).await?;
        stream.set_nodelay(true)?;
        let (sender, connection) = http1::handshake(TokioIo::new(stream)).await?;
        tokio::spawn(connection);
        Ok(Connection { sender, host: format!("{host}:{port}") })
    }

    /// Sends `request` (its Host header added), reads the whole response.
    pub(super) async fn send(
        &mut self,
        mut request: Request<Full<Bytes>>,
    ) -> Result<(StatusCode, HeaderMap, Bytes)> {
        request.headers_mut().insert(HOST, HeaderValue::from_str(&self.host)?);
        self.sender.ready().await?;
        let (head, body) = self.sender.send_request(request).await?.into_parts();
        Ok((head.status, head.headers, body.collect().await?.to_bytes()))
    }
}

/// One MCP session: its own connection and the server's session id.
pub(super) struct Session {
    connection: Connection,
    uri: Uri,
    id: Option<String>,
    next_request: u64,
    /// A call timed out: its reply may still come, so the next call opens a new connection.
    stale: bool,
    /// Every request on a new connection (`--fresh-connections`).
    fresh: bool,
}

impl Session {
    pub(super) async fn open(uri: &Uri, fresh: bool) -> Result<Session> {
        let connection = Connection::open(uri).await?;
        let mut session = Session {
            connection,
            uri: uri.clone(),
            id: None,
            next_request: 1,
            stale: false,
            fresh,
        };
        let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": PROTOCOL, "capabilities": {},
            "clientInfo": {"name": "spine-bench", "version": "1"}}});
        let (status, headers, body) = session.post(&init).await.context("initialize")?;
        session.id = headers.get("mcp-session-id").and_then(|v| v.to_str().ok()).map(str::to_owned);
        reply(status, &headers, &body, 0).context("initialize")?;
        let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        let (status, _, body) =
            session.post(&initialized).await.context("notifications/initialized")?;
        if status.as_u16() >= 400 {
            bail!(
                "notifications/initialized: HTTP {status}: {}",
                snippet(&String::from_utf8_lossy(&body))
            );
        }
        Ok(session)
    }

    pub(super) async fn post(&mut self, body: &Value) -> Result<(StatusCode, HeaderMap, Bytes)> {
        // The server may close a kept-alive connection (idle, restart): open another.
        if self.stale || self.fresh || self.connection.sender.is_closed() {
            self.connection = Connection::open(&self.uri).await?;
            self.stale = false;
        }
        let path = self.uri.path_and_query().map_or("/", |p| p.as_str());
        let mut request = Request::post(path)
            .header(CONTENT_TYPE, "application/json")
            .header(ACCEPT, "application/json, text/event-stream");
        if let Some(id) = &self.id {
            request = request.header("Mcp-Session-Id", id).header("MCP-Protocol-Version", PROTOCOL);
        }
        self.connection.send(request.body(Full::new(Bytes::from(body.to_string())))?).await
    }

    /// Ends the session on the server (DELETE), so that runs against one server do not
    /// leave sessions open until their idle timeout. Best effort.
    pub(super) async fn close(mut self) {
        if let Some(id) = &self.id
            && let Ok(request) =
                Request::delete(self.uri.path()).header("Mcp-Session-Id", id).body(Full::default())
        {
            let _ = tokio::time::timeout(CALL_TIMEOUT, self.connection.send(request)).await;
        }
    }

    /// `tools/call`: the result, or why the call failed (transport, HTTP status, JSON-RPC
    /// error, `isError`, or no reply within [`CALL_TIMEOUT`]).
    pub(super) async fn call(&mut self, tool: Tool, args: &Value) -> Result<Value> {
        let id = self.next_request;
        self.next_request += 1;
        let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                          "params": {"name": tool.name(), "arguments": args}});
        let message = match tokio::time::timeout(CALL_TIMEOUT, self.post(&body)).await {
            Err(_) => {
                self.stale = true;
                bail!("{}: no reply in {} s", tool.name(), CALL_TIMEOUT.as_secs())
            }
            Ok(response) => {
                let (status, headers, body) = response.with_context(|| tool.name())?;
                reply(status, &headers, &body, id).with_context(|| tool.name())?
            }
        };
        let result = &message["result"];
        if result.get("isError").and_then(Value::as_bool) == Some(true) {
            bail!("{}: isError: {}", tool.name(), snippet(&result["content"].to_string()));
        }
        Ok(result.clone())
    }
}

/// The JSON-RPC reply to request `id`: the body, or for an SSE stream (which the server ends
/// after the reply) the `data:` event whose `id` is `id`.
pub(super) fn reply(
    status: StatusCode,
    headers: &HeaderMap,
    body: &[u8],
    id: u64,
) -> Result<Value> {
    let body = String::from_utf8_lossy(body);
    if status.as_u16() >= 400 {
        bail!("HTTP {status}: {}", snippet(&body));
    }
    let sse =
        headers.get(CONTENT_TYPE).is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"));
    let message: Value = if sse {
        let events = body.lines().filter_map(|l| l.strip_prefix("data:"));
        let mut messages = events.filter_map(|d| serde_json::from_str::<Value>(d).ok());
        let reply = messages.find(|m| m["id"] == id);
        reply.with_context(|| format!("no reply to request {id} in the SSE stream"))?
    } else {
        serde_json::from_str(&body).context("a JSON-RPC reply")?
    };
    if let Some(error) = message.get("error") {
        bail!("JSON-RPC error: {}", snippet(&error.to_string()));
    }
    if message.get("result").is_none() {
        bail!("no result in {}", snippet(&message.to_string()));
    }
    Ok(message)
}

pub(super) fn snippet(s: &str) -> String {
    s.chars().take(300).collect()
}

/// One session calling back to back until `deadline`; a call started before it is awaited.
pub(super) async fn drive(
    mut session: Session,
    work: Arc<Workload>,
    deadline: Instant,
    seed: u64,
) -> Session {
    let mut rng = StdRng::seed_from_u64(seed);
    while Instant::now() < deadline {
        let (tool, args) = work.next_call(&mut rng);
        let started = Instant::now();
        let outcome = session.call(tool, &args).await.and_then(|result| match tool {
            Tool::Store => work.stored(&args, &result),
            _ => Ok(()),
        });
        work.record(tool, started.elapsed().as_secs_f64() * 1e3, outcome);
    }
    session
}
