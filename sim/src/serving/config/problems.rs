//! The input checks of a scenario's configuration: every problem with its serving
//! section, pools' knobs, MTP, KV transfer and SLOs, each named by its field path.

use super::{KvTransferConfig, MtpConfig, ServingConfig, ServingScenario, SloConfig};
use spec::problem::Problem;

/// The largest prefix-cache block `serving.kv_block_tokens` may name (a bound, far
/// above any engine's: vLLM's largest `--block-size` choice is 256).
pub const MAX_KV_BLOCK_TOKENS: u64 = 1 << 16;

/// The most decode steps between the scheduler's takes of new requests
/// (`serving.scheduler_recv_interval`): SGLang's scripts set tens.
pub const MAX_RECV_INTERVAL: u32 = 10_000;

pub(crate) fn check<P: From<Problem>>(problems: &mut Vec<P>, ok: bool, path: &str, msg: &str) {
    if !ok {
        problems.push(Problem::new(path, msg).into());
    }
}

pub(crate) fn finite_nonneg(x: f64) -> bool {
    x.is_finite() && x >= 0.0
}

/// Like `check` for a number: a non-finite `v` says "must be finite" whatever `msg`.
pub(crate) fn check_num<P: From<Problem>>(
    problems: &mut Vec<P>,
    v: f64,
    ok: bool,
    path: &str,
    msg: &str,
) {
    if !v.is_finite() {
        problems.push(Problem::new(path, format!("must be finite, got {v}")).into());
    } else if !ok {
        problems
            .push(Problem::new(path, format!("{msg}, got {}", crate::validate::show(v))).into());
    }
}

impl KvTransferConfig {
    /// Every problem with `serving.kv_transfer`, appended to `p`.
    fn problems(&self, p: &mut Vec<Problem>) {
        check_num(
            p,
            self.link_efficiency,
            self.link_efficiency > 0.0 && self.link_efficiency <= 1.0,
            "serving.kv_transfer.link_efficiency",
            "must be in (0, 1]",
        );
        check_num(
            p,
            self.setup_s,
            self.setup_s >= 0.0,
            "serving.kv_transfer.setup_s",
            "must be >= 0",
        );
        if let Some(d) = self.domain_gpus {
            check(p, d >= 1, "serving.kv_transfer.domain_gpus", "must be >= 1");
        }
    }
}

impl MtpConfig {
    /// Every problem with `serving.mtp`, appended to `p`.
    fn problems(&self, p: &mut Vec<Problem>) {
        if let Some(n) = self.draft_tokens {
            check(p, n <= 16, "serving.mtp.draft_tokens", "must be <= 16");
        }
        if let Some(a) = &self.acceptance {
            check(
                p,
                a.iter().all(|x| x.is_finite() && (0.0..=1.0).contains(x)),
                "serving.mtp.acceptance",
                "every entry must be in [0, 1]",
            );
        }
    }
}

impl SloConfig {
    /// Every problem with `slo`, appended to `p`.
    fn problems(&self, p: &mut Vec<Problem>) {
        check_num(
            p,
            self.ttft_ms,
            self.ttft_ms > 0.0,
            "slo.ttft_ms",
            "must be > 0",
        );
        check_num(
            p,
            self.tpot_ms,
            self.tpot_ms > 0.0,
            "slo.tpot_ms",
            "must be > 0",
        );
    }
}

impl ServingConfig {
    /// Problems with the engine knobs of the serving section: the front end, the
    /// receive interval, batch waiting and the prefix cache's block.
    fn knob_problems(&self, p: &mut Vec<Problem>) {
        if let Some(f) = self.frontend_s {
            check_num(p, f, f >= 0.0, "serving.frontend_s", "must be >= 0");
        }
        if let Some(t) = self.frontend_token_s {
            check_num(
                p,
                t,
                (0.0..1e-3).contains(&t),
                "serving.frontend_token_s",
                "must lie in [0, 1 ms)",
            );
        }
        if let Some(c) = self.frontend_chunk_s {
            check_num(p, c, c >= 0.0, "serving.frontend_chunk_s", "must be >= 0");
        }
        if let Some(n) = self.api_servers {
            check(p, n >= 1, "serving.api_servers", "must be at least 1");
        }
        if let Some(n) = self.scheduler_recv_interval {
            check(
                p,
                (1..=MAX_RECV_INTERVAL).contains(&n),
                "serving.scheduler_recv_interval",
                &format!("must be 1 to {MAX_RECV_INTERVAL} decode steps, got {n}"),
            );
        }
        if let Some(n) = self.batch_wait_iters {
            check(
                p,
                n <= MAX_RECV_INTERVAL,
                "serving.batch_wait_iters",
                &format!("must be 0 to {MAX_RECV_INTERVAL} decode steps, got {n}"),
            );
        }
        for (n, path) in [
            (self.adp_timeout_iters, "serving.adp_timeout_iters"),
            (self.adp_batching_iters, "serving.adp_batching_iters"),
        ] {
            if let Some(n) = n {
                check(
                    p,
                    n <= MAX_RECV_INTERVAL,
                    path,
                    &format!("must be 0 to {MAX_RECV_INTERVAL} decode steps, got {n}"),
                );
            }
        }
        if let Some(r) = self.batch_wait_tokens_ratio {
            check_num(
                p,
                r,
                (0.0..=1.0).contains(&r),
                "serving.batch_wait_tokens_ratio",
                "must be 0 to 1",
            );
        }
        if let Some(b) = self.kv_block_tokens {
            check(
                p,
                (1..=MAX_KV_BLOCK_TOKENS).contains(&b),
                "serving.kv_block_tokens",
                &format!("must be 1 to {MAX_KV_BLOCK_TOKENS} tokens, got {b}"),
            );
        }
    }
}

impl ServingScenario {
    /// Every problem with the scenario, each with its field path; empty when valid.
    pub fn problems(&self) -> Vec<Problem> {
        let mut p = Vec::new();
        check_num(
            &mut p,
            self.duration_s,
            self.duration_s > 0.0,
            "duration_s",
            "must be > 0",
        );
        check_num(
            &mut p,
            self.warmup_s,
            self.warmup_s >= 0.0 && self.warmup_s < self.duration_s,
            "warmup_s",
            "must be >= 0 and below duration_s",
        );
        for (name, pool) in self.pools() {
            pool.problems(name, &mut p);
        }
        self.serving.kv_transfer.problems(&mut p);
        self.serving.mtp.problems(&mut p);
        self.serving.knob_problems(&mut p);
        self.slo.problems(&mut p);
        self.limits.problems(&mut p);
        check_num(
            &mut p,
            self.router.prefill_recompute_weight,
            self.router.prefill_recompute_weight >= 0.0,
            "router.prefill_recompute_weight",
            "must be >= 0",
        );
        check(
            &mut p,
            (1..=1024).contains(&self.fidelity.cohort),
            "fidelity.cohort",
            "must be in 1..=1024",
        );
        p.extend(crate::serving::limits::scenario_problems(self));
        p.extend(self.price.problems());
        p
    }
}
