use super::int8::{
    ACTIVATION_ZERO, SMOOTHING, quantize_row, quantize_weights, weight_level, weight_levels,
};
use super::linear::Linear;
use candle_core::{Device, Result, Tensor};

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
    let layer = Linear::int8(&w, k, bias.clone(), None)?;
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

/// The weights quantised by plain loops are exactly those of the candle operations and the
/// loop they replaced: SmoothQuant's scales through candle's `clamp`, `powf`, division,
/// `broadcast_mul` and `recip`, then `(w / scale).round().clamp(-levels, levels) as i8`,
/// written column-major. With and without smoothing, at 8 and 7 bits, with ties at a
/// half, values past the levels and a zero channel.
#[test]
fn quantize_weights_matches_the_candle_operations_exactly() -> Result<()> {
    fn candle_smooth(weight: Tensor, range: Tensor) -> Result<(Tensor, Tensor)> {
        let reach = range.clamp(1e-5, f32::MAX)?.powf(SMOOTHING)?;
        let column = weight.abs()?.max(0)?.clamp(1e-5, f32::MAX)?;
        let s = (reach / column.powf(1.0 - SMOOTHING)?)?.clamp(1e-2, 1e2)?;
        Ok((weight.broadcast_mul(&s.unsqueeze(0)?)?, s.recip()?))
    }
    let cpu = &Device::Cpu;
    let (out, k) = (24, 40);
    let mut w: Vec<f32> = (0..out * k)
        .map(|i| ((i * 7919 % 1013) as f32 - 506.0) / 97.0 * (1 + i % 7) as f32)
        .collect();
    w[..k].iter_mut().for_each(|v| *v = 0.0);
    // Row 1: whole and half steps of its scale (its largest magnitude is 127).
    for (i, v) in w[k..2 * k].iter_mut().enumerate() {
        *v = (i as f32 - 20.0) * 6.5 - 0.5;
    }
    let range: Vec<f32> =
        (0..k).map(|i| (i % 11) as f32 * 0.7 + if i == 5 { 40.0 } else { 0.0 }).collect();
    for levels in [127.0f32, 63.0] {
        for smoothed in [false, true] {
            let weight = Tensor::from_vec(w.clone(), (out, k), cpu)?;
            let (weight, inv) = match smoothed {
                true => {
                    let (wt, inv) =
                        candle_smooth(weight, Tensor::from_vec(range.clone(), k, cpu)?)?;
                    (wt, Some(inv.to_vec1::<f32>()?))
                }
                false => (weight, None),
            };
            let rows = weight.to_vec2::<f32>()?;
            let (mut want_q, mut want_scale) = (vec![0i8; out * k], vec![0f32; out]);
            for (o, row) in rows.iter().enumerate() {
                let max = row.iter().fold(0f32, |m, v| m.max(v.abs()));
                let s = if max > 0.0 { max / levels } else { 1.0 };
                want_scale[o] = s;
                for (i, v) in row.iter().enumerate() {
                    want_q[i * out + o] = (v / s).round().clamp(-levels, levels) as i8;
                }
            }
            let mut mine = w.clone();
            let (q, scale, got_inv) =
                quantize_weights(&mut mine, k, smoothed.then_some(range.as_slice()), levels);
            let q_column_major: Vec<i8> = (0..k)
                .flat_map(|i| (0..out).map(move |o| (i, o)))
                .map(|(i, o)| q[o * k + i])
                .collect();
            assert_eq!(q_column_major, want_q, "levels {levels}, smoothed {smoothed}");
            assert_eq!(
                scale.iter().map(|s| s.to_bits()).collect::<Vec<_>>(),
                want_scale.iter().map(|s| s.to_bits()).collect::<Vec<_>>()
            );
            let bits =
                |v: Option<Vec<f32>>| v.map(|v| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>());
            assert_eq!(bits(got_inv), bits(inv));
        }
    }
    // The rounding alone, at its edges, against `round` then `clamp` then `as i8`.
    for x in [
        0.5f32,
        -0.5,
        1.5,
        -2.5,
        0.49999997,
        -0.49999997,
        126.5,
        127.4,
        200.0,
        -1e9,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        62.5,
        63.5,
        -63.5,
        0.0,
        -0.0,
    ] {
        for levels in [127.0f32, 63.0] {
            assert_eq!(weight_level(x, levels), x.round().clamp(-levels, levels) as i8, "{x}");
        }
    }
    Ok(())
}
