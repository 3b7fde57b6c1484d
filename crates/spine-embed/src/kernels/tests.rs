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

/// `exp` reads 2^n from the bits of `x · log2 e + 1.5 · 2^23`: the same power as the
/// integer conversion of n, at both ends of the clamped range and between.
#[test]
fn exp_takes_the_same_power_of_two_as_converting_n() {
    let cast = |x: f32| {
        let n = (x.clamp(-87.0, 88.0) * std::f32::consts::LOG2_E + 12_582_912.0) - 12_582_912.0;
        f32::from_bits(((n as i32 + 127) as u32) << 23)
    };
    let mut x = -100.0f32;
    while x < 100.0 {
        let y = x.clamp(-87.0, 88.0);
        let n = (y * std::f32::consts::LOG2_E + 12_582_912.0) - 12_582_912.0;
        let r = y - n * 0.693_359_4 - n * -2.121_944_4e-4;
        // exp(x) = p(r) · 2^n; dividing by the cast's 2^n leaves p(r), a value near 1.
        let p = exp(x) / cast(x);
        assert!((p - r.exp()).abs() < 1e-6, "x {x}: {p} against e^{r}");
        x += 0.003_1;
    }
    assert!(exp(f32::NAN).is_nan());
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
    let ours = y.copy()?;
    gelu_erf_(&ours)?;
    let diff = max_diff(&ours, &y.gelu_erf()?)?;
    assert!(diff < 1e-6, "gelu differs by {diff}");
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
    let ours = x.copy()?;
    add_layer_norm_(&ours, &r, &params, 1e-12)?;
    let diff = max_diff(&ours, &expected)?;
    assert!(diff < 1e-5, "layer norm differs by {diff}");
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
        let diff = max_diff(&attention(&qkv, 3, &lengths)?, &expected)?;
        assert!(diff < 1e-5, "attention differs by {diff} for {lengths:?}");
    }
    let qkv = Tensor::zeros((1, 4, 9), candle_core::DType::F32, &dev)?;
    assert!(attention(&qkv, 3, &[5]).is_err(), "a length past the sequence");
    Ok(())
}
