//! The quantised vectors of one embedder: 1-bit sign codes (after centring) for the scan,
//! int8 codes with per-vector scales for the re-scoring.

use multiversion::multiversion;

/// The quantised vectors of one embedder, by slot.
pub(super) struct Space {
    pub(super) dims: usize,
    /// u64 words per sign code.
    pub(super) words: usize,
    /// Subtracted before taking signs.
    pub(super) mean: Vec<f32>,
    /// Records encoded when `mean` was last computed; re-centred when the count doubles.
    pub(super) centred_at: usize,
    pub(super) encoded: usize,
    pub(super) bits: Vec<u64>,
    pub(super) codes: Vec<i8>,
    /// Dequantisation scale: `x[i] ≈ codes[i] * scale`.
    pub(super) scale: Vec<f32>,
    /// Euclidean norm of the original vector.
    pub(super) norm: Vec<f32>,
}

impl Space {
    pub(super) fn new(dims: usize) -> Self {
        Space {
            dims,
            words: dims.div_ceil(64),
            mean: vec![0.0; dims],
            centred_at: 0,
            encoded: 0,
            bits: Vec::new(),
            codes: Vec::new(),
            scale: Vec::new(),
            norm: Vec::new(),
        }
    }

    pub(super) fn grow(&mut self, slots: usize) {
        if self.scale.len() < slots {
            self.bits.resize(slots * self.words, 0);
            self.codes.resize(slots * self.dims, 0);
            self.scale.resize(slots, 0.0);
            self.norm.resize(slots, 0.0);
        }
    }

    pub(super) fn code(&self, slot: usize) -> &[i8] {
        &self.codes[slot * self.dims..(slot + 1) * self.dims]
    }

    pub(super) fn sign_code(&self, slot: usize) -> &[u64] {
        &self.bits[slot * self.words..(slot + 1) * self.words]
    }

    pub(super) fn signs_into(&self, v: &[f32], out: &mut [u64]) {
        signs(v, &self.mean, out);
    }

    pub(super) fn set(&mut self, slot: usize, v: &[f32]) {
        self.grow(slot + 1);
        let (dims, words) = (self.dims, self.words);
        self.scale[slot] = quantise_into(v, &mut self.codes[slot * dims..(slot + 1) * dims]);
        self.norm[slot] = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        signs(v, &self.mean, &mut self.bits[slot * words..(slot + 1) * words]);
        self.encoded += 1;
    }

    /// Recomputes the mean over `slots` and every sign code from the int8 codes. (Loading
    /// an index of 10,000 records spent half its time here and in [`Space::set`] when these
    /// loops were scalar: README "Performance", `spine hook prompt`.)
    pub(super) fn recentre(&mut self, slots: &[usize]) {
        if slots.is_empty() {
            return;
        }
        let mut mean = vec![0.0f64; self.dims];
        for &s in slots {
            accumulate(&mut mean, self.code(s), f64::from(self.scale[s]));
        }
        self.mean = mean.iter().map(|m| (m / slots.len() as f64) as f32).collect();
        let mut v = vec![0.0f32; self.dims];
        let (dims, words) = (self.dims, self.words);
        for &s in slots {
            dequantise(&self.codes[s * dims..(s + 1) * dims], self.scale[s], &mut v);
            signs(&v, &self.mean, &mut self.bits[s * words..(s + 1) * words]);
        }
        self.centred_at = slots.len();
    }
}

/// The sign code of `v` around `mean`: bit `i` set where `v[i] > mean[i]` (`out` has one
/// word per 64 dimensions, the last one's unused bits clear).
#[multiversion(targets("x86_64+avx512f+avx512bw", "x86_64+avx2", "aarch64+neon"))]
fn signs(v: &[f32], mean: &[f32], out: &mut [u64]) {
    for (w, (xs, ms)) in out.iter_mut().zip(v.chunks(64).zip(mean.chunks(64))) {
        let mut word = 0u64;
        for (i, (x, m)) in xs.iter().zip(ms).enumerate() {
            word |= u64::from(x > m) << i;
        }
        *w = word;
    }
}

