//! A benchmark client as a workload: the requests a `vllm bench serve`, SGLang
//! `bench_serving` or `aiperf` run sends, as it sends them, so a prediction is of the
//! run exactly as the user measured it (`twin simulate --bench`, `twin validate
//! bench`).
//!
//! A client run is a fixed list of prompts (`num_prompts`), each with its input and
//! output length drawn as the client's random dataset draws them, sent in order: at
//! the times of the arrival process (`request_rate` with gamma gaps of shape
//! `burstiness`; none: all at once), each waiting for a free slot when
//! `max_concurrency` requests are in flight. Every request counts (no warm-up), TTFT
//! runs from the moment a request is sent (after its slot was free, as the clients
//! time it), and the run ends with the last request (`duration_s` only bounds it).
//! It is the workload's `[bench]` table.
//!
//! The clients' own draws (NumPy's) cannot be reproduced; twin draws the same
//! distributions from the run's `workload` stream. A recorded run (`twin validate
//! bench`) gives its requests' lengths in `requests` instead.

use super::{gamma, normal};
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use spec::problem::Problem;

/// Which client's semantics the lengths follow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Client {
    /// `vllm bench serve --dataset-name random`: lengths uniform over
    /// `[floor(len (1 - r)), ceil(len (1 + r))]`, `r` = `--random-range-ratio`.
    Vllm,
    /// SGLang `bench_serving --dataset-name random`: lengths uniform over
    /// `[max(floor(len r), 1), len]`.
    Sglang,
    /// `aiperf`: synthetic lengths normal with a mean and a standard deviation.
    Aiperf,
}

/// One benchmark run's load, as its command line gave it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BenchClient {
    pub client: Client,
    pub num_prompts: u64,
    /// Most requests in flight (`None`: no limit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_concurrency: Option<u32>,
    /// Requests per second (`None`: `inf`, every request sent at once).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_rate: Option<f64>,
    /// Shape of the gamma-distributed gaps (1: Poisson).
    #[serde(default = "one_f64")]
    pub burstiness: f64,
    pub input_len: u32,
    pub output_len: u32,
    /// vLLM and SGLang: `--random-range-ratio`.
    #[serde(default)]
    pub range_ratio: f64,
    /// aiperf: standard deviations of the lengths.
    #[serde(default)]
    pub input_stddev: f64,
    #[serde(default)]
    pub output_stddev: f64,
    /// Tokens every prompt starts with (vLLM `--random-prefix-len`), one shared prefix.
    #[serde(default)]
    pub prefix_len: u32,
    /// A recorded run's requests, `[input, output]` tokens each in sending order: used
    /// instead of drawing `num_prompts` lengths.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub requests: Vec<[u32; 2]>,
    /// Per recorded request, its leading tokens the server already holds when it
    /// arrives: sent before by the client's warm-up or by an earlier run on the same
    /// server that kept its prefix cache (`twin validate bench --after`). Empty: none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub held: Vec<u32>,
    /// Tokens the server's tokenizer adds to each recorded prompt (the model's
    /// `prompt_special_tokens`, its beginning of text): a client records a prompt's
    /// length without them. 0: none.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub special_tokens: u32,
}

fn is_zero(v: &u32) -> bool {
    *v == 0
}

/// One request of a benchmark run: when it is due (before waiting for a slot) and
/// its lengths.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BenchRequest {
    pub due_s: f64,
    pub input: u32,
    pub output: u32,
    /// Leading tokens the server holds before the request arrives (`BenchClient::held`).
    pub held: u32,
}

fn one_f64() -> f64 {
    1.0
}

impl BenchClient {
    /// A recorded run of `client`: its requests' `[input, output]` lengths in sending
    /// order, sent under `max_concurrency` at `request_rate` (`None`: all at once).
    pub fn recorded(
        client: Client,
        requests: Vec<[u32; 2]>,
        max_concurrency: Option<u32>,
        request_rate: Option<f64>,
        burstiness: f64,
    ) -> BenchClient {
        BenchClient {
            client,
            num_prompts: requests.len() as u64,
            max_concurrency,
            request_rate,
            burstiness,
            input_len: 0,
            output_len: 0,
            range_ratio: 0.0,
            input_stddev: 0.0,
            output_stddev: 0.0,
            prefix_len: 0,
            requests,
            held: Vec::new(),
            special_tokens: 0,
        }
    }

