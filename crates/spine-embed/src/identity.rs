//! Embedder identities: the stamp stored with every vector (`Embedder::model_id`), written and
//! read in this one place, so the server's start, `spine doctor` and the embedders themselves
//! cannot spell it differently.

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

#[cfg(test)]
mod tests {
    use super::*;

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
