//! Vector arithmetic shared by the embedders and the store's exact re-scoring.

/// Cosine similarity of two equal-length vectors (dot product over the product of the
/// norms); 0.0 when either vector is zero or the lengths differ.
///
/// Built for AVX2 and AVX-512 as well, chosen at run time (the baseline x86-64 target is
/// SSE2: two instructions per eight lanes). A search re-scores ~250 stored vectors with it:
/// its share of the server's CPU outside the embedder fell (`perf`, 10,000 records;
/// docs/performance.md, "The lexical step on a store larger than the term cache"). The
/// result is the same bits on every build: the same operations
/// in the same order (Rust never fuses a multiply and an add).
#[multiversion::multiversion(targets(
    "x86_64+avx512f+avx512vl",
    "x86_64+avx2+fma",
    "aarch64+neon"
))]
pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    cosine_lanes(a, b)
}

/// [`cosine`]'s arithmetic, inlined into each of its builds.
#[inline(always)]
fn cosine_lanes(a: &[f32], b: &[f32]) -> f32 {
    if a.len() != b.len() {
        return 0.0;
    }
    // Eight independent lanes per sum: the compiler turns these into SIMD adds (a single
    // running sum cannot be reordered, so it would stay scalar and several times slower;
    // docs/performance.md, "The lexical step on a store larger than the term cache").
    const LANES: usize = 8;
    let (mut dot, mut na, mut nb) = ([0f32; LANES], [0f32; LANES], [0f32; LANES]);
    let (ca, cb) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        // Fixed-size arrays: no bounds checks in the lane loop, so it vectorises.
        let (x, y): (&[f32; LANES], &[f32; LANES]) = (x.try_into().unwrap(), y.try_into().unwrap());
        for i in 0..LANES {
            dot[i] += x[i] * y[i];
            na[i] += x[i] * x[i];
            nb[i] += y[i] * y[i];
        }
    }
    let (mut dot, mut na, mut nb) =
        (dot.iter().sum::<f32>(), na.iter().sum::<f32>(), nb.iter().sum::<f32>());
    for (x, y) in ra.iter().zip(rb) {
        dot += x * y;
        na += x * x;
        nb += y * y;
    }
    if na == 0.0 || nb == 0.0 { 0.0 } else { dot / (na.sqrt() * nb.sqrt()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_build_of_cosine_gives_the_portable_bits() {
        // `cosine` dispatches to this CPU's build; `cosine_lanes` here is the test's own,
        // built for the baseline target.
        let mut x = 0x9e37_79b9_u32;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            (x as f32 / u32::MAX as f32) * 2.0 - 1.0
        };
        for len in [0, 1, 7, 8, 9, 384, 1000] {
            let a: Vec<f32> = (0..len).map(|_| next()).collect();
            let b: Vec<f32> = (0..len).map(|_| next() * 3.0).collect();
            assert_eq!(cosine(&a, &b).to_bits(), cosine_lanes(&a, &b).to_bits(), "{len}");
        }
        assert_eq!(cosine(&[1.0, 0.0], &[0.0, 0.0]), 0.0);
        assert_eq!(cosine(&[1.0, 0.0], &[1.0]), 0.0);
        assert!((cosine(&[1.0, 2.0], &[2.0, 4.0]) - 1.0).abs() < 1e-6);
    }
}