    /// Every problem with the run's arguments, by flag.
    pub fn problems(&self) -> Vec<Problem> {
        let mut p = Vec::new();
        self.arrival_problems(&mut p);
        if self.requests.is_empty() {
            if self.input_len == 0 && self.prefix_len == 0 {
                p.push(Problem::new("bench.input_len", "must be >= 1"));
            }
            if self.output_len == 0 {
                p.push(Problem::new("bench.output_len", "must be >= 1"));
            }
        }
        self.recorded_problems(&mut p);
        self.spread_problems(&mut p);
        p
    }

    /// Adds the problems with the prompt count, concurrency and arrivals to `p`.
    fn arrival_problems(&self, p: &mut Vec<Problem>) {
        if self.num_prompts == 0 {
            p.push(Problem::new("bench.num_prompts", "must be >= 1"));
        }
        if self.max_concurrency == Some(0) {
            p.push(Problem::new("bench.max_concurrency", "must be >= 1"));
        }
        if let Some(r) = self.request_rate {
            if !(r.is_finite() && r > 0.0) {
                p.push(Problem::new(
                    "bench.request_rate",
                    format!("{r}: must be > 0 (absent: inf)"),
                ));
            }
        }
        if !(self.burstiness.is_finite() && self.burstiness > 0.0) {
            p.push(Problem::new(
                "bench.burstiness",
                format!("{}: must be > 0", self.burstiness),
            ));
        }
    }

    /// Adds the problems with the recorded requests and their held tokens to `p`.
    fn recorded_problems(&self, p: &mut Vec<Problem>) {
        if !self.held.is_empty() && self.held.len() != self.requests.len() {
            p.push(Problem::new(
                "bench.held",
                format!(
                    "{} entries for {} recorded requests (one per request, or none)",
                    self.held.len(),
                    self.requests.len()
                ),
            ));
        }
        if let Some((i, (h, r))) = self
            .held
            .iter()
            .zip(&self.requests)
            .enumerate()
            .find(|(_, (h, r))| **h > r[0])
        {
            p.push(Problem::new(
                format!("bench.held[{i}]"),
                format!("{h} held tokens but the request's input is {} tokens", r[0]),
            ));
        }
        if !self.requests.is_empty() && self.requests.len() as u64 != self.num_prompts {
            p.push(Problem::new(
                "bench.requests",
                format!(
                    "{} recorded requests but num_prompts = {}",
                    self.requests.len(),
                    self.num_prompts
                ),
            ));
        }
    }

    /// Adds the problems with the lengths' range ratio and standard deviations to `p`.
    fn spread_problems(&self, p: &mut Vec<Problem>) {
        let ratio_ok = match self.client {
            Client::Vllm => (0.0..1.0).contains(&self.range_ratio),
            Client::Sglang => (0.0..=1.0).contains(&self.range_ratio),
            Client::Aiperf => true,
        };
        if !ratio_ok {
            p.push(Problem::new(
                "bench.range_ratio",
                format!(
                    "{}: must be in [0, 1{}",
                    self.range_ratio,
                    if self.client == Client::Vllm {
                        ")"
                    } else {
                        "]"
                    }
                ),
            ));
        }
        for (name, sd) in [("input", self.input_stddev), ("output", self.output_stddev)] {
            if !(sd.is_finite() && sd >= 0.0) {
                p.push(Problem::new(
                    format!("bench.{name}_stddev"),
                    format!("{sd}: must be >= 0"),
                ));
            }
        }
    }

    /// The lengths' bounds (inclusive) of a vLLM or SGLang random dataset of mean
    /// `len`.
    pub fn bounds(&self, len: u32) -> (u32, u32) {
        let (l, r) = (len as f64, self.range_ratio);
        match self.client {
            Client::Vllm => (
                (l * (1.0 - r)).floor() as u32,
                (l * (1.0 + r)).ceil() as u32,
            ),
            Client::Sglang => (((l * r).floor() as u32).max(1).min(len), len),
            Client::Aiperf => (len, len),
        }
    }

