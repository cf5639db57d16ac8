//! The search space and its candidates, in one fixed order.

use super::{Candidate, PlanError, PoolChoice, Sizing};
use crate::serving::{Mode, ServingScenario};
use serde::{Deserialize, Serialize};
use spec::problem::Problem;

/// What `twin plan` tries. Every list is an axis of the grid; defaults cover the
/// reference rack's neighbourhood (`--space FILE` overrides any of them).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SearchSpace {
    /// Serving modes: `disaggregated` and/or `aggregated`.
    #[serde(default = "d_modes")]
    pub modes: Vec<Mode>,
    /// Prefill: DEP size of one instance.
    #[serde(default = "d_prefill_deps")]
    pub prefill_deps: Vec<u32>,
    /// Prefill: tensor-parallel instances of this many GPUs (DEP1), beside the DEP ones.
    #[serde(default)]
    pub prefill_tps: Vec<u32>,
    /// Prefill (and aggregated): token budget per rank per step.
    #[serde(default = "d_chunks")]
    pub prefill_chunks: Vec<u32>,
    /// Decode: DEP size of one group.
    #[serde(default = "d_decode_deps")]
    pub decode_deps: Vec<u32>,
    /// Decode: tensor-parallel replicas of this many GPUs (DEP1), beside the DEP groups.
    #[serde(default)]
    pub decode_tps: Vec<u32>,
    /// Decode: number of groups.
    #[serde(default = "d_groups")]
    pub decode_groups: Vec<u32>,
    /// Decode (and aggregated): most requests per rank in a step.
    #[serde(default = "d_caps")]
    pub decode_batch_caps: Vec<u32>,
    /// Aggregated: DEP size of one instance.
    #[serde(default = "d_agg_deps")]
    pub aggregated_deps: Vec<u32>,
    /// Aggregated: tensor-parallel instances of this many GPUs (DEP1).
    #[serde(default)]
    pub aggregated_tps: Vec<u32>,
    /// MTP draft tokens (empty: the scenario's).
    #[serde(default)]
    pub mtp_draft_tokens: Vec<u32>,
    /// Redundant experts per instance, both pools.
    #[serde(default = "d_redundant")]
    pub redundant_experts: Vec<u32>,
    /// Hardware of the prefill pool (empty: the scenario's).
    #[serde(default)]
    pub prefill_hardware: Vec<String>,
    /// Hardware of the decode (or aggregated) pool (empty: the scenario's).
    #[serde(default)]
    pub decode_hardware: Vec<String>,
    /// Most candidates simulated: the screen's best on the objective.
    #[serde(default = "d_max_sim")]
    pub max_simulations: u32,
    /// The screen rejects a candidate on an SLO only when its estimate misses the SLO
    /// by more than this factor (the estimates are steady-state means).
    #[serde(default = "d_slack")]
    pub screen_slack: f64,
    /// Most GPUs a candidate may use (a target rate's sizing stops here; a budget above
    /// it is refused).
    #[serde(default = "d_max_gpus")]
    pub max_gpus: u64,
    /// Sizing for a target rate: prefill (and aggregated) pools get the fewest
    /// instances that keep their estimated utilisation at or below this.
    #[serde(default = "d_target_util")]
    pub target_utilisation: f64,
}

fn d_modes() -> Vec<Mode> {
    vec![Mode::Disaggregated, Mode::Aggregated]
}
fn d_prefill_deps() -> Vec<u32> {
    vec![2, 4]
}
fn d_chunks() -> Vec<u32> {
    vec![8192]
}
fn d_decode_deps() -> Vec<u32> {
    vec![8, 16, 24, 32, 48, 64]
}
fn d_groups() -> Vec<u32> {
    vec![1, 2]
}
fn d_caps() -> Vec<u32> {
    vec![64, 128, 256]
}
fn d_agg_deps() -> Vec<u32> {
    vec![8, 16, 24]
}
fn d_redundant() -> Vec<u32> {
    vec![0]
}
fn d_max_sim() -> u32 {
    12
}
fn d_slack() -> f64 {
    1.5
}
fn d_max_gpus() -> u64 {
    1152
}
fn d_target_util() -> f64 {
    0.8
}

impl Default for SearchSpace {
    fn default() -> Self {
        serde_json::from_str("{}").expect("every field has a default")
    }
}

