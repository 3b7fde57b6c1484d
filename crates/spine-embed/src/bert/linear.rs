//! A dense layer: its weights (packed f32, with an optional half-precision copy, or
//! quantised to int8), read straight from the mapped weights file, and its product.

use std::borrow::Cow;

use candle_core::safetensors::MmapedSafetensors;
use candle_core::{Result, Tensor};
use candle_nn::VarBuilder;
use rayon::prelude::*;
use rten_gemm::{
    BiasVector, GemmExecutor, GemmInputA, GemmInputB, GemmUninitOptions, PackedBMatrix, QuantParams,
};
use rten_tensor::NdTensorView;

use super::int8::{
    ACTIVATION_ZERO, INT8_GEMM, dequantize_row, quantize_row, quantize_weights, weight_levels,
};
use super::precision::Precision;
use crate::kernels;

pub(super) enum Weights {
    /// Packed once at load into the panels rten-gemm's kernel reads (`prepack_b`), with the
    /// bias added by the same call. `gemm` (candle's matmul) reads an unpacked weight matrix
    /// with a stride of a whole row per step of the inner dimension: for the few tokens of a
    /// query that walk through all the weights is memory-bound, and a pass took several times
    /// as long as with the packed weights (README "Performance").
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
    /// rten-gemm's f32 executor (the best kernel this CPU has; it is not `Send`, hence one
    /// per thread: making one only checks the CPU's features).
    pub(super) static F32_GEMM: GemmExecutor<f32> = GemmExecutor::default();
}

/// A dense layer.
pub(super) struct Linear {
    weights: Weights,
    out: usize,
}

impl Linear {
    /// The int8 case of [`Linear::new`] ([`Weights::Int8`]).
    pub(super) fn int8(
        weight: &[f32],
        k: usize,
        bias: Vec<f32>,
        range: Option<&[f32]>,
    ) -> Result<Linear> {
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
    pub(super) fn forward(&self, x: &Tensor, short: bool) -> Result<Tensor> {
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

/// The weights file, read in place: a dense layer's matrix is packed (or quantised) straight
/// from the mapped bytes, not first copied into a tensor. Copying them (an allocation faulted
/// in page by page, then the copy) was a large share of the model's load (`throughput --
/// load`, docs/performance.md).
#[derive(Clone, Copy)]
pub(super) struct WeightsFile<'a> {
    pub(super) file: &'a MmapedSafetensors,
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

pub(super) fn linear(
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
pub(super) fn fused_qkv(
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
