//! The scenario's `[limits]` (`Limits`) and their checks: everything that scales a run's work
//! or memory is bounded, and a scenario past a bound is refused when it is loaded, with
//! the value, the limit and the limit's name to raise. Trace limits are checked while
//! the trace is read (`workload::read_mooncake`), the event limit while the run goes.

use super::config::{check, check_num, ServingScenario};
use super::workload::WorkloadConfig;
use crate::validate::show;
use serde::{Deserialize, Serialize};
use spec::problem::Problem;

/// Bounds that keep every run finite in time and memory. Each is checked when the
/// scenario, its workload and its trace are loaded (`limits::problems`,
/// `read_mooncake`), and a run that reaches one says which and how to raise it. Raise
/// one in the scenario's `[limits]` table (or `--set limits.NAME=VALUE`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Limits {
    /// The run stops with an error after this many events (about a microsecond each:
    /// the default is some 20 minutes of work).
    #[serde(default = "d_max_events")]
    pub max_events: u64,
    /// Requests alive at once (queued, prefilling, decoding) beyond which arrivals drop.
    #[serde(default = "d_max_live")]
    pub max_live_requests: u64,
    /// Shortest step the simulator accepts from a cost model, seconds (guards against
    /// zero-cost steps freezing time).
    #[serde(default = "d_min_step")]
    pub min_step_s: f64,
    /// Gauges (queues, KV use) are sampled at this period.
    #[serde(default = "d_sample")]
    pub sample_interval_s: f64,
    /// Longest run, simulated seconds (`duration_s`): one day.
    #[serde(default = "d_max_duration")]
    pub max_duration_s: f64,
    /// Requests a workload may send over the run, expected: an open loop's rate times
    /// the duration, or a trace's records.
    #[serde(default = "d_max_requests")]
    pub max_requests: u64,
    /// Users or sessions kept at once: closed-loop concurrency, AgentX sessions plus
    /// sub-agents (a few hundred bytes each).
    #[serde(default = "d_max_sessions")]
    pub max_sessions: u64,
    /// GPUs of all pools together (each rank holds state).
    #[serde(default = "d_max_gpus")]
    pub max_gpus: u64,
    /// Records a trace may hold.
    #[serde(default = "d_max_trace_records")]
    pub max_trace_records: u64,
    /// Bytes of trace read, at most.
    #[serde(default = "d_max_trace_bytes")]
    pub max_trace_bytes: u64,
    /// Longest trace line, bytes.
    #[serde(default = "d_max_trace_line")]
    pub max_trace_line_bytes: u64,
}

fn d_max_events() -> u64 {
    1_000_000_000
}
fn d_max_live() -> u64 {
    1_000_000
}
fn d_min_step() -> f64 {
    1e-6
}
fn d_sample() -> f64 {
    1.0
}
fn d_max_duration() -> f64 {
    86_400.0
}
fn d_max_requests() -> u64 {
    100_000_000
}
fn d_max_sessions() -> u64 {
    1_000_000
}
fn d_max_gpus() -> u64 {
    65_536
}
fn d_max_trace_records() -> u64 {
    10_000_000
}
fn d_max_trace_bytes() -> u64 {
    2 << 30
}
fn d_max_trace_line() -> u64 {
    1 << 20
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_events: d_max_events(),
            max_live_requests: d_max_live(),
            min_step_s: d_min_step(),
            sample_interval_s: d_sample(),
            max_duration_s: d_max_duration(),
            max_requests: d_max_requests(),
            max_sessions: d_max_sessions(),
            max_gpus: d_max_gpus(),
            max_trace_records: d_max_trace_records(),
            max_trace_bytes: d_max_trace_bytes(),
            max_trace_line_bytes: d_max_trace_line(),
        }
    }
}

impl Limits {
    /// The problems with the run's own limits (events, live requests, step and sample
    /// periods), appended to `p`; the rest are `scenario_problems`'.
    pub(super) fn problems(&self, p: &mut Vec<Problem>) {
        check(p, self.max_events >= 1, "limits.max_events", "must be >= 1");
        check(
            p,
            self.max_live_requests >= 1,
            "limits.max_live_requests",
            "must be >= 1",
        );
        check_num(
            p,
            self.min_step_s,
            self.min_step_s >= 1e-9,
            "limits.min_step_s",
            "must be >= 1e-9",
        );
        check_num(
            p,
            self.sample_interval_s,
            self.sample_interval_s >= 1e-3,
            "limits.sample_interval_s",
            "must be >= 0.001",
        );
    }
}

/// "`what` = `value` exceeds limits.`name` = `limit`; ...": one problem, about the
/// limit to raise (`what` may name several fields).
fn over(
    what: &str,
    value: impl std::fmt::Display,
    name: &str,
    limit: impl std::fmt::Display,
) -> Problem {
    Problem::sentence(
        format!("limits.{name}"),
        format!("{what} = {value} exceeds limits.{name} = {limit} (raise limits.{name} in the scenario's [limits] table if you mean it)"),
    )
}