/// `mean[i] += code[i] · scale`.
#[multiversion(targets("x86_64+avx512f+avx512bw", "x86_64+avx2", "aarch64+neon"))]
fn accumulate(mean: &mut [f64], code: &[i8], scale: f64) {
    for (m, c) in mean.iter_mut().zip(code) {
        *m += f64::from(*c) * scale;
    }
}

/// `out[i] = code[i] · scale`.
#[multiversion(targets("x86_64+avx512f+avx512bw", "x86_64+avx2", "aarch64+neon"))]
fn dequantise(code: &[i8], scale: f32, out: &mut [f32]) {
    for (x, c) in out.iter_mut().zip(code) {
        *x = f32::from(*c) * scale;
    }
}

/// Symmetric int8 quantisation with one scale per vector.
pub(super) fn quantise(v: &[f32]) -> (Vec<i8>, f32) {
    let mut codes = vec![0; v.len()];
    let scale = quantise_into(v, &mut codes);
    (codes, scale)
}

/// [`quantise`] into `codes`; returns the scale (`x[i] ≈ codes[i] · scale`).
#[multiversion(targets("x86_64+avx512f+avx512bw", "x86_64+avx2", "aarch64+neon"))]
pub(super) fn quantise_into(v: &[f32], codes: &mut [i8]) -> f32 {
    let max = v.iter().fold(0.0f32, |m, x| m.max(x.abs()));
    if max == 0.0 || !max.is_finite() {
        codes.iter_mut().for_each(|c| *c = 0);
        return 0.0;
    }
    let scale = max / 127.0;
    for (c, x) in codes.iter_mut().zip(v) {
        *c = (x / scale).round().clamp(-127.0, 127.0) as i8;
    }
    scale
}

pub(super) fn hamming(a: &[u64], b: &[u64]) -> u32 {
    a.iter().zip(b).map(|(x, y)| (x ^ y).count_ones()).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantise_round_trips_within_half_a_step() {
        let v = [0.5f32, -0.25, 0.125, 0.0, -0.5];
        let (codes, scale) = quantise(&v);
        for (x, c) in v.iter().zip(&codes) {
            assert!((x - f32::from(*c) * scale).abs() <= scale / 2.0 + 1e-7);
        }
        assert_eq!(quantise(&[0.0, 0.0]).1, 0.0);
    }

    /// Bit `i` of the sign code is `v[i] > mean[i]`, across word boundaries and in a last
    /// word that is partly used (100 dimensions: one full word and 36 bits).
    #[test]
    fn sign_codes_set_the_bits_of_the_dimensions_above_the_mean() {
        let dims = 100;
        let v: Vec<f32> = (0..dims).map(|i| ((i * 37 % 11) as f32) - 5.0).collect();
        let mean: Vec<f32> = (0..dims).map(|i| if i % 3 == 0 { 1.0 } else { -1.0 }).collect();
        let mut out = [u64::MAX; 2];
        signs(&v, &mean, &mut out);
        for i in 0..128 {
            let bit = out[i / 64] >> (i % 64) & 1 == 1;
            assert_eq!(bit, i < dims && v[i] > mean[i], "dimension {i}");
        }
        let mut space = Space::new(dims);
        space.set(3, &v);
        assert_eq!(space.sign_code(3), signs_of(&v, &[0.0; 100]));
        let back: Vec<f32> = space.code(3).iter().map(|c| f32::from(*c) * space.scale[3]).collect();
        space.recentre(&[3]);
        assert_eq!(space.mean, back, "the mean of one vector is its dequantised self");
        assert_eq!(space.sign_code(3), [0, 0], "nothing is above itself");
    }

    fn signs_of(v: &[f32], mean: &[f32]) -> Vec<u64> {
        let mut out = vec![0; v.len().div_ceil(64)];
        signs(v, mean, &mut out);
        out
    }

    #[test]
    fn hamming_counts_differing_bits() {
        assert_eq!(hamming(&[0b1011, 0], &[0b0001, 1 << 63]), 3);
    }
}
