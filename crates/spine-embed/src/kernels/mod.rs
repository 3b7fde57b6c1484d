//! The encoder's steps between its weight products, on one thread pool.
//!
//! candle runs GELU's `erf` and softmax's `exp` one element at a time through libm (for a
//! 200-token text a large share of a forward pass, `perf`; docs/performance.md, "The steps
//! between the int8 products"), and its attention products and
//! LayerNorm on rayon. Here:
//! - `exp` and `erf` are branch-free polynomials that the compiler vectorises for the CPU at
//!   hand (`multiversion` compiles each loop for AVX-512, AVX2 + FMA, NEON and the baseline
//!   and picks one at run time);
//! - attention runs one (text, head) at a time: scores, softmax and the weighted sum of
//!   values over the text's own tokens only (padding is never attended to or from), with
//!   single-threaded `gemm` calls, reading query, key and value straight out of the fused
//!   projection, so nothing is permuted or copied;
//! - the residual sum and LayerNorm are one pass;
//! - all of it is split across the rayon pool the products around it use (the pass's own),
//!   the calling thread included.
//!
//! Accuracy: `exp` within ~2e-7 relative (Cody–Waite reduction, degree-7 Taylor on
//! |r| ≤ ln 2 / 2), `erf` within 1.5e-7 absolute (Abramowitz & Stegun 7.1.26); the
//! embeddings stay within 1e-4 of the reference implementation (`reference_vectors` test).

use std::ops::Range;

pub(crate) mod halves;
pub use halves::HalfWeights;

use candle_core::{CpuStorage, InplaceOp1, Layout, Result, Shape, Tensor};
use multiversion::multiversion;
use rayon::prelude::*;

/// Runs `f` over `0..n` split in ranges, on the current rayon pool's threads and the
/// caller's.
fn par_ranges(n: usize, f: impl Fn(Range<usize>) + Sync) {
    // A few ranges per thread balance uneven units (texts of different lengths).
    let chunk = n.div_ceil(rayon::current_num_threads() * 4).max(1);
    (0..n.div_ceil(chunk)).into_par_iter().for_each(|c| f(c * chunk..n.min((c + 1) * chunk)));
}

/// GELU with the exact (erf) form, in place: `x · Φ(x)`.
pub fn gelu_erf_(x: &Tensor) -> Result<()> {
    x.inplace_op1(&Gelu)
}

struct Gelu;

/// Multi-head self-attention over the fused projection `qkv` (batch, seq, 3·hidden): each
/// row holds the queries (pre-scaled by 1/√head_dim), keys and values of its token, heads
/// side by side. Text `i` attends over its first `lengths[i]` tokens; rows past its length
/// come out zero (mean pooling ignores them, and nothing real attends to them). Returns the
/// context (batch, seq, hidden).
pub fn attention(qkv: &Tensor, heads: usize, lengths: &[usize]) -> Result<Tensor> {
    qkv.apply_op1_no_bwd(&Attention { heads, lengths: lengths.to_vec() })
}

/// `x ← LayerNorm(x + residual) · γ + β` over the last dimension, in place on `x`;
/// `params`: (2, hidden), γ then β.
pub fn add_layer_norm_(x: &Tensor, residual: &Tensor, params: &Tensor, eps: f32) -> Result<()> {
    x.inplace_op3(residual, params, &AddLayerNorm { eps })
}

struct Attention {
    heads: usize,
    lengths: Vec<usize>,
}

struct AddLayerNorm {
    eps: f32,
}

