//! Weight and cache number formats, decoded exactly as the CUDA kernels decode them,
//! and how the kernels' weight formats (`WeightDtype`) relate to the data types of
//! scenario files (`spec::dtype::Dtype`).
//!
//! They are two types, not one, because their variants differ: `WeightDtype::Int4` is
//! packed signed integers with one f32 scale per `INT4_GROUP` weights (value = nibble -
//! 8), which no scenario file names, while `Dtype::Fp4` (e2m1 floats with block
//! scales) and `Dtype::Fp32` have no weight kernel here. Both formats of half a byte
//! weigh the same, but they are different numbers. The two agree on bf16 and fp8, and
//! `WeightDtype::from_dtype` / `WeightDtype::dtype` map between them.

use crate::problem::WeightDtype;
use spec::dtype::Dtype;

impl WeightDtype {
    /// The kernels' format for weights a scenario stores as `d`: bf16 and fp8 as
    /// themselves; None for fp32 and fp4, which no weight kernel takes.
    pub fn from_dtype(d: Dtype) -> Option<WeightDtype> {
        match d {
            Dtype::Bf16 => Some(WeightDtype::Bf16),
            Dtype::Fp8 => Some(WeightDtype::Fp8),
            Dtype::Fp32 | Dtype::Fp4 | Dtype::Int4 => None,
        }
    }

    /// The element type of this format, whatever its scales: `Dtype::Int4` for int4
    /// (its own scale layout, which no scenario's int4 shares: `dtype` says None), the
    /// name a call and a profile give it.
    pub fn element(self) -> Dtype {
        match self {
            WeightDtype::Bf16 => Dtype::Bf16,
            WeightDtype::Fp8 => Dtype::Fp8,
            WeightDtype::Int4 => Dtype::Int4,
        }
    }

    /// The scenario data type of this format; None for int4 (not fp4: integers).
    pub fn dtype(self) -> Option<Dtype> {
        match self {
            WeightDtype::Bf16 => Some(Dtype::Bf16),
            WeightDtype::Fp8 => Some(Dtype::Fp8),
            WeightDtype::Int4 => None,
        }
    }
}

/// bf16 bits to f32 (the bf16 is the high half of an f32).
#[inline]
pub fn bf16_to_f32(b: u16) -> f32 {
    f32::from_bits((b as u32) << 16)
}

/// f32 to bf16 bits, round to nearest even (NaN stays NaN).
#[inline]
pub fn f32_to_bf16(f: f32) -> u16 {
    let u = f.to_bits();
    if f.is_nan() {
        return ((u >> 16) as u16) | 0x40;
    }
    let round = 0x7fff + ((u >> 16) & 1);
    ((u.wrapping_add(round)) >> 16) as u16
}

/// OCP FP8 E4M3 (e4m3fn) to f32: 1 sign, 4 exponent bits (bias 7), 3 mantissa bits, no
/// infinities, S.1111.111 is NaN. Largest finite value 448.
#[inline]
pub fn fp8_e4m3_to_f32(b: u8) -> f32 {
    let s = (b >> 7) & 1;
    let e = ((b >> 3) & 0xF) as u32;
    let m = (b & 7) as u32;
    let v = if e == 0 {
        m as f32 * 0.001953125 // m/8 * 2^-6
    } else if e == 15 && m == 7 {
        f32::NAN
    } else {
        f32::from_bits(((e + 120) << 23) | (m << 20))
    };
    if s == 1 {
        -v
    } else {
        v
    }
}

