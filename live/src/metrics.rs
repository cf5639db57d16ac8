//! Figures of a run: from a live run's records, a simulation's report, or a vLLM
//! benchmark, in one shape so they compare line by line.
//!
//! Windows follow the simulator: requests that arrived after the warm-up and finished
//! by the end count for latencies and request throughput; tokens count when they were
//! processed inside (warm-up, end]: prefill tokens when their step ended, cached tokens
//! when their request's prefill finished, output tokens when emitted.

use crate::records::{RequestRecord, RunDir};
use serde::{Deserialize, Serialize};

/// Mean and percentiles of a latency, milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Pcts {
    pub mean: f64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
}

impl Pcts {
    /// Exact percentiles by linear interpolation between order statistics (numpy's
    /// default, as vLLM's benchmark reports them: `spec::stats::percentile`); zeros for
    /// no samples.
    pub fn of(mut v: Vec<f64>) -> Pcts {
        v.retain(|x| x.is_finite());
        if v.is_empty() {
            return Pcts::default();
        }
        v.sort_by(f64::total_cmp);
        let q = |f: f64| spec::stats::percentile_sorted(&v, f);
        Pcts {
            mean: v.iter().sum::<f64>() / v.len() as f64,
            p50: q(0.5),
            p90: q(0.9),
            p99: q(0.99),
        }
    }

    fn from_summary(s: &sim::serving::Summary) -> Pcts {
        Pcts {
            mean: s.mean,
            p50: s.p50,
            p90: s.p90,
            p99: s.p99,
        }
    }
}

/// The figures compared between a run and its prediction.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Figures {
    /// Seconds the figures cover.
    pub measured_s: f64,
    pub completed: u64,
    pub dropped: u64,
    pub request_throughput: f64,
    /// Output tokens per second.
    pub output_throughput: f64,
    /// Every token processed per second: cached and uncached input, output (the
    /// simulator's throughput, all ranks together).
    pub token_throughput: f64,
    pub cached_tok_s: f64,
    pub uncached_tok_s: f64,
    pub ttft_ms: Pcts,
    pub tpot_ms: Pcts,
    pub itl_ms: Pcts,
    pub e2el_ms: Pcts,
    pub goodput_fraction: f64,
    pub goodput_req_s: f64,
}

/// A live run's per-request figures over the window, gathered request by request.
#[derive(Default)]
struct Tally {
    ttft: Vec<f64>,
    tpot: Vec<f64>,
    itl: Vec<f64>,
    e2el: Vec<f64>,
    completed: u64,
    dropped: u64,
    good: u64,
    out_tok: u64,
    cached_tok: u64,
}

impl Tally {
    /// Adds request `r`'s tokens, gaps and latencies within the window `(w0, end]`.
    fn add(&mut self, r: &RequestRecord, (w0, end): (f64, f64), slo: &sim::serving::SloConfig) {
        let in_window = |t: f64| t > w0 && t <= end;
        let measured = r.arrival_s >= w0;
        self.out_tok += r.token_times_s.iter().filter(|&&t| in_window(t)).count() as u64;
        if let Some(t) = r.prefill_done_s.filter(|&t| in_window(t)) {
            let _ = t;
            self.cached_tok += r.cached_tokens as u64;
        }
        if r.dropped && measured && r.arrival_s <= end {
            self.dropped += 1;
        }
        if measured {
            let t = &r.token_times_s;
            for w in t.windows(2) {
                if w[1] > w[0] && in_window(w[1]) {
                    self.itl.push(1e3 * (w[1] - w[0]));
                }
            }
        }
        let done = r.completed && r.finish_s.is_some_and(|f| f <= end);
        if !(measured && done) {
            return;
        }
        self.completed += 1;
        let first = r.first_token_s.unwrap_or(r.arrival_s);
        let last = r.finish_s.unwrap_or(first);
        let ttft_ms = 1e3 * (first - r.arrival_s);
        self.ttft.push(ttft_ms);
        self.e2el.push(1e3 * (last - r.arrival_s));
        let mut tpot_ms = 0.0;
        if r.output_tokens > 1 {
            tpot_ms = 1e3 * (last - first) / (r.output_tokens - 1) as f64;
            self.tpot.push(tpot_ms);
        }
        if ttft_ms <= slo.ttft_ms && tpot_ms <= slo.tpot_ms {
            self.good += 1;
        }
    }
}

/// Figures of a live run, by the simulator's window rules.
pub fn live_figures(run: &RunDir) -> Figures {
    let info = &run.info;
    let (w0, end) = (info.warmup_s, info.duration_s);
    let measured_s = (end - w0).max(1e-9);
    let in_window = |t: f64| t > w0 && t <= end;
    let slo = &info.scenario.slo;
    let mut tally = Tally::default();
    for r in &run.requests {
        tally.add(r, (w0, end), slo);
    }
    let Tally {
        ttft,
        tpot,
        itl,
        e2el,
        completed,
        dropped,
        good,
        out_tok,
        cached_tok,
    } = tally;
    let uncached: u64 = run
        .steps
        .iter()
        .filter(|s| in_window(s.end_s))
        .map(|s| s.prefill_tokens())
        .sum();
    Figures {
        measured_s,
        completed,
        dropped,
        request_throughput: completed as f64 / measured_s,
        output_throughput: out_tok as f64 / measured_s,
        token_throughput: (out_tok + uncached + cached_tok) as f64 / measured_s,
        cached_tok_s: cached_tok as f64 / measured_s,
        uncached_tok_s: uncached as f64 / measured_s,
        ttft_ms: Pcts::of(ttft),
        tpot_ms: Pcts::of(tpot),
        itl_ms: Pcts::of(itl),
        e2el_ms: Pcts::of(e2el),
        goodput_fraction: if completed > 0 {
            good as f64 / completed as f64
        } else {
            0.0
        },
        goodput_req_s: good as f64 / measured_s,
    }
}

