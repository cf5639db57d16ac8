//! `--bench 'CLIENT FLAGS'`: a benchmark client's command line read into the
//! workload that sends what it sends (`sim::serving::workload::bench`). The flags are
//! the clients' own, with their defaults:
//! - `vllm` (`vllm bench serve --dataset-name random`): `--num-prompts` (1000),
//!   `--max-concurrency` (none), `--request-rate` (inf), `--burstiness` (1),
//!   `--random-input-len` (1024), `--random-output-len` (128), `--random-range-ratio`
//!   (0), `--random-prefix-len` (0);
//! - `sglang` (`python -m sglang.bench_serving --dataset-name random`): the same
//!   names but `--random-output-len` 1024 and no `--burstiness`;
//! - `aiperf` (`aiperf profile`): `--request-count` (10), `--concurrency` (none),
//!   `--request-rate` (inf), `--synthetic-input-tokens-mean` (550) and `-stddev` (0),
//!   `--output-tokens-mean` (required) and `-stddev` (0).
//!
//! Flags that do not change the load (`--model`, `--ignore-eos`, `--seed`, ...) are
//! accepted and named in a note; a flag that would change it and that twin cannot
//! follow (another dataset) is an error.

use anyhow::{bail, Context, Result};
use sim::serving::workload::bench::{BenchClient, Client};

/// Flags that take a value and leave the load as it is.
const IGNORED_WITH_VALUE: &[&str] = &[
    "--model",
    "--tokenizer",
    "--backend",
    "--base-url",
    "--host",
    "--port",
    "--endpoint",
    "--seed",
    "--save-result",
    "--result-dir",
    "--result-filename",
    "--label",
    "--percentile-metrics",
    "--metric-percentiles",
    "--served-model-name",
    "--url",
    "--endpoint-type",
    "--artifact-dir",
    "--tokenizer-mode",
    "--num-warmups",
    "--warmup-requests",
    "--warmup-request-count",
];

/// Flags without a value that leave the load as it is (twin always generates the
/// requested output length, as with `--ignore-eos`).
const IGNORED_SWITCHES: &[&str] = &[
    "--ignore-eos",
    "--save-detailed",
    "--disable-tqdm",
    "--disable-ignore-eos",
    "--streaming",
    "--trust-remote-code",
    "--disable-stream",
];

/// The client of `spec` (`vllm --num-prompts 640 --max-concurrency 64 ...`), and
/// notes on what was taken as given.
pub fn parse(spec: &str) -> Result<(BenchClient, Vec<String>)> {
    let words: Vec<&str> = spec.split_whitespace().collect();
    let Some((&first, rest)) = words.split_first() else {
        bail!("--bench: empty; give a client and its flags, e.g. 'vllm --num-prompts 640 --max-concurrency 64 --random-input-len 8192 --random-output-len 1024'");
    };
    let client = match first.to_ascii_lowercase().as_str() {
        "vllm" => Client::Vllm,
        "sglang" => Client::Sglang,
        "aiperf" => Client::Aiperf,
        other => bail!("--bench: unknown client `{other}`; one of vllm, sglang, aiperf"),
    };
    let mut c = defaults(client);
    let mut notes = Vec::new();
    let mut output_given = false;
    let mut i = 0;
    while i < rest.len() {
        let (flag, inline) = match rest[i].split_once('=') {
            Some((f, v)) => (f, Some(v)),
            None => (rest[i], None),
        };
        if IGNORED_SWITCHES.contains(&flag) {
            notes.push(format!(
                "--bench: {flag} does not change the load twin simulates"
            ));
            i += 1;
            continue;
        }
        let value = match inline {
            Some(v) => v,
            None => {
                i += 1;
                rest.get(i)
                    .copied()
                    .with_context(|| format!("--bench {first}: {flag} needs a value"))?
            }
        };
        i += 1;
        if IGNORED_WITH_VALUE.contains(&flag) {
            notes.push(format!(
                "--bench: {flag} {value} does not change the load twin simulates"
            ));
            continue;
        }
        output_given |= set(&mut c, flag, value).with_context(|| format!("--bench {first}"))?;
    }
    if client == Client::Aiperf && !output_given {
        bail!("--bench aiperf: give --output-tokens-mean (aiperf lets the model stop where it likes; twin needs a length)");
    }
    let problems: Vec<String> = c.problems().iter().map(ToString::to_string).collect();
    if !problems.is_empty() {
        bail!("--bench {first}: {}", problems.join("; "));
    }
    Ok((c, notes))
}

/// The client's defaults (its own `--help`).
fn defaults(client: Client) -> BenchClient {
    let (num_prompts, input_len, output_len) = match client {
        Client::Vllm => (1000, 1024, 128),
        Client::Sglang => (1000, 1024, 1024),
        Client::Aiperf => (10, 550, 0),
    };
    BenchClient {
        client,
        num_prompts,
        max_concurrency: None,
        request_rate: None,
        burstiness: 1.0,
        input_len,
        output_len,
        range_ratio: 0.0,
        input_stddev: 0.0,
        output_stddev: 0.0,
        prefix_len: 0,
        requests: Vec::new(),
        held: Vec::new(),
        special_tokens: 0,
    }
}

