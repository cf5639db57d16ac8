//! What a run asks for, typed: the scenario, the seed and duration, the `--set`
//! overrides split once by the file each changes, what prices the steps, the trace and
//! the benchmark client. Every command builds one [`RunRequest`] (the clap structs once,
//! `plan`, `cost`, `live` and `validate` from their own arguments) and
//! [`resolve`](super::resolve) turns it into a checked run; a command that changes the
//! run (a `--decode-deps` split, a benchmark's client) changes typed values here.

use super::Set;
use anyhow::Result;

/// The scenario a run uses when none is named.
pub const DEFAULT_SCENARIO: &str = "gb300-nvl72-v4.1-flash-agentx";

/// The `--set` overrides of a run, parsed once and split by the file they change: the
/// first segment (`hardware.`, `model.`, `workload.`, `cost.`, `tco.`) is removed; the
/// rest change the scenario file itself.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Overrides {
    pub hardware: Vec<Set>,
    pub model: Vec<Set>,
    pub workload: Vec<Set>,
    pub cost: Vec<Set>,
    /// The TCO preset's (`--tco`), read by `cost`, `plan` and `simulate --tco`.
    pub tco: Vec<Set>,
    pub scenario: Vec<Set>,
}

impl Overrides {
    /// `--set` arguments, each `PATH=VALUE`, in the order given.
    pub fn parse(list: &[String]) -> Result<Overrides> {
        Ok(Overrides::of(Set::parse_all(list)?))
    }

    /// `--cohort K` (when given) as the first override of the scenario, then the
    /// `--set` arguments: a `--set fidelity.cohort` after it wins.
    pub fn with_cohort(cohort: Option<u32>, list: &[String]) -> Result<Overrides> {
        let cohort = cohort.map(|k| Set::typed("fidelity.cohort", i64::from(k).into(), "--cohort"));
        let sets = cohort
            .into_iter()
            .map(Ok)
            .chain(list.iter().map(|s| Set::parse(s)))
            .collect::<Result<Vec<Set>>>()?;
        Ok(Overrides::of(sets))
    }

    /// Parsed overrides, split by the file they change.
    pub fn of(sets: Vec<Set>) -> Overrides {
        let mut o = Overrides::default();
        for mut s in sets {
            let file = match s.path.first().map(String::as_str) {
                Some("hardware") => &mut o.hardware,
                Some("model") => &mut o.model,
                Some("workload") => &mut o.workload,
                Some("cost") => &mut o.cost,
                Some("tco") => &mut o.tco,
                _ => {
                    o.scenario.push(s);
                    continue;
                }
            };
            // `workload=NAME` (one segment) names the scenario's workload.
            if s.path.len() == 1 {
                o.scenario.push(s);
                continue;
            }
            s.path.remove(0);
            file.push(s);
        }
        o
    }

    /// More overrides after these, each file's after its own: as if given last.
    pub fn extend(&mut self, more: &[Set]) {
        let o = Overrides::of(more.to_vec());
        self.hardware.extend(o.hardware);
        self.model.extend(o.model);
        self.workload.extend(o.workload);
        self.cost.extend(o.cost);
        self.tco.extend(o.tco);
        self.scenario.extend(o.scenario);
    }

    /// The first override of a file not among `files` (`"hardware"`, `"model"`,
    /// `"workload"`, `"cost"`, `"tco"`; `"scenario"` for the scenario's own fields): a
    /// command that reads only some files refuses the others.
    pub fn first_outside(&self, files: &[&str]) -> Option<&Set> {
        [
            ("hardware", &self.hardware),
            ("model", &self.model),
            ("workload", &self.workload),
            ("cost", &self.cost),
            ("tco", &self.tco),
            ("scenario", &self.scenario),
        ]
        .into_iter()
        .filter(|(f, _)| !files.contains(f))
        .find_map(|(_, sets)| sets.first())
    }

    /// A field of the scenario file set in code (`serving.decode.dep` of a split), after
    /// every override given.
    pub fn set_scenario(&mut self, path: &str, value: impl Into<toml::Value>, from: &str) {
        self.scenario.push(Set::typed(path, value.into(), from));
    }
}

/// What prices the steps beside the hardware file (`--profile`, `--engine`,
/// `--physics-only`, `--allow-slow-profile`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pricing {
    pub profile: Option<String>,
    pub engine: Option<String>,
    pub physics_only: bool,
    pub allow_slow_profile: bool,
}

/// A request trace to replay: its path and, where its first line does not show it,
/// its format.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceSource {
    pub path: String,
    pub format: Option<crate::trace_formats::TraceFormat>,
}

/// One run, as asked: built once from the command line (or a command's own
/// arguments), then resolved by [`resolve`](super::resolve).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunRequest {
    /// Scenario name or path; [`DEFAULT_SCENARIO`] when `None`.
    pub scenario: Option<String>,
    pub seed: Option<u64>,
    /// Simulated seconds, warm-up included.
    pub duration: Option<f64>,
    pub sets: Overrides,
    pub pricing: Pricing,
    pub trace: Option<TraceSource>,
    /// A benchmark client's flags (`--bench`): its run replaces the workload.
    pub bench: Option<String>,
}

impl RunRequest {
    /// A request for `scenario` with `--set` overrides, everything else by default.
    pub fn of(scenario: &str, sets: &[String]) -> Result<RunRequest> {
        Ok(RunRequest {
            scenario: Some(scenario.to_string()),
            sets: Overrides::parse(sets)?,
            ..RunRequest::default()
        })
    }

    /// The scenario's name or path.
    pub fn scenario_name(&self) -> &str {
        self.scenario.as_deref().unwrap_or(DEFAULT_SCENARIO)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(sets: &[Set]) -> Vec<String> {
        sets.iter().map(|s| s.path.join(".")).collect()
    }

    #[test]
    fn overrides_split_by_file_and_keep_their_order() {
        let o = Overrides::parse(&[
            "hardware.hbm.bytes_per_s=1e12".into(),
            "serving.decode.dep=8".into(),
            "workload=poisson".into(),
            "workload.open_loop.rate_per_s=2".into(),
            "cost.moe.mem_eff=0.9".into(),
            "tco.usd_per_kwh=0.2".into(),
            "model.mtp.draft_tokens=1".into(),
            "seed=3".into(),
        ])
        .unwrap();
        assert_eq!(paths(&o.hardware), ["hbm.bytes_per_s"]);
        assert_eq!(paths(&o.model), ["mtp.draft_tokens"]);
        assert_eq!(paths(&o.workload), ["open_loop.rate_per_s"]);
        assert_eq!(paths(&o.cost), ["moe.mem_eff"]);
        assert_eq!(paths(&o.tco), ["usd_per_kwh"]);
        assert_eq!(
            paths(&o.scenario),
            ["serving.decode.dep", "workload", "seed"]
        );
    }

    #[test]
    fn a_field_set_in_code_is_typed_and_comes_last() {
        let mut o = Overrides::parse(&["serving.decode.dep=8".into()]).unwrap();
        o.set_scenario("serving.decode.dep", 16_i64, "--decode-deps");
        let last = o.scenario.last().unwrap();
        assert_eq!(last.path, ["serving", "decode", "dep"]);
        assert_eq!(last.value, toml::Value::Integer(16));
        assert_eq!(last.text, "serving.decode.dep=16");
        assert_eq!(last.from, "--decode-deps");
    }
}
