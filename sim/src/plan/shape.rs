//! A workload's mean request and how requests arrive, as the screen needs them.

use crate::serving::{Dist, TraceRecord, WorkloadConfig, TRACE_BLOCK_TOKENS};
use serde::{Deserialize, Serialize};
use std::collections::HashSet;

/// How requests arrive.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Arrivals {
    /// At a rate whatever the system does.
    Open { rate_per_s: f64 },
    /// `users` each send a request, wait for it, think, and send the next.
    Closed { users: f64, think_s: f64 },
}

/// The mean request of a workload and its arrivals.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct WorkShape {
    /// Prompt tokens per request.
    pub input_tokens: f64,
    /// Of them, expected to be served from the prefix cache.
    pub cached_tokens: f64,
    pub output_tokens: f64,
    pub arrivals: Arrivals,
}

impl WorkShape {
    /// Input tokens the prefill computes.
    pub fn uncached_tokens(&self) -> f64 {
        (self.input_tokens - self.cached_tokens).max(1.0)
    }

    /// All tokens of a request (input + output).
    pub fn tokens(&self) -> f64 {
        self.input_tokens + self.output_tokens
    }

    /// The workload at `scale` times its nominal load (rate or users).
    pub fn scaled(&self, scale: f64) -> WorkShape {
        let arrivals = match self.arrivals {
            Arrivals::Open { rate_per_s } => Arrivals::Open {
                rate_per_s: rate_per_s * scale,
            },
            Arrivals::Closed { users, think_s } => Arrivals::Closed {
                users: users * scale,
                think_s,
            },
        };
        WorkShape { arrivals, ..*self }
    }

    /// The mean request of a generated workload (closed or open loop): prompts of
    /// `input` tokens whose shared prefix's full blocks (`block` tokens) are cached,
    /// outputs of `output` tokens (at least one of each).
    fn generated(
        input: &Dist,
        output: &Dist,
        shared_prefix_tokens: u32,
        arrivals: Arrivals,
        block: u64,
    ) -> WorkShape {
        let input = input.mean().max(1.0);
        WorkShape {
            input_tokens: input,
            cached_tokens: full_blocks((shared_prefix_tokens as f64).min(input - 1.0), block),
            output_tokens: output.mean().max(1.0),
            arrivals,
        }
    }

    /// The shape of `wl` (with `trace`'s records for a trace replay). AgentX: a
    /// session's context grows from its system prompt and task to its maximum, so a
    /// turn's mean prompt is the midpoint plus the turn's new tokens; the previous
    /// output and the last partial block are recomputed (the decode side's KV is not
    /// written back), the rest is cached. Closed and open loops: the shared prefix's
    /// full blocks are cached. Traces: a block is cached when an earlier record listed
    /// it (an unbounded cache), the rate is records over the trace's span. `block`:
    /// the engine's prefix-cache block in tokens (`ServingScenario::kv_block_tokens`),
    /// a cached prefix is a whole number of them.
    pub fn of(wl: &WorkloadConfig, trace: &[TraceRecord], block: u64) -> WorkShape {
        if let Some(a) = &wl.agentx {
            let start = a.system_prompt_tokens as f64 + a.task_tokens.mean();
            let end = a.max_context_tokens.mean().max(start);
            let new = a.turn_new_tokens.mean();
            let output = a.output_tokens.mean();
            let input = 0.5 * (start + end) + new;
            let uncached = (new + output + 0.5 * block as f64).min(input);
            return WorkShape {
                input_tokens: input,
                cached_tokens: input - uncached,
                output_tokens: output,
                arrivals: Arrivals::Closed {
                    users: a.sessions as f64,
                    think_s: a.idle_gap_s.mean().min(a.idle_gap_cap_s),
                },
            };
        }
        if let Some(c) = &wl.closed_loop {
            let arrivals = Arrivals::Closed {
                users: c.concurrency as f64,
                think_s: c.think_time_s.mean(),
            };
            return WorkShape::generated(
                &c.input_tokens,
                &c.output_tokens,
                c.shared_prefix_tokens,
                arrivals,
                block,
            );
        }
        if let Some(o) = &wl.open_loop {
            let arrivals = Arrivals::Open {
                rate_per_s: o.rate_per_s,
            };
            return WorkShape::generated(
                &o.input_tokens,
                &o.output_tokens,
                o.shared_prefix_tokens,
                arrivals,
                block,
            );
        }
        trace_shape(wl, trace, block)
    }
}

/// `t` tokens rounded down to whole prefix-cache blocks of `block` tokens.
fn full_blocks(t: f64, block: u64) -> f64 {
    let b = block.max(1) as f64;
    (t.max(0.0) / b).floor() * b
}

