//! What a benchmark's server already held when each request arrived: the client's
//! warm-up, and earlier runs on the same server that kept their prompts in its prefix
//! cache (`twin validate bench --after`).

use super::Bench;
use crate::LiveError;
use sim::serving::workload::bench::Client;

impl Bench {
    /// Per successful request, the leading tokens the server held when it arrived,
    /// and what that rests on. Two sources, both the client's own behaviour:
    /// - **the warm-up**: SGLang's `bench_serving` first sends its first request
    ///   (`--warmup-requests`, default 1; the file does not record it, so the default
    ///   is assumed), so that request's whole prompt is cached when the run sends it
    ///   (`python/sglang/bench_serving.py`, `benchmark`). vLLM's `--num-warmups`
    ///   defaults to 0.
    /// - **earlier runs on the same server** (`earlier`, each with its name), which
    ///   kept their prompts in the radix cache (no `--flush-cache`). SGLang's `random`
    ///   dataset builds request `i` by repeating the `i`-th ShareGPT prompt of a
    ///   shuffle seeded by `--seed` and cutting it to the drawn length
    ///   (`sglang/benchmark/datasets/random.py`), so under one seed request `i` of two
    ///   runs share their first min(length, length') tokens. Two SGLang files name the
    ///   same server process when their `server_info.random_seed` (drawn at start) and
    ///   model agree; the client's seed is not in the file, so passing a run asserts
    ///   it was the same.
    ///
    /// Refused (with what and where) when an earlier run is not an SGLang `random` run
    /// of the same server, or this server's radix cache was off.
    pub fn held(&self, earlier: &[(String, Bench)]) -> Result<(Vec<u32>, Vec<String>), LiveError> {
        let mut notes = Vec::new();
        let mut by_index = vec![0u64; self.sent_inputs.len()];
        if self.client == Client::Sglang {
            if let Some(first) = by_index.first_mut() {
                *first = self.sent_inputs[0];
                notes.push("SGLang's client warms up with its first request (--warmup-requests, default 1, assumed): that prompt is cached when the run sends it".into());
            }
        }
        if !earlier.is_empty() {
            let server = self.same_server_check(earlier)?;
            let mut kept = 0u64;
            for (_, e) in earlier {
                for (h, (&a, &b)) in by_index
                    .iter_mut()
                    .zip(self.sent_inputs.iter().zip(&e.sent_inputs))
                {
                    *h = (*h).max(a.min(b));
                }
                kept += e.sent_inputs.iter().sum::<u64>()
                    + e.requests.iter().map(|r| r.output).sum::<u64>();
            }
            let held: u64 = by_index.iter().sum();
            let total: u64 = self.sent_inputs.iter().sum();
            notes.push(format!(
                "after {}: {held} of the run's {total} prompt tokens were sent before on the same server (server_info.random_seed {server}; the client's --seed assumed the same) and are held in its radix cache",
                earlier
                    .iter()
                    .map(|(n, _)| n.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
            if let Some(cap) = self.server.as_ref().and_then(|s| s.token_capacity) {
                if kept > cap {
                    notes.push(format!(
                        "the earlier runs sent {kept} tokens, more than the server's KV capacity ({cap}): its LRU eviction may have dropped some that twin counts as held"
                    ));
                }
            }
        }
        let held = self
            .requests
            .iter()
            .map(|r| by_index[r.index].min(r.input).min(u32::MAX as u64) as u32)
            .collect();
        Ok((held, notes))
    }

    /// That every earlier run is an SGLang `random` run of this run's server process
    /// and the server kept a radix cache; returns the server's seed.
    fn same_server_check(&self, earlier: &[(String, Bench)]) -> Result<u64, LiveError> {
        let sglang_random =
            |b: &Bench| b.client == Client::Sglang && b.dataset_name.as_deref() == Some("random");
        let no = |m: String| Err(LiveError::Bench(m));
        if !sglang_random(self) {
            return no("--after: twin knows how prompts nest across runs only for SGLang bench_serving's `random` dataset, and this file is not such a run".into());
        }
        let Some(me) = self.server.as_ref().filter(|s| s.random_seed.is_some()) else {
            return no("--after: this file records no server_info.random_seed, so twin cannot tell that the runs shared a server".into());
        };
        if me.disable_radix_cache == Some(true) {
            return no("--after: this run's server had its radix cache off (server_info.disable_radix_cache): nothing is held from earlier runs".into());
        }
        for (name, e) in earlier {
            if !sglang_random(e) {
                return no(format!(
                    "--after {name}: not an SGLang bench_serving run of the `random` dataset"
                ));
            }
            let theirs = e.server.as_ref().and_then(|s| s.random_seed);
            if theirs != me.random_seed
                || e.server.as_ref().map(|s| &s.model_path) != Some(&me.model_path)
            {
                return no(format!(
                    "--after {name}: it ran on another server process (server_info.random_seed {} against this run's {}, or another model_path): its radix cache is not this run's",
                    theirs.map_or("absent".to_string(), |s| s.to_string()),
                    me.random_seed.unwrap_or_default()
                ));
            }
        }
        Ok(me.random_seed.unwrap_or_default())
    }
}

#[cfg(test)]
mod held_tests {
    use super::*;
    use std::io::Read;

    /// A fixture of `tests/fixtures/bench/`, gunzipped.
    fn fixture(name: &str) -> (String, Bench) {
        let path = format!(
            "{}/../tests/fixtures/bench/{name}",
            env!("CARGO_MANIFEST_DIR")
        );
        let mut text = String::new();
        flate2::read::GzDecoder::new(std::fs::File::open(&path).unwrap())
            .read_to_string(&mut text)
            .unwrap();
        let b = Bench::parse(&text, &path).unwrap();
        (name.to_string(), b)
    }

    /// Two public SGLang runs of one server (the same `server_info.random_seed`),
    /// prompts drawn up to 1024 and then up to 2048 tokens under one client seed:
    /// request i of the second holds min(its length, the first's request i) tokens;
    /// request 0 holds all of its own through the warm-up.
    #[test]
    fn an_earlier_run_of_the_same_server_leaves_each_prompts_shared_prefix() {
        let first = fixture("sglang-llama31-70b-h100-tp8-in1024-c100.jsonl.gz");
        let (_, second) = fixture("sglang-llama31-70b-h100-tp8-in2048-c100.jsonl.gz");
        let (held, notes) = second.held(std::slice::from_ref(&first)).unwrap();
        let (a, b) = (&first.1.sent_inputs, &second.sent_inputs);
        assert_eq!((a[0], b[0], held[0]), (37, 1061, 1061), "warm-up");
        for i in 1..100 {
            assert_eq!(held[i] as u64, a[i].min(b[i]), "request {i}");
        }
        // Request 1 drew 235 tokens both times: all of it is held.
        assert_eq!((a[1], b[1], held[1]), (235, 235, 235));
        let sum: u64 = held.iter().map(|&h| h as u64).sum();
        assert_eq!(sum, 51485);
        assert!(notes
            .iter()
            .any(|n| n.contains("51485 of the run's 108829")));
        // Alone, only the warm-up's prompt is held.
        let (alone, _) = second.held(&[]).unwrap();
        assert_eq!(alone.iter().map(|&h| h as u64).sum::<u64>(), 1061);
    }

    #[test]
    fn runs_of_another_server_or_client_are_refused() {
        let first = fixture("sglang-llama31-70b-h100-tp8-in1024-c100.jsonl.gz");
        let (_, second) = fixture("sglang-llama31-70b-h100-tp8-in2048-c100.jsonl.gz");
        let mut other = first.clone();
        other.1.server.as_mut().unwrap().random_seed = Some(7);
        let e = second.held(&[other]).unwrap_err().to_string();
        assert!(
            e.contains("another server process") && e.contains("random_seed 7"),
            "{e}"
        );
        let vllm = fixture("llama31-70b-h100-tp8-c10.json.gz");
        let e = second
            .held(std::slice::from_ref(&vllm))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("--after llama31-70b-h100-tp8-c10.json.gz"),
            "{e}"
        );
        let e = vllm
            .1
            .held(std::slice::from_ref(&first))
            .unwrap_err()
            .to_string();
        assert!(e.contains("only for SGLang"), "{e}");
        let mut off = second.clone();
        off.server.as_mut().unwrap().disable_radix_cache = Some(true);
        let e = off.held(&[first]).unwrap_err().to_string();
        assert!(e.contains("radix cache off"), "{e}");
        // A vLLM run alone holds nothing (its client warms up with no request by default).
        let (h, _) = vllm.1.held(&[]).unwrap();
        assert!(h.iter().all(|&x| x == 0));
    }
}
