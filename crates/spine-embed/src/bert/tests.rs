use super::*;
use candle_core::Device;

/// rten-gemm's int8 product against the plain f32 one, within the bound the two
/// quantisations allow, on 40 rows (past the kernels' first tile of rows: rten-gemm
/// 0.27 got rows past it wrong when their zero points differed) and an outlier channel.
#[test]
fn int8_matches_the_f32_product_within_its_quantisation() -> Result<()> {
    let (rows, k, n) = (40, 96, 48);
    let w: Vec<f32> = (0..n * k).map(|i| ((i * 37 % 101) as f32 - 50.0) / 50.0).collect();
    let x: Vec<f32> = (0..rows * k)
        .map(|i| ((i * 53 % 89) as f32 - 44.0) / 10.0 * if i % k == 3 { 8.0 } else { 1.0 })
        .collect();
    let bias: Vec<f32> = (0..n).map(|i| i as f32 / 10.0).collect();
    let cpu = &Device::Cpu;
    let weight = Tensor::from_vec(w.clone(), (n, k), cpu)?;
    let layer = Linear::int8(weight, Tensor::from_vec(bias.clone(), n, cpu)?, None)?;
    let y = layer.forward(&Tensor::from_vec(x.clone(), (2, rows / 2, k), cpu)?, false)?;
    assert_eq!(y.dims(), [2, rows / 2, n]);
    let y = y.flatten_all()?.to_vec1::<f32>()?;
    let max = |v: &[f32]| v.iter().fold(0f32, |m, a| m.max(a.abs()));
    for r in 0..rows {
        let xr = &x[r * k..(r + 1) * k];
        let dx = max(xr) / 127.0 / 2.0;
        for o in 0..n {
            let wo = &w[o * k..(o + 1) * k];
            let dw = max(wo) / weight_levels() / 2.0;
            let want: f32 = xr.iter().zip(wo).map(|(a, b)| a * b).sum::<f32>() + bias[o];
            let bound: f32 =
                xr.iter().zip(wo).map(|(a, b)| a.abs() * dw + b.abs() * dx + dx * dw).sum();
            let got = y[r * n + o];
            assert!(
                (got - want).abs() <= bound * 1.01 + 1e-4,
                "row {r}, output {o}: {got} vs {want} (bound {bound})"
            );
        }
    }
    Ok(())
}

/// The vectorised quantisation gives exactly the levels and scale of the plain loop it
/// replaced (the largest magnitude, then `(x / scale + zero + 0.5) as u8`), with and
/// without smoothing, on lengths with and without a partial chunk, and with NaN and ±∞.
#[test]
fn quantize_row_matches_the_plain_loop_exactly() {
    fn plain(row: &[f32], smooth: Option<&[f32]>, out: &mut [u8]) -> f32 {
        let value = |i: usize| smooth.map_or(row[i], |s| row[i] * s[i]);
        let max = (0..row.len()).fold(0f32, |m, i| m.max(value(i).abs()));
        let scale = if max > 0.0 { max / 127.0 } else { 1.0 };
        let (inv, offset) = (1.0 / scale, ACTIVATION_ZERO as f32 + 0.5);
        for (i, q) in out.iter_mut().enumerate() {
            *q = (value(i) * inv + offset) as u8;
        }
        scale
    }
    for len in [1, 15, 16, 17, 384, 389, 1536] {
        let row: Vec<f32> = (0..len)
            .map(|i| ((i * 7919 % 1013) as f32 - 506.0) / 37.0 * (1 + i % 5) as f32)
            .collect();
        let smooth: Vec<f32> = (0..len).map(|i| 0.25 + (i % 9) as f32 / 4.0).collect();
        let mut odd = row.clone();
        odd[len / 2] = f32::NAN;
        for row in [&row, &odd, &vec![0.0; len]] {
            for s in [None, Some(smooth.as_slice())] {
                let (mut got, mut want) = (vec![0u8; len], vec![0u8; len]);
                let scale = quantize_row(row, s, &mut got);
                assert_eq!(scale.to_bits(), plain(row, s, &mut want).to_bits(), "len {len}");
                assert_eq!(got, want, "len {len}, smoothed {}", s.is_some());
            }
        }
    }
    // An infinite value: every finite one falls to the zero point's level, ±∞ saturates.
    let mut got = [0u8; 3];
    let scale = quantize_row(&[f32::INFINITY, 1.0, f32::NEG_INFINITY], None, &mut got);
    let mut want = [0u8; 3];
    assert_eq!(scale, plain(&[f32::INFINITY, 1.0, f32::NEG_INFINITY], None, &mut want));
    assert_eq!(got, want);
}
