//! vLLM `bench serve` results (saved with `--save-result --save-detailed`), so users
//! can check twin against their own deployments.
//!
//! Fields read (missing per-request lists are an error; the rest have defaults):
//! - `input_lens`, `output_lens`: per request, prompt and generated tokens;
//! - `ttfts`: per request, seconds to the first token;
//! - `itls`: per request, the gaps between its later tokens, seconds;
//! - `request_rate` (requests/s; `inf` or absent: all sent at once), `burstiness`
//!   (gamma shape of the gaps, default 1 = Poisson), `max_concurrency` (optional);
//! - `duration` (seconds), `completed`.
//!
//! Requests with no output or no first token (failed) are left out of the figures.

use crate::metrics::{Figures, Pcts};
use crate::LiveError;
use serde::Deserialize;
use sim::serving::workload::bench::{BenchClient, Client};
use sim::serving::WorkloadConfig;

mod held;
mod pauses;
pub mod steps;

/// The fields of a vLLM benchmark result twin reads.
#[derive(Debug, Clone, Deserialize)]
pub struct BenchResult {
    #[serde(default)]
    pub input_lens: Option<Vec<u64>>,
    #[serde(default)]
    pub output_lens: Option<Vec<u64>>,
    #[serde(default)]
    pub ttfts: Option<Vec<f64>>,
    #[serde(default)]
    pub itls: Option<Vec<Vec<f64>>>,
    /// Per request, when the client sent it (seconds on the client's clock; vLLM's
    /// newer layout).
    #[serde(default)]
    pub start_times: Option<Vec<f64>>,
    #[serde(default)]
    pub request_rate: Option<serde_json::Value>,
    #[serde(default)]
    pub burstiness: Option<f64>,
    #[serde(default)]
    pub max_concurrency: Option<u64>,
    #[serde(default)]
    pub duration: Option<f64>,
    #[serde(default)]
    pub completed: Option<u64>,
    /// The model the benchmark served (a Hugging Face id or a local path).
    #[serde(default)]
    pub model_id: Option<String>,
    /// The client's backend: `sglang` for SGLang's `bench_serving` (whose results are
    /// JSON lines, one run a line), else a vLLM `bench serve` endpoint type.
    #[serde(default)]
    pub backend: Option<String>,
    /// SGLang's server arguments, as its client saved them (`server_info`).
    #[serde(default)]
    pub server_info: Option<serde_json::Value>,
    /// The client's dataset (`random`, `sharegpt`, ...), where the file names it.
    #[serde(default)]
    pub dataset_name: Option<String>,
}

/// What an SGLang result says of the server that ran it (`server_info`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ServerInfo {
    pub version: Option<String>,
    pub chunked_prefill_size: Option<u64>,
    pub max_running_requests: Option<u64>,
    pub enable_mixed_chunk: Option<bool>,
    pub disable_overlap_schedule: Option<bool>,
    pub dp_size: Option<u64>,
    /// The server process's random seed (drawn at start when not given): two runs
    /// with the same one ran on the same server process.
    pub random_seed: Option<u64>,
    pub model_path: Option<String>,
    pub disable_radix_cache: Option<bool>,
    /// KV tokens the server could hold (`internal_states[0].memory_usage.token_capacity`).
    pub token_capacity: Option<u64>,
}

impl ServerInfo {
    fn of(v: &serde_json::Value) -> ServerInfo {
        let u = |k: &str| v.get(k).and_then(|x| x.as_u64());
        let b = |k: &str| v.get(k).and_then(|x| x.as_bool());
        ServerInfo {
            version: v
                .get("version")
                .and_then(|x| x.as_str())
                .map(str::to_string),
            chunked_prefill_size: u("chunked_prefill_size"),
            max_running_requests: u("max_running_requests"),
            enable_mixed_chunk: b("enable_mixed_chunk"),
            disable_overlap_schedule: b("disable_overlap_schedule"),
            dp_size: u("dp_size"),
            random_seed: u("random_seed"),
            model_path: v
                .get("model_path")
                .and_then(|x| x.as_str())
                .map(str::to_string),
            disable_radix_cache: b("disable_radix_cache"),
            token_capacity: v
                .pointer("/internal_states/0/memory_usage/token_capacity")
                .or_else(|| v.pointer("/memory_usage/token_capacity"))
                .and_then(|x| x.as_u64()),
        }
    }
}

