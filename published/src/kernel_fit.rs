//! The fit of the public kernel table: each group of cost parameters is fitted by
//! least squares (log-ratio residuals) to its group's `fit` rows, run on the hardware
//! its rows name, and stored in that hardware's `[cost]` table; other hardware of the
//! same kind may borrow the values, marked `assumed`. Leave-one-out errors are
//! reported for groups with more fit rows than parameters.

use crate::rows::{Evaluator, Fitted};
use crate::CommandLine;
use anyhow::{anyhow, bail, Context, Result};
use calibration::spread_fit::{class_of, ClassSpread, Held, ARCHITECTURES};
use fitting::{least_squares, leave_one_out, rel_error, round5, Bounds, PublishedFigure};
use scenario::Set;

/// A fitted cost parameter and the keys that take the same value.
pub struct Param {
    pub key: &'static str,
    pub lo: f64,
    pub hi: f64,
    pub also: &'static [&'static str],
}

/// Parameters fitted together to the fit rows whose ids start with `prefix`.
pub struct Group {
    pub name: &'static str,
    pub prefixes: &'static [&'static str],
    pub params: &'static [Param],
    /// Hardware whose rows are fitted (the values are theirs).
    pub fitted_in: &'static [&'static str],
    /// Hardware that borrows the values, and why.
    pub assumed_in: &'static [&'static str],
    /// Keys the borrowing hardware does not take (their own fits set them).
    pub not_borrowed: &'static [&'static str],
    pub why_assumed: &'static str,
}

/// A parameter with no keys sharing its value.
pub const fn p(key: &'static str, lo: f64, hi: f64) -> Param {
    Param {
        key,
        lo,
        hi,
        also: &[],
    }
}

