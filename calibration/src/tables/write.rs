//! Writing measured per-op rows as tables in AIConfigurator's layout (the documented
//! CSV form [`super::read`] reads), one file per family:
//!
//! ```text
//! ROOT/<system>/gemm/<engine>/<version>/gemm_perf.csv
//! ROOT/<system>/attention/<engine>/<version>/{context,generation}_attention_perf.csv
//! ROOT/<system>/moe/<engine>/<version>/moe_perf.csv
//! ROOT/<system>/comm/<engine>/<version>/custom_allreduce_perf.csv
//! ROOT/<system>/comm/nccl/<engine version>/nccl_perf.csv
//! ```
//!
//! `twin calibrate --device cuda:N --tables-out DIR` writes what it measured so, and
//! fits a profile from the tables read back: what is written is what is fitted.
//! Latencies in milliseconds, message sizes in elements, as the collectors write them.

use super::read::{Measured, Selection};
use crate::error::{io_err, CalibrationError, Result};
use sim::cost::tables::family::Shape;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The columns of each table this writer writes (the reader's, plus the collectors'
/// `framework`, `version` and `device`).
const GEMM: &[&str] = &["kernel_source", "gemm_dtype", "m", "n", "k"];
const DECODE: &[&str] = &[
    "kernel_source",
    "batch_size",
    "num_heads",
    "num_key_value_heads",
    "head_dim",
    "isl",
    "step",
    "window_size",
    "kv_cache_dtype",
];
const PREFILL: &[&str] = &[
    "kernel_source",
    "batch_size",
    "isl",
    "num_heads",
    "num_key_value_heads",
    "head_dim",
    "window_size",
    "attn_dtype",
    "kv_cache_dtype",
];
const MOE: &[&str] = &[
    "kernel_source",
    "moe_dtype",
    "distribution",
    "num_tokens",
    "hidden_size",
    "inter_size",
    "topk",
    "num_experts",
    "moe_tp_size",
    "moe_ep_size",
];
const CUSTOM: &[&str] = &[
    "kernel_source",
    "op_name",
    "allreduce_dtype",
    "num_gpus",
    "message_size",
];
const NCCL: &[&str] = &["op_name", "nccl_dtype", "num_gpus", "message_size"];

fn bad(path: &Path, msg: &str) -> CalibrationError {
    CalibrationError::Csv {
        path: path.to_path_buf(),
        msg: msg.to_string(),
    }
}

fn kv(fp8: bool) -> String {
    if fp8 { "fp8" } else { "bfloat16" }.to_string()
}

/// A number as the tables write it: integers without a fraction.
fn n(x: f64) -> String {
    if x.fract() == 0.0 && x.abs() < 1e15 {
        format!("{}", x as i64)
    } else {
        format!("{x}")
    }
}

/// The collective's dtype name and element bytes from its library string
/// (`nccl bfloat16`, or `ENGINE KERNEL` for the engine's own all-reduce, BF16).
fn collective_dtype(library: &str) -> (&'static str, f64) {
    let d = library.rsplit(' ').next().unwrap_or("");
    match d {
        "int8" | "fp8" => ("int8", 1.0),
        "float" | "float32" => ("float32", 4.0),
        _ => ("bfloat16", 2.0),
    }
}

/// One row's table (folder under the system, file stem), its columns and values.
type Row = (String, &'static str, &'static [&'static str], Vec<String>);

/// A family's folder of `sel` under the system.
fn fam(sel: &Selection, family: &str) -> String {
    format!("{family}/{}/{}", sel.engine, sel.version)
}

/// The table row of `shape` (MoE and collective rows by their own functions).
fn row_of(shape: &Shape, sel: &Selection) -> Row {
    match shape {
        Shape::Gemm {
            kernel,
            format,
            m,
            n: nn,
            k,
        } => (
            fam(sel, "gemm"),
            "gemm_perf",
            GEMM,
            vec![kernel.clone(), format.name().into(), n(*m), n(*nn), n(*k)],
        ),
        Shape::DecodeAttention {
            kernel,
            batch,
            heads,
            kv_heads,
            head_dim,
            context,
            window,
            kv_fp8,
        } => (
            fam(sel, "attention"),
            "generation_attention_perf",
            DECODE,
            vec![
                kernel.clone(),
                n(*batch),
                n(*heads),
                n(*kv_heads),
                n(*head_dim),
                n(*context),
                "0".into(),
                n(*window),
                kv(*kv_fp8),
            ],
        ),
        Shape::PrefillAttention {
            kernel,
            batch,
            isl,
            heads,
            kv_heads,
            head_dim,
            window,
            fp8,
            kv_fp8,
        } => (
            fam(sel, "attention"),
            "context_attention_perf",
            PREFILL,
            vec![
                kernel.clone(),
                n(*batch),
                n(*isl),
                n(*heads),
                n(*kv_heads),
                n(*head_dim),
                n(*window),
                kv(*fp8),
                kv(*kv_fp8),
            ],
        ),
        Shape::Moe { .. } => moe_row(shape, sel),
        Shape::Collective { .. } => collective_row(shape, sel),
    }
}

/// An MoE shard's row (`shape` is a `Shape::Moe`).
fn moe_row(shape: &Shape, sel: &Selection) -> Row {
    let Shape::Moe {
        kernel,
        format,
        tokens,
        hidden,
        inter,
        top_k,
        experts,
        tp,
        ep,
        skew,
        gated,
    } = shape
    else {
        unreachable!("moe_row of another shape")
    };
    {
        // The reader takes a kernel containing "nongated" as two weight matrices.
        let kernel = match (*gated, kernel.contains("nongated")) {
            (false, false) => format!("{kernel} nongated"),
            _ => kernel.clone(),
        };
        let dist = if *skew == 0.0 {
            "balanced".to_string()
        } else {
            format!("power_law_{skew}")
        };
        (
            fam(sel, "moe"),
            "moe_perf",
            MOE,
            vec![
                kernel,
                format.name().into(),
                dist,
                n(*tokens),
                n(*hidden),
                n(*inter),
                n(*top_k),
                n(*experts),
                n(*tp),
                n(*ep),
            ],
        )
    }
}

/// A collective's row: NCCL's table or the engine's own all-reduce (`shape` is a
/// `Shape::Collective`).
fn collective_row(shape: &Shape, sel: &Selection) -> Row {
    let Shape::Collective {
        library,
        op,
        gpus,
        bytes,
    } = shape
    else {
        unreachable!("collective_row of another shape")
    };
    {
        let (dtype, width) = collective_dtype(library);
        let elements = n(bytes / width);
        if library.starts_with("nccl") {
            (
                format!("comm/nccl/{}", sel.version),
                "nccl_perf",
                NCCL,
                vec![op.name().into(), dtype.into(), n(*gpus), elements],
            )
        } else {
            let kernel = library
                .strip_prefix(&format!("{} ", sel.engine))
                .unwrap_or(library)
                .to_string();
            (
                fam(sel, "comm"),
                "custom_allreduce_perf",
                CUSTOM,
                vec![kernel, op.name().into(), dtype.into(), n(*gpus), elements],
            )
        }
    }
}

/// Writes `rows` under `root` as `sel`'s tables (CSV), replacing files of the same
/// name; returns the files written.
pub fn write(
    root: &Path,
    sel: &Selection,
    device: &str,
    rows: &[Measured],
) -> Result<Vec<PathBuf>> {
    type Table = (&'static [&'static str], Vec<(Vec<String>, f64)>);
    let mut tables: BTreeMap<PathBuf, Table> = BTreeMap::new();
    for m in rows {
        if !(m.seconds.is_finite() && m.seconds > 0.0) {
            return Err(bad(
                root,
                &format!(
                    "{:?}: a latency of {} s is not a measurement",
                    m.shape, m.seconds
                ),
            ));
        }
        let (folder, stem, cols, values) = row_of(&m.shape, sel);
        let path = root
            .join(&sel.system)
            .join(folder)
            .join(format!("{stem}.csv"));
        tables
            .entry(path)
            .or_insert_with(|| (cols, Vec::new()))
            .1
            .push((values, m.seconds));
    }
    let mut written = Vec::new();
    for (path, (cols, rows)) in tables {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(io_err(dir))?;
        }
        let mut w = csv::Writer::from_writer(Vec::new());
        let head: Vec<&str> = ["framework", "version", "device"]
            .iter()
            .chain(cols.iter())
            .chain(std::iter::once(&"latency"))
            .copied()
            .collect();
        w.write_record(&head)
            .map_err(|e| bad(&path, &e.to_string()))?;
        for (values, s) in rows {
            let mut rec = vec![sel.engine.clone(), sel.version.clone(), device.to_string()];
            rec.extend(values);
            rec.push(format!("{}", s * 1e3));
            w.write_record(&rec)
                .map_err(|e| bad(&path, &e.to_string()))?;
        }
        let bytes = w.into_inner().map_err(|e| bad(&path, &e.to_string()))?;
        std::fs::write(&path, bytes).map_err(io_err(&path))?;
        written.push(path);
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sim::cost::tables::format::{CollectiveOp, Format};

    fn shapes() -> Vec<Shape> {
        vec![
            Shape::Gemm {
                kernel: "cublaslt".into(),
                format: Format::Fp8,
                m: 16.0,
                n: 7168.0,
                k: 2048.0,
            },
            Shape::DecodeAttention {
                kernel: "own".into(),
                batch: 8.0,
                heads: 8.0,
                kv_heads: 1.0,
                head_dim: 128.0,
                context: 4096.0,
                window: 0.0,
                kv_fp8: true,
            },
            Shape::PrefillAttention {
                kernel: "own".into(),
                batch: 1.0,
                isl: 2048.0,
                heads: 8.0,
                kv_heads: 8.0,
                head_dim: 128.0,
                window: 0.0,
                fp8: false,
                kv_fp8: false,
            },
            Shape::Moe {
                kernel: "grouped nongated".into(),
                format: Format::Bf16,
                tokens: 64.0,
                hidden: 4096.0,
                inter: 1536.0,
                top_k: 8.0,
                experts: 128.0,
                tp: 1.0,
                ep: 8.0,
                skew: 1.2,
                gated: false,
            },
            Shape::Collective {
                library: "nccl bfloat16".into(),
                op: CollectiveOp::AllReduce,
                gpus: 8.0,
                bytes: 2.0 * 65536.0,
            },
            Shape::Collective {
                library: "measured oneshot".into(),
                op: CollectiveOp::AllReduce,
                gpus: 4.0,
                bytes: 2.0 * 1024.0,
            },
        ]
    }

    #[test]
    fn every_shape_reads_back_as_written() {
        // One row of each family and both collectives, written and read back through
        // the reader the profiles are fitted from: the same shapes, the same seconds.
        let root = tempfile::tempdir().unwrap();
        let sel = Selection {
            system: "h200_sxm".into(),
            engine: "measured".into(),
            version: "2026-12-05".into(),
        };
        let rows: Vec<Measured> = shapes()
            .into_iter()
            .enumerate()
            .map(|(i, shape)| Measured {
                shape,
                seconds: 1e-5 * (i + 1) as f64 + 3.7e-9,
            })
            .collect();
        let files = write(root.path(), &sel, "cuda:0 test", &rows).unwrap();
        assert_eq!(files.len(), 6, "{files:?}");
        let back = super::super::read(root.path(), &sel).unwrap();
        assert!(back.skipped.is_empty(), "{:?}", back.skipped);
        assert_eq!(back.rows.len(), rows.len());
        for m in &rows {
            let b = back
                .rows
                .iter()
                .find(|b| b.shape == m.shape)
                .unwrap_or_else(|| panic!("{:?} not read back: {:?}", m.shape, back.rows));
            assert!(
                (b.seconds / m.seconds - 1.0).abs() < 1e-12,
                "{b:?} vs {m:?}"
            );
        }
    }

    #[test]
    fn a_latency_that_is_not_a_measurement_is_refused() {
        let root = tempfile::tempdir().unwrap();
        let sel = Selection {
            system: "h200_sxm".into(),
            engine: "measured".into(),
            version: "1".into(),
        };
        let rows = vec![Measured {
            shape: shapes().remove(0),
            seconds: f64::NAN,
        }];
        assert!(write(root.path(), &sel, "x", &rows).is_err());
    }
}
