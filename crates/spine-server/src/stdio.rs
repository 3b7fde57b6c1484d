//! The stdio transport's guard: newline-delimited JSON-RPC between the client and rmcp, with
//! every line checked before rmcp sees it.
//!
//! rmcp's stdio codec drops a line that is not JSON without a word, so a client whose request
//! carried, say, a lone surrogate escape waits for an answer forever; and it buffers a line of
//! any length. The guard answers a line that does not parse with a JSON-RPC parse error
//! (-32700) and a line over [`MAX_LINE_BYTES`] with an invalid-request error (-32600) —
//! discarding the rest of that line as it arrives, so memory stays bounded — and passes every
//! other line through unchanged. Answers are whole lines interleaved with rmcp's.

use serde_json::json;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader, DuplexStream};
use tokio::sync::mpsc;

/// The longest message line accepted, the same bound as an HTTP request body (rmcp's
/// streamable-HTTP default): far above every argument limit of the tools.
pub const MAX_LINE_BYTES: usize = 4 * 1024 * 1024;

/// The pipe between the guard and rmcp, each way.
const PIPE_BYTES: usize = 256 * 1024;

/// A transport for rmcp over the process's stdin and stdout, guarded as the module says.
/// Must be called inside a Tokio runtime; the guard's tasks end with the streams.
pub fn stdio() -> (DuplexStream, DuplexStream) {
    guarded(tokio::io::stdin(), tokio::io::stdout())
}

/// [`stdio`] over any pair of streams: `(what rmcp reads, what rmcp writes)`.
pub fn guarded<R, W>(input: R, output: W) -> (DuplexStream, DuplexStream)
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (rmcp_in, mut to_rmcp) = tokio::io::duplex(PIPE_BYTES);
    let (rmcp_out, from_rmcp) = tokio::io::duplex(PIPE_BYTES);
    let (errors, mut error_lines) = mpsc::channel::<String>(64);
    tokio::spawn(async move {
        let mut input = BufReader::new(input);
        loop {
            match read_line(&mut input).await {
                Ok(Line::End) | Err(_) => break,
                Ok(Line::TooLong) => {
                    let message = format!("message line longer than {MAX_LINE_BYTES} bytes");
                    if errors.send(error_line(-32600, &message)).await.is_err() {
                        break;
                    }
                }
                Ok(Line::Text(line)) => {
                    if line.iter().all(u8::is_ascii_whitespace) {
                        continue;
                    }
                    // A full parse: skipping values (`IgnoredAny`) lets lone surrogates through.
                    if let Err(e) = serde_json::from_slice::<serde_json::Value>(&line) {
                        let message = format!("Parse error: {e}");
                        if errors.send(error_line(-32700, &message)).await.is_err() {
                            break;
                        }
                        continue;
                    }
                    if to_rmcp.write_all(&line).await.is_err()
                        || to_rmcp.write_all(b"\n").await.is_err()
                    {
                        break;
                    }
                }
            }
        }
        // Dropping the pipe tells rmcp the input ended; it then ends the session.
        drop(to_rmcp);
    });
    tokio::spawn(async move {
        let mut output = output;
        let mut from_rmcp = BufReader::new(from_rmcp);
        let mut line = Vec::new();
        let (mut rmcp_open, mut errors_open) = (true, true);
        while rmcp_open || errors_open {
            tokio::select! {
                read = from_rmcp.read_until(b'\n', &mut line), if rmcp_open => {
                    match read {
                        Ok(0) | Err(_) => rmcp_open = false,
                        Ok(_) => {
                            if output.write_all(&line).await.is_err() || output.flush().await.is_err() {
                                break;
                            }
                            line.clear();
                        }
                    }
                }
                error = error_lines.recv(), if errors_open => {
                    let Some(error) = error else {
                        errors_open = false;
                        continue;
                    };
                    if output.write_all(error.as_bytes()).await.is_err() || output.flush().await.is_err() {
                        break;
                    }
                }
            }
        }
    });
    (rmcp_in, rmcp_out)
}

enum Line {
    Text(Vec<u8>),
    TooLong,
    End,
}