    fn draw(&self, rng: &mut ChaCha8Rng, len: u32, sd: f64) -> u32 {
        match self.client {
            Client::Aiperf if sd > 0.0 => (len as f64 + sd * normal(rng)).round().max(1.0) as u32,
            Client::Aiperf => len,
            _ => {
                let (lo, hi) = self.bounds(len);
                rng.random_range(lo..=hi.max(lo))
            }
        }
    }

    /// The wait before each of `n` requests, seconds (all 0 at rate `inf`):
    /// - vLLM: every request, the first too, waits a gamma gap of shape `burstiness`
    ///   and scale `1 / (rate burstiness)`; the gaps are then scaled so that the last
    ///   is sent at exactly `n / rate` (`vllm/benchmarks/serve.py`, `get_request`);
    /// - SGLang: the first is sent at once, each later one after an exponential gap of
    ///   mean `1 / rate` (no burstiness);
    /// - aiperf: as SGLang, with the gaps of `burstiness` (assumed).
    fn gaps(&self, rng: &mut ChaCha8Rng, n: usize) -> Vec<f64> {
        let Some(rate) = self.request_rate else {
            return vec![0.0; n];
        };
        let k = match self.client {
            Client::Sglang => 1.0,
            _ => self.burstiness,
        };
        let mut g: Vec<f64> = (0..n).map(|_| gamma(rng, k) / (rate * k)).collect();
        match self.client {
            Client::Vllm => {
                let total: f64 = g.iter().sum();
                if total > 0.0 {
                    let scale = n as f64 / rate / total;
                    g.iter_mut().for_each(|x| *x *= scale);
                }
            }
            Client::Sglang | Client::Aiperf => {
                if let Some(first) = g.first_mut() {
                    *first = 0.0;
                }
            }
        }
        g
    }