/// f32 to the nearest finite FP8 E4M3 value (saturating at +-448; NaN maps to NaN).
pub fn f32_to_fp8_e4m3(f: f32) -> u8 {
    if f.is_nan() {
        return 0x7f;
    }
    let sign = if f.is_sign_negative() { 0x80u8 } else { 0 };
    let a = f.abs();
    // Positive codes 0..=0x7e are monotonic in value: binary search for the nearest.
    let (mut lo, mut hi) = (0u8, 0x7eu8);
    if a >= fp8_e4m3_to_f32(hi) {
        return sign | hi;
    }
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if fp8_e4m3_to_f32(mid) <= a {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    let (vl, vh) = (fp8_e4m3_to_f32(lo), fp8_e4m3_to_f32(hi));
    let code = if a - vl <= vh - a { lo } else { hi };
    sign | code
}

/// Packed signed 4-bit weights: two per byte, low nibble first, value = nibble - 8.
#[inline]
pub fn int4_pair(b: u8) -> (f32, f32) {
    (((b & 0xF) as i32 - 8) as f32, ((b >> 4) as i32 - 8) as f32)
}

/// Packs values in -8..=7 two per byte (low nibble first). `vals.len()` must be even.
pub fn pack_int4(vals: &[i8]) -> Vec<u8> {
    vals.chunks(2)
        .map(|p| {
            let lo = (p[0].clamp(-8, 7) + 8) as u8;
            let hi = (p.get(1).copied().unwrap_or(0).clamp(-8, 7) + 8) as u8;
            lo | (hi << 4)
        })
        .collect()
}

/// Number of weights per int4 scale group.
pub const INT4_GROUP: usize = 32;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fp8_known_values() {
        assert_eq!(fp8_e4m3_to_f32(0x00), 0.0);
        assert_eq!(fp8_e4m3_to_f32(0x38), 1.0); // e=7, m=0
        assert_eq!(fp8_e4m3_to_f32(0x7e), 448.0);
        assert_eq!(fp8_e4m3_to_f32(0xb8), -1.0);
        assert_eq!(fp8_e4m3_to_f32(0x01), 2f32.powi(-9)); // smallest subnormal
        assert_eq!(fp8_e4m3_to_f32(0x08), 2f32.powi(-6)); // smallest normal
        assert!(fp8_e4m3_to_f32(0x7f).is_nan());
        assert!(fp8_e4m3_to_f32(0xff).is_nan());
    }

    #[test]
    fn fp8_roundtrip_every_code() {
        for b in 0u8..=255 {
            let v = fp8_e4m3_to_f32(b);
            if v.is_nan() {
                continue;
            }
            let back = f32_to_fp8_e4m3(v);
            // +0 and -0 are distinct codes with the same value.
            assert_eq!(fp8_e4m3_to_f32(back), v, "code {b:#x}");
        }
        assert_eq!(fp8_e4m3_to_f32(f32_to_fp8_e4m3(1000.0)), 448.0);
        assert_eq!(fp8_e4m3_to_f32(f32_to_fp8_e4m3(1.05)), 1.0);
        assert_eq!(fp8_e4m3_to_f32(f32_to_fp8_e4m3(-1.1)), -1.125);
    }

    #[test]
    fn bf16_roundtrip() {
        for f in [0.0f32, 1.0, -2.5, 3.140625, 2f32.powi(-60), 65536.0] {
            assert_eq!(bf16_to_f32(f32_to_bf16(f)), f);
        }
        // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties to even (1.0).
        assert_eq!(bf16_to_f32(f32_to_bf16(1.0 + 2f32.powi(-8))), 1.0);
        assert!((bf16_to_f32(f32_to_bf16(0.1)) - 0.1).abs() < 1e-3);
    }

    #[test]
    fn weight_formats_map_to_scenario_dtypes_by_name_and_width() {
        for w in WeightDtype::ALL {
            match w.dtype() {
                Some(d) => {
                    assert_eq!(d.name(), w.name());
                    assert_eq!(WeightDtype::from_dtype(d), Some(w));
                    // Bytes per weight agree with the scenario dtype's width.
                    assert_eq!(w.weight_bytes(1, 1024) as f64, 1024.0 * d.bytes());
                }
                None => assert_eq!(w, WeightDtype::Int4),
            }
        }
        assert_eq!(WeightDtype::from_dtype(Dtype::Fp4), None);
        assert_eq!(WeightDtype::from_dtype(Dtype::Fp32), None);
    }

    #[test]
    fn int4_pack_unpack() {
        let vals: Vec<i8> = (-8..8).collect();
        let packed = pack_int4(&vals);
        assert_eq!(packed.len(), 8);
        for (i, b) in packed.iter().enumerate() {
            let (lo, hi) = int4_pair(*b);
            assert_eq!(lo, vals[2 * i] as f32);
            assert_eq!(hi, vals[2 * i + 1] as f32);
        }
    }
}

#[cfg(test)]
mod moderate_tests {
    use super::*;
    use crate::problem::{moderate_bf16, moderate_fp8};

    #[test]
    fn moderate_values_are_finite_and_bounded() {
        for b in 0u8..=255 {
            let v = fp8_e4m3_to_f32(moderate_fp8(b)).abs();
            assert!((0.25..4.0).contains(&v), "{b:#x} -> {v}");
        }
        for r in (0u16..=u16::MAX).step_by(7) {
            let v = bf16_to_f32(moderate_bf16(r)).abs();
            assert!((0.125..2.0).contains(&v), "{r:#x} -> {v}");
        }
    }
}
