//! The quantised vectors of one embedder: 1-bit sign codes (after centring) for the scan,
//! int8 codes with per-vector scales for the re-scoring.

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
        out.iter_mut().for_each(|w| *w = 0);
        for (i, (x, m)) in v.iter().zip(&self.mean).enumerate() {
            if x > m {
                out[i / 64] |= 1 << (i % 64);
            }
        }
    }

    pub(super) fn set(&mut self, slot: usize, v: &[f32]) {
        self.grow(slot + 1);
        let (codes, scale) = quantise(v);
        self.codes[slot * self.dims..(slot + 1) * self.dims].copy_from_slice(&codes);
        self.scale[slot] = scale;
        self.norm[slot] = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        let mut signs = vec![0; self.words];
        self.signs_into(v, &mut signs);
        self.bits[slot * self.words..(slot + 1) * self.words].copy_from_slice(&signs);
        self.encoded += 1;
    }

    /// Recomputes the mean over `slots` and every sign code from the int8 codes.
    pub(super) fn recentre(&mut self, slots: &[usize]) {
        if slots.is_empty() {
            return;
        }
        let mut mean = vec![0.0f64; self.dims];
        for &s in slots {
            for (m, c) in mean.iter_mut().zip(self.code(s)) {
                *m += f64::from(*c) * f64::from(self.scale[s]);
            }
        }
        self.mean = mean.iter().map(|m| (m / slots.len() as f64) as f32).collect();
        let mut v = vec![0.0f32; self.dims];
        let mut signs = vec![0u64; self.words];
        for &s in slots {
            for (x, c) in v.iter_mut().zip(self.code(s)) {
                *x = f32::from(*c) * self.scale[s];
            }
            self.signs_into(&v, &mut signs);
            self.bits[s * self.words..(s + 1) * self.words].copy_from_slice(&signs);
        }
        self.centred_at = slots.len();
    }
}

/// Symmetric int8 quantisation with one scale per vector.
pub(super) fn quantise(v: &[f32]) -> (Vec<i8>, f32) {
    let max = v.iter().fold(0.0f32, |m, x| m.max(x.abs()));
    if max == 0.0 || !max.is_finite() {
        return (vec![0; v.len()], 0.0);
    }
    let scale = max / 127.0;
    (v.iter().map(|x| (x / scale).round().clamp(-127.0, 127.0) as i8).collect(), scale)
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

    #[test]
    fn hamming_counts_differing_bits() {
        assert_eq!(hamming(&[0b1011, 0], &[0b0001, 1 << 63]), 3);
    }
}
