//! A BERT encoder forward pass (inference only), enough for all-MiniLM-L6-v2.
//!
//! Follows the Hugging Face `BertModel` layout and tensor names (with or without a `bert.`
//! prefix): embeddings (word + position + token type, LayerNorm), then per layer
//! self-attention over each text's own tokens, residual + LayerNorm, a GELU feed-forward, residual
//! + LayerNorm. Dropout is absent (inference).

mod embedding;

use std::borrow::Cow;

use candle_core::safetensors::MmapedSafetensors;
use candle_core::{Module, Result, Tensor};
use candle_nn::{Embedding, VarBuilder};
use rten_gemm::{
    BiasVector, GemmExecutor, GemmInputA, GemmInputB, GemmUninitOptions, PackedBMatrix, QuantParams,
};
use rten_tensor::NdTensorView;

use crate::kernels;
use embedding::MappedEmbedding;
use multiversion::multiversion;
use rayon::prelude::*;
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
    /// ([`kernels::HalfWeights::preferred`]): a query's pass ~1 ms faster on two cores, the
    /// evaluation corpora's recall the same (docs/embeddings.md).
    Mixed,
    /// 8-bit integer products on rten-gemm's kernels ([`Weights::Int8`]): weights quantised
    /// per output channel, activations per row after SmoothQuant-style per-channel smoothing
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

/// Whether rten-gemm's int8 kernel on this CPU sums products without saturating (VNNI on
/// x86-64, the dot-product instructions on Arm): then the weights keep 8 bits, else 7
/// ([`weight_levels`]).
fn int8_exact() -> bool {
    INT8_GEMM.with(|g| !g.may_saturate())
}

enum Weights {
    /// Packed once at load into the panels rten-gemm's kernel reads (`prepack_b`), with the
    /// bias added by the same call. `gemm` (candle's matmul) reads an unpacked weight matrix
    /// with a stride of a whole row per step of the inner dimension: for the few tokens of a
    /// query that walk through 42 MB of weights is memory-bound, and a pass took 16 ms where
    /// the packed weights take 4 (README "Performance").
    /// `half`: the same weights as half floats, for passes of texts of at most
    /// [`kernels::halves::MAX_TOKENS`] tokens (queries), whose products are bound by reading
    /// the weights rather than by the arithmetic (`kernels/halves.rs`), at
    /// [`Precision::Mixed`] only; `None` at [`Precision::F32`], on CPUs without AVX2, FMA and
    /// F16C, or where a weight is out of half precision's range.
    F32 { packed: PackedBMatrix<f32>, bias: Vec<f32>, half: Option<kernels::HalfWeights> },
    /// 8-bit integer products through rten-gemm (`u8` activations × `i8` weights → `i32`):
    /// weights quantised per output channel to [`weight_levels`], activations per row to 8
    /// bits around [`ACTIVATION_ZERO`], after SmoothQuant smoothing (`Linear::new`).
    Int8 {
        packed: PackedBMatrix<i8>,
        /// Per output channel: the weight scale.
        scale: Vec<f32>,
        /// Per input channel: `1/s` of the smoothing, if any.
        inv_smooth: Option<Vec<f32>>,
        bias: Vec<f32>,
    },
}

thread_local! {
    /// rten-gemm's int8 executor (`u8` × `i8` → `i32`), as [`F32_GEMM`].
    static INT8_GEMM: GemmExecutor<u8, i8, i32> = GemmExecutor::default();
    /// rten-gemm's f32 executor (the best kernel this CPU has; it is not `Send`, hence one
    /// per thread: making one only checks the CPU's features).
    static F32_GEMM: GemmExecutor<f32> = GemmExecutor::default();
}

/// How far each channel of a LayerNorm's output reaches, estimated from its parameters:
/// the normalised values lie mostly within ±3, so `3·|γ| + |β|`. Channels with large γ or β
/// are BERT's activation outliers, which would otherwise set the int8 scale of their whole
/// row and crush the others.
fn layer_norm_range(vb: &VarBuilder, h: usize) -> Result<Vec<f32>> {
    ((vb.get(h, "weight")?.abs()? * 3.0)? + vb.get(h, "bias")?.abs()?)?.to_vec1()
}

/// SmoothQuant's migration strength: how much of an activation outlier moves into the
/// weights (0.5 shares it evenly).
const SMOOTHING: f64 = 0.5;