impl candle_core::CustomOp1 for Attention {
    fn name(&self) -> &'static str {
        "spine-attention"
    }

    fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> Result<(CpuStorage, Shape)> {
        let (b, s, three_h) = layout.shape().dims3()?;
        let (h, heads) = (three_h / 3, self.heads);
        if three_h % 3 != 0 || heads == 0 || h % heads != 0 || self.lengths.len() != b {
            candle_core::bail!("attention: shape {:?} with {heads} heads", layout.dims());
        }
        if self.lengths.iter().any(|&l| l > s) {
            candle_core::bail!("attention: a length exceeds the sequence ({s})");
        }
        let CpuStorage::F32(data) = storage else {
            candle_core::bail!("attention: f32 only");
        };
        let Some((start, end)) = layout.contiguous_offsets() else {
            candle_core::bail!("attention: the input must be contiguous");
        };
        let qkv = &data[start..end];
        let d = h / heads;
        let mut out = vec![0f32; b * s * h];
        let dst = SendPtr(out.as_mut_ptr());
        let work: usize = self.lengths.iter().map(|&l| l * l).sum::<usize>() * h;
        let run = |units: Range<usize>| {
            let mut scores = Vec::new();
            for unit in units {
                let (i, j) = (unit / heads, unit % heads);
                let l = self.lengths[i];
                if l == 0 {
                    continue;
                }
                let base = i * s * three_h + j * d;
                let (q, k, v) = (&qkv[base..], &qkv[base + h..], &qkv[base + 2 * h..]);
                scores.clear();
                scores.resize(l * l, 0f32);
                let row = three_h as isize;
                // SAFETY: every matrix lies inside its buffer: q, k and v rows are
                // `3·hidden` apart within text i (l ≤ s rows, d columns), the scores are
                // l × l, and this unit's output block (text i's first l rows, head j's d
                // columns) is written by no other unit.
                unsafe {
                    // scores = q · kᵀ (l × l)
                    product(
                        l,
                        l,
                        d,
                        scores.as_mut_ptr(),
                        l,
                        q.as_ptr(),
                        1,
                        row,
                        k.as_ptr(),
                        row,
                        1,
                    );
                    scores.chunks_exact_mut(l).for_each(softmax_row);
                    // context = scores · v (l × d), into columns j·d.. of text i's rows
                    product(
                        l,
                        d,
                        l,
                        dst.get().add(i * s * h + j * d),
                        h,
                        scores.as_ptr(),
                        1,
                        l as isize,
                        v.as_ptr(),
                        1,
                        row,
                    );
                }
            }
        };
        if work < INLINE_ELEMENTS * 16 {
            run(0..b * heads);
        } else {
            par_ranges(b * heads, run);
        }
        Ok((CpuStorage::F32(out), Shape::from((b, s, h))))
    }
}

/// `dst (m × n, rows dst_row apart) = lhs (m × k) · rhs (k × n)`, each operand given by its
/// column and row strides, on the calling thread.
///
/// # Safety
/// Every element the strides reach must lie inside its buffer, and `dst`'s must not alias
/// the operands.
#[allow(clippy::too_many_arguments)]
unsafe fn product(
    m: usize,
    n: usize,
    k: usize,
    dst: *mut f32,
    dst_row: usize,
    lhs: *const f32,
    lhs_cs: isize,
    lhs_rs: isize,
    rhs: *const f32,
    rhs_cs: isize,
    rhs_rs: isize,
) {
    // SAFETY: the caller's contract.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst,
            1,
            dst_row as isize,
            false,
            lhs,
            lhs_cs,
            lhs_rs,
            rhs,
            rhs_cs,
            rhs_rs,
            0.0,
            1.0,
            false,
            false,
            false,
            gemm::Parallelism::None,
        )
    }
}

impl candle_core::InplaceOp3 for AddLayerNorm {
    fn name(&self) -> &'static str {
        "spine-add-layer-norm"
    }

    fn cpu_fwd(
        &self,
        x: &mut CpuStorage,
        x_layout: &Layout,
        residual: &CpuStorage,
        r_layout: &Layout,
        params: &CpuStorage,
        p_layout: &Layout,
    ) -> Result<()> {
        let name = self.name();
        let n = *x_layout.dims().last().unwrap_or(&0);
        if r_layout.shape() != x_layout.shape() || p_layout.dims() != [2, n] {
            candle_core::bail!("{name}: shapes {:?} {:?}", x_layout.dims(), r_layout.dims());
        }
        let read = |s: &'_ CpuStorage, l: &Layout| -> Result<*const f32> {
            let CpuStorage::F32(data) = s else { candle_core::bail!("{name}: f32 only") };
            match l.contiguous_offsets() {
                Some((start, _)) => Ok(data[start..].as_ptr()),
                None => candle_core::bail!("{name}: inputs must be contiguous"),
            }
        };
        let (residual, params) = (read(residual, r_layout)?, read(params, p_layout)?);
        let count = x_layout.shape().elem_count();
        let xs = contiguous_f32(x, x_layout, name)?;
        if n == 0 {
            return Ok(());
        }
        // SAFETY: both were checked contiguous, with the shapes checked above.
        let (residual, params) = unsafe {
            (std::slice::from_raw_parts(residual, count), std::slice::from_raw_parts(params, 2 * n))
        };
        let (gamma, beta) = params.split_at(n);
        let eps = self.eps;
        in_parallel(xs, n * 2048usize.div_ceil(n), |offset, piece| {
            let residual = &residual[offset..offset + piece.len()];
            for (row, res) in piece.chunks_exact_mut(n).zip(residual.chunks_exact(n)) {
                add_layer_norm_row(row, res, gamma, beta, eps);
            }
        });
        Ok(())
    }
}

