//! A BERT encoder forward pass (inference only), enough for all-MiniLM-L6-v2.
//!
//! Follows the Hugging Face `BertModel` layout and tensor names (with or without a `bert.`
//! prefix): embeddings (word + position + token type, LayerNorm), then per layer
//! self-attention with a padding mask, residual + LayerNorm, a GELU feed-forward, residual
//! + LayerNorm. Dropout is absent (inference).

use candle_core::{DType, Module, Result, Tensor};
use candle_nn::{Embedding, LayerNorm, VarBuilder};
use serde::Deserialize;

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

/// A dense layer whose weight is kept transposed, `(in, out)` and contiguous.
///
/// `candle_nn::Linear` multiplies by the `(out, in)` weight viewed transposed, which makes
/// `gemm` repack the whole weight matrix on every call; for the few-token inputs of
/// sentence embedding that repacking costs about as much as the arithmetic. Transposing
/// once at load time lets `gemm` read the weight in place.
struct Linear {
    weight_t: Tensor,
    bias: Tensor,
}

impl Linear {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let (b, s, k) = x.dims3()?;
        let y = x.reshape((b * s, k))?.matmul(&self.weight_t)?.broadcast_add(&self.bias)?;
        y.reshape((b, s, ()))
    }
}

fn linear(in_dim: usize, out_dim: usize, vb: VarBuilder) -> Result<Linear> {
    let weight_t = vb.get((out_dim, in_dim), "weight")?.t()?.contiguous()?;
    Ok(Linear { weight_t, bias: vb.get(out_dim, "bias")? })
}

/// The query, key and value projections as one `(in, 3·out)` layer: one matrix product per
/// layer instead of three (for a short query, each product costs about as much in fixed
/// overhead as in arithmetic). The query part is pre-multiplied by the attention scale
/// `1/√head_dim`, which saves scaling the scores.
fn fused_qkv(h: usize, scale: f64, vb: VarBuilder) -> Result<Linear> {
    let q = linear(h, h, vb.pp("query"))?;
    let k = linear(h, h, vb.pp("key"))?;
    let v = linear(h, h, vb.pp("value"))?;
    Ok(Linear {
        weight_t: Tensor::cat(&[&(q.weight_t * scale)?, &k.weight_t, &v.weight_t], 1)?,
        bias: Tensor::cat(&[&(q.bias * scale)?, &k.bias, &v.bias], 0)?,
    })
}

fn layer_norm(size: usize, eps: f64, vb: VarBuilder) -> Result<LayerNorm> {
    Ok(LayerNorm::new(vb.get(size, "weight")?, vb.get(size, "bias")?, eps))
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
    head_dim: usize,
}

impl Layer {
    fn load(vb: VarBuilder, c: &Config) -> Result<Self> {
        let h = c.hidden_size;
        let att = vb.pp("attention");
        let head_dim = h / c.num_attention_heads;
        Ok(Layer {
            qkv: fused_qkv(h, 1.0 / (head_dim as f64).sqrt(), att.pp("self"))?,
            attn_out: linear(h, h, att.pp("output").pp("dense"))?,
            attn_norm: layer_norm(h, c.layer_norm_eps, att.pp("output").pp("LayerNorm"))?,
            inter: linear(h, c.intermediate_size, vb.pp("intermediate").pp("dense"))?,
            out: linear(c.intermediate_size, h, vb.pp("output").pp("dense"))?,
            out_norm: layer_norm(h, c.layer_norm_eps, vb.pp("output").pp("LayerNorm"))?,
            heads: c.num_attention_heads,
            head_dim,
        })
    }

    /// `x`: (batch, seq, hidden); `bias`: (batch, 1, 1, seq) additive mask, `None` when no
    /// text of the batch is padded.
    fn forward(&self, x: &Tensor, bias: Option<&Tensor>) -> Result<Tensor> {
        let (b, s, h) = x.dims3()?;
        // (b, s, 3, heads, head_dim) → (3, b, heads, s, head_dim)
        let qkv = self.qkv.forward(x)?.reshape((b, s, 3, self.heads, self.head_dim))?;
        let qkv = qkv.permute((2, 0, 3, 1, 4))?.contiguous()?;
        let (q, k, v) = (qkv.get(0)?, qkv.get(1)?, qkv.get(2)?);
        let mut scores = q.matmul(&k.t()?)?;
        if let Some(bias) = bias {
            scores = scores.broadcast_add(bias)?;
        }
        let probs = candle_nn::ops::softmax_last_dim(&scores)?;
        let ctx = probs.matmul(&v)?.transpose(1, 2)?.reshape((b, s, h))?;
        let x = self.attn_norm.forward(&(self.attn_out.forward(&ctx)? + x)?)?;
        let ff = self.out.forward(&self.inter.forward(&x)?.gelu_erf()?)?;
        self.out_norm.forward(&(ff + x)?)
    }
}

/// The encoder.
pub struct Bert {
    word: Embedding,
    position: Embedding,
    token_type: Embedding,
    norm: LayerNorm,
    layers: Vec<Layer>,
}

impl Bert {
    pub fn load(vb: VarBuilder, c: &Config) -> Result<Self> {
        let vb = if vb.contains_tensor("bert.embeddings.word_embeddings.weight") {
            vb.pp("bert")
        } else {
            vb
        };
        let h = c.hidden_size;
        if c.num_attention_heads == 0 || !h.is_multiple_of(c.num_attention_heads) {
            candle_core::bail!("hidden_size {h} is not a multiple of num_attention_heads");
        }
        let emb = vb.pp("embeddings");
        Ok(Bert {
            word: candle_nn::embedding(c.vocab_size, h, emb.pp("word_embeddings"))?,
            position: candle_nn::embedding(
                c.max_position_embeddings,
                h,
                emb.pp("position_embeddings"),
            )?,
            token_type: candle_nn::embedding(
                c.type_vocab_size,
                h,
                emb.pp("token_type_embeddings"),
            )?,
            norm: layer_norm(h, c.layer_norm_eps, emb.pp("LayerNorm"))?,
            layers: (0..c.num_hidden_layers)
                .map(|i| Layer::load(vb.pp("encoder").pp("layer").pp(i.to_string()), c))
                .collect::<Result<_>>()?,
        })
    }

    /// `ids`, `mask`: (batch, seq) u32. Returns the last hidden state (batch, seq, hidden).
    pub fn forward(&self, ids: &Tensor, mask: &Tensor) -> Result<Tensor> {
        let (_, s) = ids.dims2()?;
        let positions = Tensor::arange(0u32, s as u32, ids.device())?.unsqueeze(0)?;
        let types = ids.zeros_like()?;
        let x = self
            .word
            .forward(ids)?
            .broadcast_add(&self.position.forward(&positions)?)?
            .add(&self.token_type.forward(&types)?)?;
        let mut x = self.norm.forward(&x)?;
        // 0 for real tokens, a large negative number for padding; none without padding.
        let mask = mask.to_dtype(DType::F32)?;
        let padded = mask.min_all()?.to_scalar::<f32>()? < 1.0;
        let bias = match padded {
            true => Some(((mask - 1.0)? * 1e4)?.unsqueeze(1)?.unsqueeze(1)?),
            false => None,
        };
        for layer in &self.layers {
            x = layer.forward(&x, bias.as_ref())?;
        }
        Ok(x)
    }
}
