//! Edits of JSON and JSON-with-comments files (every client but Codex and goose) through a
//! concrete syntax tree (`jsonc-parser`'s CST): only Spine's entries change; every other
//! byte — comments, key order, indentation, trailing commas — stays as it was.

use std::path::Path;

use anyhow::{Context, Result, bail};
use jsonc_parser::ParseOptions;
use jsonc_parser::cst::{CstInputValue, CstObject, CstRootNode};
use serde_json::Value;

use super::is_spine_hook;

/// A JSON or JSONC text as data (comments and trailing commas allowed); `None` when empty.
pub fn parse_value(text: &str, path: &Path) -> Result<Option<Value>> {
    jsonc_parser::parse_to_serde_value(text, &ParseOptions::default())
        .with_context(|| format!("{} is not valid JSON; fix or move it first", path.display()))
}

fn parse(text: Option<&str>, path: &Path) -> Result<CstRootNode> {
    let text = match text {
        Some(t) if !t.trim().is_empty() => t,
        _ => "{}\n",
    };
    let root = CstRootNode::parse(text, &ParseOptions::default())
        .with_context(|| format!("{} is not valid JSON; fix or move it first", path.display()))?;
    if root.value().is_some_and(|v| v.as_object().is_none()) {
        bail!("{} does not hold a JSON object", path.display());
    }
    Ok(root)
}

fn input(v: &Value) -> CstInputValue {
    match v {
        Value::Null => CstInputValue::Null,
        Value::Bool(b) => CstInputValue::Bool(*b),
        Value::Number(n) => CstInputValue::Number(n.to_string()),
        Value::String(s) => CstInputValue::String(s.clone()),
        Value::Array(a) => CstInputValue::Array(a.iter().map(input).collect()),
        Value::Object(o) => {
            CstInputValue::Object(o.iter().map(|(k, v)| (k.clone(), input(v))).collect())
        }
    }
}

/// The object at `key` of `parent`, made when absent; an error when it is something else.
fn object_at(parent: &CstObject, key: &str, path: &Path) -> Result<CstObject> {
    parent
        .object_value_or_create(key)
        .with_context(|| format!("{}: \"{key}\" is not an object", path.display()))
}

/// The text with `servers_key.<name>` set to `entry` (or removed when `entry` is `None`;
/// then an object it leaves empty goes too). The text comes back as it was when the data
/// would not change.
pub fn edit_server(
    text: Option<&str>,
    path: &Path,
    servers_key: &str,
    name: &str,
    entry: Option<&Value>,
) -> Result<String> {
    let root = parse(text, path)?;
    let top = root.object_value_or_set();
    match entry {
        Some(entry) => {
            let servers = object_at(&top, servers_key, path)?;
            match servers.get(name) {
                Some(prop) => {
                    let same =
                        prop.value().and_then(|v| v.to_serde_value()).as_ref() == Some(entry);
                    if !same {
                        prop.set_value(input(entry));
                    }
                }
                None => {
                    servers.append(name, input(entry));
                }
            }
        }
        None => {
            if let Some(servers) = top.object_value(servers_key) {
                if let Some(prop) = servers.get(name) {
                    prop.remove();
                }
                if servers.properties().is_empty()
                    && let Some(p) = top.get(servers_key)
                {
                    p.remove();
                }
            }
        }
    }
    Ok(unchanged_if_same(text, root.to_string(), path))
}

/// The text with Spine's hook handlers for `events` (client event, `spine hook` event)
/// replaced by `command_for(event)` (or only removed when `command_for` is `None`), in
/// Claude Code's layout `hooks.<Event>[{matcher?, hooks: [{type, command}]}]`, which
/// Codex and Gemini CLI share. Spine's handlers are recognised by their command; groups and
/// lists they leave empty are removed.
pub fn edit_hooks(
    text: Option<&str>,
    path: &Path,
    events: &[(&str, &str)],
    command_for: Option<&dyn Fn(&str) -> String>,
) -> Result<String> {
    let root = parse(text, path)?;
    let top = root.object_value_or_set();
    if command_for.is_none() && top.get("hooks").is_none() {
        return Ok(text.unwrap_or_default().to_owned());
    }
    let all = object_at(&top, "hooks", path)?;
    for (event, hook_event) in events {
        let Some(groups) = all.array_value_or_create(event) else {
            bail!("{}: hooks.{event} is not a list", path.display());
        };
        for group in groups.elements() {
            let Some(handlers) = group.as_object().and_then(|g| g.array_value("hooks")) else {
                continue;
            };
            let mut removed = false;
            for h in handlers.elements() {
                let command = h
                    .as_object()
                    .and_then(|o| o.get("command"))
                    .and_then(|p| p.value())
                    .and_then(|v| v.as_string_lit())
                    .and_then(|s| s.decoded_value().ok());
                if command.is_some_and(|c| is_spine_hook(&c)) {
                    h.remove();
                    removed = true;
                }
            }
            if removed && handlers.elements().is_empty() {
                group.remove();
            }
        }
        if let Some(command_for) = command_for {
            let handler =
                serde_json::json!({"type": "command", "command": command_for(hook_event)});
            groups.append(input(&serde_json::json!({"hooks": [handler]})));
        }
        if groups.elements().is_empty()
            && let Some(p) = all.get(event)
        {
            p.remove();
        }
    }
    if all.properties().is_empty()
        && let Some(p) = top.get("hooks")
    {
        p.remove();
    }
    Ok(unchanged_if_same(text, root.to_string(), path))
}