/// One request of the benchmark.
#[derive(Debug, Clone, PartialEq)]
pub struct BenchRequest {
    /// Its place in the file's lists (failed requests keep theirs).
    pub index: usize,
    pub input: u64,
    pub output: u64,
    pub ttft_s: f64,
    pub itls_s: Vec<f64>,
    /// When the client sent it, seconds after the run's first send (when the file
    /// records `start_times`).
    pub sent_s: Option<f64>,
}

/// A parsed benchmark: its successful requests and how they were sent.
#[derive(Debug, Clone)]
pub struct Bench {
    pub requests: Vec<BenchRequest>,
    /// Requests per second (`None`: all at once).
    pub rate: Option<f64>,
    pub burstiness: f64,
    pub max_concurrency: Option<u64>,
    pub duration_s: f64,
    /// The model the file says it served.
    pub model_id: Option<String>,
    /// Requests of the file left out as failed (no output or no first token).
    pub failed: usize,
    /// Tokens per inter-token gap, on average over the successful requests: above 1
    /// when the server streamed several tokens per chunk (then ITL is compared per
    /// token: each gap divided by this). 1 when at least 95% of the gaps are there.
    pub tokens_per_gap: f64,
    /// Whose client sent the requests (`backend`).
    pub client: Client,
    /// The server's arguments, when the file records them (SGLang).
    pub server: Option<ServerInfo>,
    /// Runs in the file (SGLang appends one JSON line per run; the last is read).
    pub runs: usize,
    /// Every request's input tokens as the file lists them, failed ones included (the
    /// prompts the server was sent).
    pub sent_inputs: Vec<u64>,
    /// The client's dataset, where the file names it.
    pub dataset_name: Option<String>,
}

/// Share of the expected inter-token gaps (output - 1 per request) below which a
/// benchmark counts as streamed in chunks.
pub const CHUNKED_BELOW: f64 = 0.95;

/// Python's `json.dump` writes `Infinity` and `NaN` for non-finite floats; JSON has no
/// such tokens. Outside strings they become `null`.
fn python_json_to_json(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut in_str = false;
    let mut esc = false;
    let b = text.as_bytes();
    let mut i = 0;
    while i < b.len() {
        let c = b[i] as char;
        if in_str {
            out.push(c);
            if esc {
                esc = false;
            } else if c == '\\' {
                esc = true;
            } else if c == '"' {
                in_str = false;
            }
            i += 1;
            continue;
        }
        if c == '"' {
            in_str = true;
            out.push(c);
            i += 1;
            continue;
        }
        let rest = &text[i..];
        if let Some(tok) = ["-Infinity", "Infinity", "NaN"]
            .iter()
            .find(|t| rest.starts_with(**t))
        {
            // A rate of `Infinity` means "all at once"; the others carry no figure.
            out.push_str(if *tok == "Infinity" {
                "\"inf\""
            } else {
                "null"
            });
            i += tok.len();
            continue;
        }
        // Multi-byte UTF-8 outside strings cannot occur in valid JSON; copy bytes as is.
        let ch = rest.chars().next().unwrap_or(' ');
        out.push(ch);
        i += ch.len_utf8();
    }
    out
}

/// Each request's send, seconds after the run's first, from the file's `start_times`
/// when it lists one finite time per request.
fn sends(start_times: Option<Vec<f64>>, n: usize) -> Option<Vec<f64>> {
    let s = start_times.filter(|s| s.len() == n && s.iter().all(|x| x.is_finite()))?;
    let first = s.iter().copied().fold(f64::INFINITY, f64::min);
    Some(s.iter().map(|x| x - first).collect())
}

