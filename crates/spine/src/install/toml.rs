//! Codex's `config.toml`: `[mcp_servers.spine]` through `toml_edit`, which keeps every
//! other table, comment and blank line as it was.

use std::path::Path;

use anyhow::{Context, Result};
use serde_json::Value;

/// The text as data (`None` when empty).
pub fn parse_value(text: &str, path: &Path) -> Result<Option<Value>> {
    if text.trim().is_empty() {
        return Ok(None);
    }
    let v: toml::Value = toml::from_str(text)
        .with_context(|| format!("{} is not valid TOML; fix or move it first", path.display()))?;
    Ok(Some(serde_json::to_value(v)?))
}

/// Codex's `config.toml` with `[mcp_servers.spine]` set or removed, everything else kept
/// byte for byte.
pub fn edit_codex_toml(
    text: Option<&str>,
    path: &Path,
    install: bool,
    spine: &str,
    args: &[String],
) -> Result<String> {
    let mut doc: toml_edit::DocumentMut = text
        .unwrap_or_default()
        .parse()
        .with_context(|| format!("{} is not valid TOML; fix or move it first", path.display()))?;
    if install {
        let servers = doc
            .entry("mcp_servers")
            .or_insert_with(|| {
                let mut t = toml_edit::Table::new();
                t.set_implicit(true);
                toml_edit::Item::Table(t)
            })
            .as_table_mut()
            .with_context(|| format!("{}: mcp_servers is not a table", path.display()))?;
        let mut entry = toml_edit::Table::new();
        entry.insert("command", toml_edit::value(spine));
        let mut list = toml_edit::Array::new();
        for a in args {
            list.push(a.as_str());
        }
        entry.insert("args", toml_edit::value(list));
        let same = servers.get("spine").and_then(|e| e.as_table()).is_some_and(|t| {
            t.get("command").and_then(|c| c.as_str()) == Some(spine)
                && t.get("args").and_then(|a| a.as_array()).is_some_and(|a| {
                    a.iter()
                        .map(|v| v.as_str().unwrap_or_default())
                        .eq(args.iter().map(String::as_str))
                })
        });
        if !same {
            servers.insert("spine", toml_edit::Item::Table(entry));
        }
    } else if let Some(servers) = doc.get_mut("mcp_servers").and_then(|s| s.as_table_mut()) {
        servers.remove("spine");
    }
    Ok(doc.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codex_toml_keeps_comments_and_layout() {
        let text =
            "# my settings\nmodel = \"o4\"  # fast\n\n[mcp_servers.other]\ncommand = \"x\"\n";
        let p = Path::new("config.toml");
        let args = vec!["mcp".to_owned()];
        let once = edit_codex_toml(Some(text), p, true, "/bin/spine", &args).unwrap();
        assert!(once.starts_with(text), "the existing text is untouched: {once}");
        assert!(
            once.contains("[mcp_servers.spine]\ncommand = \"/bin/spine\"\nargs = [\"mcp\"]"),
            "{once}"
        );
        assert_eq!(edit_codex_toml(Some(&once), p, true, "/bin/spine", &args).unwrap(), once);
        let removed = edit_codex_toml(Some(&once), p, false, "/bin/spine", &args).unwrap();
        assert_eq!(removed, text);
    }
}