/// SmoothQuant without calibration data: the weight columns multiplied by
/// `s = √(range / max|weight column|)` per input channel, and `1/s` to divide the inputs by,
/// which leaves the product unchanged and evens out the ranges the two quantisations see.
/// `weight`: `(out, in)` row-major, smoothed in place; returns `1/s`. Plain loops with the
/// arithmetic candle's tensor operations did here (`max`/`min` as its `clamp`, `powf`,
/// division, `recip`), so the same bits: each of candle's operations ran on its barrier
/// pool, which cost more than the arithmetic at load.
fn smooth(weight: &mut [f32], range: &[f32]) -> Vec<f32> {
    let k = range.len();
    let clamp = |v: f32, lo: f64, hi: f64| {
        let (lo, hi) = (lo as f32, hi as f32);
        let v = if v < lo { lo } else { v };
        if v > hi { hi } else { v }
    };
    let mut column = vec![0f32; k];
    for row in weight.chunks_exact(k) {
        for (c, w) in column.iter_mut().zip(row) {
            let a = w.abs();
            if a > *c {
                *c = a;
            }
        }
    }
    let s: Vec<f32> = range
        .iter()
        .zip(&column)
        .map(|(r, c)| {
            let reach = clamp(*r, 1e-5, f32::MAX as f64).powf(SMOOTHING as f32);
            let column = clamp(*c, 1e-5, f32::MAX as f64).powf((1.0 - SMOOTHING) as f32);
            clamp(reach / column, 1e-2, 1e2)
        })
        .collect();
    for row in weight.chunks_exact_mut(k) {
        row.iter_mut().zip(&s).for_each(|(w, s)| *w *= s);
    }
    s.iter().map(|s| s.recip()).collect()
}

/// `x.round().clamp(-levels, levels) as i8` for a whole `levels`, without a call to
/// `roundf` per weight (the baseline target has no rounding instruction): bounded first
/// (NaN to 0, as `as i8` gave), truncated, then one step away from zero where the part cut
/// off was at least a half, as `f32::round` rounds.
fn weight_level(x: f32, levels: f32) -> i8 {
    let x = if x.is_nan() { 0.0 } else { x.clamp(-levels, levels) };
    // SAFETY: `x` is finite and within ±127, representable as `i32`.
    let t = unsafe { x.to_int_unchecked::<i32>() };
    let cut = x - t as f32;
    (t + i32::from(cut >= 0.5) - i32::from(cut <= -0.5)) as i8
}

/// The weights of [`Weights::Int8`] from `weight` (`(out, in)` row-major, smoothed in
/// place when `range` is given): per output channel the scale `max|w| / levels` and the
/// channel quantised to ±`levels`, in the same `(out, in)` layout; and `1/s` of the
/// smoothing.
fn quantize_weights(
    weight: &mut [f32],
    k: usize,
    range: Option<&[f32]>,
    levels: f32,
) -> (Vec<i8>, Vec<f32>, Option<Vec<f32>>) {
    let inv_smooth = range.map(|range| smooth(weight, range));
    let mut q = vec![0i8; weight.len()];
    let scale = weight
        .chunks_exact(k)
        .zip(q.chunks_exact_mut(k))
        .map(|(row, q)| {
            let max = row.iter().fold(0f32, |m, v| m.max(v.abs()));
            let s = if max > 0.0 { max / levels } else { 1.0 };
            q.iter_mut().zip(row).for_each(|(q, v)| *q = weight_level(v / s, levels));
            s
        })
        .collect();
    (q, scale, inv_smooth)
}

/// The largest magnitude of a quantised weight of [`Weights::Int8`]: 127 (8 bits) where
/// the kernel's sums are exact, else 63 (7 bits): AVX2's `vpmaddubsw` adds two products into
/// 16 bits, which 8-bit weights times 8-bit activations could overflow; with 7 they cannot.
fn weight_levels() -> f32 {
    if int8_exact() { 127.0 } else { 63.0 }
}

/// A dense layer.
struct Linear {
    weights: Weights,
    out: usize,
}

impl Linear {
    /// The int8 case of [`Linear::new`] ([`Weights::Int8`]).
    fn int8(weight: &[f32], k: usize, bias: Vec<f32>, range: Option<&[f32]>) -> Result<Linear> {
        let out = weight.len() / k;
        let mut w = weight.to_vec();
        let (q, scale, inv_smooth) = quantize_weights(&mut w, k, range, weight_levels());
        // The `(out, in)` matrix read as `(in, out)`: packing reads it in whatever order it
        // is laid out.
        let q = NdTensorView::from_data_with_strides([k, out], q.as_slice(), [1, k])
            .map_err(|e| candle_core::Error::Msg(format!("a weight's shape: {e}")))?;
        let packed = INT8_GEMM.with(|g| g.prepack_b(q));
        Ok(Linear { weights: Weights::Int8 { packed, scale, inv_smooth, bias }, out })
    }

