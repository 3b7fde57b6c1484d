//! Diagnostics shared by the HTTP clients (the OpenAI-compatible embedder here, and the
//! chat summarizer of `spine summarize-missing`).

/// The first 300 characters of a body, on one line, for error messages.
pub fn snippet(body: &str) -> String {
    let one_line: String = body.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut s: String = one_line.chars().take(300).collect();
    if s.len() < one_line.len() {
        s.push('…');
    }
    if s.is_empty() { "(empty body)".into() } else { s }
}

/// An error with its sources ("error sending request: connection refused").
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut source = e.source();
    while let Some(inner) = source {
        let text = inner.to_string();
        if !s.contains(&text) {
            s.push_str(": ");
            s.push_str(&text);
        }
        source = inner.source();
    }
    s
}