/// Problems with the scenario against its own limits and GPU budget.
pub(crate) fn scenario_problems(sc: &ServingScenario) -> Vec<Problem> {
    let l = &sc.limits;
    let mut p = Vec::new();
    for (name, v) in [
        ("max_events", l.max_events),
        ("max_live_requests", l.max_live_requests),
        ("max_requests", l.max_requests),
        ("max_sessions", l.max_sessions),
        ("max_gpus", l.max_gpus),
        ("max_trace_records", l.max_trace_records),
        ("max_trace_bytes", l.max_trace_bytes),
        ("max_trace_line_bytes", l.max_trace_line_bytes),
    ] {
        if v == 0 {
            p.push(Problem::new(format!("limits.{name}"), "must be >= 1"));
        }
    }
    if !(l.max_duration_s.is_finite() && l.max_duration_s > 0.0) {
        p.push(Problem::new(
            "limits.max_duration_s",
            format!("must be a finite number > 0, got {}", l.max_duration_s),
        ));
    } else if sc.duration_s.is_finite() && sc.duration_s > l.max_duration_s {
        p.push(over(
            "duration_s",
            show(sc.duration_s),
            "max_duration_s",
            show(l.max_duration_s),
        ));
    }
    let gpus = sc.gpus();
    if gpus > l.max_gpus {
        p.push(over("the pools' GPUs", gpus, "max_gpus", l.max_gpus));
    }
    if let Some(budget) = sc.serving.gpus {
        if budget == 0 {
            p.push(Problem::new("serving.gpus", "must be >= 1"));
        } else if gpus > budget {
            let pools: Vec<String> = sc
                .pools()
                .iter()
                .map(|(name, c)| {
                    format!(
                        "{name} {} x {} = {}",
                        c.instances,
                        c.layout().name(),
                        c.gpus()
                    )
                })
                .collect();
            p.push(Problem::new(
                "serving.gpus",
                format!(
                    "the deployment needs {gpus} GPUs ({}) but serving.gpus is {budget}; use fewer instances or smaller DEPs, or raise serving.gpus",
                    pools.join(", ")
                ),
            ));
        }
    }
    p
}

/// Problems with the workload's size against the scenario's limits: sessions kept at
/// once and requests expected over the run.
pub fn workload_problems(sc: &ServingScenario, wl: &WorkloadConfig) -> Vec<Problem> {
    let l = &sc.limits;
    let mut p = Vec::new();
    if let Some(c) = &wl.closed_loop {
        if c.concurrency as u64 > l.max_sessions {
            p.push(over(
                "closed_loop.concurrency",
                c.concurrency,
                "max_sessions",
                l.max_sessions,
            ));
        }
    }
    if let Some(a) = &wl.agentx {
        let sessions = a.sessions as u64 + a.max_subagents as u64;
        if sessions > l.max_sessions {
            p.push(over(
                "agentx.sessions + agentx.max_subagents",
                sessions,
                "max_sessions",
                l.max_sessions,
            ));
        }
    }
    if let Some(o) = &wl.open_loop {
        let expected = o.rate_per_s * sc.duration_s;
        if o.rate_per_s.is_finite() && sc.duration_s.is_finite() && expected > l.max_requests as f64
        {
            p.push(over(
                &format!(
                    "open_loop.rate_per_s x duration_s ({} x {} s, requests expected)",
                    show(o.rate_per_s),
                    show(sc.duration_s)
                ),
                format!("{expected:.3e}"),
                "max_requests",
                l.max_requests,
            ));
        }
    }
    if let Some(t) = &wl.trace {
        if let Some(m) = t.max_requests {
            if m > l.max_requests {
                p.push(over(
                    "trace.max_requests",
                    m,
                    "max_requests",
                    l.max_requests,
                ));
            }
        }
    }
    p
}

#[cfg(test)]
mod tests {
    use super::Limits;

    /// Every default limit is what docs/scenario-format.md's Limits section states.
    #[test]
    fn defaults_are_the_documented_ones() {
        let l = Limits::default();
        assert_eq!(l.max_duration_s, 86_400.0);
        assert_eq!(l.max_events, 1_000_000_000);
        assert_eq!(l.max_requests, 100_000_000);
        assert_eq!(l.max_sessions, 1_000_000);
        assert_eq!(l.max_live_requests, 1_000_000);
        assert_eq!(l.max_gpus, 65_536);
        assert_eq!(l.max_trace_records, 10_000_000);
        assert_eq!(l.max_trace_bytes, 2 << 30);
        assert_eq!(l.max_trace_line_bytes, 1 << 20);
    }
}
