//! The encoder's steps between its weight products, on one thread pool.
//!
//! candle runs GELU's `erf` and softmax's `exp` one element at a time through libm (for a
//! 200-token text about a fifth of a forward pass, `perf`), and its attention products and
//! LayerNorm on rayon while its int8 products use its own barrier pool, whose worker spins
//! while rayon's threads run: three busy threads on two cores. Here:
//! - `exp` and `erf` are branch-free polynomials that the compiler vectorises for the CPU at
//!   hand (`multiversion` compiles each loop for AVX-512, AVX2 + FMA, NEON and the baseline
//!   and picks one at run time);
//! - attention runs one (text, head) at a time: scores, softmax and the weighted sum of
//!   values over the text's own tokens only (padding is never attended to or from), with
//!   single-threaded `gemm` calls, reading query, key and value straight out of the fused
//!   projection, so nothing is permuted or copied;
//! - the residual sum and LayerNorm are one pass;
//! - all of it is split across the pool the products around it use ([`Pool`]), the calling
//!   thread included, so that no pool's workers spin while another's compute.
//!
//! Accuracy: `exp` within ~2e-7 relative (Cody–Waite reduction, degree-7 Taylor on
//! |r| ≤ ln 2 / 2), `erf` within 1.5e-7 absolute (Abramowitz & Stegun 7.1.26); the
//! embeddings stay within 1e-4 of the reference implementation (`reference_vectors` test).

use std::ops::Range;

use candle_core::{CpuStorage, InplaceOp1, Layout, Result, Shape, Tensor};
use multiversion::multiversion;
use rayon::prelude::*;

/// The worker threads a kernel splits its work across: those of the matrix products around
/// it. candle's f32 products run on rayon, its int8 products on its own barrier pool, whose
/// workers spin for a while after each task; work handed to the other pool would compete
/// with them for the cores (a short query's f32 pass took 20 instead of 17 ms that way).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pool {
    Rayon,
    Barrier,
}

impl Pool {
    /// Runs `f` over `0..n` split in ranges, on this pool's threads and the caller's.
    fn run(self, n: usize, f: impl Fn(Range<usize>) + Sync) {
        match self {
            Pool::Barrier => candle_core::utils::barrier_pool().execute_chunked(n, f),
            Pool::Rayon => {
                // A few ranges per thread balance uneven units (texts of different lengths).
                let chunk = n.div_ceil(rayon::current_num_threads() * 4).max(1);
                (0..n.div_ceil(chunk))
                    .into_par_iter()
                    .for_each(|c| f(c * chunk..n.min((c + 1) * chunk)));
            }
        }
    }
}

/// GELU with the exact (erf) form, in place: `x · Φ(x)`.
pub fn gelu_erf_(x: &Tensor, pool: Pool) -> Result<()> {
    x.inplace_op1(&Gelu { pool })
}

struct Gelu {
    pool: Pool,
}

/// Multi-head self-attention over the fused projection `qkv` (batch, seq, 3·hidden): each
/// row holds the queries (pre-scaled by 1/√head_dim), keys and values of its token, heads
/// side by side. Text `i` attends over its first `lengths[i]` tokens; rows past its length
/// come out zero (mean pooling ignores them, and nothing real attends to them). Returns the
/// context (batch, seq, hidden).
pub fn attention(qkv: &Tensor, heads: usize, lengths: &[usize], pool: Pool) -> Result<Tensor> {
    qkv.apply_op1_no_bwd(&Attention { heads, lengths: lengths.to_vec(), pool })
}

/// `x ← LayerNorm(x + residual) · γ + β` over the last dimension, in place on `x`;
/// `params`: (2, hidden), γ then β.
pub fn add_layer_norm_(
    x: &Tensor,
    residual: &Tensor,
    params: &Tensor,
    eps: f32,
    pool: Pool,
) -> Result<()> {
    x.inplace_op3(residual, params, &AddLayerNorm { eps, pool })
}

struct Attention {
    heads: usize,
    lengths: Vec<usize>,
    pool: Pool,
}