/// Sets one flag; true when it gave the output length.
fn set(c: &mut BenchClient, flag: &str, value: &str) -> Result<bool> {
    let num = || -> Result<f64> {
        value
            .parse::<f64>()
            .ok()
            .filter(|x| !x.is_nan())
            .with_context(|| format!("{flag} {value}: not a number"))
    };
    let whole = || -> Result<u32> {
        let x = num()?;
        if x < 0.0 || x.fract() != 0.0 || x > u32::MAX as f64 {
            bail!("{flag} {value}: not a whole number of at most {}", u32::MAX);
        }
        Ok(x as u32)
    };
    let aiperf = c.client == Client::Aiperf;
    match flag {
        "--num-prompts" if !aiperf => c.num_prompts = whole()? as u64,
        "--request-count" if aiperf => c.num_prompts = whole()? as u64,
        "--max-concurrency" if !aiperf => c.max_concurrency = Some(whole()?),
        "--concurrency" if aiperf => c.max_concurrency = Some(whole()?),
        "--request-rate" => {
            c.request_rate = match value {
                "inf" | "Inf" | "infinity" => None,
                _ => Some(num()?).filter(|r| r.is_finite()),
            }
        }
        "--burstiness" if c.client == Client::Vllm => c.burstiness = num()?,
        "--random-input-len" if !aiperf => c.input_len = whole()?,
        "--random-output-len" if !aiperf => {
            c.output_len = whole()?;
            return Ok(true);
        }
        "--random-range-ratio" if !aiperf => c.range_ratio = num()?,
        "--random-prefix-len" if c.client == Client::Vllm => c.prefix_len = whole()?,
        "--synthetic-input-tokens-mean" if aiperf => c.input_len = whole()?,
        "--synthetic-input-tokens-stddev" if aiperf => c.input_stddev = num()?,
        "--output-tokens-mean" if aiperf => {
            c.output_len = whole()?;
            return Ok(true);
        }
        "--output-tokens-stddev" if aiperf => c.output_stddev = num()?,
        "--dataset-name" if value == "random" && !aiperf => {}
        "--dataset-name" => bail!(
            "--dataset-name {value}: twin draws the random dataset only (its lengths are known; another dataset's are in the prompts)"
        ),
        _ => bail!("{flag}: not a flag twin reads for this client (see `twin simulate --help`, --bench)"),
    }
    Ok(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_issue_example_reads_as_vllm_would_send_it() {
        let (c, notes) = parse("vllm --num-prompts 640 --max-concurrency 64 --random-input-len 8192 --random-output-len 1024 --random-range-ratio 0.8 --ignore-eos").unwrap();
        assert_eq!(c.client, Client::Vllm);
        assert_eq!((c.num_prompts, c.max_concurrency), (640, Some(64)));
        assert_eq!(
            (c.input_len, c.output_len, c.range_ratio),
            (8192, 1024, 0.8)
        );
        assert_eq!(c.request_rate, None);
        assert_eq!(notes.len(), 1);
        let (c, _) = parse("vllm --request-rate=4 --burstiness 0.5").unwrap();
        assert_eq!(
            (c.request_rate, c.burstiness, c.num_prompts),
            (Some(4.0), 0.5, 1000)
        );
        assert_eq!((c.input_len, c.output_len), (1024, 128));
    }

    #[test]
    fn sglang_and_aiperf_have_their_own_defaults_and_flags() {
        let (s, _) = parse("sglang --max-concurrency 8").unwrap();
        assert_eq!((s.output_len, s.range_ratio), (1024, 0.0));
        assert!(parse("sglang --burstiness 2").is_err());
        let (a, _) = parse("aiperf --request-count 100 --concurrency 4 --synthetic-input-tokens-mean 3000 --output-tokens-mean 200 --output-tokens-stddev 20").unwrap();
        assert_eq!((a.num_prompts, a.max_concurrency), (100, Some(4)));
        assert_eq!(
            (a.input_len, a.output_len, a.output_stddev),
            (3000, 200, 20.0)
        );
        let e = parse("aiperf --concurrency 4").unwrap_err().to_string();
        assert!(e.contains("--output-tokens-mean"), "{e}");
    }

    #[test]
    fn bad_specs_say_what_and_where() {
        for (spec, want) in [
            ("", "empty"),
            ("tgi --num-prompts 3", "unknown client `tgi`"),
            ("vllm --num-prompts", "needs a value"),
            ("vllm --num-prompts 2.5", "not a whole number"),
            ("vllm --dataset-name sharegpt", "random dataset only"),
            ("vllm --max-concurrency 0", "bench.max_concurrency"),
            ("vllm --random-range-ratio 1.0", "bench.range_ratio"),
            ("vllm --frobnicate 3", "--frobnicate"),
        ] {
            let e = format!("{:#}", parse(spec).unwrap_err());
            assert!(e.contains(want), "{spec}: {e}");
        }
    }
}