/// Runs `f` on the f32 values of a contiguous CPU tensor.
pub(crate) fn with_f32<R>(t: &Tensor, f: impl FnOnce(&[f32]) -> R) -> Result<R> {
    let (storage, layout) = t.storage_and_layout();
    let (candle_core::Storage::Cpu(CpuStorage::F32(data)), Some((start, end))) =
        (&*storage, layout.contiguous_offsets())
    else {
        candle_core::bail!("a tensor that is not contiguous f32 on the CPU");
    };
    Ok(f(&data[start..end]))
}

/// The f32 slice a contiguous CPU tensor's layout covers.
fn contiguous_f32<'a>(
    storage: &'a mut CpuStorage,
    layout: &Layout,
    op: &str,
) -> Result<&'a mut [f32]> {
    let CpuStorage::F32(data) = storage else {
        candle_core::bail!("{op}: f32 only");
    };
    match layout.contiguous_offsets() {
        Some((start, end)) => Ok(&mut data[start..end]),
        None => candle_core::bail!("{op}: the input must be contiguous"),
    }
}

impl InplaceOp1 for Gelu {
    fn name(&self) -> &'static str {
        "spine-gelu-erf"
    }

    fn cpu_fwd(&self, storage: &mut CpuStorage, layout: &Layout) -> Result<()> {
        let xs = contiguous_f32(storage, layout, self.name())?;
        in_parallel(xs, 4096, |_, piece| gelu_slice(piece));
        Ok(())
    }
}

/// Below this many elements a step between the products runs on the calling thread alone:
/// waking the pool's threads for it costs more than it saves (a short query's pass has ~24
/// such steps).
pub(crate) const INLINE_ELEMENTS: usize = 32 * 1024;

/// Runs `f(offset, piece)` over pieces of `xs` of `piece` elements (the last one shorter)
/// on the current rayon pool, the calling thread included.
fn in_parallel(xs: &mut [f32], piece: usize, f: impl Fn(usize, &mut [f32]) + Sync) {
    let len = xs.len();
    let pieces = len.div_ceil(piece);
    if pieces <= 1 || len < INLINE_ELEMENTS {
        f(0, xs);
        return;
    }
    let base = SendPtr(xs.as_mut_ptr());
    par_ranges(pieces, |range| {
        for i in range {
            let start = i * piece;
            let end = len.min(start + piece);
            // SAFETY: the pool hands out each index once, so the pieces are disjoint
            // sub-slices of `xs`, which outlives this call.
            let piece =
                unsafe { std::slice::from_raw_parts_mut(base.get().add(start), end - start) };
            f(start, piece);
        }
    });
}

#[derive(Clone, Copy)]
struct SendPtr(*mut f32);
// SAFETY: only used to hand disjoint pieces of one slice to the pool's threads.
unsafe impl Send for SendPtr {}
unsafe impl Sync for SendPtr {}
impl SendPtr {
    fn get(self) -> *mut f32 {
        self.0
    }
}

/// `e^x`, saturating to 0 below -87 (softmax's masked scores) and to e^88 above.
#[inline(always)]
fn exp(x: f32) -> f32 {
    const LOG2_E: f32 = std::f32::consts::LOG2_E;
    // ln 2 split so that `n · LN2_HI` is exact for the n that occur.
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    // Adding and subtracting 1.5 · 2^23 rounds to the nearest integer.
    const ROUND: f32 = 12_582_912.0;
    let x = x.clamp(-87.0, 88.0);
    // `shifted` lies in [2^23, 2^24), where a float's last mantissa bit is 1: its bits are
    // ROUND's plus the integer n, and n itself is the exact difference.
    let shifted = x * LOG2_E + ROUND;
    let n = shifted - ROUND;
    let r = x - n * LN2_HI - n * LN2_LO;
    let p = 1.0
        + r * (1.0
            + r * (1.0 / 2.0
                + r * (1.0 / 6.0
                    + r * (1.0 / 24.0 + r * (1.0 / 120.0 + r * (1.0 / 720.0 + r / 5040.0))))));
    // 2^n through the exponent bits: n lies in [-126, 127]. Taken from `shifted`'s bits
    // rather than by `n as i32`, a saturating cast that kept the callers' loops scalar.
    let biased = shifted.to_bits().wrapping_sub(ROUND.to_bits()).wrapping_add(127);
    p * f32::from_bits(biased << 23)
}