/// The tensor-parallel sizes a dense model's replicas take by default (one node's GPUs:
/// its DEP ranks would each hold all of it), in `plan`'s space and `sweep`'s grid.
pub const DENSE_TPS: [u32; 4] = [1, 2, 4, 8];

impl SearchSpace {
    /// The default space for a dense model: tensor-parallel replicas of 1, 2, 4 and 8
    /// GPUs in every pool instead of DEP groups (a dense model's DEP ranks would each
    /// hold all its weights: only its smallest fit a GPU so); the other axes as
    /// [`SearchSpace::default`].
    pub fn dense_default() -> Self {
        let tps = DENSE_TPS.to_vec();
        SearchSpace {
            prefill_deps: Vec::new(),
            decode_deps: Vec::new(),
            aggregated_deps: Vec::new(),
            prefill_tps: tps.clone(),
            decode_tps: tps.clone(),
            aggregated_tps: tps,
            ..SearchSpace::default()
        }
    }

    /// Fills the hardware and MTP axes left empty from `base`.
    pub fn resolved(&self, base: &ServingScenario, model_mtp: Option<u32>) -> SearchSpace {
        let mut s = self.clone();
        if s.prefill_hardware.is_empty() {
            s.prefill_hardware = vec![base.hardware.clone()];
        }
        if s.decode_hardware.is_empty() {
            s.decode_hardware = vec![base.hardware.clone()];
        }
        if s.mtp_draft_tokens.is_empty() {
            s.mtp_draft_tokens = vec![base.serving.mtp.draft_tokens.or(model_mtp).unwrap_or(0)];
        }
        s
    }

    /// The axes the modes need that are empty, and bad scalars, as one message.
    fn problems(&self) -> Vec<Problem> {
        // `sentence` names its field (`field`) itself.
        self.axis_checks()
            .into_iter()
            .chain(self.scalar_checks())
            .filter(|(ok, _, _)| !ok)
            .map(|(_, field, sentence)| Problem::sentence(field, sentence))
            .collect()
    }

    /// Whether each axis the modes need has values: (ok, field, the sentence if not).
    fn axis_checks(&self) -> Vec<(bool, &'static str, &'static str)> {
        let disagg = self.modes.contains(&Mode::Disaggregated);
        let agg = self.modes.contains(&Mode::Aggregated);
        let planned = |m: &Mode| matches!(m, Mode::Disaggregated | Mode::Aggregated);
        let mut checks = vec![
            (!self.modes.is_empty(), "modes", "modes is empty"),
            (
                self.modes.iter().all(planned),
                "modes",
                "modes: only disaggregated and aggregated are planned",
            ),
        ];
        if disagg {
            checks.extend([
                (
                    !(self.prefill_deps.is_empty() && self.prefill_tps.is_empty()),
                    "prefill_deps",
                    "prefill_deps is empty (and so is prefill_tps)",
                ),
                (
                    !(self.decode_deps.is_empty() && self.decode_tps.is_empty()),
                    "decode_deps",
                    "decode_deps is empty (and so is decode_tps)",
                ),
                (
                    !self.decode_groups.is_empty(),
                    "decode_groups",
                    "decode_groups is empty",
                ),
                (
                    !self.prefill_hardware.is_empty(),
                    "prefill_hardware",
                    "prefill_hardware is empty",
                ),
            ]);
        }
        if agg {
            checks.push((
                !(self.aggregated_deps.is_empty() && self.aggregated_tps.is_empty()),
                "aggregated_deps",
                "aggregated_deps is empty (and so is aggregated_tps)",
            ));
        }
        checks.extend(self.nonempty_checks());
        checks
    }

    /// Whether each axis every mode needs has values: (ok, field, the sentence if not).
    fn nonempty_checks(&self) -> [(bool, &'static str, &'static str); 5] {
        let nonempty = [
            (
                self.prefill_chunks.is_empty(),
                "prefill_chunks",
                "prefill_chunks is empty",
            ),
            (
                self.decode_batch_caps.is_empty(),
                "decode_batch_caps",
                "decode_batch_caps is empty",
            ),
            (
                self.mtp_draft_tokens.is_empty(),
                "mtp_draft_tokens",
                "mtp_draft_tokens is empty",
            ),
            (
                self.redundant_experts.is_empty(),
                "redundant_experts",
                "redundant_experts is empty",
            ),
            (
                self.decode_hardware.is_empty(),
                "decode_hardware",
                "decode_hardware is empty",
            ),
        ];
        nonempty.map(|(empty, field, sentence)| (!empty, field, sentence))
    }