    /// `weight`: `(out, in)` row-major, as stored, with `k` inputs; `bias`: `out` values;
    /// `range`: each input channel's estimated reach, when known, to smooth int8
    /// quantisation with (SmoothQuant, without calibration data): the inputs are divided per
    /// channel by `s = √(range / max|weight column|)` and the weight columns multiplied by
    /// it, which leaves the product unchanged and evens out the ranges the two quantisations
    /// see. The weights are read once, into the packed layout the product reads (or into the
    /// quantised copy): `weight` may be the mapped file itself ([`WeightsFile`]).
    fn new(
        weight: &[f32],
        k: usize,
        bias: Vec<f32>,
        precision: Precision,
        range: Option<&[f32]>,
    ) -> Result<Linear> {
        if k == 0 || !weight.len().is_multiple_of(k) || weight.len() / k != bias.len() {
            candle_core::bail!(
                "a weight of {} values with {k} inputs and {} biases",
                weight.len(),
                bias.len()
            );
        }
        let n = bias.len();
        let weights = match precision {
            Precision::F32 | Precision::Mixed => {
                let half = if precision == Precision::Mixed && kernels::HalfWeights::supported() {
                    kernels::HalfWeights::new(weight, n, k)
                } else {
                    None
                };
                // The stored `(out, in)` matrix read as `(in, out)`: packing reads it in
                // whatever order it is laid out.
                let w_t = NdTensorView::from_data_with_strides([k, n], weight, [1, k])
                    .map_err(|e| candle_core::Error::Msg(format!("a weight's shape: {e}")))?;
                let packed = F32_GEMM.with(|g| g.prepack_b(w_t));
                Weights::F32 { packed, bias, half }
            }
            Precision::Int8 => return Self::int8(weight, k, bias, range),
        };
        Ok(Linear { weights, out: n })
    }

    /// `x`: (batch, seq, in). `short`: every text of the pass is at most
    /// [`kernels::halves::MAX_TOKENS`] long, so the halves may multiply it.
    fn forward(&self, x: &Tensor, short: bool) -> Result<Tensor> {
        let (b, s, k) = x.dims3()?;
        let x = x.reshape((b * s, k))?;
        match &self.weights {
            Weights::F32 { half: Some(half), bias, .. } if short => {
                let y = kernels::with_f32(&x, |x| half.product(x, b * s, bias))?;
                Tensor::from_vec(y, (b, s, half.outputs()), x.device())
            }
            Weights::F32 { packed, bias, .. } => {
                let mut y = Vec::with_capacity(b * s * self.out);
                kernels::with_f32(&x, |x| -> Result<()> {
                    let x = NdTensorView::from_data([b * s, k], x);
                    let options = GemmUninitOptions {
                        bias: Some(BiasVector::Row(bias)),
                        ..Default::default()
                    };
                    F32_GEMM.with(|g| {
                        g.gemm_uninit(
                            y.spare_capacity_mut(),
                            GemmInputA::Unpacked(x),
                            GemmInputB::Packed(packed),
                            options,
                        )
                        .map_err(|e| candle_core::Error::Msg(format!("a dense layer: {e}")))
                    })?;
                    Ok(())
                })??;
                // SAFETY: `gemm_uninit` succeeded, and it writes every element of its output.
                unsafe { y.set_len(b * s * self.out) };
                Tensor::from_vec(y, (b, s, self.out), x.device())
            }
            Weights::Int8 { packed, scale, inv_smooth, bias } => {
                let (rows, n) = (b * s, self.out);
                let mut q = vec![0u8; rows * k];
                let mut row_scale = vec![0f32; rows];
                // A query's few rows are quantised on the calling thread: waking a 16-thread
                // pool for each of them cost more than the work (kernels::INLINE_ELEMENTS).
                let inline = rows * k.max(n) < kernels::INLINE_ELEMENTS;
                kernels::with_f32(&x, |x| {
                    let inv = inv_smooth.as_deref();
                    let quantize = |((q, row), scale): ((&mut [u8], &[f32]), &mut f32)| {
                        *scale = quantize_row(row, inv, q)
                    };
                    if inline {
                        q.chunks_mut(k)
                            .zip(x.chunks(k))
                            .zip(row_scale.iter_mut())
                            .for_each(quantize)
                    } else {
                        q.par_chunks_mut(k)
                            .zip(x.par_chunks(k))
                            .zip(row_scale.par_iter_mut())
                            .with_min_len(8)
                            .for_each(quantize)
                    }
                })?;
                let zero = vec![ACTIVATION_ZERO; rows];
                let mut acc = Vec::with_capacity(rows * n);
                let a = NdTensorView::from_data([rows, k], q.as_slice());
                INT8_GEMM.with(|g| {
                    g.gemm_uninit(
                        acc.spare_capacity_mut(),
                        GemmInputA::Unpacked(a),
                        GemmInputB::Packed(packed),
                        GemmUninitOptions {
                            a_quant: Some(QuantParams { zero_point: &zero }),
                            ..Default::default()
                        },
                    )
                    .map_err(|e| candle_core::Error::Msg(format!("a dense layer: {e}")))
                })?;
                // SAFETY: `gemm_uninit` succeeded, and it writes every element of its output.
                unsafe { acc.set_len(rows * n) };
                let mut y = vec![0f32; rows * n];
                let dequantize = |((y, acc), row_scale): ((&mut [f32], &[i32]), &f32)| {
                    dequantize_row(acc, *row_scale, scale, bias, y)
                };
                if inline {
                    y.chunks_mut(n).zip(acc.chunks(n)).zip(row_scale.iter()).for_each(dequantize)
                } else {
                    y.par_chunks_mut(n)
                        .zip(acc.par_chunks(n))
                        .zip(row_scale.par_iter())
                        .with_min_len(8)
                        .for_each(dequantize)
                }
                Tensor::from_vec(y, (b, s, n), x.device())
            }
        }
    }
}