/// `x · Φ(x) = x · (1 + erf(x/√2)) / 2` with erfc from Abramowitz & Stegun 7.1.26. For
/// negative x, `1 + erf` is computed as erfc of |x| directly, without cancellation.
#[inline(always)]
fn gelu(x: f32) -> f32 {
    const P: f32 = 0.327_591_1;
    const A: [f32; 5] = [0.254_829_6, -0.284_496_74, 1.421_413_7, -1.453_152_1, 1.061_405_4];
    let z = x.abs() * std::f32::consts::FRAC_1_SQRT_2;
    let t = 1.0 / (1.0 + P * z);
    let poly = t * (A[0] + t * (A[1] + t * (A[2] + t * (A[3] + t * A[4]))));
    let erfc = poly * exp(-z * z);
    let one_plus_erf = if x < 0.0 { erfc } else { 2.0 - erfc };
    0.5 * x * one_plus_erf
}

#[multiversion(targets("x86_64+avx512f+avx512vl", "x86_64+avx2+fma", "aarch64+neon"))]
fn gelu_slice(xs: &mut [f32]) {
    for x in xs {
        *x = gelu(*x);
    }
}

/// The running sums (or maxima) a row reduction keeps: one AVX-512 register of f32.
pub(crate) const LANES: usize = 16;

/// Sum of a slice in LANES independent accumulators.
#[inline(always)]
fn sum(xs: &[f32]) -> f32 {
    let mut acc = [0f32; LANES];
    let mut chunks = xs.chunks_exact(LANES);
    for c in &mut chunks {
        for (a, &v) in acc.iter_mut().zip(c) {
            *a += v;
        }
    }
    acc.iter().sum::<f32>() + chunks.remainder().iter().sum::<f32>()
}

#[multiversion(targets("x86_64+avx512f+avx512vl", "x86_64+avx2+fma", "aarch64+neon"))]
fn add_layer_norm_row(row: &mut [f32], residual: &[f32], gamma: &[f32], beta: &[f32], eps: f32) {
    for (x, r) in row.iter_mut().zip(residual) {
        *x += r;
    }
    let n = row.len() as f32;
    let mean = sum(row) / n;
    for x in row.iter_mut() {
        *x -= mean;
    }
    let mut acc = [0f32; LANES];
    let mut chunks = row.chunks_exact(LANES);
    for c in &mut chunks {
        for (a, &v) in acc.iter_mut().zip(c) {
            *a += v * v;
        }
    }
    let squares = acc.iter().sum::<f32>() + chunks.remainder().iter().map(|v| v * v).sum::<f32>();
    let inv = 1.0 / (squares / n + eps).sqrt();
    for ((x, g), b) in row.iter_mut().zip(gamma).zip(beta) {
        *x = *x * inv * g + b;
    }
}

#[multiversion(targets("x86_64+avx512f+avx512vl", "x86_64+avx2+fma", "aarch64+neon"))]
fn softmax_row(row: &mut [f32]) {
    // Reductions in LANES independent accumulators, which the compiler keeps in vector
    // registers (a single accumulator would be a serial chain).
    let mut max = [f32::NEG_INFINITY; LANES];
    let mut chunks = row.chunks_exact(LANES);
    for c in &mut chunks {
        for (m, &v) in max.iter_mut().zip(c) {
            *m = if v > *m { v } else { *m };
        }
    }
    let mut max = max.into_iter().fold(f32::NEG_INFINITY, f32::max);
    max = chunks.remainder().iter().copied().fold(max, f32::max);
    let mut sum = [0f32; LANES];
    let mut chunks = row.chunks_exact_mut(LANES);
    for c in &mut chunks {
        for (s, v) in sum.iter_mut().zip(c) {
            *v = exp(*v - max);
            *s += *v;
        }
    }
    let mut total: f32 = sum.iter().sum();
    for v in chunks.into_remainder() {
        *v = exp(*v - max);
        total += *v;
    }
    let inv = 1.0 / total;
    for v in row {
        *v *= inv;
    }
}

#[cfg(test)]
mod tests;
