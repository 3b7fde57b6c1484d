//! goose's `config.yaml`: Spine's extension as one block of lines under the top-level
//! `extensions:` mapping.
//!
//! Key design decision: no YAML crate writes a document back with its comments, so the
//! edit is textual — the block is inserted right after the `extensions:` line, or removed
//! as the `spine:` key's line and the more-indented lines below it — and every other line
//! stays byte for byte. The result is then parsed and checked to say what was meant; an
//! edit that does not is refused rather than written.

use std::path::Path;

use anyhow::{Context, Result, bail};
use serde_json::Value;

/// The text as data (`None` when empty).
pub fn parse_value(text: &str, path: &Path) -> Result<Option<Value>> {
    if text.trim().is_empty() {
        return Ok(None);
    }
    serde_yaml_ng::from_str(text)
        .with_context(|| format!("{} is not valid YAML; fix or move it first", path.display()))
}

/// A YAML scalar for `s`: JSON's double-quoted string is YAML's too.
fn quoted(s: &str) -> String {
    serde_json::to_string(s).expect("a string serializes")
}

/// The lines of goose's extension entry named `name`, indented by `indent` spaces.
fn block(name: &str, entry: &Value, indent: usize) -> String {
    let pad = " ".repeat(indent);
    let mut out = format!("{pad}{name}:\n");
    if let Value::Object(fields) = entry {
        for (k, v) in fields {
            let v = match v {
                Value::String(s) => quoted(s),
                other => other.to_string(),
            };
            out.push_str(&format!("{pad}{pad}{k}: {v}\n"));
        }
    }
    out
}

fn indent_of(line: &str) -> usize {
    line.len() - line.trim_start_matches(' ').len()
}

fn is_blank_or_comment(line: &str) -> bool {
    let t = line.trim();
    t.is_empty() || t.starts_with('#')
}

/// The line index of the top-level `extensions:` key holding a block mapping.
fn extensions_line(lines: &[&str], path: &Path) -> Result<Option<usize>> {
    for (i, line) in lines.iter().enumerate() {
        if let Some(rest) = line.strip_prefix("extensions:") {
            let rest = rest.trim();
            if rest.is_empty() || rest.starts_with('#') {
                return Ok(Some(i));
            }
            bail!(
                "{}: `extensions:` is written inline ({rest}); write it as a block mapping, or \
                 add Spine by hand",
                path.display()
            );
        }
    }
    Ok(None)
}

/// The indentation of the children of the mapping at line `at`, if it has any.
fn child_indent(lines: &[&str], at: usize) -> Option<usize> {
    lines[at + 1..]
        .iter()
        .find(|l| !is_blank_or_comment(l))
        .map(|l| indent_of(l))
        .filter(|&i| i > 0)
}

/// The lines `[start, end)` of the child `name` of `extensions:`, with its nested lines.
fn find_child(lines: &[&str], at: usize, name: &str) -> Option<(usize, usize)> {
    let indent = child_indent(lines, at)?;
    let mut i = at + 1;
    while i < lines.len() {
        let line = lines[i];
        if !is_blank_or_comment(line) && indent_of(line) < indent {
            return None;
        }
        let key = line.trim_start();
        let named = key.strip_prefix(name).or_else(|| {
            key.strip_prefix(&format!("\"{name}\""))
                .or_else(|| key.strip_prefix(&format!("'{name}'")))
        });
        if indent_of(line) == indent && named.is_some_and(|r| r.starts_with(':')) {
            let mut end = i + 1;
            let mut last = i + 1;
            while end < lines.len() {
                let l = lines[end];
                if l.trim().is_empty() {
                    end += 1;
                    continue;
                }
                if indent_of(l) <= indent {
                    break;
                }
                end += 1;
                last = end;
            }
            return Some((i, last));
        }
        i += 1;
    }
    None
}

fn join(lines: &[&str], trailing_newline: bool) -> String {
    let mut s = lines.join("\n");
    if trailing_newline && !s.is_empty() {
        s.push('\n');
    }
    s
}