/// The zero point of every quantised activation: they are symmetric around it, ±127.
/// (rten-gemm 0.27 mishandles zero points that differ from row to row past its first tile
/// of rows; `int8_matches_the_f32_product_within_its_quantisation` multiplies 40 rows.)
const ACTIVATION_ZERO: u8 = 128;

/// `row` (times `inv_smooth` per channel, if given) quantised to `out` as `u8` around
/// [`ACTIVATION_ZERO`]: returns the scale (`value ≈ scale · (q − zero)`).
///
/// Written so that the compiler vectorises both loops: the largest magnitude in 16 lanes,
/// and a conversion that cannot saturate (`as u8` of a float is a saturating cast, which
/// compiled to one scalar conversion and two comparisons per value, and made quantising a
/// query's rows a fifth of its pass on AVX-512 VNNI). NaN becomes 0 and ±∞ saturates, as
/// `as u8` did.
#[multiversion(targets("x86_64+avx512f+avx512vl", "x86_64+avx2+fma", "aarch64+neon"))]
fn quantize_row(row: &[f32], inv_smooth: Option<&[f32]>, out: &mut [u8]) -> f32 {
    let max = max_abs(row, inv_smooth);
    let scale = if max > 0.0 { max / 127.0 } else { 1.0 };
    let (inv, offset) = (1.0 / scale, ACTIVATION_ZERO as f32 + 0.5);
    let level = |v: f32| {
        // Within [1.5, 255.5] for finite values: truncating rounds. Bounded first, NaN to 0
        // (`max` returns the other operand; `clamp` would keep the NaN).
        #[allow(clippy::manual_clamp)]
        let v = (v * inv + offset).max(0.0).min(255.0);
        // SAFETY: `v` is finite and within [0, 255], representable as `i32`.
        unsafe { v.to_int_unchecked::<i32>() as u8 }
    };
    match inv_smooth {
        None => out.iter_mut().zip(row).for_each(|(q, x)| *q = level(*x)),
        Some(s) => out.iter_mut().zip(row).zip(s).for_each(|((q, x), s)| *q = level(x * s)),
    }
    scale
}

