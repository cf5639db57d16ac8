//! A live run's directory: what it ran (`run.json`), every request (`requests.jsonl`),
//! every step (`steps.jsonl`) and the figures (`result.json`). Written by the run,
//! read back (with every problem named by file and line) by `twin validate live`.

use crate::LiveError;
use serde::{Deserialize, Serialize};
use spec::problem::Problem;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};

pub const RUN_FILE: &str = "run.json";
pub const REQUESTS_FILE: &str = "requests.jsonl";
pub const STEPS_FILE: &str = "steps.jsonl";
pub const RESULT_FILE: &str = "result.json";

/// What ran: everything needed to simulate the same run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunInfo {
    pub twin_version: String,
    /// `cpu` or `cuda:N`.
    pub device: String,
    /// The device as calibration names it (a profile must name the same).
    pub device_name: String,
    pub scenario_origin: String,
    pub scenario: sim::serving::ServingScenario,
    pub workload: sim::serving::WorkloadConfig,
    pub model: spec::model::Model,
    pub hardware: spec::hardware::Hardware,
    pub seed: u64,
    pub duration_s: f64,
    pub warmup_s: f64,
    /// `reserve` (the simulator's) or `vllm`.
    pub kv_policy: String,
    pub page_tokens: usize,
    /// KV capacity per rank (tokens) of the prefill and decode (or mixed) pools.
    pub kv_capacity_tokens_per_rank: [u64; 2],
    pub prefix_cache_tokens_per_rank: u64,
    pub kv_bytes_per_token: usize,
    pub draft_tokens: usize,
    pub acceptance: Vec<f64>,
    /// The declared MTP acceptance rule.
    pub mtp_rule: String,
    /// Cores per rank, by global rank index (empty = unpinned).
    pub cores: Vec<Vec<usize>>,
    pub started_utc: String,
    /// `/proc/loadavg` at the start and the end (other load on the machine).
    pub load_start: String,
    pub load_end: String,
    pub requests: usize,
    pub steps: usize,
    pub trace_records: usize,
    /// How the ranks and the serving loop waited when idle: `spin` or `sleep` (runs
    /// recorded before the setting existed slept).
    #[serde(default = "slept")]
    pub idle: String,
    /// How the serving loop waited for the ranks: `spin` only where the ranks' cores
    /// left it one of its own (`run::loop_idle`), else `sleep`.
    #[serde(default = "slept")]
    pub loop_idle: String,
    /// The op trace the run wrote (`None`: not traced).
    #[serde(default)]
    pub op_trace: Option<OpTraceInfo>,
}

fn slept() -> String {
    "sleep".into()
}

/// The op trace of a run: its file in the run directory and how it was sampled.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct OpTraceInfo {
    pub file: String,
    pub sampling: crate::trace::Sampling,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestRecord {
    pub id: u32,
    /// Seconds from the run's start (the workload's own time of the request).
    pub arrival_s: f64,
    pub input_tokens: u32,
    pub output_tokens: u32,
    pub cached_tokens: u32,
    pub prefill_start_s: Option<f64>,
    pub prefill_done_s: Option<f64>,
    pub first_token_s: Option<f64>,
    /// Emission time of every output token (tokens of one step share a time).
    pub token_times_s: Vec<f64>,
    pub finish_s: Option<f64>,
    pub completed: bool,
    pub dropped: bool,
    pub preemptions: u32,
    /// (group, rank) of the prefill and decode.
    pub prefill_at: [usize; 2],
    pub decode_at: [usize; 2],
    pub transfer_bytes: u64,
    pub transfer_s: Option<[f64; 2]>,
}

/// One rank's part of a step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct RankStep {
    /// Prefill chunks: (new tokens, tokens already in KV).
    pub prefill: Vec<[u64; 2]>,
    /// Decode sequences: tokens already in KV (each brings 1 + drafts rows).
    pub decode: Vec<u64>,
    pub accepted: Vec<u32>,
    pub kv_pages_used: usize,
    pub kv_pages_total: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepRecord {
    pub index: u64,
    pub group: usize,
    /// `prefill`, `decode` or `mixed`.
    pub pool: String,
    /// `prefill`, `decode` or `mixed`: which passes ran.
    pub kind: String,
    pub start_s: f64,
    pub end_s: f64,
    /// Forward passes (prefill + decode) of the slowest rank.
    pub step_ms: f64,
    pub prefill_ms: f64,
    pub decode_ms: f64,
    /// Writing handed-over KV into the cache before the passes.
    pub import_ms: f64,
    /// CPU time of the passes (one-thread ranks): `step_ms` less what other processes
    /// took of the rank's core.
    #[serde(default)]
    pub cpu_ms: Option<f64>,
    pub drafts: usize,
    pub ranks: Vec<RankStep>,
}

impl StepRecord {
    pub fn prefill_tokens(&self) -> u64 {
        self.ranks
            .iter()
            .flat_map(|r| &r.prefill)
            .map(|c| c[0])
            .sum()
    }
    pub fn decode_requests(&self) -> usize {
        self.ranks.iter().map(|r| r.decode.len()).sum()
    }
}

