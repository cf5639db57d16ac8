use crate::dtype::{bf16_to_f32, f32_to_fp8_e4m3};
use rayon::prelude::*;

/// Dynamic per-tensor FP8 (E4M3) quantization of BF16 values, the CPU twin of
/// `fp8_quant.cu`: `scale = max|x| / 448` (1 where every value is 0) and each value
/// `e4m3(x / scale)`, saturating. Returns the codes and the scale. `x.len()` must be a
/// multiple of 8 (the kernel's 16-byte loads). Codes may differ from the GPU's by one
/// step where a value falls exactly between two (the GPU rounds ties to even, this to
/// the smaller magnitude).
pub fn fp8_quant(x: &[u16]) -> crate::Result<(Vec<u8>, f32)> {
    if !x.len().is_multiple_of(8) {
        return crate::shape_err(
            "fp8_quant",
            format!("{} values: a multiple of 8 is required", x.len()),
        );
    }
    let amax = x
        .par_iter()
        .map(|&b| bf16_to_f32(b).abs())
        .reduce(|| 0.0, f32::max);
    let scale = if amax > 0.0 { amax / 448.0 } else { 1.0 };
    let inv = 1.0 / scale;
    let q = x
        .par_iter()
        .map(|&b| f32_to_fp8_e4m3(bf16_to_f32(b) * inv))
        .collect();
    Ok((q, scale))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::{f32_to_bf16, fp8_e4m3_to_f32};

    #[test]
    fn the_largest_value_maps_to_448_and_the_rest_within_half_a_step() {
        let vals: Vec<f32> = (0..64).map(|i| (i as f32 - 20.0) * 0.37).collect();
        let x: Vec<u16> = vals.iter().map(|&v| f32_to_bf16(v)).collect();
        let (q, scale) = fp8_quant(&x).unwrap();
        let amax = x.iter().map(|&b| bf16_to_f32(b).abs()).fold(0.0, f32::max);
        assert_eq!(scale, amax / 448.0);
        let top = x
            .iter()
            .position(|&b| bf16_to_f32(b).abs() == amax)
            .unwrap();
        assert_eq!(fp8_e4m3_to_f32(q[top]).abs(), 448.0);
        for (&b, &c) in x.iter().zip(&q) {
            let v = bf16_to_f32(b) / scale;
            // E4M3 has 3 mantissa bits: half a step is at most 1/16 of the value
            // (normals) or 2^-10 (subnormals).
            let err = (fp8_e4m3_to_f32(c) - v).abs();
            assert!(
                err <= v.abs() / 16.0 + 1e-3,
                "{v} -> {}",
                fp8_e4m3_to_f32(c)
            );
        }
        assert!(fp8_quant(&x[..12]).is_err());
        let (z, s) = fp8_quant(&[0u16; 8]).unwrap();
        assert_eq!((z, s), (vec![0u8; 8], 1.0));
    }
}
