//! A BERT encoder forward pass (inference only), enough for all-MiniLM-L6-v2.
//!
//! Follows the Hugging Face `BertModel` layout and tensor names (with or without a `bert.`
//! prefix): embeddings (word + position + token type, LayerNorm), then per layer
//! self-attention over each text's own tokens, residual + LayerNorm, a GELU feed-forward, residual
//! + LayerNorm. Dropout is absent (inference).
//!
//! This module holds the graph: the configuration, the LayerNorms, the layers and their
//! order. Its parts: `precision` (how the dense layers multiply, and what `auto` chooses),
//! `linear` (a dense layer: its weights, read from the mapped file, and its product), `int8`
//! (the 8-bit quantisation arithmetic) and `embedding` (the word-embedding table, read in
//! place).

mod embedding;
mod int8;
mod linear;
mod precision;

pub use precision::Precision;

use candle_core::safetensors::MmapedSafetensors;
use candle_core::{Module, Result, Tensor};
use candle_nn::{Embedding, VarBuilder};
use serde::Deserialize;

use crate::kernels;
use embedding::MappedEmbedding;
use int8::layer_norm_range;
use linear::{Linear, WeightsFile, fused_qkv, linear};

/// The fields of `config.json` the encoder needs.
#[derive(Debug, Clone, Deserialize)]
pub struct Config {
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub intermediate_size: usize,
    pub max_position_embeddings: usize,
    pub type_vocab_size: usize,
    pub layer_norm_eps: f64,
    #[serde(default)]
    pub pad_token_id: u32,
}

/// A LayerNorm that adds a residual first (`kernels::add_layer_norm_`).
struct LayerNorm {
    /// (2, size): γ then β.
    params: Tensor,
    eps: f32,
}

impl LayerNorm {
    /// `x ← LayerNorm(x + residual)`, in place on `x`, which must not be shared.
    fn add_forward_(&self, x: &Tensor, residual: &Tensor) -> Result<()> {
        kernels::add_layer_norm_(x, residual, &self.params, self.eps)
    }
}

fn layer_norm(size: usize, eps: f64, vb: VarBuilder) -> Result<LayerNorm> {
    let params = Tensor::stack(&[vb.get(size, "weight")?, vb.get(size, "bias")?], 0)?;
    Ok(LayerNorm { params, eps: eps as f32 })
}

struct Layer {
    /// Query (pre-scaled), key and value projections, fused.
    qkv: Linear,
    attn_out: Linear,
    attn_norm: LayerNorm,
    inter: Linear,
    out: Linear,
    out_norm: LayerNorm,
    heads: usize,
}

impl Layer {
    /// `prev_norm`: the LayerNorm whose output is this layer's input.
    fn load(
        vb: VarBuilder,
        prev_norm: VarBuilder,
        file: WeightsFile<'_>,
        c: &Config,
        p: Precision,
    ) -> Result<Self> {
        let h = c.hidden_size;
        let att = vb.pp("attention");
        let head_dim = h / c.num_attention_heads;
        let scale = 1.0 / (head_dim as f64).sqrt();
        let attn_norm = att.pp("output").pp("LayerNorm");
        let inter = c.intermediate_size;
        Ok(Layer {
            qkv: fused_qkv(h, scale, att.pp("self"), file, p, &layer_norm_range(&prev_norm, h)?)?,
            attn_out: linear(h, h, att.pp("output").pp("dense"), file, p, None)?,
            attn_norm: layer_norm(h, c.layer_norm_eps, attn_norm.clone())?,
            inter: linear(
                h,
                inter,
                vb.pp("intermediate").pp("dense"),
                file,
                p,
                Some(&layer_norm_range(&attn_norm, h)?),
            )?,
            out: linear(inter, h, vb.pp("output").pp("dense"), file, p, None)?,
            out_norm: layer_norm(h, c.layer_norm_eps, vb.pp("output").pp("LayerNorm"))?,
            heads: c.num_attention_heads,
        })
    }

