//! Embedder identities: the stamp stored with every vector (`Embedder::model_id`), written and
//! read in this one place, so the server's start, `spine doctor` and the embedders themselves
//! cannot spell it differently; and the one rule that compares a store's stamps with the
//! configured embedder ([`Stamps`]).

use std::fmt;

use crate::MODEL_ID;

/// Which embedder wrote a vector, as its stamp says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Identity<'a> {
    /// The built-in model ([`MODEL_ID`]).
    Builtin,
    /// An OpenAI-compatible server's model: `openai:<model>`.
    OpenAi(&'a str),
    /// A stamp this build does not know (written by another version, or by hand).
    Other(&'a str),
}

/// The prefix of an OpenAI-compatible embedder's stamp.
const OPENAI: &str = "openai:";

impl<'a> Identity<'a> {
    /// The identity a stamp names.
    pub fn parse(stamp: &'a str) -> Self {
        if stamp == MODEL_ID {
            Identity::Builtin
        } else if let Some(model) = stamp.strip_prefix(OPENAI) {
            Identity::OpenAi(model)
        } else {
            Identity::Other(stamp)
        }
    }
}

impl fmt::Display for Identity<'_> {
    /// The stamp: what [`Identity::parse`] reads back.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Identity::Builtin => f.write_str(MODEL_ID),
            Identity::OpenAi(model) => write!(f, "{OPENAI}{model}"),
            Identity::Other(stamp) => f.write_str(stamp),
        }
    }
}

/// A store's embedder stamps (`Store::embedder_models`: each stamp with its vector count)
/// against the configured embedder's identity. The rule: a store whose vectors all carry the
/// configured stamp (or that holds none) can be searched; any other stamp means vectors whose
/// similarity to this embedder's queries is meaningless. The server refuses to start on such
/// a store, `spine doctor` reports it; both read this.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stamps<'a> {
    /// The configured embedder's stamp.
    pub configured: &'a str,
    /// How many vectors carry it.
    pub mine: u64,
    /// Every other stamp with its count, in the store's order.
    pub others: Vec<(&'a str, u64)>,
}

impl<'a> Stamps<'a> {
    /// `models` (stamp, vectors) as a store counts them, against `configured`.
    pub fn of(models: &'a [(String, u64)], configured: &'a str) -> Self {
        let mine = models.iter().filter(|(m, _)| m == configured).map(|(_, n)| n).sum();
        let others =
            models.iter().filter(|(m, _)| m != configured).map(|(m, n)| (m.as_str(), *n)).collect();
        Stamps { configured, mine, others }
    }

    /// Whether every vector is the configured embedder's.
    pub fn compatible(&self) -> bool {
        self.others.is_empty()
    }

    /// The configured embedder's count as a reader sees it: `1 vector`, `5 vectors`.
    pub fn mine_listed(&self) -> String {
        vectors(self.mine)
    }

    /// The other stamps as a reader sees them: `openai:bge-m3 (5 vectors), x (1 vector)`.
    pub fn listed(&self) -> String {
        let each: Vec<String> =
            self.others.iter().map(|(m, n)| format!("{m} ({})", vectors(*n))).collect();
        each.join(", ")
    }
}

/// `n vector(s)`.
fn vectors(n: u64) -> String {
    format!("{n} vector{}", if n == 1 { "" } else { "s" })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps_are_compatible_only_when_every_vector_is_the_configured_embedders() {
        let models = vec![(MODEL_ID.to_owned(), 3), ("openai:bge-m3".to_owned(), 1)];
        let s = Stamps::of(&models, MODEL_ID);
        assert_eq!((s.mine, s.compatible(), s.mine_listed()), (3, false, "3 vectors".into()));
        assert_eq!(s.listed(), "openai:bge-m3 (1 vector)");
        let s = Stamps::of(&models, "openai:other");
        assert_eq!(s.mine, 0);
        assert_eq!(s.listed(), format!("{MODEL_ID} (3 vectors), openai:bge-m3 (1 vector)"));
        let one = vec![(MODEL_ID.to_owned(), 2)];
        assert!(Stamps::of(&one, MODEL_ID).compatible());
        assert!(Stamps::of(&[], "openai:x").compatible(), "an empty store fits any embedder");
    }

    #[test]
    fn every_stamp_reads_back_as_it_was_written() {
        for id in [Identity::Builtin, Identity::OpenAi("nomic-embed-text"), Identity::Other("x:y")]
        {
            assert_eq!(Identity::parse(&id.to_string()), id);
        }
        assert_eq!(Identity::OpenAi("bge-m3").to_string(), "openai:bge-m3");
        assert_eq!(Identity::parse(MODEL_ID), Identity::Builtin);
        assert_eq!(Identity::parse("openai:"), Identity::OpenAi(""));
    }
}
