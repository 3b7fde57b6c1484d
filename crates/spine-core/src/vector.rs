//! Vector arithmetic shared by the embedders and the store's exact re-scoring.

/// Cosine similarity of two equal-length vectors (dot product over the product of the
/// norms); 0.0 when either vector is zero or the lengths differ.
pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    if a.len() != b.len() {
        return 0.0;
    }
    // Eight independent lanes per sum: the compiler turns these into SIMD adds (a single
    // running sum cannot be reordered, so it would stay scalar; ~7x slower at 384 dims).
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
