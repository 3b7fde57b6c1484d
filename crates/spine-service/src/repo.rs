//! Which repository a working directory belongs to, and which scopes hold its memory: the
//! one rule the session hooks (`spine hook`), `spine import-notes` and the `bootstrap`
//! prompt share.
//!
//! A checkout's names are its top-level directory's and its `origin` remote's; its
//! `.spine.toml` may name the repository, its memory scopes and its rule scopes instead.
//! Without one, every readable memory scope ending in one of the names is the repository's,
//! and `rule:repo:<name>` holds its rules.

use std::path::{Path, PathBuf};

use serde::Deserialize;
use spine_core::{Caller, Error, Hint, Scope, ScopeKind};

use crate::Service;
use crate::digest::RepoScopes;

/// A repository found from a working directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkout {
    /// Its top-level directory.
    pub top: PathBuf,
    /// Its names: the directory's, then the origin remote's when it differs.
    pub names: Vec<String>,
}

impl Checkout {
    /// The repository `cwd` is in: the nearest directory above it holding `.git` (or,
    /// outside git, `.spine.toml`).
    pub fn find(cwd: &Path) -> Option<Checkout> {
        let top =
            cwd.ancestors().find(|d| d.join(".git").exists() || d.join(".spine.toml").is_file())?;
        let mut names: Vec<String> =
            top.file_name().map(|n| n.to_string_lossy().into_owned()).into_iter().collect();
        if let Some(origin) = origin_name(top)
            && !names.contains(&origin)
        {
            names.push(origin);
        }
        (!names.is_empty()).then(|| Checkout { top: top.to_path_buf(), names })
    }

    /// Its `.spine.toml`, or the defaults when it has none.
    pub fn config(&self) -> Result<RepoConfig, Error> {
        RepoConfig::read(&self.top)
    }
}

impl RepoConfig {
    /// The `.spine.toml` at `top`, or the defaults when there is none; one that does not
    /// parse is an error naming the file.
    pub fn read(top: &Path) -> Result<RepoConfig, Error> {
        let path = top.join(".spine.toml");
        match std::fs::read_to_string(&path) {
            Ok(text) => toml::from_str(&text).map_err(|e| {
                Error::invalid(
                    ".spine.toml",
                    Hint::InvalidValue,
                    format!("reading {}: {e}", path.display()),
                )
            }),
            Err(_) => Ok(RepoConfig::default()),
        }
    }
}

/// `.spine.toml` at a repository's top level.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RepoConfig {
    /// The repository's name, instead of the directory's or the origin's.
    #[serde(default)]
    pub repo: Option<String>,
    /// The one memory scope to read (and the one `import-notes` writes to).
    #[serde(default)]
    pub scope: Option<String>,
    /// Several memory scopes to read, in this order.
    #[serde(default)]
    pub scopes: Option<Vec<String>>,
    /// Rule scopes to read (default: `rule:repo:<repo>`).
    #[serde(default)]
    pub rule_scopes: Option<Vec<String>>,
}

/// The git directory holding `top`'s config: `.git` itself, or for a worktree or submodule
/// (`.git` is a file `gitdir: …`), the common directory it points to.
fn git_config(top: &Path) -> Option<PathBuf> {
    let dot_git = top.join(".git");
    if dot_git.is_dir() {
        return Some(dot_git.join("config"));
    }
    let text = std::fs::read_to_string(&dot_git).ok()?;
    let gitdir = top.join(text.trim().strip_prefix("gitdir:")?.trim());
    let common = match std::fs::read_to_string(gitdir.join("commondir")) {
        Ok(rel) => gitdir.join(rel.trim()),
        Err(_) => gitdir,
    };
    Some(common.join("config"))
}

/// The repository name of the `origin` remote's URL in `top`'s git config.
fn origin_name(top: &Path) -> Option<String> {
    let config = std::fs::read_to_string(git_config(top)?).ok()?;
    let mut in_origin = false;
    for line in config.lines().map(str::trim) {
        if line.starts_with('[') {
            in_origin = line.replace(' ', "") == "[remote\"origin\"]";
        } else if in_origin
            && let Some((key, value)) = line.split_once('=')
            && key.trim() == "url"
        {
            return repo_name_of_url(value.trim());
        }
    }
    None
}

/// `spine` for `git@github.com:acme/spine.git`, `https://host/acme/spine/` and the like.
pub fn repo_name_of_url(url: &str) -> Option<String> {
    let url = url.trim().trim_end_matches('/');
    let last = url.rsplit(['/', ':']).next()?;
    let name = last.strip_suffix(".git").unwrap_or(last);
    (!name.is_empty()).then(|| name.to_owned())
}