    /// The run's requests in sending order, drawn from `rng`: lengths from the
    /// client's dataset (or the recorded ones), due times from the arrival process
    /// (`gaps`). A shared prefix (`prefix_len`) is part of each input.
    pub fn requests(&self, rng: &mut ChaCha8Rng) -> Vec<BenchRequest> {
        let n = if self.requests.is_empty() {
            self.num_prompts as usize
        } else {
            self.requests.len()
        };
        let mut out = Vec::with_capacity(n);
        let mut due = 0.0;
        let gaps = self.gaps(rng, n);
        for i in 0..n {
            let (input, output) = match self.requests.get(i) {
                Some(&[inp, outp]) => (inp.saturating_add(self.special_tokens).max(1), outp.max(1)),
                None => (
                    (self.prefix_len + self.draw(rng, self.input_len, self.input_stddev)).max(1),
                    self.draw(rng, self.output_len, self.output_stddev).max(1),
                ),
            };
            due += gaps.get(i).copied().unwrap_or(0.0);
            let held = self.held.get(i).copied().unwrap_or(0).min(input);
            out.push(BenchRequest {
                due_s: due,
                input,
                output,
                held,
            });
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::serving::streams::stream;

    fn vllm(input: u32, output: u32, ratio: f64) -> BenchClient {
        BenchClient {
            client: Client::Vllm,
            num_prompts: 400,
            max_concurrency: Some(8),
            request_rate: None,
            burstiness: 1.0,
            input_len: input,
            output_len: output,
            range_ratio: ratio,
            input_stddev: 0.0,
            output_stddev: 0.0,
            prefix_len: 0,
            requests: Vec::new(),
            held: Vec::new(),
            special_tokens: 0,
        }
    }

    #[test]
    fn vllm_and_sglang_range_ratios_bound_the_lengths_their_way() {
        // vLLM: 8192 x (1 - 0.8) = 1638.4 -> 1638; 8192 x 1.8 = 14745.6 -> 14746.
        assert_eq!(vllm(8192, 1024, 0.8).bounds(8192), (1638, 14746));
        assert_eq!(vllm(1024, 1024, 0.0).bounds(1024), (1024, 1024));
        let mut s = vllm(8192, 1024, 0.8);
        s.client = Client::Sglang;
        // SGLang: [floor(8192 x 0.8), 8192]; ratio 0 means [1, len].
        assert_eq!(s.bounds(8192), (6553, 8192));
        s.range_ratio = 0.0;
        assert_eq!(s.bounds(8192), (1, 8192));
        let reqs = vllm(8192, 1024, 0.8).requests(&mut stream(7, "workload"));
        assert_eq!(reqs.len(), 400);
        assert!(reqs.iter().all(|r| (1638..=14746).contains(&r.input)));
        assert!(reqs.iter().all(|r| (204..=1844).contains(&r.output)));
        let mean = reqs.iter().map(|r| r.input as f64).sum::<f64>() / 400.0;
        assert!((mean - 8192.0).abs() < 400.0, "{mean}");
        assert!(reqs.iter().all(|r| r.due_s == 0.0));
        let again = vllm(8192, 1024, 0.8).requests(&mut stream(7, "workload"));
        assert_eq!(reqs, again, "same seed, same requests");
    }

    #[test]
    fn a_prefix_adds_to_every_input_and_rates_space_the_sends() {
        let mut c = vllm(1024, 16, 0.0);
        c.prefix_len = 1024;
        c.request_rate = Some(4.0);
        c.burstiness = 0.5;
        c.num_prompts = 4000;
        let reqs = c.requests(&mut stream(1, "workload"));
        assert!(reqs.iter().all(|r| r.input == 2048 && r.output == 16));
        // vLLM: the first waits a gap too, and the last is sent at 4000 / 4 = 1000 s.
        assert!(reqs[0].due_s > 0.0);
        assert!(
            (reqs[3999].due_s - 1000.0).abs() < 1e-9,
            "{}",
            reqs[3999].due_s
        );
        // 3999 gaps of mean 250 ms; burstiness 0.5: a coefficient of variation of
        // sqrt(2).
        let gaps: Vec<f64> = reqs.windows(2).map(|w| w[1].due_s - w[0].due_s).collect();
        let m = gaps.iter().sum::<f64>() / gaps.len() as f64;
        let sd = (gaps.iter().map(|g| (g - m).powi(2)).sum::<f64>() / gaps.len() as f64).sqrt();
        assert!((m - 0.25).abs() < 0.02, "{m}");
        assert!((sd / m - 2f64.sqrt()).abs() < 0.1, "{}", sd / m);
        // SGLang: the first at once, exponential gaps whatever the burstiness.
        c.client = Client::Sglang;
        let reqs = c.requests(&mut stream(1, "workload"));
        assert_eq!(reqs[0].due_s, 0.0);
        let gaps: Vec<f64> = reqs.windows(2).map(|w| w[1].due_s - w[0].due_s).collect();
        let m = gaps.iter().sum::<f64>() / gaps.len() as f64;
        let sd = (gaps.iter().map(|g| (g - m).powi(2)).sum::<f64>() / gaps.len() as f64).sqrt();
        assert!((sd / m - 1.0).abs() < 0.08, "{}", sd / m);
    }

    #[test]
    fn recorded_lengths_are_sent_as_recorded() {
        let mut c = vllm(1, 1, 0.0);
        c.num_prompts = 2;
        c.requests = vec![[2047, 128], [100, 0]];
        let reqs = c.requests(&mut stream(1, "workload"));
        assert_eq!((reqs[0].input, reqs[0].output), (2047, 128));
        assert_eq!((reqs[1].input, reqs[1].output), (100, 1));
        assert!(c.problems().is_empty());
        // The server's tokenizer adds a token to each recorded prompt (its beginning
        // of text); the outputs are as recorded.
        c.special_tokens = 1;
        let reqs = c.requests(&mut stream(1, "workload"));
        assert_eq!((reqs[0].input, reqs[0].output), (2048, 128));
        assert_eq!((reqs[1].input, reqs[1].output), (101, 1));
        c.num_prompts = 3;
        assert!(c.problems()[0].to_string().contains("2 recorded requests"));
    }

    #[test]
    fn bad_arguments_are_named() {
        let mut c = vllm(0, 0, 1.0);
        c.num_prompts = 0;
        c.max_concurrency = Some(0);
        c.request_rate = Some(-1.0);
        let p: Vec<String> = c.problems().into_iter().map(String::from).collect();
        let p = p.join("; ");
        for w in [
            "bench.num_prompts",
            "bench.max_concurrency",
            "bench.request_rate: -1",
            "bench.input_len",
            "bench.output_len",
            "bench.range_ratio: 1",
        ] {
            assert!(p.contains(w), "{w}: {p}");
        }
        assert!(vllm(100, 10, 0.5).problems().is_empty());
    }
}