/// The run a result file holds, and how many it holds: SGLang's results are JSON
/// lines, one run a line, of which the last is read; vLLM's are one JSON object.
fn last_run(text: &str) -> (&str, usize) {
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let jsonl = lines.len() > 1 && lines.iter().all(|l| l.trim_start().starts_with('{'));
    if jsonl {
        (lines.last().copied().unwrap_or(""), lines.len())
    } else {
        (text, 1)
    }
}

/// A result's per-request lists, one entry per request sent.
struct Lists {
    inp: Vec<u64>,
    out: Vec<u64>,
    ttft: Vec<f64>,
    itl: Vec<Vec<f64>>,
}

impl Lists {
    /// Takes the per-request lists out of `r`: an error when one is missing or their
    /// lengths disagree (or there are none); `origin` names the file in errors.
    fn take(r: &mut BenchResult, origin: &str) -> Result<Lists, LiveError> {
        let missing: Vec<&str> = [
            ("input_lens", r.input_lens.is_none()),
            ("output_lens", r.output_lens.is_none()),
            ("ttfts", r.ttfts.is_none()),
            ("itls", r.itls.is_none()),
        ]
        .iter()
        .filter(|(_, m)| *m)
        .map(|(n, _)| *n)
        .collect();
        if !missing.is_empty() {
            return Err(LiveError::Bench(format!(
                "{origin}: no per-request data ({} missing): save the result with `vllm bench serve --save-result --save-detailed`",
                missing.join(", ")
            )));
        }
        let (inp, out, ttft, itl) = (
            r.input_lens.take().unwrap_or_default(),
            r.output_lens.take().unwrap_or_default(),
            r.ttfts.take().unwrap_or_default(),
            r.itls.take().unwrap_or_default(),
        );
        if [out.len(), ttft.len(), itl.len()]
            .iter()
            .any(|&n| n != inp.len())
            || inp.is_empty()
        {
            return Err(LiveError::Bench(format!(
                "{origin}: per-request lists disagree in length (input_lens {}, output_lens {}, ttfts {}, itls {})",
                inp.len(),
                out.len(),
                ttft.len(),
                itl.len()
            )));
        }
        Ok(Lists {
            inp,
            out,
            ttft,
            itl,
        })
    }
}

/// Output tokens per inter-token gap: above 1 when the server streamed in chunks
/// (fewer gaps than [`CHUNKED_BELOW`] of those expected), else 1.
fn tokens_per_gap(requests: &[BenchRequest]) -> f64 {
    let gaps: usize = requests.iter().map(|r| r.itls_s.len()).sum();
    let expected: u64 = requests.iter().map(|r| r.output - 1).sum();
    if gaps > 0 && (gaps as f64) < CHUNKED_BELOW * expected as f64 {
        expected as f64 / gaps as f64
    } else {
        1.0
    }
}

/// The request rate a result states (a number or a numeric string), where finite and
/// positive.
fn request_rate(rate: &Option<serde_json::Value>) -> Option<f64> {
    match rate {
        Some(serde_json::Value::Number(n)) => n.as_f64().filter(|x| x.is_finite() && *x > 0.0),
        Some(serde_json::Value::String(s)) => {
            s.parse::<f64>().ok().filter(|x| x.is_finite() && *x > 0.0)
        }
        _ => None,
    }
}