/// Writes `records` as JSON lines.
pub fn write_jsonl<T: Serialize>(path: &Path, records: &[T]) -> Result<(), LiveError> {
    let f = std::fs::File::create(path).map_err(|e| LiveError::io(path, e))?;
    let mut w = std::io::BufWriter::new(f);
    for r in records {
        serde_json::to_writer(&mut w, r)
            .map_err(|e| LiveError::Records(format!("{}: {e}", path.display())))?;
        w.write_all(b"\n").map_err(|e| LiveError::io(path, e))?;
    }
    w.flush().map_err(|e| LiveError::io(path, e))
}

pub fn write_json<T: Serialize>(path: &Path, v: &T) -> Result<(), LiveError> {
    let text = serde_json::to_string_pretty(v)
        .map_err(|e| LiveError::Records(format!("{}: {e}", path.display())))?;
    std::fs::write(path, text + "\n").map_err(|e| LiveError::io(path, e))
}

fn read_jsonl<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<Vec<T>, LiveError> {
    let f = std::fs::File::open(path).map_err(|e| LiveError::MissingRecords {
        path: path.to_path_buf(),
        why: e.to_string(),
    })?;
    let mut out = Vec::new();
    for (i, line) in std::io::BufReader::new(f).lines().enumerate() {
        let line = line.map_err(|e| LiveError::io(path, e))?;
        if line.trim().is_empty() {
            continue;
        }
        out.push(
            serde_json::from_str(&line).map_err(|e| LiveError::CorruptRecords {
                path: path.to_path_buf(),
                line: i + 1,
                why: e.to_string(),
            })?,
        );
    }
    Ok(out)
}

/// A run directory read back.
#[derive(Debug, Clone)]
pub struct RunDir {
    pub path: PathBuf,
    pub info: RunInfo,
    pub requests: Vec<RequestRecord>,
    pub steps: Vec<StepRecord>,
}

impl RunDir {
    /// Reads a run directory; missing files, unparsable lines and record counts that
    /// disagree with `run.json` are errors naming the file.
    pub fn load(dir: &Path) -> Result<RunDir, LiveError> {
        let run = dir.join(RUN_FILE);
        let text = std::fs::read_to_string(&run).map_err(|e| LiveError::MissingRecords {
            path: run.clone(),
            why: format!("{e} (a run writes run.json last: was it interrupted?)"),
        })?;
        let info: RunInfo = serde_json::from_str(&text).map_err(|e| LiveError::CorruptRecords {
            path: run.clone(),
            line: e.line(),
            why: e.to_string(),
        })?;
        let requests: Vec<RequestRecord> = read_jsonl(&dir.join(REQUESTS_FILE))?;
        let steps: Vec<StepRecord> = read_jsonl(&dir.join(STEPS_FILE))?;
        if requests.len() != info.requests {
            return Err(LiveError::CorruptRecords {
                path: dir.join(REQUESTS_FILE),
                line: requests.len(),
                why: format!(
                    "{} records, run.json says {}",
                    requests.len(),
                    info.requests
                ),
            });
        }
        if steps.len() != info.steps {
            return Err(LiveError::CorruptRecords {
                path: dir.join(STEPS_FILE),
                line: steps.len(),
                why: format!("{} records, run.json says {}", steps.len(), info.steps),
            });
        }
        Ok(RunDir {
            path: dir.to_path_buf(),
            info,
            requests,
            steps,
        })
    }

    /// Consistency of the records: every problem found (empty when consistent).
    pub fn problems(&self) -> Vec<Problem> {
        let mut p = Vec::new();
        for r in &self.requests {
            let t = &r.token_times_s;
            if t.windows(2).any(|w| w[1] < w[0]) {
                p.push(Problem::new(
                    format!("request {}", r.id),
                    "token times go backwards",
                ));
            }
            if let (Some(first), Some(last)) = (t.first(), t.last()) {
                if first > last || r.first_token_s != Some(*first) {
                    p.push(Problem::new(
                        format!("request {}", r.id),
                        "first token after the last, or not the first recorded",
                    ));
                }
                if *first < r.arrival_s {
                    p.push(Problem::new(
                        format!("request {}", r.id),
                        "first token before its arrival",
                    ));
                }
            }
            if r.completed {
                if t.len() != r.output_tokens as usize {
                    p.push(Problem::new(
                        format!("request {}", r.id),
                        format!(
                            "{} token times for {} output tokens",
                            t.len(),
                            r.output_tokens
                        ),
                    ));
                }
                if r.finish_s != t.last().copied() {
                    p.push(Problem::new(
                        format!("request {}", r.id),
                        "finish is not its last token",
                    ));
                }
            } else if t.len() >= r.output_tokens as usize && !r.dropped {
                p.push(Problem::new(
                    format!("request {}", r.id),
                    "all tokens out but not completed",
                ));
            }
            if r.cached_tokens >= r.input_tokens && r.input_tokens > 0 {
                p.push(Problem::new(
                    format!("request {}", r.id),
                    format!(
                        "{} cached of {} input tokens",
                        r.cached_tokens, r.input_tokens
                    ),
                ));
            }
        }
        for s in &self.steps {
            if !(s.end_s >= s.start_s && s.step_ms >= 0.0 && s.step_ms.is_finite()) {
                p.push(Problem::new(format!("step {}", s.index), "bad times"));
            }
            for (i, r) in s.ranks.iter().enumerate() {
                if r.kv_pages_used > r.kv_pages_total {
                    p.push(Problem::new(
                        format!("step {} rank {i}", s.index),
                        format!("{} KV pages used of {}", r.kv_pages_used, r.kv_pages_total),
                    ));
                }
            }
        }
        p
    }
}