pub const GROUPS: &[Group] = &[
    Group {
        name: "DeepGEMM tile model (SM90)",
        prefixes: &["deepgemm-"],
        params: &[
            Param {
                key: "gemm.compute_eff",
                lo: 0.3,
                hi: 1.0,
                also: &["moe.compute_eff"],
            },
            Param {
                key: "gemm.mem_eff",
                lo: 0.3,
                hi: 1.0,
                also: &["moe.mem_eff"],
            },
            Param {
                key: "gemm.fixed_s",
                lo: 0.0,
                hi: 2e-5,
                also: &["moe.fixed_s"],
            },
            p("tile.load_bytes_per_flop", 1e-4, 0.1),
            p("tile.epilogue_k", 0.0, 4096.0),
            p("tile.small_tile_eff", 0.2, 1.0),
            p("tile.overlap_p", 1.0, 20.0),
        ],
        fitted_in: &["h800"],
        assumed_in: &["h100", "h200", "b200", "gb200", "gb300"],
        why_assumed: "the H800's DeepGEMM tile fit (no GEMM table is published for this GPU)",
        // SM100's tensor efficiency comes from the Mega MoE rows (B200, GB200) and the
        // GB300 report's prefill row.
        not_borrowed: &["gemm.compute_eff", "moe.compute_eff"],
    },
    Group {
        name: "DeepGEMM Mega MoE (SM100)",
        prefixes: &["megamoe-"],
        params: &[Param {
            key: "gemm.compute_eff",
            lo: 0.1,
            hi: 1.0,
            also: &["moe.compute_eff"],
        }],
        fitted_in: &["b200"],
        assumed_in: &["gb200"],
        why_assumed: "the B200's Mega MoE fit (the same SM100 GPU)",
        not_borrowed: &[],
    },
    Group {
        name: "DeepEP normal kernels (H800, CX7)",
        prefixes: &["deepep-normal-"],
        params: &[p("comm.mem_eff", 0.1, 1.0), p("comm_rdma_eff", 0.1, 1.0)],
        fitted_in: &["h800"],
        assumed_in: &["h100", "h200"],
        why_assumed: "the H800's DeepEP normal-kernel fit (same SM90 kernels, CX7 NICs)",
        not_borrowed: &[],
    },
    Group {
        name: "DeepEP normal kernels, initial release (H800, CX7)",
        prefixes: &["deepep-initial-"],
        params: &[p("comm_rdma_eff_initial", 0.1, 1.0)],
        fitted_in: &["h800"],
        assumed_in: &["h100", "h200"],
        why_assumed: "the H800's fit of DeepEP's initial release (same SM90 kernels, CX7 NICs)",
        not_borrowed: &[],
    },
    Group {
        name: "DeepEP low-latency kernels (H800, CX7)",
        prefixes: &["deepep-ll-"],
        params: &[
            p("ll.dispatch_s", 0.0, 2e-4),
            p("ll.combine_s", 0.0, 2e-4),
            p("ll.nvlink_eff", 0.1, 1.0),
            p("ll.rdma_eff", 0.1, 1.0),
        ],
        fitted_in: &["h800"],
        assumed_in: &["h100", "h200"],
        why_assumed: "the H800's DeepEP low-latency fit (same SM90 kernels, CX7 NICs)",
        not_borrowed: &[],
    },
    Group {
        name: "TensorRT-LLM one-sided all-to-all (GB200 NVL72)",
        prefixes: &["trtllm-onesided-"],
        params: &[
            p("ll.dispatch_s", 0.0, 2e-4),
            p("ll.combine_s", 0.0, 2e-4),
            p("ll.nvlink_eff", 0.1, 1.0),
            p("ll.per_peer_s", 0.0, 5e-6),
            p("ll.overlap_p", 1.0, 20.0),
        ],
        fitted_in: &["gb200"],
        assumed_in: &["gb300", "b200"],
        why_assumed: "the GB200's one-sided all-to-all fit (NVLink 5 at 900 GB/s per direction)",
        not_borrowed: &[],
    },
    Group {
        name: "DeepEP V2 NVLink kernels (SM100)",
        prefixes: &["deepep-v2-sm100-"],
        params: &[p("comm.mem_eff", 0.1, 1.0)],
        fitted_in: &["b200"],
        assumed_in: &["gb200", "gb300"],
        why_assumed: "DeepEP V2's SM100 NVLink figure (NVLink 5 at 900 GB/s per direction)",
        not_borrowed: &[],
    },
    Group {
        name: "NCCL all-reduce latency (H200)",
        prefixes: &["nccl-allreduce-h200-"],
        params: &[p("allreduce.fixed_s", 0.0, 1e-4)],
        fitted_in: &["h200"],
        assumed_in: &["h100", "h800"],
        why_assumed: "the H200's tuned NCCL all-reduce latency (the same NVLink 4 HGX node)",
        not_borrowed: &[],
    },
    Group {
        name: "NCCL all-reduce latency (B200)",
        prefixes: &["nccl-allreduce-b200-"],
        params: &[p("allreduce.fixed_s", 0.0, 1e-4)],
        fitted_in: &["b200"],
        assumed_in: &[],
        why_assumed: "",
        not_borrowed: &[],
    },
    Group {
        name: "NCCL all-reduce latency (GB200)",
        prefixes: &["nccl-allreduce-gb200-4gpu-"],
        params: &[p("allreduce.fixed_s", 0.0, 1e-4)],
        fitted_in: &["gb200"],
        assumed_in: &["gb300"],
        why_assumed: "the GB200's NCCL all-reduce latency (the same NVL72 NVLink 5 fabric)",
        not_borrowed: &[],
    },
    Group {
        name: "NCCL all-reduce bandwidth (GB200 NVL72)",
        prefixes: &["nccl-allreduce-gb200-72gpu-"],
        params: &[
            p("allreduce.mem_eff", 0.1, 1.0),
            p("allreduce_ring_step_s", 0.0, 1e-4),
        ],
        fitted_in: &["gb200"],
        assumed_in: &["gb300", "b200", "h100", "h200", "h800"],
        why_assumed: "the GB200 NVL72's large NCCL all-reduce fit (no all-reduce bandwidth table is published for this GPU)",
        not_borrowed: &[],
    },
    Group {
        name: "FlashMLA dense decode (H800)",
        prefixes: &["flashmla-dense-decode-"],
        params: &[
            p("attention.mem_eff", 0.3, 1.0),
            p("attention.compute_eff", 0.1, 1.0),
        ],
        fitted_in: &["h800"],
        assumed_in: &["h100", "h200", "b200", "gb200", "gb300"],
        why_assumed: "FlashMLA's H800 dense-decode figures (none published for this GPU)",
        not_borrowed: &[],
    },
    Group {
        name: "FlashMLA dense decode, initial release (H800)",
        prefixes: &["flashmla-initial-"],
        params: &[p("attention_compute_eff_initial", 0.1, 1.0)],
        fitted_in: &["h800"],
        assumed_in: &["h100", "h200"],
        why_assumed: "FlashMLA's H800 figure of its initial release (the same SM90 kernel)",
        not_borrowed: &[],
    },
    Group {
        name: "FlashMLA sparse (H800)",
        prefixes: &[
            "flashmla-sparse-decode-h800",
            "flashmla-sparse-prefill-h800",
        ],
        params: &[
            p("attention_sparse.compute_eff", 0.05, 1.0),
            p("attention_sparse_prefill.compute_eff", 0.1, 1.0),
        ],
        fitted_in: &["h800"],
        assumed_in: &["h100", "h200"],
        why_assumed: "FlashMLA's H800 sparse figures (the same SM90 kernels)",
        not_borrowed: &[],
    },
    Group {
        name: "FlashMLA sparse (B200)",
        prefixes: &[
            "flashmla-sparse-decode-b200",
            "flashmla-sparse-prefill-b200",
        ],
        params: &[
            p("attention_sparse.compute_eff", 0.05, 1.0),
            p("attention_sparse_prefill.compute_eff", 0.1, 1.0),
        ],
        fitted_in: &["b200"],
        assumed_in: &["gb200", "gb300"],
        why_assumed: "FlashMLA's B200 sparse figures (the same SM100 kernels)",
        not_borrowed: &[],
    },
    Group {
        name: "FlashMLA MHA prefill (B200)",
        prefixes: &["flashmla-mha-prefill-b200"],
        params: &[p("attention_prefill.compute_eff", 0.1, 1.0)],
        fitted_in: &["b200"],
        assumed_in: &[],
        why_assumed: "",
        not_borrowed: &[],
    },
    Group {
        name: "cuDNN causal prefill attention (H200)",
        prefixes: &["cudnn-dsv3-prefill-h200-"],
        params: &[
            p("attention_prefill.compute_eff", 0.1, 1.0),
            p("prefill_diag_tokens", 0.0, 20000.0),
        ],
        fitted_in: &["h200"],
        assumed_in: &["h100", "h800"],
        why_assumed: "cuDNN's H200 prefill-attention fit (the same SM90 die)",
        not_borrowed: &[],
    },
    Group {
        name: "cuDNN causal prefill attention (GB200)",
        prefixes: &["cudnn-dsv3-prefill-gb200-"],
        params: &[
            p("attention_prefill.compute_eff", 0.1, 1.0),
            p("prefill_diag_tokens", 0.0, 20000.0),
        ],
        fitted_in: &["gb200"],
        assumed_in: &[],
        why_assumed: "",
        not_borrowed: &[],
    },
    Group {
        name: "cuDNN causal prefill attention (GB300)",
        prefixes: &["cudnn-dsv3-prefill-gb300-"],
        params: &[
            p("attention_prefill.compute_eff", 0.1, 1.0),
            p("prefill_diag_tokens", 0.0, 20000.0),
        ],
        fitted_in: &["gb300"],
        assumed_in: &[],
        why_assumed: "",
        not_borrowed: &[],
    },
];