impl Bench {
    /// Parses a benchmark result; `origin` names it in errors.
    pub fn parse(text: &str, origin: &str) -> Result<Bench, LiveError> {
        let (one, runs) = last_run(text);
        let clean = python_json_to_json(one);
        let mut r: BenchResult = serde_json::from_str(&clean)
            .map_err(|e| LiveError::Bench(format!("{origin}: not a vLLM bench result: {e}")))?;
        let Lists {
            inp,
            out,
            ttft,
            itl,
        } = Lists::take(&mut r, origin)?;
        let sent = sends(r.start_times, inp.len());
        let requests: Vec<BenchRequest> = (0..inp.len())
            .filter(|&i| out[i] > 0 && ttft[i] > 0.0 && ttft[i].is_finite())
            .map(|i| BenchRequest {
                index: i,
                input: inp[i].max(1),
                output: out[i],
                ttft_s: ttft[i],
                itls_s: itl[i].clone(),
                sent_s: sent.as_ref().map(|s| s[i]),
            })
            .collect();
        if requests.is_empty() {
            return Err(LiveError::Bench(format!("{origin}: no successful request")));
        }
        let failed = inp.len() - requests.len();
        let tokens_per_gap = tokens_per_gap(&requests);
        let rate = request_rate(&r.request_rate);
        let duration_s = r
            .duration
            .filter(|d| d.is_finite() && *d > 0.0)
            .ok_or_else(|| {
                LiveError::Bench(format!(
                    "{origin}: `duration` (seconds) is missing or not positive"
                ))
            })?;
        Ok(Bench {
            requests,
            rate,
            burstiness: r
                .burstiness
                .filter(|b| b.is_finite() && *b > 0.0)
                .unwrap_or(1.0),
            max_concurrency: r.max_concurrency.filter(|&c| c > 0),
            duration_s,
            model_id: r.model_id.filter(|m| !m.trim().is_empty()),
            failed,
            tokens_per_gap,
            client: match r.backend.as_deref() {
                Some(b) if b.starts_with("sglang") => Client::Sglang,
                _ => Client::Vllm,
            },
            server: r.server_info.as_ref().map(ServerInfo::of),
            runs,
            sent_inputs: inp,
            dataset_name: r.dataset_name,
        })
    }

    /// What the figures leave out or change, said beside them.
    pub fn notes(&self) -> Vec<String> {
        let mut v = Vec::new();
        if self.runs > 1 {
            v.push(format!(
                "the file holds {} runs (JSON lines): the last is compared",
                self.runs
            ));
        }
        if self.failed > 0 {
            v.push(format!(
                "{} failed request(s) of the file (no output or no first token) left out of the measured figures",
                self.failed
            ));
        }
        if self.tokens_per_gap > 1.0 {
            v.push(format!(
                "the server streamed several tokens per chunk ({:.2} tokens per inter-token gap on average): measured ITL is per token, each gap divided by that",
                self.tokens_per_gap
            ));
        }
        v
    }

    /// Whether the file's `model_id` names `model` (a twin model name): the id's last
    /// path segment and the name, lowercased, one holding the other
    /// (`meta-llama/Llama-3.1-70B-Instruct` names `llama-3.1-70b`). `None` when the file
    /// names no model.
    pub fn names_model(&self, model: &str) -> Option<bool> {
        let id = self.model_id.as_ref()?;
        let id = id
            .trim_end_matches('/')
            .rsplit('/')
            .next()
            .unwrap_or(id)
            .to_lowercase();
        let m = model.to_lowercase();
        Some(id.contains(&m) || m.contains(&id))
    }

    /// The benchmark's figures (vLLM's definitions: tokens of the successful requests
    /// over the benchmark's duration; TPOT from the inter-token gaps).
    pub fn figures(&self) -> Figures {
        let d = self.duration_s;
        let ttft: Vec<f64> = self.requests.iter().map(|r| 1e3 * r.ttft_s).collect();
        let tpot: Vec<f64> = self
            .requests
            .iter()
            .filter(|r| r.output > 1)
            .map(|r| 1e3 * r.itls_s.iter().sum::<f64>() / (r.output - 1) as f64)
            .collect();
        let per_token = 1e3 / self.tokens_per_gap;
        let itl: Vec<f64> = self
            .requests
            .iter()
            .flat_map(|r| r.itls_s.iter().map(|x| per_token * x))
            .collect();
        let e2el: Vec<f64> = self
            .requests
            .iter()
            .map(|r| 1e3 * (r.ttft_s + r.itls_s.iter().sum::<f64>()))
            .collect();
        let out: u64 = self.requests.iter().map(|r| r.output).sum();
        let inp: u64 = self.requests.iter().map(|r| r.input).sum();
        Figures {
            measured_s: d,
            completed: self.requests.len() as u64,
            dropped: 0,
            request_throughput: self.requests.len() as f64 / d,
            output_throughput: out as f64 / d,
            token_throughput: (inp + out) as f64 / d,
            cached_tok_s: 0.0,
            uncached_tok_s: inp as f64 / d,
            ttft_ms: Pcts::of(ttft),
            tpot_ms: Pcts::of(tpot),
            itl_ms: Pcts::of(itl),
            e2el_ms: Pcts::of(e2el),
            goodput_fraction: 0.0,
            goodput_req_s: 0.0,
        }
    }