fn trace_shape(wl: &WorkloadConfig, trace: &[TraceRecord], block: u64) -> WorkShape {
    let n = trace.len().max(1) as f64;
    let mut seen = HashSet::new();
    let (mut input, mut output, mut cached) = (0.0, 0.0, 0.0);
    let mut order: Vec<&TraceRecord> = trace.iter().collect();
    order.sort_by_key(|r| r.timestamp);
    for r in &order {
        input += r.input_length as f64;
        output += r.output_length.max(1) as f64;
        // Leading blocks already seen are a cached prefix.
        let hit = r.hash_ids.iter().take_while(|b| seen.contains(*b)).count();
        let matched = (hit as f64 * TRACE_BLOCK_TOKENS as f64).min(r.input_length as f64 - 1.0);
        cached += full_blocks(matched, block);
        seen.extend(r.hash_ids.iter().copied());
    }
    let scale = wl.trace.as_ref().map_or(1.0, |t| t.time_scale);
    let span_s = match (order.first(), order.last()) {
        (Some(a), Some(b)) => (b.timestamp.saturating_sub(a.timestamp)) as f64 / 1e3 * scale,
        _ => 0.0,
    };
    WorkShape {
        input_tokens: (input / n).max(1.0),
        cached_tokens: cached / n,
        output_tokens: (output / n).max(1.0),
        arrivals: Arrivals::Open {
            rate_per_s: if span_s > 0.0 { n / span_s } else { n },
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shipped AgentX workload: start 16384 + 4000 = 20384, end (150K + 240K) / 2
    /// = 195000, so the mean prompt is 107692 + 300 = 107992 tokens; uncached 300 +
    /// 1000 + 256 = 1556 in twin's own 512-token blocks (half a block recomputed), and
    /// 300 + 1000 + 8 = 1308 in vLLM's 16-token blocks; 4672 sessions thinking 2 s,
    /// min(2, 10).
    #[test]
    fn agentx_shape_by_hand() {
        let wl: WorkloadConfig =
            toml::from_str(include_str!("../../../scenarios/workloads/agentx.toml")).unwrap();
        let s = WorkShape::of(&wl, &[], 512);
        assert!((s.input_tokens - 107_992.0).abs() < 1e-9, "{s:?}");
        assert!((s.uncached_tokens() - 1556.0).abs() < 1e-9);
        let v = WorkShape::of(&wl, &[], 16);
        assert!((v.uncached_tokens() - 1308.0).abs() < 1e-9, "{v:?}");
        assert_eq!(s.output_tokens, 1000.0);
        assert_eq!(
            s.arrivals,
            Arrivals::Closed {
                users: 4672.0,
                think_s: 2.0
            }
        );
        assert_eq!(
            s.scaled(0.5).arrivals,
            Arrivals::Closed {
                users: 2336.0,
                think_s: 2.0
            }
        );
    }

    /// Two records 2 s apart sharing their first block: the second's 512 tokens are
    /// cached; 2 records over 2 s is 1 request per second.
    #[test]
    fn trace_shape_counts_seen_blocks() {
        let recs = crate::serving::parse_mooncake_str(
            "{\"timestamp\": 0, \"input_length\": 1000, \"output_length\": 10, \"hash_ids\": [1, 2]}\n\
             {\"timestamp\": 2000, \"input_length\": 1000, \"output_length\": 30, \"hash_ids\": [1, 3]}\n",
        )
        .unwrap();
        let wl: WorkloadConfig =
            toml::from_str("name = \"t\"\n[trace]\ntime_scale = 1.0\n").unwrap();
        let s = WorkShape::of(&wl, &recs, 512);
        assert_eq!(s.input_tokens, 1000.0);
        assert_eq!(s.cached_tokens, 256.0);
        // The trace's 512-token block counted in 16-, 1- and 100-token engine blocks:
        // 512, 512 and 500 tokens of the second record, so 256, 256 and 250 a record.
        assert_eq!(WorkShape::of(&wl, &recs, 16).cached_tokens, 256.0);
        assert_eq!(WorkShape::of(&wl, &recs, 1).cached_tokens, 256.0);
        assert_eq!(WorkShape::of(&wl, &recs, 100).cached_tokens, 250.0);
        assert_eq!(s.output_tokens, 20.0);
        assert_eq!(s.arrivals, Arrivals::Open { rate_per_s: 1.0 });
    }

    /// A 500-token shared prefix of 2,000-token prompts: 496 tokens cached in vLLM's
    /// 16-token blocks (31 x 16), 500 in SGLang's single tokens, 480 in TensorRT-LLM's
    /// 32-token blocks (15 x 32), 0 in twin's own 512-token blocks.
    #[test]
    fn shared_prefix_cached_in_the_engines_block() {
        let wl: WorkloadConfig = toml::from_str(
            "name = \"c\"\n[closed_loop]\nconcurrency = 4\nshared_prefix_tokens = 500\n\
             input_tokens = { dist = \"fixed\", value = 2000 }\n\
             output_tokens = { dist = \"fixed\", value = 100 }\n",
        )
        .unwrap();
        let cached = |b| WorkShape::of(&wl, &[], b).cached_tokens;
        assert_eq!(
            [cached(16), cached(1), cached(32), cached(512)],
            [496.0, 500.0, 480.0, 0.0]
        );
    }
}
