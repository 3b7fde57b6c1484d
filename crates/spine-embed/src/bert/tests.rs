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