    /// The share of requests within `ttft_ms` and `tpot_ms` (a one-token answer has no
    /// TPOT) and their rate over the run: the benchmark's goodput under the scenario's
    /// SLO, as the simulator counts its own (`sim::serving::metrics`).
    pub fn goodput(&self, ttft_ms: f64, tpot_ms: f64) -> (f64, f64) {
        let good = self
            .requests
            .iter()
            .filter(|r| {
                let tpot = if r.output > 1 {
                    1e3 * r.itls_s.iter().sum::<f64>() / (r.output - 1) as f64
                } else {
                    0.0
                };
                1e3 * r.ttft_s <= ttft_ms && tpot <= tpot_ms
            })
            .count() as f64;
        let n = self.requests.len().max(1) as f64;
        (good / n, good / self.duration_s)
    }

    /// The workload the simulator replays: the benchmark's requests in the file's
    /// order with their lengths, sent as the client sent them
    /// (`sim::serving::workload::bench`): at times drawn from its rate and burstiness
    /// from the run's seed (the client's own draws are not in the file; `inf`: all at once),
    /// each waiting for a free slot while `max_concurrency` are in flight; the run
    /// ends with the last request. Returns the workload and what was assumed.
    /// `held`: per successful request, its leading tokens the server already holds
    /// (`held`; empty: none); `special_tokens`: what the model's tokenizer adds to each
    /// prompt, which the client did not count (the model's `prompt_special_tokens`).
    pub fn workload(&self, held: Vec<u32>, special_tokens: u32) -> (WorkloadConfig, Vec<String>) {
        let mut notes = Vec::new();
        let cap = self.max_concurrency.map(|c| c.min(u32::MAX as u64) as u32);
        let requests = self
            .requests
            .iter()
            .map(|r| [r.input, r.output].map(|x| x.min(u32::MAX as u64) as u32))
            .collect();
        let mut client =
            BenchClient::recorded(self.client, requests, cap, self.rate, self.burstiness);
        client.held = held;
        client.special_tokens = special_tokens;
        if special_tokens > 0 {
            notes.push(format!(
                "prompts: each recorded length and the {special_tokens} token{} the model's tokenizer adds (its beginning of text), which the client does not count",
                if special_tokens == 1 { "" } else { "s" }
            ));
        }
        match self.rate {
            Some(r) => notes.push(format!(
                "sends drawn at {r} requests/s (burstiness {}) from the run's seed; the client's own draws are not in the file",
                self.burstiness
            )),
            None => notes.push("request rate inf: every request due at t = 0".into()),
        }
        if let Some(c) = cap {
            notes.push(format!(
                "max_concurrency {c}: a request waits for a free slot; its TTFT runs from when it was sent"
            ));
        }
        (WorkloadConfig::bench_run("vllm-bench", client), notes)
    }
}