/// The largest `|x · s|` over `row` (and `smooth`, else s = 1), NaN ignored, in
/// [`kernels::LANES`] running maxima over whole chunks.
#[inline(always)]
fn max_abs(row: &[f32], smooth: Option<&[f32]>) -> f32 {
    const L: usize = kernels::LANES;
    let mut reach = [0f32; L];
    let fold = |r: &mut f32, v: f32| *r = r.max(v.abs());
    let whole = row.len() / L * L;
    match smooth {
        None => {
            for c in row[..whole].chunks_exact(L) {
                reach.iter_mut().zip(c).for_each(|(r, x)| fold(r, *x));
            }
            row[whole..].iter().for_each(|x| fold(&mut reach[0], *x));
        }
        Some(s) => {
            for (c, s) in row[..whole].chunks_exact(L).zip(s.chunks_exact(L)) {
                reach.iter_mut().zip(c).zip(s).for_each(|((r, x), s)| fold(r, x * s));
            }
            row[whole..].iter().zip(&s[whole..]).for_each(|(x, s)| fold(&mut reach[0], x * s));
        }
    }
    reach.into_iter().fold(0f32, f32::max)
}

/// `y = acc · row_scale · scale + bias`, per output channel.
#[multiversion(targets("x86_64+avx512f+avx512vl", "x86_64+avx2+fma", "aarch64+neon"))]
fn dequantize_row(acc: &[i32], row_scale: f32, scale: &[f32], bias: &[f32], y: &mut [f32]) {
    for (((y, a), s), b) in y.iter_mut().zip(acc).zip(scale).zip(bias) {
        *y = *a as f32 * (row_scale * s) + b;
    }
}

/// The weights file, read in place: a dense layer's matrix is packed (or quantised) straight
/// from the mapped bytes, not first copied into a tensor. Copying them (42 MB at f32: an
/// allocation faulted in page by page, then the copy) was a sixth of the model's load
/// (`throughput -- load` 36–37 → 30–33 ms at f32, 39 → 30 ms at int8).
#[derive(Clone, Copy)]
struct WeightsFile<'a> {
    file: &'a MmapedSafetensors,
}

impl<'a> WeightsFile<'a> {
    /// The tensor `name` under `vb`'s prefix, of `shape`, as f32: borrowed from the map
    /// where the file stores it as aligned little-endian f32 (all-MiniLM-L6-v2's does),
    /// else read through `vb`, which converts.
    fn get(&self, vb: &VarBuilder, name: &str, shape: &[usize]) -> Result<Cow<'a, [f32]>> {
        let full = match vb.prefix() {
            p if p.is_empty() => name.to_owned(),
            p => format!("{p}.{name}"),
        };
        if cfg!(target_endian = "little")
            && let Ok(view) = self.file.get(&full)
            && candle_core::DType::try_from(view.dtype()).ok() == Some(candle_core::DType::F32)
            && view.shape() == shape
            && let Ok(values) = bytemuck::try_cast_slice::<u8, f32>(view.data())
        {
            return Ok(Cow::Borrowed(values));
        }
        Ok(Cow::Owned(vb.get(shape, name)?.flatten_all()?.to_vec1()?))
    }
}

fn linear(
    in_dim: usize,
    out_dim: usize,
    vb: VarBuilder,
    file: WeightsFile<'_>,
    precision: Precision,
    range: Option<&[f32]>,
) -> Result<Linear> {
    let weight = file.get(&vb, "weight", &[out_dim, in_dim])?;
    Linear::new(&weight, in_dim, vb.get(out_dim, "bias")?.to_vec1()?, precision, range)
}

/// The query, key and value projections as one `(in, 3·out)` layer: one matrix product per
/// layer instead of three (for a short query, each product costs about as much in fixed
/// overhead as in arithmetic). The query part is pre-multiplied by the attention scale
/// `1/√head_dim`, which saves scaling the scores (`v · scale + 0`, the arithmetic of
/// candle's scalar multiplication this once was, so the same bits).
fn fused_qkv(
    h: usize,
    scale: f64,
    vb: VarBuilder,
    file: WeightsFile<'_>,
    precision: Precision,
    range: &[f32],
) -> Result<Linear> {
    let scale = scale as f32;
    let mut weight = Vec::with_capacity(3 * h * h);
    let mut bias = Vec::with_capacity(3 * h);
    for (name, scaled) in [("query", true), ("key", false), ("value", false)] {
        let w = file.get(&vb.pp(name), "weight", &[h, h])?;
        let b = vb.pp(name).get(h, "bias")?.to_vec1::<f32>()?;
        if scaled {
            weight.extend(w.iter().map(|v| v * scale + 0.0));
            bias.extend(b.iter().map(|v| v * scale + 0.0));
        } else {
            weight.extend_from_slice(&w);
            bias.extend(b);
        }
    }
    Linear::new(&weight, h, bias, precision, Some(range))
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