/// `after`, or the original text when both say the same as data (so a second install
/// rewrites nothing and makes no backup).
fn unchanged_if_same(before: Option<&str>, after: String, path: &Path) -> String {
    let Some(before) = before else { return after };
    let same = match (parse_value(before, path), parse_value(&after, path)) {
        (Ok(a), Ok(b)) => {
            a.unwrap_or_else(|| Value::Object(Default::default()))
                == b.unwrap_or_else(|| Value::Object(Default::default()))
        }
        _ => false,
    };
    if same { before.to_owned() } else { after }
}

/// Which of `events` have a Spine handler in the hooks file `value`.
pub fn hooks_present(value: &Value, events: &[(&str, &str)]) -> Vec<bool> {
    events
        .iter()
        .map(|(event, _)| {
            value["hooks"][event].as_array().is_some_and(|groups| {
                groups.iter().any(|g| {
                    g["hooks"].as_array().is_some_and(|hs| {
                        hs.iter().any(|h| h["command"].as_str().is_some_and(is_spine_hook))
                    })
                })
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn comments_and_layout_survive_an_install_and_an_uninstall() {
        let text = "{\n  // my theme\n  \"theme\": \"One Dark\",\n  \"context_servers\": {\n    \"other\": { \"command\": \"x\" }, // keep me\n  },\n}\n";
        let p = Path::new("settings.json");
        let entry = json!({"command": "/bin/spine", "args": ["mcp"]});
        let once = edit_server(Some(text), p, "context_servers", "spine", Some(&entry)).unwrap();
        assert!(once.contains("// my theme") && once.contains("// keep me"), "{once}");
        let v = parse_value(&once, p).unwrap().unwrap();
        assert_eq!(v["context_servers"]["spine"], entry);
        assert_eq!(v["context_servers"]["other"], json!({"command": "x"}));
        let twice = edit_server(Some(&once), p, "context_servers", "spine", Some(&entry)).unwrap();
        assert_eq!(once, twice);
        let removed = edit_server(Some(&once), p, "context_servers", "spine", None).unwrap();
        assert_eq!(parse_value(&removed, p).unwrap(), parse_value(text, p).unwrap());
        assert!(removed.contains("// keep me"), "{removed}");
    }

    #[test]
    fn hooks_are_added_once_and_removed_alone() {
        let text = r#"{"hooks": {"SessionStart": [{"matcher": "startup", "hooks": [{"type": "command", "command": "echo hi"}]}]}}"#;
        let p = Path::new("settings.json");
        let events = [("SessionStart", "session-start"), ("BeforeAgent", "prompt")];
        let hook = |e: &str| format!("/bin/spine hook {e}");
        let once = edit_hooks(Some(text), p, &events, Some(&hook)).unwrap();
        let v = parse_value(&once, p).unwrap().unwrap();
        assert_eq!(v["hooks"]["SessionStart"].as_array().unwrap().len(), 2);
        assert_eq!(v["hooks"]["BeforeAgent"][0]["hooks"][0]["command"], "/bin/spine hook prompt");
        assert_eq!(hooks_present(&v, &events), [true, true]);
        assert_eq!(edit_hooks(Some(&once), p, &events, Some(&hook)).unwrap(), once);
        let removed = edit_hooks(Some(&once), p, &events, None).unwrap();
        assert_eq!(parse_value(&removed, p).unwrap(), parse_value(text, p).unwrap());
    }

    #[test]
    fn a_servers_key_holding_something_else_is_an_error() {
        let p = Path::new("mcp.json");
        let e = edit_server(Some(r#"{"servers": []}"#), p, "servers", "spine", Some(&json!({})))
            .unwrap_err();
        assert!(e.to_string().contains("\"servers\" is not an object"), "{e}");
        assert!(edit_server(Some("{oops"), p, "servers", "spine", None).is_err());
    }
}
