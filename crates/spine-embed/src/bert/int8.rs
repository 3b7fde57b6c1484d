//! The int8 arithmetic of [`Precision::Int8`](super::Precision::Int8): SmoothQuant-style
//! smoothing without calibration data, the weights quantised per output channel, the
//! activations per row, the products' dequantisation, and rten-gemm's int8 executor.

use candle_core::Result;
use candle_nn::VarBuilder;
use multiversion::multiversion;
use rten_gemm::GemmExecutor;

use crate::kernels;

/// Whether rten-gemm's int8 kernel on this CPU sums products without saturating (VNNI on
/// x86-64, the dot-product instructions on Arm): then the weights keep 8 bits, else 7
/// ([`weight_levels`]).
pub(super) fn int8_exact() -> bool {
    INT8_GEMM.with(|g| !g.may_saturate())
}

thread_local! {
    /// rten-gemm's int8 executor (`u8` × `i8` → `i32`), as
    /// [`F32_GEMM`](super::linear::F32_GEMM).
    pub(super) static INT8_GEMM: GemmExecutor<u8, i8, i32> = GemmExecutor::default();
}

/// How far each channel of a LayerNorm's output reaches, estimated from its parameters:
/// the normalised values lie mostly within ±3, so `3·|γ| + |β|`. Channels with large γ or β
/// are BERT's activation outliers, which would otherwise set the int8 scale of their whole
/// row and crush the others.
pub(super) fn layer_norm_range(vb: &VarBuilder, h: usize) -> Result<Vec<f32>> {
    ((vb.get(h, "weight")?.abs()? * 3.0)? + vb.get(h, "bias")?.abs()?)?.to_vec1()
}

/// SmoothQuant's migration strength: how much of an activation outlier moves into the
/// weights (0.5 shares it evenly).
pub(super) const SMOOTHING: f64 = 0.5;

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
pub(super) fn weight_level(x: f32, levels: f32) -> i8 {
    let x = if x.is_nan() { 0.0 } else { x.clamp(-levels, levels) };
    // SAFETY: `x` is finite and within ±127, representable as `i32`.
    let t = unsafe { x.to_int_unchecked::<i32>() };
    let cut = x - t as f32;
    (t + i32::from(cut >= 0.5) - i32::from(cut <= -0.5)) as i8
}

/// The weights of [`Weights::Int8`](super::linear::Weights::Int8) from `weight` (`(out, in)`
/// row-major, smoothed in place when `range` is given): per output channel the scale
/// `max|w| / levels` and the channel quantised to ±`levels`, in the same `(out, in)` layout;
/// and `1/s` of the smoothing.
pub(super) fn quantize_weights(
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

/// The largest magnitude of a quantised weight of
/// [`Weights::Int8`](super::linear::Weights::Int8): 127 (8 bits) where
/// the kernel's sums are exact, else 63 (7 bits): AVX2's `vpmaddubsw` adds two products into
/// 16 bits, which 8-bit weights times 8-bit activations could overflow; with 7 they cannot.
pub(super) fn weight_levels() -> f32 {
    if int8_exact() { 127.0 } else { 63.0 }
}

/// The zero point of every quantised activation: they are symmetric around it, ±127.
/// (rten-gemm 0.27 mishandles zero points that differ from row to row past its first tile
/// of rows; `int8_matches_the_f32_product_within_its_quantisation` multiplies 40 rows.)
pub(super) const ACTIVATION_ZERO: u8 = 128;

/// `row` (times `inv_smooth` per channel, if given) quantised to `out` as `u8` around
/// [`ACTIVATION_ZERO`]: returns the scale (`value ≈ scale · (q − zero)`).
///
/// Written so that the compiler vectorises both loops: the largest magnitude in 16 lanes,
/// and a conversion that cannot saturate (`as u8` of a float is a saturating cast, which
/// compiled to one scalar conversion and two comparisons per value, and made quantising a
/// query's rows a large share of its pass on AVX-512 VNNI, docs/performance.md). NaN becomes
/// 0 and ±∞ saturates, as `as u8` did.
#[multiversion(targets("x86_64+avx512f+avx512vl", "x86_64+avx2+fma", "aarch64+neon"))]
pub(super) fn quantize_row(row: &[f32], inv_smooth: Option<&[f32]>, out: &mut [u8]) -> f32 {
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
pub(super) fn dequantize_row(
    acc: &[i32],
    row_scale: f32,
    scale: &[f32],
    bias: &[f32],
    y: &mut [f32],
) {
    for (((y, a), s), b) in y.iter_mut().zip(acc).zip(scale).zip(bias) {
        *y = *a as f32 * (row_scale * s) + b;
    }
}