    /// `x`: (batch, seq, hidden); text `i` is its first `lengths[i]` tokens; `short` as
    /// [`Linear::forward`]'s.
    fn forward(&self, x: &Tensor, lengths: &[usize], short: bool) -> Result<Tensor> {
        let ctx = kernels::attention(&self.qkv.forward(x, short)?, self.heads, lengths)?;
        let x1 = self.attn_out.forward(&ctx, short)?;
        self.attn_norm.add_forward_(&x1, x)?;
        let inter = self.inter.forward(&x1, short)?;
        kernels::gelu_erf_(&inter)?;
        let x2 = self.out.forward(&inter, short)?;
        self.out_norm.add_forward_(&x2, &x1)?;
        Ok(x2)
    }
}

/// The encoder.
pub struct Bert {
    word: MappedEmbedding,
    /// The position embeddings, `(max_position_embeddings, hidden)` row by row: added to the
    /// word rows as they are gathered (`MappedEmbedding::forward`), not by candle's
    /// element-wise add, which splits tensors of 64k values or more across candle's one
    /// process-wide barrier pool (a long note's pass queued there for every other's).
    position: Vec<f32>,
    token_type: Embedding,
    norm: LayerNorm,
    layers: Vec<Layer>,
}

impl Bert {
    /// `vb` reads the weights from `file`, the same memory-mapped safetensors file, which the
    /// encoder keeps to read the word-embedding table in place.
    pub fn load(
        vb: VarBuilder,
        file: MmapedSafetensors,
        c: &Config,
        precision: Precision,
    ) -> Result<Self> {
        let (vb, prefix) = if vb.contains_tensor("bert.embeddings.word_embeddings.weight") {
            (vb.pp("bert"), "bert.")
        } else {
            (vb, "")
        };
        let h = c.hidden_size;
        if c.num_attention_heads == 0 || !h.is_multiple_of(c.num_attention_heads) {
            candle_core::bail!("hidden_size {h} is not a multiple of num_attention_heads");
        }
        let emb = vb.pp("embeddings");
        let weights = WeightsFile { file: &file };
        // Layers load on threads of their own: quantising the weights to int8 is most of
        // the load time, and it divides across cores.
        let layers = std::thread::scope(|s| {
            let loading: Vec<_> = (0..c.num_hidden_layers)
                .map(|i| {
                    let prev = match i {
                        0 => vb.pp("embeddings").pp("LayerNorm"),
                        _ => vb.pp(format!("encoder.layer.{}.output.LayerNorm", i - 1)),
                    };
                    let vb = vb.pp("encoder").pp("layer").pp(i.to_string());
                    s.spawn(move || Layer::load(vb, prev, weights, c, precision))
                })
                .collect();
            loading
                .into_iter()
                .map(|t| t.join().unwrap_or_else(|_| candle_core::bail!("a layer's load panicked")))
                .collect::<Result<Vec<_>>>()
        })?;
        Ok(Bert {
            word: MappedEmbedding::new(
                file,
                format!("{prefix}embeddings.word_embeddings.weight"),
                c.vocab_size,
                h,
            )?,
            position: emb
                .pp("position_embeddings")
                .get((c.max_position_embeddings, h), "weight")?
                .flatten_all()?
                .to_vec1()?,
            token_type: candle_nn::embedding(
                c.type_vocab_size,
                h,
                emb.pp("token_type_embeddings"),
            )?,
            norm: layer_norm(h, c.layer_norm_eps, emb.pp("LayerNorm"))?,
            layers,
        })
    }

    /// `ids`: (batch, seq) u32, text `i` its first `lengths[i]` tokens, padding after.
    /// Returns the last hidden state (batch, seq, hidden); rows past a text's length are
    /// not meaningful. A pass of at most [`kernels::halves::MAX_TOKENS`] columns multiplies
    /// by the half-precision weights where the layers keep them: the caller keeps texts
    /// that short apart from longer ones, so that a text's vector does not depend on what
    /// it is batched with.
    pub fn forward(&self, ids: &Tensor, lengths: &[usize]) -> Result<Tensor> {
        let (_, s) = ids.dims2()?;
        let short = s <= kernels::halves::MAX_TOKENS;
        let x = self.word.forward(ids, &self.position)?;
        let types = self.token_type.forward(&ids.zeros_like()?)?;
        self.norm.add_forward_(&x, &types)?;
        let mut x = x;
        for layer in &self.layers {
            x = layer.forward(&x, lengths, short)?;
        }
        Ok(x)
    }
}

#[cfg(test)]
mod tests;