struct AddLayerNorm {
    eps: f32,
    pool: Pool,
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
            self.pool.run(b * heads, run);
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
        in_parallel(self.pool, xs, n * 2048usize.div_ceil(n), |offset, piece| {
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
        in_parallel(self.pool, xs, 4096, |_, piece| gelu_slice(piece));
        Ok(())
    }
}

/// Below this many elements a step between the products runs on the calling thread alone:
/// waking the pool's threads for it costs more than it saves (a short query's pass has ~24
/// such steps).
const INLINE_ELEMENTS: usize = 32 * 1024;

/// Runs `f(offset, piece)` over pieces of `xs` of `piece` elements (the last one shorter)
/// on `pool`, the calling thread included.
fn in_parallel(pool: Pool, xs: &mut [f32], piece: usize, f: impl Fn(usize, &mut [f32]) + Sync) {
    let len = xs.len();
    let pieces = len.div_ceil(piece);
    if pieces <= 1 || len < INLINE_ELEMENTS {
        f(0, xs);
        return;
    }
    let base = SendPtr(xs.as_mut_ptr());
    pool.run(pieces, |range| {
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
    let n = (x * LOG2_E + ROUND) - ROUND;
    let r = x - n * LN2_HI - n * LN2_LO;
    let p = 1.0
        + r * (1.0
            + r * (1.0 / 2.0
                + r * (1.0 / 6.0
                    + r * (1.0 / 24.0 + r * (1.0 / 120.0 + r * (1.0 / 720.0 + r / 5040.0))))));
    // 2^n through the exponent bits: n lies in [-126, 127].
    p * f32::from_bits(((n as i32 + 127) as u32) << 23)
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

const LANES: usize = 16;

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
mod tests {
    use super::*;
    use candle_core::{Device, Tensor};

    #[test]
    fn exp_matches_std_within_a_few_ulp() {
        let mut worst = 0f32;
        let mut x = -87.0f32;
        while x < 88.0 {
            let rel = (exp(x) - x.exp()).abs() / x.exp();
            worst = worst.max(rel);
            x += 0.001_7;
        }
        assert!(worst < 5e-7, "worst relative error {worst}");
        assert_eq!(exp(-1e4), exp(-87.0), "saturates instead of wrapping");
        assert!(exp(-1e4) < 1e-37);
    }

    #[test]
    fn gelu_matches_the_erf_definition() {
        let mut worst = 0f64;
        let mut x = -12.0f32;
        while x < 12.0 {
            let exact = 0.5 * x as f64 * (1.0 + libm_erf(x as f64 / std::f64::consts::SQRT_2));
            worst = worst.max((gelu(x) as f64 - exact).abs());
            x += 0.000_9;
        }
        assert!(worst < 1e-6, "worst absolute error {worst}");
        assert_eq!(gelu(0.0), 0.0);
        // e^(-z²) saturates at e^-87 instead of underflowing: a tiny value, never NaN.
        assert!(gelu(-30.0).abs() < 1e-37 && gelu(-1e30).abs() < 1e-6);
        assert_eq!(gelu(30.0), 30.0);
    }

    /// erf in f64, enough for a test: its Taylor series below 3 (terms stay under ~1e4, so
    /// f64 keeps ~12 digits), and above it erfc's continued fraction
    /// e^(-z²)/√π · 1/(z + ½/(z + 1/(z + 3/2/(z + …)))), evaluated backwards.
    fn libm_erf(x: f64) -> f64 {
        let z = x.abs();
        if z >= 3.0 {
            let mut f = z;
            for k in (1..=200).rev() {
                f = z + (k as f64 / 2.0) / f;
            }
            let erfc = (-z * z).exp() / (std::f64::consts::PI.sqrt() * f);
            return x.signum() * (1.0 - erfc);
        }
        // erf(x) = 2/√π Σ (-1)^n x^(2n+1) / (n! (2n+1))
        let (mut term, mut sum, mut n) = (x, x, 0.0);
        while term.abs() > 1e-17 * sum.abs().max(1e-300) {
            n += 1.0;
            term *= -x * x / n;
            sum += term / (2.0 * n + 1.0);
        }
        sum * 2.0 / std::f64::consts::PI.sqrt()
    }

    #[test]
    fn the_reference_erf_is_right() {
        // Values from tables of erf (Abramowitz & Stegun 7.1), to 10 digits.
        for (x, erf) in [(0.5, 0.520_499_877_8), (1.0, 0.842_700_792_9), (2.9, 0.999_958_902_1)] {
            assert!((libm_erf(x) - erf).abs() < 1e-9, "erf({x})");
            assert!((libm_erf(-x) + erf).abs() < 1e-9, "erf(-{x})");
        }
        assert!((libm_erf(3.5) - 0.999_999_256_9).abs() < 1e-9);
        assert!((libm_erf(3.0) - 0.999_977_909_5).abs() < 1e-9);
    }

    fn max_diff(a: &Tensor, b: &Tensor) -> Result<f32> {
        (a - b)?.abs()?.flatten_all()?.max(0)?.to_scalar::<f32>()
    }

    #[test]
    fn gelu_matches_candle_on_a_tensor() -> Result<()> {
        // A query's few tokens (inline) and a batch (on the pool).
        for rows in [9, 97] {
            gelu_matches_candle_on(rows)?;
        }
        Ok(())
    }

    fn gelu_matches_candle_on(rows: usize) -> Result<()> {
        let y = ((Tensor::rand(0f32, 1.0, (2, rows, 1536), &Device::Cpu)? - 0.5)? * 16.0)?;
        for pool in [Pool::Rayon, Pool::Barrier] {
            let ours = y.copy()?;
            gelu_erf_(&ours, pool)?;
            let diff = max_diff(&ours, &y.gelu_erf()?)?;
            assert!(diff < 1e-6, "gelu differs by {diff} on {pool:?}");
        }
        Ok(())
    }

    #[test]
    fn add_layer_norm_matches_candle() -> Result<()> {
        // A query's few tokens (inline) and a batch (on the pool).
        for rows in [9, 41] {
            add_layer_norm_matches_candle_on(rows)?;
        }
        Ok(())
    }

    fn add_layer_norm_matches_candle_on(rows: usize) -> Result<()> {
        let dev = Device::Cpu;
        let x = ((Tensor::rand(0f32, 1.0, (3, rows, 384), &dev)? - 0.5)? * 6.0)?;
        let r = ((Tensor::rand(0f32, 1.0, (3, rows, 384), &dev)? - 0.5)? * 6.0)?;
        let gamma = Tensor::rand(0.5f32, 1.5, 384, &dev)?;
        let beta = Tensor::rand(-1f32, 1.0, 384, &dev)?;
        let expected = candle_nn::ops::layer_norm(&(&x + &r)?, &gamma, &beta, 1e-12)?;
        let params = Tensor::stack(&[&gamma, &beta], 0)?;
        for pool in [Pool::Rayon, Pool::Barrier] {
            let ours = x.copy()?;
            add_layer_norm_(&ours, &r, &params, 1e-12, pool)?;
            let diff = max_diff(&ours, &expected)?;
            assert!(diff < 1e-5, "layer norm differs by {diff} on {pool:?}");
        }
        Ok(())
    }

    /// Attention the plain way, one text at a time over its own tokens.
    fn reference_attention(qkv: &Tensor, heads: usize, lengths: &[usize]) -> Result<Tensor> {
        let (b, s, three_h) = qkv.dims3()?;
        let (h, d) = (three_h / 3, three_h / 3 / heads);
        let mut texts = Vec::new();
        for (i, &l) in lengths.iter().enumerate().take(b) {
            if l == 0 {
                texts.push(Tensor::zeros((s, h), candle_core::DType::F32, qkv.device())?);
                continue;
            }
            // (l, 3, heads, d) → (3, heads, l, d)
            let t = qkv.get(i)?.narrow(0, 0, l)?.reshape((l, 3, heads, d))?;
            let t = t.permute((1, 2, 0, 3))?.contiguous()?;
            let (q, k, v) = (t.get(0)?, t.get(1)?, t.get(2)?);
            let p = candle_nn::ops::softmax_last_dim(&q.matmul(&k.t()?)?)?;
            let ctx = p.matmul(&v)?.transpose(0, 1)?.reshape((l, h))?;
            texts.push(ctx.pad_with_zeros(0, 0, s - l)?);
        }
        Tensor::stack(&texts, 0)
    }

    #[test]
    fn attention_matches_the_plain_computation() -> Result<()> {
        let dev = Device::Cpu;
        // Small ones run inline (below INLINE_ELEMENTS), the last on the pool.
        for (lengths, s) in
            [(vec![1], 1), (vec![9], 9), (vec![37, 5, 0, 37], 37), (vec![130, 77, 0, 130], 130)]
        {
            let qkv = ((Tensor::rand(0f32, 1.0, (lengths.len(), s, 3 * 96), &dev)? - 0.5)? * 4.0)?;
            let expected = reference_attention(&qkv, 3, &lengths)?;
            for pool in [Pool::Rayon, Pool::Barrier] {
                let diff = max_diff(&attention(&qkv, 3, &lengths, pool)?, &expected)?;
                assert!(diff < 1e-5, "attention differs by {diff} for {lengths:?} on {pool:?}");
            }
        }
        let qkv = Tensor::zeros((1, 4, 9), candle_core::DType::F32, &dev)?;
        assert!(attention(&qkv, 3, &[5], Pool::Rayon).is_err(), "a length past the sequence");
        Ok(())
    }
}