/// Figures of a simulated benchmark: latencies from the report; throughputs over the
/// time the simulation took to finish every request (the benchmark's duration).
pub fn sim_bench_figures(
    report: &sim::serving::Report,
    finish_s: f64,
    requests: &[BenchRequest],
) -> Figures {
    let mut f = crate::metrics::sim_figures(report);
    let d = finish_s.max(1e-9);
    let out: u64 = requests.iter().map(|r| r.output).sum();
    let inp: u64 = requests.iter().map(|r| r.input).sum();
    f.measured_s = d;
    f.request_throughput = report.requests_completed as f64 / d;
    f.output_throughput =
        out as f64 * report.requests_completed as f64 / requests.len().max(1) as f64 / d;
    f.token_throughput =
        (inp + out) as f64 * report.requests_completed as f64 / requests.len().max(1) as f64 / d;
    f
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_lines_are_runs_of_which_the_last_is_read() {
        assert_eq!(last_run("{\"a\": 1}\n{\"a\": 2}\n\n"), ("{\"a\": 2}", 2));
        let pretty = "{\n  \"a\": 1\n}\n";
        assert_eq!(last_run(pretty), (pretty, 1));
    }

    #[test]
    fn python_non_finite_floats_become_json() {
        let t = r#"{"request_rate": Infinity, "x": NaN, "s": "Infinity NaN", "y": -Infinity}"#;
        let v: serde_json::Value = serde_json::from_str(&python_json_to_json(t)).unwrap();
        assert_eq!(v["request_rate"], "inf");
        assert!(v["x"].is_null() && v["y"].is_null());
        assert_eq!(v["s"], "Infinity NaN");
    }

    /// A real `vllm bench serve --save-result --save-detailed` file of a newer vLLM
    /// (Llama-3.1-70B-Instruct, 8x H100 SXM, TP8, random 2047/128, 500 prompts,
    /// max_concurrency 50; provenance in tests/fixtures/bench/README.md). Its layout
    /// adds `endpoint_type`, `label`, `failed`, `request_goodput` (null),
    /// `start_times`, `generated_texts`, `errors`, `max_output_tokens_per_s` and
    /// `max_concurrent_requests`, and writes `request_rate` as the string "inf".
    /// The figures recomputed from its per-request lists must match the summary vLLM
    /// wrote beside them.
    #[test]
    fn real_vllm_bench_serve_file_parses_and_matches_its_summary() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../tests/fixtures/bench/llama31-70b-h100-tp8-c50.json"
        );
        let text = std::fs::read_to_string(path).unwrap();
        let b = Bench::parse(&text, path).unwrap();
        assert_eq!(b.requests.len(), 500);
        assert_eq!(b.rate, None);
        assert_eq!(b.max_concurrency, Some(50));
        assert_eq!(b.burstiness, 1.0);
        assert!((b.duration_s - 59.779716135933995).abs() < 1e-9);
        assert!(b
            .requests
            .iter()
            .all(|r| r.input == 2047 && r.output == 128));
        // 127 gaps after the first token, except one request whose stream merged two
        // tokens into one chunk (126 gaps): the file is kept as vLLM wrote it.
        let short: Vec<usize> = b
            .requests
            .iter()
            .map(|r| r.itls_s.len())
            .filter(|&n| n != 127)
            .collect();
        assert_eq!(short, vec![126]);
        let s: serde_json::Value = serde_json::from_str(&text).unwrap();
        let f = b.figures();
        let close = |ours: f64, key: &str| {
            let theirs = s[key].as_f64().unwrap();
            assert!(
                (ours - theirs).abs() <= 1e-6 * theirs.abs().max(1.0),
                "{key}: ours {ours}, vLLM's {theirs}"
            );
        };
        close(f.request_throughput, "request_throughput");
        close(f.output_throughput, "output_throughput");
        close(f.token_throughput, "total_token_throughput");
        close(f.ttft_ms.mean, "mean_ttft_ms");
        close(f.ttft_ms.p50, "median_ttft_ms");
        close(f.ttft_ms.p99, "p99_ttft_ms");
        close(f.tpot_ms.mean, "mean_tpot_ms");
        close(f.tpot_ms.p50, "median_tpot_ms");
        close(f.tpot_ms.p99, "p99_tpot_ms");
        close(f.itl_ms.mean, "mean_itl_ms");
        close(f.itl_ms.p50, "median_itl_ms");
        close(f.itl_ms.p99, "p99_itl_ms");
        close(f.e2el_ms.p50, "median_e2el_ms");
        close(f.e2el_ms.p99, "p99_e2el_ms");
    }
}

