//! Units shared by every crate: data types with their byte widths, and byte sizes that
//! read as `4KiB`, `2MiB`, `288GB` or plain integers in scenario files.

use serde::{de, Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;

/// Numeric formats of weights, activations and KV entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Dtype {
    Fp32,
    Bf16,
    Fp8,
    Fp4,
    /// Weight-only 4-bit integers (AWQ, GPTQ, compressed-tensors' pack-quantized):
    /// the kernels (Marlin, Machete) multiply in BF16.
    Int4,
}

impl Dtype {
    /// Bytes per element, without block scales (FP4 is half a byte).
    pub fn bytes(self) -> f64 {
        match self {
            Dtype::Fp32 => 4.0,
            Dtype::Bf16 => 2.0,
            Dtype::Fp8 => 1.0,
            Dtype::Fp4 | Dtype::Int4 => 0.5,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Dtype::Fp32 => "fp32",
            Dtype::Bf16 => "bf16",
            Dtype::Fp8 => "fp8",
            Dtype::Fp4 => "fp4",
            Dtype::Int4 => "int4",
        }
    }
}

/// Side of the square scale blocks of block-FP8 weights: DeepSeek-V3's format
/// (`weight_block_size [128, 128]`), which every block-FP8 checkpoint twin reads uses.
pub const FP8_BLOCK_SIDE: u32 = 128;

/// Whether slicing a block-FP8 weight `width` wide over `parts` GPUs leaves each a whole
/// number of scale blocks: a block's one scale cannot be split between GPUs, and vLLM
/// and SGLang refuse to load a shard that would split it (their block-FP8 MoE
/// `create_weights`: "The output_size of gate's and up's weight = 192 is not divisible
/// by weight quantization block_n = 128", MiniMax-M2.5 at TP8).
pub fn fp8_blocks_whole(width: u32, parts: u32) -> bool {
    parts <= 1 || (width.is_multiple_of(parts) && (width / parts).is_multiple_of(FP8_BLOCK_SIDE))
}

impl fmt::Display for Dtype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A byte count. Parses integers and strings with a unit: `B`, `KB`/`MB`/`GB`/`TB`
/// (powers of 1000) and `KiB`/`MiB`/`GiB`/`TiB` (powers of 1024).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct ByteSize(pub u64);

impl ByteSize {
    pub const KIB: u64 = 1024;
    pub const MIB: u64 = 1024 * 1024;
    pub const GIB: u64 = 1024 * 1024 * 1024;

    pub fn as_f64(self) -> f64 {
        self.0 as f64
    }

    /// Parses `"2MiB"`, `"4 KiB"`, `"288GB"`, `"890"`, `"1.5GiB"`.
    pub fn parse(text: &str) -> Result<ByteSize, ByteSizeError> {
        let t = text.trim();
        let split = t
            .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '_'))
            .unwrap_or(t.len());
        let (num, unit) = t.split_at(split);
        let num: f64 = num
            .replace('_', "")
            .parse()
            .map_err(|_| ByteSizeError::NotANumber(text.to_string()))?;
        let mult: f64 = match unit.trim() {
            "" | "B" => 1.0,
            "KB" | "kB" => 1e3,
            "MB" => 1e6,
            "GB" => 1e9,
            "TB" => 1e12,
            "KiB" => 1024.0,
            "MiB" => 1024.0 * 1024.0,
            "GiB" => 1024.0 * 1024.0 * 1024.0,
            "TiB" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
            other => {
                return Err(ByteSizeError::Unit {
                    unit: other.to_string(),
                    text: text.to_string(),
                })
            }
        };
        let v = num * mult;
        if !v.is_finite() || v < 0.0 || v > u64::MAX as f64 {
            return Err(ByteSizeError::Range(text.to_string()));
        }
        Ok(ByteSize(v.round() as u64))
    }
}

/// Why a text is not a byte size.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ByteSizeError {
    #[error("`{0}` is not a byte size (examples: 4KiB, 2MiB, 288GB)")]
    NotANumber(String),
    #[error("unknown byte unit `{unit}` in `{text}` (use B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)")]
    Unit { unit: String, text: String },
    #[error("byte size `{0}` is out of range")]
    Range(String),
}

impl fmt::Display for ByteSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0;
        if b >= Self::GIB && b.is_multiple_of(Self::GIB) {
            write!(f, "{}GiB", b / Self::GIB)
        } else if b >= Self::MIB && b.is_multiple_of(Self::MIB) {
            write!(f, "{}MiB", b / Self::MIB)
        } else if b >= Self::KIB && b.is_multiple_of(Self::KIB) {
            write!(f, "{}KiB", b / Self::KIB)
        } else {
            write!(f, "{b}B")
        }
    }
}

impl Serialize for ByteSize {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl de::Visitor<'_> for V {
            type Value = ByteSize;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a byte size: an integer or a string such as \"2MiB\"")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<ByteSize, E> {
                Ok(ByteSize(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<ByteSize, E> {
                u64::try_from(v)
                    .map(ByteSize)
                    .map_err(|_| E::custom("a byte size cannot be negative"))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<ByteSize, E> {
                if v.is_finite() && v >= 0.0 {
                    Ok(ByteSize(v.round() as u64))
                } else {
                    Err(E::custom(
                        "a byte size must be a finite, non-negative number",
                    ))
                }
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<ByteSize, E> {
                ByteSize::parse(v).map_err(E::custom)
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_binary_and_decimal_units() {
        assert_eq!(ByteSize::parse("4KiB").unwrap().0, 4096);
        assert_eq!(ByteSize::parse("2MiB").unwrap().0, 2 * 1024 * 1024);
        assert_eq!(ByteSize::parse("288GB").unwrap().0, 288_000_000_000);
        assert_eq!(ByteSize::parse("890").unwrap().0, 890);
        assert_eq!(ByteSize::parse("1.5 KiB").unwrap().0, 1536);
        assert!(ByteSize::parse("2 parsecs").is_err());
        assert!(ByteSize::parse("lots").is_err());
    }

    #[test]
    fn displays_round_units() {
        assert_eq!(ByteSize(2 * 1024 * 1024).to_string(), "2MiB");
        assert_eq!(ByteSize(4096).to_string(), "4KiB");
        assert_eq!(ByteSize(890).to_string(), "890B");
    }
}
