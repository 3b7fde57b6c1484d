//! Dense products for short texts, with the weights in half precision.
//!
//! A query of a dozen tokens multiplies a dozen rows by every weight of the encoder: 42 MB
//! of f32 weights stream from memory for a few hundred thousand multiply-adds each, and that
//! stream, not the arithmetic, sets the pass's floor (a one-word query's pass costs not much
//! less than an eight-word one's; docs/performance.md, "Short texts read their weights in
//! half precision"). Here the weights are kept a second time as IEEE half floats (11
//! significant bits, relative rounding ≤ 2⁻¹¹), half the bytes, and widened to f32 in the
//! kernel (`vcvtph2ps`, F16C); the products and sums stay f32.
//!
//! Which texts: those of at most [`MAX_TOKENS`] tokens, whatever they are batched with (the
//! embedder never puts a text this short in a pass with a longer one, so a text's vector
//! does not depend on its batchmates). Each output is one chain of f32 multiply-adds over
//! the inputs in order, so a row's result does not depend on how many rows the product has
//! either. Longer texts keep rten-gemm's f32 kernels, where the arithmetic dominates.
//!
//! Layout: panels of [`PANEL`] output columns, each `k` rows of [`PANEL`] halves, so a panel
//! streams contiguously, and every tile of [`TILE_ROWS`] input rows widens it as it reads
//! it (the panel stays in the core's cache for the next tile). No crate offers
//! f16 weights times f32 activations on x86 (rten-gemm multiplies f32 or 8-bit integers;
//! `gemm-f16` wants every operand in f16).

use rayon::prelude::*;

/// Output columns a panel holds: two AVX registers of f32.
const PANEL: usize = 16;

/// Input rows a tile multiplies at once: 12 accumulators, 2 weight registers and a
/// broadcast fill 15 of AVX2's 16 registers.
const TILE_ROWS: usize = 6;

/// The heights of the tiles `rows` input rows are cut into: as few as [`TILE_ROWS`] allows,
/// as even as possible (20 rows: 5, 5, 5, 5, not 6, 6, 6, 2). A tile's step is one
/// multiply-add chain per accumulator, so a short tile waits on the FMA's latency: a 1-row
/// or 4-row tile took well over its share of a 6-row tile's time, and 8 rows ran faster as
/// 4 + 4 than as 6 + 2 (docs/performance.md, "Short texts read their weights in half
/// precision").
fn tile_heights(rows: usize) -> impl Iterator<Item = usize> {
    let tiles = rows.div_ceil(TILE_ROWS);
    (0..tiles).map(move |t| rows / tiles + usize::from(t < rows % tiles))
}

/// Tasks per thread of the pool a product is split into (by panels): two, so that a thread
/// finishing early takes work from a slower one, without cutting a product into pieces too
/// small to stream well.
const TASKS_PER_THREAD: usize = 2;

/// Panels one task of a product of `panels` computes on a pool of `threads`. Fixed tasks of
/// 8 panels cut the encoder's 384-wide layers (24 panels) into 3 tasks whatever the pool: on
/// two threads this measured the same (throughput example, `callers 1|8 query`), but a lone
/// pass on a 16-thread pool left 13 threads without a share of those layers.
fn panels_per_task(panels: usize, threads: usize) -> usize {
    panels.div_ceil(threads.max(1) * TASKS_PER_THREAD).max(1)
}

/// The longest text (in tokens, `[CLS]` and `[SEP]` included) whose products use the
/// halves ([module docs](self)). Up to here they were faster (EPYC, throughput example
/// `lengths`); past it the arithmetic dominates either way.
pub const MAX_TOKENS: usize = 32;

/// A dense layer's weights as half floats, in panels ([module docs](self)).
pub struct HalfWeights {
    k: usize,
    n: usize,
    /// `n.div_ceil(PANEL)` panels of `k × PANEL` halves (bits); columns past `n` are zero.
    panels: Vec<u16>,
}

