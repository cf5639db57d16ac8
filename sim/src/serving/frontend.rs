//! The engine's front end: the API server a request passes before the engine's queue,
//! shared with the streaming of every running request's tokens.
//!
//! An engine's API server is one Python process whose event loop both takes requests
//! in (parsing, tokenisation, hand-over: `serving.frontend_s` of its time each) and
//! streams every token the engine produces back to its client (one chunk a request a
//! step: detokenising, formatting, sending; `serving.frontend_chunk_s` each). The
//! loop shares itself between them, so a request's intake stretches with the share of
//! the loop the streaming takes (processor sharing: work `a` at load `rho` takes
//! `a / (1 - rho)`). The load is the chunks the steps just finished stream, over the
//! API servers (`serving.api_servers` per instance of the entry pool: vLLM's
//! `--api-server-count`). Requests pass in the order they were sent, and each API
//! server's one thread tokenises them in turn (`serving.frontend_token_s` a prompt
//! token, over the API servers): a request passes no sooner than its own tokenisation
//! after the one before it, so requests sent together reach the engine one after
//! another (the first of a burst alone, where the engine starts a step as soon as one
//! arrives).
//!
//! Why: at high concurrency vLLM's single API server becomes the bottleneck
//! (`--api-server-count`, vLLM PR #17546, scales it out for that reason), and a
//! closed loop's requests then wait longer before the engine sees them the more
//! streams are running.

use super::clock::Nanos;

/// The highest load a front end's intake is stretched at: beyond it the API server is
/// saturated (its streams fall behind), and a request's intake is taken to last twenty
/// times its work rather than without end.
pub const MAX_LOAD: f64 = 0.95;

/// The front end of a deployment, as the simulation runs it.
#[derive(Debug, Clone, Default)]
pub(crate) struct FrontEnd {
    /// A request's intake work, nanoseconds (`serving.frontend_s`).
    pub work_ns: Nanos,
    /// API-server seconds per streamed chunk, over the API servers the streams spread
    /// on (`serving.frontend_chunk_s / (serving.api_servers x entry instances)`).
    pub chunk_s_per_server: f64,
    /// Tokenisation seconds per prompt token, requests in turn, over the API servers
    /// that tokenise side by side (`serving.frontend_token_s / (serving.api_servers x
    /// entry instances)`: a burst passes that many at a time).
    pub token_s_per_server: f64,
    /// When the last request sent passed it (requests pass in order).
    last_ns: Nanos,
    /// The loads requests met, for the report: their sum, count and highest.
    load_sum: f64,
    loads: u64,
    load_max: f64,
}

impl FrontEnd {
    pub fn new(work_s: f64, chunk_s: f64, servers: f64, token_s: f64) -> Self {
        let per_server = |s: f64| if servers > 0.0 { s / servers } else { 0.0 };
        FrontEnd {
            work_ns: super::clock::secs_to_ns(work_s),
            token_s_per_server: per_server(token_s),
            chunk_s_per_server: per_server(chunk_s),
            ..FrontEnd::default()
        }
    }

    /// The front end of scenario `sc` (the engine's, where it sets none), its streams
    /// spread over `servers` API servers.
    pub fn of(sc: &super::config::ServingScenario, servers: f64) -> Self {
        FrontEnd::new(
            sc.frontend_s(),
            sc.frontend_chunk_s(),
            servers,
            sc.frontend_token_s(),
        )
    }

    /// The API server's load (its busy share) at `chunks_per_s` streamed chunks a
    /// second in all.
    pub fn load(&self, chunks_per_s: f64) -> f64 {
        (chunks_per_s * self.chunk_s_per_server).max(0.0)
    }