/// The text with `extensions.<name>` set to `entry` (or removed when `None`; an
/// `extensions:` it leaves empty goes too).
pub fn edit_extension(
    text: Option<&str>,
    path: &Path,
    name: &str,
    entry: Option<&Value>,
) -> Result<String> {
    let before = text.unwrap_or_default();
    let data = parse_value(before, path)?;
    if data.as_ref().is_some_and(|d| !d.is_object()) {
        bail!("{} does not hold a YAML mapping", path.display());
    }
    let current = data.as_ref().and_then(|d| d.get("extensions")).and_then(|e| e.get(name));
    if current == entry {
        return Ok(before.to_owned());
    }
    let newline = before.is_empty() || before.ends_with('\n');
    let mut lines: Vec<&str> = before.lines().collect();
    let at = extensions_line(&lines, path)?;
    // Remove the current entry, if any.
    if let Some(at) = at
        && let Some((start, end)) = find_child(&lines, at, name)
    {
        lines.drain(start..end);
    }
    let mut out;
    match (entry, at) {
        (Some(entry), Some(at)) => {
            let indent = child_indent(&lines, at).unwrap_or(2);
            let mut head = join(&lines[..=at], true);
            head.push_str(&block(name, entry, indent));
            out = head + &join(&lines[at + 1..], newline);
        }
        (Some(entry), None) => {
            out = join(&lines, true);
            if !out.is_empty() && !out.ends_with("\n\n") {
                out.push('\n');
            }
            out.push_str("extensions:\n");
            out.push_str(&block(name, entry, 2));
        }
        (None, Some(at)) => {
            if child_indent(&lines, at).is_none() && !lines[at].contains('#') {
                lines.remove(at);
            }
            out = join(&lines, newline);
        }
        (None, None) => out = before.to_owned(),
    }
    let check = parse_value(&out, path).ok().flatten();
    let written = check.as_ref().and_then(|d| d.get("extensions")).and_then(|e| e.get(name));
    if written != entry {
        bail!(
            "{}: could not edit `extensions.{name}` safely (unusual layout); add or remove it by \
             hand",
            path.display()
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const GOOSE: &str = "# goose settings\nGOOSE_PROVIDER: anthropic\nextensions:\n  developer:\n    bundled: true\n    enabled: true # always on\n    name: developer\n    timeout: 300\n    type: builtin\nGOOSE_MODE: smart_approve\n";

    #[test]
    fn the_block_goes_in_and_out_leaving_every_other_line() {
        let p = Path::new("config.yaml");
        let entry = json!({"name": "spine", "type": "stdio", "cmd": "/a b/spine", "args": ["mcp"], "enabled": true, "envs": {}, "timeout": 300});
        let once = edit_extension(Some(GOOSE), p, "spine", Some(&entry)).unwrap();
        assert!(once.contains("# always on") && once.contains("GOOSE_MODE: smart_approve"));
        let v = parse_value(&once, p).unwrap().unwrap();
        assert_eq!(v["extensions"]["spine"], entry);
        assert_eq!(v["extensions"]["developer"]["type"], "builtin");
        assert_eq!(edit_extension(Some(&once), p, "spine", Some(&entry)).unwrap(), once);
        assert_eq!(edit_extension(Some(&once), p, "spine", None).unwrap(), GOOSE);
    }

    #[test]
    fn a_file_without_extensions_gets_the_key_and_loses_it_again() {
        let p = Path::new("config.yaml");
        let text = "GOOSE_PROVIDER: openai\n";
        let entry = json!({"name": "spine", "cmd": "spine"});
        let once = edit_extension(Some(text), p, "spine", Some(&entry)).unwrap();
        assert_eq!(parse_value(&once, p).unwrap().unwrap()["extensions"]["spine"], entry);
        let removed = edit_extension(Some(&once), p, "spine", None).unwrap();
        assert_eq!(parse_value(&removed, p).unwrap(), parse_value(text, p).unwrap());
        let inline = "extensions: {}\n";
        assert!(edit_extension(Some(inline), p, "spine", Some(&entry)).is_err());
    }
}