/// One line without its `\n`; a line over the limit is consumed to its end and reported.
async fn read_line<R: AsyncBufReadExt + Unpin>(input: &mut R) -> std::io::Result<Line> {
    let mut line = Vec::new();
    let mut too_long = false;
    loop {
        let buf = input.fill_buf().await?;
        if buf.is_empty() {
            return Ok(match (too_long, line.is_empty()) {
                (true, _) => Line::TooLong,
                (false, true) => Line::End,
                (false, false) => Line::Text(line),
            });
        }
        let (chunk, done) = match buf.iter().position(|&b| b == b'\n') {
            Some(i) => (&buf[..i], Some(i + 1)),
            None => (buf, None),
        };
        if !too_long && line.len() + chunk.len() <= MAX_LINE_BYTES {
            line.extend_from_slice(chunk);
        } else {
            too_long = true;
            line = Vec::new();
        }
        let used = done.unwrap_or(buf.len());
        input.consume(used);
        if done.is_some() {
            return Ok(if too_long { Line::TooLong } else { Line::Text(line) });
        }
    }
}

/// A JSON-RPC error response to a message whose id could not be read.
fn error_line(code: i64, message: &str) -> String {
    let mut line =
        json!({"jsonrpc": "2.0", "error": {"code": code, "message": message}}).to_string();
    line.push('\n');
    line
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    /// Feeds `input` through the guard and returns (what rmcp read, what the client got).
    async fn run(input: Vec<u8>, rmcp_says: &[u8]) -> (String, String) {
        let (client_out, guard_in) = tokio::io::duplex(1 << 16);
        let (guard_out, mut client_in) = tokio::io::duplex(1 << 16);
        let (mut rmcp_in, mut rmcp_out) = guarded(guard_in, guard_out);
        let writer = tokio::spawn(async move {
            let mut client_out = client_out;
            client_out.write_all(&input).await.unwrap();
        });
        let mut seen = Vec::new();
        rmcp_in.read_to_end(&mut seen).await.unwrap();
        writer.await.unwrap();
        rmcp_out.write_all(rmcp_says).await.unwrap();
        drop(rmcp_out);
        drop(rmcp_in);
        let mut got = Vec::new();
        client_in.read_to_end(&mut got).await.unwrap();
        (String::from_utf8(seen).unwrap(), String::from_utf8_lossy(&got).into_owned())
    }

    #[tokio::test]
    async fn valid_lines_pass_and_bad_ones_are_answered() {
        let mut input = b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\n".to_vec();
        input.extend_from_slice(b"{\n\n   \n\xff\xfe\n");
        input.extend_from_slice(b"{\"a\":\"\\ud800\"}\n");
        input.extend_from_slice(&b"[".repeat(100_000));
        input.extend_from_slice(b"\n");
        input.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"ping\"}");
        let (seen, got) = run(input, b"{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n").await;
        assert_eq!(
            seen,
            "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\n\
             {\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"ping\"}\n"
        );
        let lines: Vec<&str> = got.lines().collect();
        assert_eq!(lines.len(), 5, "{got}");
        let parse_errors = lines.iter().filter(|l| l.contains("-32700")).count();
        assert_eq!(parse_errors, 4, "{got}");
        assert!(lines.contains(&"{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}"), "{got}");
    }

    #[tokio::test]
    async fn a_line_over_the_limit_is_refused_and_skipped() {
        let mut input = vec![b' '; MAX_LINE_BYTES - 2];
        input.extend_from_slice(b"{}\n"); // exactly MAX_LINE_BYTES: passes
        input.extend_from_slice(&vec![b' '; MAX_LINE_BYTES + 1]);
        input.extend_from_slice(b"\n{\"ok\":true}\n");
        let (seen, got) = run(input, b"").await;
        assert_eq!(seen.len(), MAX_LINE_BYTES + 1 + "{\"ok\":true}\n".len());
        assert!(seen.ends_with("{}\n{\"ok\":true}\n"));
        assert_eq!(got.lines().count(), 1, "{got}");
        assert!(got.contains("-32600") && got.contains("longer than"), "{got}");
    }
}