#[cfg(test)]
mod goodput_tests {
    use super::*;

    /// Goodput counts the requests within both bounds: from the same real file, a
    /// bound above every request keeps all of them, one below the fastest TTFT none,
    /// and a TTFT bound at the measured median about half.
    #[test]
    fn goodput_counts_requests_within_both_bounds() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../tests/fixtures/bench/llama31-70b-h100-tp8-c50.json"
        );
        let b = Bench::parse(&std::fs::read_to_string(path).unwrap(), path).unwrap();
        let (all, rate) = b.goodput(1e9, 1e9);
        assert_eq!(all, 1.0);
        assert!((rate - 500.0 / b.duration_s).abs() < 1e-9);
        assert_eq!(b.goodput(0.0, 1e9).0, 0.0);
        let median = b.figures().ttft_ms.p50;
        let half = b.goodput(median, 1e9).0;
        assert!((0.45..=0.55).contains(&half), "{half}");
        // A TPOT bound alone below every request's TPOT keeps none.
        assert_eq!(b.goodput(1e9, 1.0).0, 0.0);
    }
}

#[cfg(test)]
mod trust_tests {
    use super::*;

    /// Three requests: one failed (no output), two of 9 tokens whose 8 later tokens came
    /// in 2 chunks each (4 tokens per gap).
    const CHUNKED: &str = r#"{"model_id": "meta-llama/Llama-3.1-8B-Instruct", "duration": 10.0,
        "input_lens": [100, 100, 100], "output_lens": [9, 0, 9], "ttfts": [0.1, 0.0, 0.2],
        "itls": [[0.04, 0.08], [], [0.04, 0.04]], "completed": 2, "failed": 1}"#;

    #[test]
    fn failed_requests_are_counted_and_chunked_streams_compared_per_token() {
        let b = Bench::parse(CHUNKED, "x.json").unwrap();
        assert_eq!((b.requests.len(), b.failed), (2, 1));
        // 16 tokens after the first, in 4 gaps: 4 tokens per gap.
        assert_eq!(b.tokens_per_gap, 4.0);
        let f = b.figures();
        // Per-token ITL: 40, 80, 40, 40 ms over 4 tokens each -> 10, 20, 10, 10 ms.
        assert!((f.itl_ms.p50 - 10.0).abs() < 1e-9, "{:?}", f.itl_ms);
        // TPOT is unchanged by the chunking: (0.04 + 0.08) / 8 = 15 ms, 0.08 / 8 = 10 ms.
        assert!((f.tpot_ms.p90 - 15.0).abs() < 0.6, "{:?}", f.tpot_ms);
        let notes = b.notes().join("\n");
        assert!(notes.contains("1 failed request(s)"), "{notes}");
        assert!(notes.contains("4.00 tokens per inter-token gap"), "{notes}");
        assert_eq!(b.names_model("llama-3.1-8b"), Some(true));
        assert_eq!(b.names_model("deepseek-v4.1-flash"), Some(false));
    }

    #[test]
    fn a_full_stream_is_not_chunked_and_a_file_without_model_id_is_unchecked() {
        let text = CHUNKED
            .replace(r#""model_id": "meta-llama/Llama-3.1-8B-Instruct", "#, "")
            .replace("[[0.04, 0.08], [], [0.04, 0.04]]", "[[0.01,0.01,0.01,0.01,0.01,0.01,0.01,0.01], [], [0.01,0.01,0.01,0.01,0.01,0.01,0.01,0.01]]");
        let b = Bench::parse(&text, "x.json").unwrap();
        assert_eq!(b.tokens_per_gap, 1.0);
        assert_eq!(b.names_model("llama-3.1-8b"), None);
        assert!(b.notes().iter().all(|n| !n.contains("chunk")));
    }
}