    /// When a request of `prompt_tokens` sent at `now`, at load `load`, passes the
    /// front end: its work stretched by the load, and not before its tokenisation
    /// after the request sent before it passed.
    pub fn passes_at(&mut self, now: Nanos, load: f64, prompt_tokens: u32) -> Nanos {
        self.load_sum += load;
        self.loads += 1;
        self.load_max = self.load_max.max(load);
        let stretch = 1.0 / (1.0 - load.min(MAX_LOAD));
        let at = now + (self.work_ns as f64 * stretch).round() as Nanos;
        let turn = super::clock::secs_to_ns(self.token_s_per_server * prompt_tokens as f64);
        self.last_ns = at.max(self.last_ns + turn);
        self.last_ns
    }

    /// The mean and highest load the requests met (none without streaming cost or
    /// requests).
    pub fn loads(&self) -> Option<(f64, f64)> {
        (self.chunk_s_per_server > 0.0 && self.loads > 0)
            .then(|| (self.load_sum / self.loads as f64, self.load_max))
    }
}

/// How the API server fared, for the scheduler's line: nothing without a streaming
/// cost; a saturated one says so, and what relieves it.
pub fn describe_loads(loads: Option<(f64, f64)>) -> String {
    let Some((mean, max)) = loads else {
        return String::new();
    };
    let pct = |x: f64| format!("{:.0}%", 100.0 * x);
    let mut s = format!(
        "; its API server streaming {} busy as requests arrived ({} at most)",
        pct(mean),
        pct(max)
    );
    if max >= MAX_LOAD {
        s.push_str(
            ", saturated: more API servers (serving.api_servers) would take requests in sooner",
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// By hand: 12 ms of intake at no load is 12 ms; 10,000 chunks a second at 50 us
    /// on two API servers is a load of 0.25, and 12 ms becomes 16 ms; a request sent
    /// 1 ms later at no load still passes after it.
    #[test]
    fn intake_stretches_with_the_streams_load_in_order() {
        let mut fe = FrontEnd::new(12e-3, 50e-6, 2.0, 0.0);
        assert_eq!(fe.passes_at(0, 0.0, 100), 12_000_000);
        let load = fe.load(10_000.0);
        assert!((load - 0.25).abs() < 1e-12);
        assert_eq!(fe.passes_at(1_000_000_000, load, 100), 1_016_000_000);
        assert_eq!(fe.passes_at(1_001_000_000, 0.0, 100), 1_016_000_000);
        let (mean, max) = fe.loads().expect("loads kept");
        assert!((mean - 0.25 / 3.0).abs() < 1e-12 && (max - 0.25).abs() < 1e-12);
        // Saturated: twenty times the work, not without end.
        assert_eq!(fe.passes_at(2_000_000_000, 3.0, 100), 2_240_000_000);
    }

    #[test]
    fn without_a_streaming_cost_the_intake_is_its_work() {
        let mut fe = FrontEnd::new(12e-3, 0.0, 1.0, 0.0);
        assert_eq!(fe.load(1e6), 0.0);
        assert_eq!(fe.passes_at(5, fe.load(1e6), 100), 12_000_005);
        assert!(fe.loads().is_none());
    }

    /// By hand: 2,000-token prompts at 1 us a token, 12 ms of work: three sent at once
    /// pass at 12, 14 and 16 ms (each its 2 ms of tokenisation after the one before);
    /// one sent 100 ms later passes 12 ms after it was sent, the tokenizer idle by then.
    /// Two API servers tokenise side by side: 1 ms apart.
    #[test]
    fn requests_sent_together_pass_one_tokenisation_apart() {
        let mut fe = FrontEnd::new(12e-3, 0.0, 1.0, 1e-6);
        let passed: Vec<Nanos> = (0..3).map(|_| fe.passes_at(0, 0.0, 2_000)).collect();
        assert_eq!(passed, [12_000_000, 14_000_000, 16_000_000]);
        assert_eq!(fe.passes_at(100_000_000, 0.0, 2_000), 112_000_000);
        let mut two = FrontEnd::new(12e-3, 0.0, 2.0, 1e-6);
        let passed: Vec<Nanos> = (0..3).map(|_| two.passes_at(0, 0.0, 2_000)).collect();
        assert_eq!(passed, [12_000_000, 13_000_000, 14_000_000]);
    }
}
