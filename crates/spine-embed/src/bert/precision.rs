//! The precision policy: how the encoder's dense layers multiply (f32, f32 with
//! half-precision weights for short texts, or 8-bit integers) and which of them `auto`
//! chooses on this CPU.

use candle_core::Result;

use super::int8::int8_exact;
use crate::kernels;

/// How the encoder's dense layers multiply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Precision {
    /// The published f32 weights, as the reference implementation computes.
    F32,
    /// f32 arithmetic throughout; the products of texts of at most
    /// [`kernels::halves::MAX_TOKENS`] tokens (queries, brief notes) read their weights from a
    /// second copy in half precision (f16, 11 significant bits), half the bytes to stream
    /// from memory, which is what such a pass waits on; longer texts as [`Precision::F32`].
    /// What `auto` is on CPUs with AVX2, FMA and F16C and without AVX-512
    /// ([`kernels::HalfWeights::preferred`]): a query's pass faster, the evaluation corpora's
    /// recall the same (docs/embeddings.md).
    Mixed,
    /// 8-bit integer products on rten-gemm's kernels
    /// ([`Weights::Int8`](super::linear::Weights::Int8)): weights quantised per output
    /// channel, activations per row after SmoothQuant-style per-channel smoothing
    /// (`Linear::new`). With AVX-512 VNNI (`vpdpbusd`, exact 32-bit sums) the weights keep 8
    /// bits and `auto` chooses it ([`Precision::int8_is_fast`]); without, AVX2's
    /// `vpmaddubsw` sums pairs of products into 16 bits, so the weights get 7 bits: faster
    /// than f32 too, but with a slightly lower recall, so `auto` does not choose it there
    /// (docs/embeddings.md).
    Int8,
}

impl Precision {
    /// `SPINE_EMBED_PRECISION` (`auto`, `f32` or `int8`), auto when unset.
    pub fn from_env() -> Result<Precision> {
        Self::parse(std::env::var("SPINE_EMBED_PRECISION").ok().as_deref())
    }

    /// A setting's value: `auto` (or unset / empty) is [`Precision::detect`]'s choice;
    /// `f32` and `int8` choose.
    pub fn parse(value: Option<&str>) -> Result<Precision> {
        match value {
            None | Some("") | Some("auto") => Ok(Self::detect()),
            Some("f32") => Ok(Precision::F32),
            Some("int8") => Ok(Precision::Int8),
            Some(other) => {
                candle_core::bail!("SPINE_EMBED_PRECISION must be auto, f32 or int8, not {other:?}")
            }
        }
    }

    /// What `auto` means: [`Precision::Int8`] where rten-gemm multiplies 8-bit integers
    /// exactly with VNNI ([`Precision::int8_is_fast`]); elsewhere f32 arithmetic, with short
    /// texts' weights in half precision where the CPU is one the halves were measured
    /// faster on ([`Precision::Mixed`]), else [`Precision::F32`] (docs/embeddings.md).
    pub fn detect() -> Precision {
        if Self::int8_is_fast() {
            Precision::Int8
        } else if kernels::HalfWeights::preferred() {
            Precision::Mixed
        } else {
            Precision::F32
        }
    }

    /// Whether this CPU multiplies 8-bit integers with VNNI on x86-64: rten-gemm's AVX-512
    /// kernel with `vpdpbusd`, whose 32-bit sums never saturate ([`int8_exact`]).
    pub fn int8_is_fast() -> bool {
        cfg!(target_arch = "x86_64") && int8_exact()
    }
}