/// Figures of a simulation report (its per-GPU throughputs times its GPUs).
pub fn sim_figures(r: &sim::serving::Report) -> Figures {
    let g = r.gpus.max(1) as f64;
    let t = &r.throughput_tok_s_per_gpu;
    Figures {
        measured_s: r.measured_s,
        completed: r.requests_completed,
        dropped: r.requests_dropped,
        request_throughput: r.requests_per_s,
        output_throughput: t.output * g,
        token_throughput: t.total * g,
        cached_tok_s: t.cached_input * g,
        uncached_tok_s: t.uncached_input * g,
        ttft_ms: Pcts::from_summary(&r.ttft_ms),
        tpot_ms: Pcts::from_summary(&r.tpot_ms),
        itl_ms: Pcts::from_summary(&r.itl_ms),
        e2el_ms: Pcts::from_summary(&r.e2e_ms),
        goodput_fraction: r.goodput.fraction,
        goodput_req_s: r.goodput.requests_per_s,
    }
}

/// The `twin` object of `result.json`: the figures as the simulator counts them, step,
/// MTP and KV-transfer statistics, preemptions and the load's bounds.
fn twin_json(run: &RunDir, f: &Figures) -> serde_json::Value {
    let steps = &run.steps;
    let mtp_rows: usize = steps
        .iter()
        .flat_map(|s| &s.ranks)
        .map(|r| r.decode.len())
        .sum();
    let mtp_acc: u64 = steps
        .iter()
        .flat_map(|s| &s.ranks)
        .flat_map(|r| &r.accepted)
        .map(|&a| a as u64)
        .sum();
    let transfers: Vec<(u64, f64)> = run
        .requests
        .iter()
        .filter_map(|r| r.transfer_s.map(|t| (r.transfer_bytes, t[1] - t[0])))
        .collect();
    let tb: u64 = transfers.iter().map(|t| t.0).sum();
    let ts: f64 = transfers.iter().map(|t| t.1).sum();
    serde_json::json!({
        "note": "output_throughput and total_token_throughput follow vLLM (tokens of completed requests per second of the window); twin.figures counts tokens processed in the window as the simulator does",
        "figures": f,
        "steps": steps.len(),
        "step_ms_mean": if steps.is_empty() { 0.0 } else { steps.iter().map(|s| s.step_ms).sum::<f64>() / steps.len() as f64 },
        "mtp": {
            "rule": run.info.mtp_rule,
            "draft_tokens": run.info.draft_tokens,
            "accepted_per_step": if mtp_rows > 0 { mtp_acc as f64 / mtp_rows as f64 } else { 0.0 },
        },
        "kv_transfer": {
            "transfers": transfers.len(),
            "bytes": tb,
            "measured_bytes_per_s": if ts > 0.0 { tb as f64 / ts } else { 0.0 },
        },
        "preemptions": run.requests.iter().map(|r| r.preemptions as u64).sum::<u64>(),
        "load_start": run.info.load_start,
        "load_end": run.info.load_end,
    })
}

/// `result.json`: vLLM `bench serve` key names for the run's figures, then twin's own.
pub fn result_json(run: &RunDir, f: &Figures) -> serde_json::Value {
    let completed: Vec<_> = run
        .requests
        .iter()
        .filter(|r| {
            r.completed
                && r.arrival_s >= run.info.warmup_s
                && r.finish_s.is_some_and(|t| t <= run.info.duration_s)
        })
        .collect();
    let input: u64 = completed.iter().map(|r| r.input_tokens as u64).sum();
    let output: u64 = completed.iter().map(|r| r.output_tokens as u64).sum();
    let mut m = serde_json::Map::new();
    let mut put = |k: &str, v: serde_json::Value| {
        m.insert(k.to_string(), v);
    };
    put("duration", f.measured_s.into());
    put("completed", f.completed.into());
    put("total_input_tokens", input.into());
    put("total_output_tokens", output.into());
    put("request_throughput", f.request_throughput.into());
    put("output_throughput", (output as f64 / f.measured_s).into());
    put(
        "total_token_throughput",
        ((input + output) as f64 / f.measured_s).into(),
    );
    for (name, p) in [
        ("ttft", f.ttft_ms),
        ("tpot", f.tpot_ms),
        ("itl", f.itl_ms),
        ("e2el", f.e2el_ms),
    ] {
        put(&format!("mean_{name}_ms"), p.mean.into());
        put(&format!("median_{name}_ms"), p.p50.into());
        put(&format!("p90_{name}_ms"), p.p90.into());
        put(&format!("p99_{name}_ms"), p.p99.into());
    }
    put("twin", twin_json(run, f));
    serde_json::Value::Object(m)
}