impl HalfWeights {
    /// Whether this CPU has the instructions the kernel uses (AVX2, FMA, F16C).
    pub fn supported() -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            std::arch::is_x86_feature_detected!("avx2")
                && std::arch::is_x86_feature_detected!("fma")
                && std::arch::is_x86_feature_detected!("f16c")
        }
        #[cfg(not(target_arch = "x86_64"))]
        false
    }

    /// Whether the encoder keeps halves on this CPU: [`HalfWeights::supported`], and no
    /// AVX-512, where rten-gemm's f32 kernels do twice the arithmetic per instruction that
    /// this AVX2 kernel does (the halves were measured on AVX2 machines only).
    pub fn preferred() -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            Self::supported() && !std::arch::is_x86_feature_detected!("avx512f")
        }
        #[cfg(not(target_arch = "x86_64"))]
        false
    }

    /// From a stored weight matrix: `n` rows (outputs) of `k` inputs, row-major; `None` if a
    /// weight lies outside half precision's range (±65,504; no BERT's does), which would
    /// round to infinity.
    pub fn new(w: &[f32], n: usize, k: usize) -> Option<Self> {
        assert_eq!(w.len(), n * k, "a weight matrix of {n} × {k}");
        let max = f32::from(::half::f16::MAX);
        if !w.iter().all(|v| v.is_finite() && v.abs() <= max) {
            return None;
        }
        let count = n.div_ceil(PANEL);
        let mut panels = vec![0u16; count * k * PANEL];
        for (p, panel) in panels.chunks_mut(k * PANEL).enumerate() {
            for (i, row) in panel.chunks_mut(PANEL).enumerate() {
                for (c, h) in row.iter_mut().enumerate() {
                    let col = p * PANEL + c;
                    if col < n {
                        *h = ::half::f16::from_f32(w[col * k + i]).to_bits();
                    }
                }
            }
        }
        Some(HalfWeights { k, n, panels })
    }

    /// Outputs per row.
    pub fn outputs(&self) -> usize {
        self.n
    }

    /// `x` (`rows × k`, row-major) times the weights plus `bias`, as `rows × n`, split
    /// across the current rayon pool by groups of panels. Call only where
    /// [`HalfWeights::supported`].
    pub fn product(&self, x: &[f32], rows: usize, bias: &[f32]) -> Vec<f32> {
        let (k, n) = (self.k, self.n);
        assert_eq!(x.len(), rows * k, "an input of {rows} × {k}");
        assert_eq!(bias.len(), n, "a bias of {n}");
        assert!(Self::supported(), "HalfWeights::product needs AVX2, FMA and F16C");
        let per_task = panels_per_task(n.div_ceil(PANEL), rayon::current_num_threads());
        let blocks: Vec<Vec<f32>> = self
            .panels
            .par_chunks(k * PANEL * per_task)
            .map(|group| {
                let mut block = vec![0f32; group.len() / k * rows];
                for (panel, out) in group.chunks(k * PANEL).zip(block.chunks_mut(rows * PANEL)) {
                    #[cfg(target_arch = "x86_64")]
                    // SAFETY: `supported()` was asserted; the slices have the lengths the
                    // kernel reads and writes (k·PANEL, rows·k, rows·PANEL).
                    unsafe {
                        avx2::panel(panel, x, rows, k, out)
                    };
                }
                block
            })
            .collect();
        let mut y = vec![0f32; rows * n];
        for (g, block) in blocks.iter().enumerate() {
            for (p, out) in block.chunks(rows * PANEL).enumerate() {
                let first = (g * per_task + p) * PANEL;
                let width = PANEL.min(n - first);
                for r in 0..rows {
                    let dst = &mut y[r * n + first..r * n + first + width];
                    for ((d, s), b) in dst.iter_mut().zip(&out[r * PANEL..]).zip(&bias[first..]) {
                        *d = s + b;
                    }
                }
            }
        }
        y
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    use super::{PANEL, TILE_ROWS};

    /// One panel: every tile of rows of `x` times it, into `out` (`rows × PANEL`).
    ///
    /// # Safety
    /// The CPU has AVX2, FMA and F16C; `panel.len() == k·PANEL`, `x.len() == rows·k`,
    /// `out.len() == rows·PANEL`.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn panel(panel: &[u16], x: &[f32], rows: usize, k: usize, out: &mut [f32]) {
        debug_assert!(panel.len() == k * PANEL);
        debug_assert!(x.len() == rows * k && out.len() == rows * PANEL);
        let mut r = 0;
        for height in super::tile_heights(rows) {
            let x = &x[r * k..];
            let out = &mut out[r * PANEL..];
            // SAFETY: as this function's; each tile reads its rows of `x` and writes its
            // rows of `out`.
            unsafe {
                match height {
                    1 => tile::<1>(panel, x, k, out),
                    2 => tile::<2>(panel, x, k, out),
                    3 => tile::<3>(panel, x, k, out),
                    4 => tile::<4>(panel, x, k, out),
                    5 => tile::<5>(panel, x, k, out),
                    _ => tile::<TILE_ROWS>(panel, x, k, out),
                }
            }
            r += height;
        }
    }

    /// `R` rows of `x` (stride `k`) times the panel `w` (halves, widened as they are read:
    /// a panel is 12–48 KB, re-read from the core's cache by each tile) into `out`
    /// (stride PANEL).
    ///
    /// # Safety
    /// AVX2, FMA and F16C; `w` holds `k·PANEL`, `x` at least `(R−1)·k + k`, `out` `R·PANEL`.
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn tile<const R: usize>(w: &[u16], x: &[f32], k: usize, out: &mut [f32]) {
        debug_assert!(w.len() >= k * PANEL && x.len() >= R * k && out.len() >= R * PANEL);
        let mut acc = [[_mm256_setzero_ps(); 2]; R];
        let (w, x) = (w.as_ptr(), x.as_ptr());
        for i in 0..k {
            // SAFETY: i < k, r < R: within the lengths above.
            unsafe {
                let w0 = _mm256_cvtph_ps(_mm_loadu_si128(w.add(i * PANEL).cast()));
                let w1 = _mm256_cvtph_ps(_mm_loadu_si128(w.add(i * PANEL + 8).cast()));
                for (r, acc) in acc.iter_mut().enumerate() {
                    let v = _mm256_broadcast_ss(&*x.add(r * k + i));
                    acc[0] = _mm256_fmadd_ps(v, w0, acc[0]);
                    acc[1] = _mm256_fmadd_ps(v, w1, acc[1]);
                }
            }
        }
        for (r, acc) in acc.iter().enumerate() {
            // SAFETY: r·PANEL + 16 ≤ R·PANEL.
            unsafe {
                _mm256_storeu_ps(out.as_mut_ptr().add(r * PANEL), acc[0]);
                _mm256_storeu_ps(out.as_mut_ptr().add(r * PANEL + 8), acc[1]);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn numbers(n: usize, seed: u32) -> Vec<f32> {
        let mut s = seed.wrapping_mul(2_654_435_761) | 1;
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 17;
                s ^= s << 5;
                (s % 20_000) as f32 / 10_000.0 - 1.0
            })
            .collect()
    }

    /// Every row count a tile can end on and widths that leave a panel part-filled: the
    /// product equals the f32 product of the half-rounded weights (to f32 rounding), and the
    /// exact weights' to within the halves' rounding.
    #[test]
    fn matches_the_f32_product_of_the_rounded_weights() {
        if !HalfWeights::supported() {
            return;
        }
        let (n, k) = (40, 37);
        let w = numbers(n * k, 1);
        let bias = numbers(n, 2);
        let half = HalfWeights::new(&w, n, k).unwrap();
        assert_eq!(half.outputs(), n);
        let rounded: Vec<f32> = w.iter().map(|v| ::half::f16::from_f32(*v).to_f32()).collect();
        for rows in [1, 2, 5, 6, 7, 12, 13, 32] {
            let x = numbers(rows * k, 3 + rows as u32);
            let y = half.product(&x, rows, &bias);
            assert_eq!(y.len(), rows * n);
            for r in 0..rows {
                for c in 0..n {
                    let dot = |w: &[f32]| -> f32 {
                        (0..k).map(|i| x[r * k + i] * w[c * k + i]).sum::<f32>() + bias[c]
                    };
                    let got = y[r * n + c];
                    assert!((got - dot(&rounded)).abs() < 1e-4, "rows {rows}, [{r},{c}]");
                    assert!((got - dot(&w)).abs() < 1e-2, "rows {rows}, [{r},{c}] vs f32");
                }
            }
        }
    }

    /// A row's outputs are the same bits however many rows the product has: a query's
    /// vector must not depend on how many texts share its pass.
    #[test]
    fn a_rows_outputs_do_not_depend_on_the_row_count() {
        if !HalfWeights::supported() {
            return;
        }
        let (n, k) = (PANEL * 16 * 2 + 5, 53);
        let half = HalfWeights::new(&numbers(n * k, 4), n, k).unwrap();
        let bias = numbers(n, 5);
        let x = numbers(40 * k, 6);
        let all = half.product(&x, 40, &bias);
        for (r, rows) in [(0, 1), (3, 1), (5, 7), (12, 1), (39, 1)] {
            let part = half.product(&x[r * k..(r + rows) * k], rows, &bias);
            assert_eq!(part, all[r * n..(r + rows) * n], "rows {r}..{}", r + rows);
        }
    }

    /// Tiles are as few as six rows a tile allows and differ by at most one row.
    #[test]
    fn rows_are_cut_into_even_tiles() {
        let heights = |rows| tile_heights(rows).collect::<Vec<_>>();
        assert_eq!(heights(0), Vec::<usize>::new());
        assert_eq!(heights(1), [1]);
        assert_eq!(heights(6), [6]);
        assert_eq!(heights(7), [4, 3]);
        assert_eq!(heights(8), [4, 4]);
        assert_eq!(heights(13), [5, 4, 4]);
        assert_eq!(heights(20), [5, 5, 5, 5]);
        assert_eq!(heights(32), [6, 6, 5, 5, 5, 5]);
        for rows in 0..200 {
            let h = heights(rows);
            assert_eq!(h.iter().sum::<usize>(), rows);
            assert_eq!(h.len(), rows.div_ceil(TILE_ROWS));
            assert!(h.iter().all(|&t| (1..=TILE_ROWS).contains(&t)));
            assert!(h.iter().max().unwrap_or(&0) - h.iter().min().unwrap_or(&0) <= 1);
        }
    }

    /// A product is split into two tasks per thread, however wide it is.
    #[test]
    fn products_split_into_two_tasks_a_thread() {
        assert_eq!(panels_per_task(24, 2), 6);
        assert_eq!(panels_per_task(96, 2), 24);
        assert_eq!(panels_per_task(24, 16), 1);
        assert_eq!(panels_per_task(25, 1), 13);
        assert_eq!(panels_per_task(1, 0), 1);
    }

    /// Forty-one panels make several tasks, the last one short: each task's columns land
    /// where they belong.
    #[test]
    fn panels_split_across_tasks_land_in_their_columns() {
        if !HalfWeights::supported() {
            return;
        }
        let (n, k) = (PANEL * 40 + 3, 8);
        // Weight of output c, input i: c when i == 0, else 0 (exact in half precision).
        let mut w = vec![0f32; n * k];
        for c in 0..n {
            w[c * k] = c as f32;
        }
        let x: Vec<f32> = (0..2 * k).map(|i| if i % k == 0 { 1.0 } else { 0.5 }).collect();
        let y = HalfWeights::new(&w, n, k).unwrap().product(&x, 2, &vec![0.0; n]);
        let want: Vec<f32> = (0..n).map(|c| c as f32).collect();
        assert_eq!(&y[..n], &want[..]);
        assert_eq!(&y[n..], &want[..]);
    }

    /// A weight past half precision's range (or not a number) keeps the layer on f32.
    #[test]
    fn weights_out_of_half_range_are_refused() {
        assert!(HalfWeights::new(&[1.0, -65_504.0], 1, 2).is_some());
        assert!(HalfWeights::new(&[1.0, 70_000.0], 1, 2).is_none());
        assert!(HalfWeights::new(&[f32::NAN, 0.0], 2, 1).is_none());
    }
}