impl Group {
    fn has(&self, row: &PublishedFigure) -> bool {
        self.prefixes.iter().any(|p| row.id.starts_with(p))
    }

    /// Every key the group writes.
    #[cfg(test)]
    pub fn keys(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.params
            .iter()
            .flat_map(|p| std::iter::once(p.key).chain(p.also.iter().copied()))
    }

    /// `cost.KEY` overrides for `values`.
    pub fn sets(&self, values: &[f64]) -> Vec<Set> {
        let mut out = Vec::new();
        for (p, v) in self.params.iter().zip(values) {
            for k in std::iter::once(p.key).chain(p.also.iter().copied()) {
                out.push(Set::typed(&format!("cost.{k}"), (*v).into(), "--set"));
            }
        }
        out
    }

    /// Hardware that takes the group's values, and whether as fitted.
    pub fn targets(&self) -> impl Iterator<Item = (&'static str, bool)> + '_ {
        self.fitted_in
            .iter()
            .map(|h| (*h, true))
            .chain(self.assumed_in.iter().map(|h| (*h, false)))
    }
}

/// A group's fit.
pub struct GroupFit {
    pub group: &'static Group,
    pub values: Vec<f64>,
    pub stored: Vec<f64>,
    /// Sum of squared log-ratio errors over the fit rows at the fitted and stored values.
    pub cost_fitted: f64,
    pub cost_stored: f64,
    /// Leave-one-out relative error per fit row (None where the group has no more
    /// rows than parameters).
    pub loo: Vec<(String, Option<f64>)>,
}

/// The values the hardware file of the group's first fitted hardware holds now.
fn stored(group: &Group) -> Result<Vec<f64>> {
    let hw = scenario::load_hardware(group.fitted_in[0], &[])?;
    let base = sim::cost::CostParams::default();
    Ok(group
        .params
        .iter()
        .map(|p| {
            hw.cost
                .get(p.key)
                .copied()
                .or_else(|| base.get(p.key))
                .unwrap_or((p.lo + p.hi) / 2.0)
        })
        .collect())
}

fn residuals(
    ev: &mut Evaluator<'_>,
    group: &Group,
    rows: &[&PublishedFigure],
    values: &[f64],
) -> Result<Vec<f64>> {
    let sets = group.sets(values);
    rows.iter()
        .map(|r| Ok((ev.predict(r, &sets)? / r.published).ln()))
        .collect()
}

fn fit_rows(
    ev: &mut Evaluator<'_>,
    group: &Group,
    rows: &[&PublishedFigure],
    start: &[f64],
) -> Result<Vec<f64>> {
    let bounds: Vec<Bounds> = group
        .params
        .iter()
        .map(|p| Bounds { lo: p.lo, hi: p.hi })
        .collect();
    least_squares(&bounds, start, |v| residuals(ev, group, rows, v))
        .map_err(|e| anyhow!("fit {}: {e}", group.name))
}

/// Fits every group of the kernel table to its fit rows of `rows`.
pub fn fit(rows: &[PublishedFigure], loo: bool, cli: &dyn CommandLine) -> Result<Vec<GroupFit>> {
    fit_groups(GROUPS, rows, loo, cli)
}

/// Fits every group of `groups` to its fit rows of `rows`.
pub fn fit_groups(
    groups: &'static [Group],
    rows: &[PublishedFigure],
    loo: bool,
    cli: &dyn CommandLine,
) -> Result<Vec<GroupFit>> {
    let mut ev = Evaluator::new(cli, Fitted::default());
    let mut out = Vec::new();
    for group in groups {
        let fit_rows_: Vec<&PublishedFigure> = rows
            .iter()
            .filter(|r| r.role == "fit" && group.has(r))
            .collect();
        if fit_rows_.is_empty() {
            bail!("fit {}: the table has no fit rows for it", group.name);
        }
        let stored = stored(group)?;
        // A term that is 0 today (an in-situ term not yet fitted) starts at a tenth of
        // its range: at 0 its row's log error is not finite.
        let start: Vec<f64> = stored
            .iter()
            .zip(group.params)
            .map(|(&v, p)| if v == 0.0 { p.lo.max(p.hi / 10.0) } else { v })
            .collect();
        let values = fit_rows(&mut ev, group, &fit_rows_, &start)?;
        let ss = |r: Vec<f64>| r.iter().map(|x| x * x).sum::<f64>();
        let cost_fitted = ss(residuals(&mut ev, group, &fit_rows_, &values)?);
        let cost_stored = ss(residuals(&mut ev, group, &fit_rows_, &stored)?);
        let loo_errs: Vec<(String, Option<f64>)> = if loo && fit_rows_.len() > group.params.len() {
            let bounds: Vec<Bounds> = group
                .params
                .iter()
                .map(|p| Bounds { lo: p.lo, hi: p.hi })
                .collect();
            let refits = leave_one_out(&bounds, &values, fit_rows_.len(), |x, subset| {
                let sub: Vec<&PublishedFigure> = subset.iter().map(|&i| fit_rows_[i]).collect();
                residuals(&mut ev, group, &sub, x)
            })
            .map_err(|e| anyhow!("leave-one-out of {}: {e}", group.name))?;
            fit_rows_
                .iter()
                .zip(&refits)
                .map(|(r, v)| {
                    Ok((
                        r.id.clone(),
                        Some(rel_error(ev.predict(r, &group.sets(v))?, r.published)),
                    ))
                })
                .collect::<Result<_>>()?
        } else {
            fit_rows_.iter().map(|r| (r.id.clone(), None)).collect()
        };
        out.push(GroupFit {
            group,
            values,
            stored,
            cost_fitted,
            cost_stored,
            loo: loo_errs,
        });
    }
    Ok(out)
}

/// The out-of-sample errors of `rows`: every check row's (priced with the stored
/// values) and every fit row's leave-one-out error (from `fits`), in log space, with
/// the row's kernel class and hardware.
pub fn held_out(
    rows: &[PublishedFigure],
    fits: &[GroupFit],
    cli: &dyn CommandLine,
) -> Result<Vec<Held>> {
    let mut ev = Evaluator::new(cli, Fitted::default());
    let mut out = Vec::new();
    for r in rows {
        let class = class_of(&r.id).ok_or_else(|| {
            anyhow!(
                "row {}: no kernel class for its id (add its prefix to spread_fit::CLASS_OF)",
                r.id
            )
        })?;
        let log_error = if r.role == "check" {
            Some((ev.predict(r, &[])? / r.published).ln())
        } else {
            fits.iter()
                .flat_map(|f| f.loo.iter())
                .find(|(id, _)| *id == r.id)
                .and_then(|(_, e)| *e)
                .map(|e| (1.0 + e).ln())
        };
        if let Some(log_error) = log_error {
            out.push(Held {
                id: r.id.clone(),
                hardware: ev.kernel_hardware(r)?,
                class,
                log_error,
                check: r.role == "check",
            });
        }
    }
    Ok(out)
}

/// The hardware file `path` among `docs`, read on first use, with `[cost]` and
/// `[provenance]` tables.
fn doc_for<'a>(
    docs: &'a mut Vec<(String, toml_edit::DocumentMut)>,
    path: &str,
) -> Result<&'a mut toml_edit::DocumentMut> {
    if !docs.iter().any(|(p, _)| p == path) {
        let doc: toml_edit::DocumentMut = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read {path}"))?
            .parse()
            .with_context(|| format!("{path} is not valid TOML"))?;
        docs.push((path.to_string(), doc));
    }
    let doc = &mut docs.iter_mut().find(|(p, _)| p == path).expect("loaded").1;
    for t in ["cost", "provenance"] {
        if !doc.contains_table(t) {
            doc[t] = toml_edit::table();
        }
    }
    Ok(doc)
}