    /// Whether each size and scalar is in range: (ok, field, the sentence if not).
    fn scalar_checks(&self) -> [(bool, &'static str, &'static str); 5] {
        let sizes = [
            &self.prefill_deps,
            &self.decode_deps,
            &self.decode_groups,
            &self.aggregated_deps,
            &self.prefill_tps,
            &self.decode_tps,
            &self.aggregated_tps,
            &self.prefill_chunks,
            &self.decode_batch_caps,
        ];
        [
            (
                !sizes.iter().any(|v| v.contains(&0)),
                "",
                "DEP and TP sizes, groups, chunks and batch caps must be >= 1",
            ),
            (
                self.max_simulations >= 1,
                "max_simulations",
                "max_simulations must be >= 1",
            ),
            (
                self.screen_slack.is_finite() && self.screen_slack >= 1.0,
                "screen_slack",
                "screen_slack must be >= 1",
            ),
            (
                self.target_utilisation > 0.0 && self.target_utilisation < 1.0,
                "target_utilisation",
                "target_utilisation must be in (0, 1)",
            ),
            (self.max_gpus >= 1, "max_gpus", "max_gpus must be >= 1"),
        ]
    }
}

/// The (DEP, TP) layouts of one pool: its DEP sizes, then its TP sizes (on DEP1).
fn layouts(deps: &[u32], tps: &[u32]) -> Vec<(u32, u32)> {
    deps.iter()
        .map(|&d| (d, 1))
        .chain(tps.iter().map(|&t| (1, t)))
        .collect()
}

/// An instance count, saturating.
fn instances(n: u64) -> u32 {
    n.min(u32::MAX as u64) as u32
}