/// `rule:repo:<name>`, when `name` makes a valid scope.
fn rule_scope_of(name: &str) -> Option<Scope> {
    Scope::parse("repo", &format!("rule:repo:{name}")).ok()
}

impl Service {
    /// The scopes of the repository known by `names`: every readable memory scope of each
    /// name (in the names' order, each once) and each name's `rule:repo:` scope.
    pub fn named_repo_scopes(
        &self,
        caller: &Caller,
        names: &[String],
    ) -> Result<RepoScopes, Error> {
        let mut memory = Vec::new();
        for name in names {
            for s in self.repo_scopes(caller, name)? {
                if !memory.contains(&s) {
                    memory.push(s);
                }
            }
        }
        Ok(RepoScopes {
            repo: names.first().cloned().unwrap_or_default(),
            memory,
            rules: names.iter().filter_map(|n| rule_scope_of(n)).collect(),
        })
    }

    /// The scopes of `checkout`: what its `.spine.toml` names, the rest found by its names
    /// ([`Service::named_repo_scopes`]).
    pub fn checkout_scopes(
        &self,
        caller: &Caller,
        checkout: &Checkout,
    ) -> Result<RepoScopes, Error> {
        let config = checkout.config()?;
        let path = checkout.top.join(".spine.toml");
        let names: Vec<String> = match &config.repo {
            Some(r) => vec![r.clone()],
            None => checkout.names.clone(),
        };
        let parse = |s: &str, want: ScopeKind| -> Result<Scope, Error> {
            let bad = |why: String| Error::invalid(".spine.toml", Hint::MalformedScope, why);
            let scope = Scope::parse("scope", s)
                .map_err(|e| bad(format!("{}: {}", path.display(), e.message)))?;
            if scope.kind() != want {
                let kind = if want == ScopeKind::Rule { "rule" } else { "memory" };
                return Err(bad(format!("{}: {s:?} is not a {kind} scope", path.display())));
            }
            Ok(scope)
        };
        let mut found = self.named_repo_scopes(caller, &names)?;
        let configured: Vec<&String> =
            config.scope.iter().chain(config.scopes.iter().flatten()).collect();
        if !configured.is_empty() {
            found.memory =
                configured.iter().map(|s| parse(s, ScopeKind::Memory)).collect::<Result<_, _>>()?;
        }
        if let Some(list) = &config.rule_scopes {
            found.rules =
                list.iter().map(|s| parse(s, ScopeKind::Rule)).collect::<Result<_, _>>()?;
        }
        Ok(found)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repository_names_come_from_remote_urls() {
        for (url, name) in [
            ("git@github.com:acme/spine.git", "spine"),
            ("https://github.com/acme/spine", "spine"),
            ("https://gitlab.example/group/sub/spine.git/", "spine"),
            ("ssh://git@host:2222/acme/tools.git", "tools"),
            ("/srv/git/local-repo", "local-repo"),
        ] {
            assert_eq!(repo_name_of_url(url).as_deref(), Some(name), "{url}");
        }
        assert_eq!(repo_name_of_url(""), None);
    }

    #[test]
    fn the_repository_is_the_git_top_level_with_its_origin_name() {
        let dir = tempfile::tempdir().unwrap();
        let top = dir.path().join("checkout");
        std::fs::create_dir_all(top.join(".git")).unwrap();
        std::fs::create_dir_all(top.join("src/deep")).unwrap();
        std::fs::write(
            top.join(".git/config"),
            "[core]\n\tbare = false\n[remote \"upstream\"]\n\turl = git@x:o/other.git\n\
             [remote \"origin\"]\n\turl = git@github.com:acme/spine.git\n",
        )
        .unwrap();
        let repo = Checkout::find(&top.join("src/deep")).unwrap();
        assert_eq!(repo.top, top);
        assert_eq!(repo.names, ["checkout", "spine"]);
        assert_eq!(Checkout::find(dir.path()), None, "not in a repository");
        // A .spine.toml it cannot read is an error naming the file, not the defaults.
        std::fs::write(top.join(".spine.toml"), "scope = 5\n").unwrap();
        let e = repo.config().unwrap_err();
        assert!(e.message.contains(".spine.toml"), "{}", e.message);
        std::fs::write(top.join(".spine.toml"), "scope = \"acme:project:x\"\n").unwrap();
        assert_eq!(repo.config().unwrap().scope.as_deref(), Some("acme:project:x"));
    }
}