/// Writes each group's values into the `[cost]` tables of its hardware files under
/// `dir`, and each architecture's class spreads into the `[cost.spread]` of its GPUs
/// (rebuilt whole: a class without rows loses its old value, the in-situ keys stay;
/// `None` leaves them as they are), with provenance; returns the files written.
pub fn write(
    dir: &str,
    fits: &[GroupFit],
    spreads: Option<&[ClassSpread]>,
    table: &str,
) -> Result<Vec<String>> {
    let mut docs: Vec<(String, toml_edit::DocumentMut)> = Vec::new();
    if let Some(spreads) = spreads {
        for (arch, gpus) in ARCHITECTURES {
            for hw in *gpus {
                let path = format!("{dir}/hardware/{hw}.toml");
                if !std::path::Path::new(&path).exists() {
                    continue;
                }
                let doc = doc_for(&mut docs, &path)?;
                // The in-situ spreads are a deployment's, not the kernel table's: kept.
                let mut t = toml_edit::Table::new();
                if let Some(old) = doc["cost"].get("spread").and_then(|s| s.as_table()) {
                    for (k, v) in old.iter().filter(|(k, _)| k.starts_with("in_situ.")) {
                        t[k] = v.clone();
                    }
                }
                let prov = doc["provenance"]
                    .as_table_mut()
                    .ok_or_else(|| anyhow!("{path}: [provenance] is not a table"))?;
                prov.retain(|k, _| {
                    !k.starts_with("cost.spread.") || k.starts_with("cost.spread.in_situ.")
                });
                for s in spreads.iter().filter(|s| s.architecture == *arch) {
                    t[s.class.key()] = toml_edit::value(round5(s.spread));
                    prov[&format!("cost.spread.{}", s.class.key())] =
                        toml_edit::value(s.provenance(table, hw));
                }
                doc["cost"]["spread"] = toml_edit::Item::Table(t);
            }
        }
    }
    for f in fits {
        let rows: Vec<&str> = f.loo.iter().map(|(id, _)| id.as_str()).collect();
        for (hw, fitted) in f.group.targets() {
            let path = format!("{dir}/hardware/{hw}.toml");
            let doc = doc_for(&mut docs, &path)?;
            for (param, v) in f.group.params.iter().zip(&f.values) {
                for key in std::iter::once(param.key).chain(param.also.iter().copied()) {
                    if hw == crate::report_fit::FIT_HARDWARE
                        && crate::report_fit::OWNED_COST_KEYS.contains(&key)
                    {
                        continue;
                    }
                    if !fitted && f.group.not_borrowed.contains(&key) {
                        continue;
                    }
                    doc["cost"][key] = toml_edit::value(round5(*v));
                    let prov = if fitted {
                        format!(
                            "fitted: {} to {table} rows {} (`twin validate published {table} --fit`)",
                            f.group.name,
                            rows.join(", ")
                        )
                    } else {
                        format!("assumed: {}", f.group.why_assumed)
                    };
                    doc["provenance"][&format!("cost.{key}")] = toml_edit::value(prov);
                }
            }
        }
    }
    let mut written = Vec::new();
    for (path, doc) in &docs {
        let tmp = format!("{path}.tmp");
        std::fs::write(&tmp, doc.to_string()).with_context(|| format!("cannot write {tmp}"))?;
        std::fs::rename(&tmp, path).with_context(|| format!("cannot replace {path}"))?;
        written.push(path.clone());
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_key_is_written_twice_into_one_file() {
        let mut seen: Vec<(&str, &str, &str)> = Vec::new();
        for g in GROUPS {
            for (hw, fitted) in g.targets() {
                for k in g.keys().filter(|k| fitted || !g.not_borrowed.contains(k)) {
                    if let Some(prev) = seen.iter().find(|(h, key, _)| *h == hw && *key == k) {
                        panic!(
                            "{hw} cost.{k} is written by both `{}` and `{}`",
                            prev.2, g.name
                        );
                    }
                    seen.push((hw, k, g.name));
                }
            }
        }
    }

    /// Rebuilding a GPU's `[cost.spread]` from the kernel table's classes keeps the
    /// in-situ spreads (and their provenance) a deployment put there, and drops a class
    /// spread with no rows.
    #[test]
    fn a_spread_rewrite_keeps_the_in_situ_keys() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("hardware")).unwrap();
        let (arch, gpus) = ARCHITECTURES[0];
        let path = dir.path().join(format!("hardware/{}.toml", gpus[0]));
        std::fs::write(
            &path,
            "[cost]\n\n[cost.spread]\ngemm = 0.5\n\"in_situ.moe\" = 0.2\n\n[provenance]\n\"cost.spread.gemm\" = \"old\"\n\"cost.spread.in_situ.moe\" = \"a trace\"\n",
        )
        .unwrap();
        let spreads = [ClassSpread {
            class: sim::cost::spread::Class::Attention,
            architecture: arch,
            rows: Vec::new(),
            rms: 0.1,
            spread: 0.125,
        }];
        write(dir.path().to_str().unwrap(), &[], Some(&spreads), "t").unwrap();
        let v: toml::Value = toml::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let s = &v["cost"]["spread"];
        assert_eq!(s["in_situ.moe"].as_float(), Some(0.2));
        assert_eq!(s["attention"].as_float(), Some(0.125));
        assert!(s.get("gemm").is_none(), "{s}");
        let prov = &v["provenance"];
        assert_eq!(prov["cost.spread.in_situ.moe"].as_str(), Some("a trace"));
        assert!(prov.get("cost.spread.gemm").is_none());
    }
}