/// Every candidate of `space` (resolved) for `sizing`, in a fixed order. With a GPU
/// budget the prefill pool (or the aggregated pool) takes every GPU the decode pool
/// leaves, in whole instances; for a target rate the pools the screen sizes start at
/// one instance. `load_scale` is the load every candidate carries (the rate curve's
/// peak with a budget).
pub fn enumerate(
    space: &SearchSpace,
    sizing: Sizing,
    load_scale: f64,
) -> Result<Vec<Candidate>, PlanError> {
    let p = space.problems();
    if !p.is_empty() {
        let lines: Vec<String> = p.iter().map(Problem::to_string).collect();
        return Err(PlanError::EmptySpace(lines.join("; ")));
    }
    let budget = match sizing {
        Sizing::Gpus(n) => Some(n),
        _ => None,
    };
    let mut out = Vec::new();
    for &mode in &space.modes {
        for &mtp in &space.mtp_draft_tokens {
            for &r in &space.redundant_experts {
                for dhw in &space.decode_hardware {
                    for &cap in &space.decode_batch_caps {
                        for &chunk in &space.prefill_chunks {
                            let pool =
                                |hw: &str, instances: u32, (dep, tp): (u32, u32)| PoolChoice {
                                    hardware: hw.to_string(),
                                    instances,
                                    dep,
                                    tp,
                                    redundant_experts: r,
                                    max_batch_per_rank: cap,
                                    chunk_tokens_per_rank: chunk,
                                };
                            let cand = |prefill, decode| Candidate {
                                mode,
                                prefill,
                                decode,
                                mtp_draft_tokens: mtp,
                                load_scale,
                            };
                            if mode == Mode::Aggregated {
                                for l in layouts(&space.aggregated_deps, &space.aggregated_tps) {
                                    let per = l.0 as u64 * l.1 as u64;
                                    let n = budget.map_or(1, |b| instances(b / per));
                                    out.push(cand(None, pool(dhw, n, l)));
                                }
                                continue;
                            }
                            let prefill_layouts = layouts(&space.prefill_deps, &space.prefill_tps);
                            for dl in layouts(&space.decode_deps, &space.decode_tps) {
                                for &groups in &space.decode_groups {
                                    for phw in &space.prefill_hardware {
                                        for &pl in &prefill_layouts {
                                            let dg = dl.0 as u64 * dl.1 as u64 * groups as u64;
                                            let per = pl.0 as u64 * pl.1 as u64;
                                            let n = budget.map_or(1, |b| {
                                                instances(b.saturating_sub(dg) / per)
                                            });
                                            out.push(cand(
                                                Some(pool(phw, n, pl)),
                                                pool(dhw, groups, dl),
                                            ));
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    if out.is_empty() {
        return Err(PlanError::EmptySpace("no candidate in the grid".into()));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn space() -> SearchSpace {
        SearchSpace {
            prefill_hardware: vec!["gb300".into()],
            decode_hardware: vec!["gb300".into()],
            mtp_draft_tokens: vec![3],
            ..SearchSpace::default()
        }
    }

    /// Defaults: disaggregated 6 decode DEPs x 2 group counts x 2 prefill DEPs x 3
    /// caps = 72, aggregated 3 DEPs x 3 caps = 9.
    #[test]
    fn default_grid_size_and_budget_fill() {
        let c = enumerate(&space(), Sizing::Gpus(72), 1.0).unwrap();
        assert_eq!(c.len(), 81);
        let dep32 = c
            .iter()
            .find(|c| {
                c.decode.dep == 32
                    && c.decode.instances == 1
                    && c.prefill.as_ref().unwrap().dep == 2
            })
            .unwrap();
        // 72 - 32 = 40 GPUs of prefill: 20 DEP2 instances.
        assert_eq!(dep32.prefill.as_ref().unwrap().instances, 20);
        assert_eq!(dep32.gpus(), 72);
        let agg = c
            .iter()
            .find(|c| c.mode == Mode::Aggregated && c.decode.dep == 16)
            .unwrap();
        assert_eq!((agg.decode.instances, agg.gpus()), (4, 64));
        // The order is fixed, keys differ.
        assert_eq!(c, enumerate(&space(), Sizing::Gpus(72), 1.0).unwrap());
        let mut keys: Vec<String> = c.iter().map(|c| c.key()).collect();
        keys.sort();
        keys.dedup();
        assert_eq!(keys.len(), 81);
    }

    /// TP axes add candidates beside the DEP ones: 2 decode TPs x 2 group counts x 2
    /// prefill DEPs x 3 caps = 24 more. A TP8 decode replica on a 72-GPU budget leaves
    /// 64 GPUs: 32 DEP2 prefill instances; two replicas leave 56: 28.
    #[test]
    fn tensor_parallel_axes_add_candidates() {
        let mut s = space();
        s.decode_tps = vec![4, 8];
        let c = enumerate(&s, Sizing::Gpus(72), 1.0).unwrap();
        assert_eq!(c.len(), 81 + 24);
        let tp8 = |groups: u32| {
            c.iter()
                .find(|c| {
                    c.decode.tp == 8
                        && c.decode.instances == groups
                        && c.prefill.as_ref().unwrap().dep == 2
                })
                .unwrap()
        };
        assert_eq!((tp8(1).decode.dep, tp8(1).decode.gpus()), (1, 8));
        assert_eq!(tp8(1).prefill.as_ref().unwrap().instances, 32);
        assert_eq!(tp8(2).prefill.as_ref().unwrap().instances, 28);
        assert_eq!(tp8(1).gpus(), 72);
        assert!(
            tp8(1).label().contains("1xTP8 gb300 b"),
            "{}",
            tp8(1).label()
        );
        // A candidate without TP serialises as before (its key is unchanged).
        let dep = c.iter().find(|c| c.decode.tp == 1).unwrap();
        assert!(!serde_json::to_string(dep).unwrap().contains("\"tp\""));
        s.decode_tps = vec![0];
        assert!(enumerate(&s, Sizing::Gpus(72), 1.0).is_err());
    }

    #[test]
    fn empty_axes_are_named() {
        let mut s = space();
        s.decode_deps.clear();
        s.decode_batch_caps.clear();
        let e = enumerate(&s, Sizing::Gpus(72), 1.0)
            .unwrap_err()
            .to_string();
        assert!(e.contains("empty search space") && e.contains("decode_deps is empty"));
        assert!(e.contains("decode_batch_caps is empty"), "{e}");
        s = space();
        s.modes = vec![Mode::Aggregated];
        s.aggregated_deps.clear();
        assert!(enumerate(&s, Sizing::Gpus(72), 1.0).is_err());
    }
}
