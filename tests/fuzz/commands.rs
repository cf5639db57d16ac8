//! `twin forward` and `twin kernel` command lines.

use super::*;

/// `twin forward` and `twin kernel` command lines with edge numbers and `--set`
/// overrides (some naming mutated hardware and model files), parsed by clap and
/// evaluated as the commands do.
#[test]
fn fuzz_forward_and_kernel_command_lines_never_panic() {
    let n = cases(2000);
    let dir = tempfile::tempdir().unwrap();
    let mut paths: Vec<Field> = leaf_paths(embedded(Kind::Hardware, "gb300"))
        .into_iter()
        .map(|f| f.under("hardware"))
        .collect();
    paths.extend(
        leaf_paths(embedded(Kind::Model, "deepseek-v4.1-flash"))
            .into_iter()
            .map(|f| f.under("model")),
    );
    paths.extend([
        Field::new("cost.moe.mem_eff", "0.5"),
        Field::new("cost.ll.dispatch_s", "0.00001"),
    ]);
    let mut failures = Vec::new();
    let tally = Tally::default();
    for seed in n.clone() {
        let mut rng = ChaCha8Rng::seed_from_u64(1 << 32 | seed);
        let mut argv: Vec<String> = vec!["twin".into()];
        let kernel = rng.random_bool(0.3);
        if kernel {
            argv.extend(kernel_args(&mut rng));
        } else {
            argv.extend(forward_args(&mut rng, dir.path(), seed));
        }
        for _ in 0..rng.random_range(0..3) {
            let set = random_set(&mut rng, &paths);
            argv.extend(["--set".into(), set]);
        }
        let input = argv.join(" ");
        no_panic(&mut failures, "command line", seed, &input, || {
            let Ok(cli) = Cli::try_parse_from(&argv) else {
                return;
            };
            match &cli.command {
                Command::Forward(a) => tally.count(&evaluate_forward(a)),
                Command::Kernel(a) => {
                    let k = a.request().and_then(|r| ::scenario::kernel::evaluate(&r));
                    tally.count(&k);
                    if let Ok(k) = k {
                        let _ = ::scenario::kernel::to_json(&k);
                    }
                }
            }
        });
    }
    tally.show("command lines evaluated");
    check(failures, n);
}

/// A `twin forward` command line with edge numbers; its `--hardware` and `--model`
/// sometimes name a mutated file (written under `dir`) or another embedded one.
fn forward_args(rng: &mut ChaCha8Rng, dir: &std::path::Path, seed: u64) -> Vec<String> {
    let mut argv: Vec<String> = vec!["forward".into()];
    for (flag, p) in [
        ("--dep", 0.6),
        ("--batch-per-rank", 0.5),
        ("--requests", 0.15),
        ("--context", 0.5),
        ("--new-tokens", 0.3),
        ("--chunk", 0.15),
        ("--mtp", 0.2),
        ("--redundant-experts", 0.15),
    ] {
        if rng.random_bool(p) {
            argv.push(format!("{flag}={}", number(rng)));
        }
    }
    if rng.random_bool(0.4) {
        argv.extend(["--phase".into(), "prefill".into()]);
    }
    for flag in ["--no-overlap", "--eager-decode", "--prefill-graphs"] {
        if rng.random_bool(0.1) {
            argv.push(flag.into());
        }
    }
    for (flag, kind, name) in [
        ("--hardware", Kind::Hardware, "gb300"),
        ("--model", Kind::Model, "deepseek-v4.1-flash"),
    ] {
        if rng.random_bool(0.2) {
            let p = dir.join(format!("{seed}{flag}.toml"));
            std::fs::write(&p, mutate(rng, embedded(kind, name))).unwrap();
            argv.extend([flag.to_string(), p.to_string_lossy().into_owned()]);
        } else if rng.random_bool(0.2) {
            let others = embedded_names(kind);
            argv.extend([flag.to_string(), others.choose(rng).unwrap().clone()]);
        }
    }
    argv
}

fn evaluate_forward(a: &ForwardArgs) -> anyhow::Result<()> {
    let f = ::scenario::step::evaluate(&a.request()?)?;
    let _ = forward::render(&f);
    let _ = forward::to_json(&f);
    Ok(())
}

/// An integer for a command-line flag: mostly plausible, else an edge of the integer
/// types, and one in ten anything (`-1`, `nan`, `0.5`: clap refuses those).
fn number(rng: &mut ChaCha8Rng) -> String {
    const PLAUSIBLE_INT: &[&str] = &[
        "1", "2", "4", "8", "16", "24", "32", "48", "64", "128", "256", "1000", "8192",
    ];
    const EDGE_INT: &[&str] = &[
        "0",
        "3",
        "7",
        "4096",
        "4097",
        "65536",
        "4294967295",
        "4294967296",
        "18446744073709551615",
    ];
    match rng.random_range(0..10) {
        0..6 => PLAUSIBLE_INT.choose(rng).unwrap().to_string(),
        6..9 => EDGE_INT.choose(rng).unwrap().to_string(),
        _ => NUMBERS.choose(rng).unwrap().to_string(),
    }
}

/// The required `--ep` and `--tokens`, and each of `optional` two times in five, with
/// numbers.
fn some_flags(rng: &mut ChaCha8Rng, v: &mut Vec<String>, optional: &[&str]) {
    for f in ["--ep", "--tokens"] {
        v.push(format!("{f}={}", number(rng)));
    }
    for f in optional {
        if rng.random_bool(0.4) {
            v.push(format!("{f}={}", number(rng)));
        }
    }
}

/// A `twin kernel` command line with edge numbers.
fn kernel_args(rng: &mut ChaCha8Rng) -> Vec<String> {
    let num = number;
    let mut v: Vec<String> = vec!["kernel".into()];
    match rng.random_range(0..5) {
        0 => {
            v.push("gemm".into());
            for f in ["--m", "--n", "--k", "--groups"] {
                v.push(format!("{f}={}", num(rng)));
            }
            v.extend([
                "--layout".into(),
                ["dense", "contiguous", "masked"]
                    .choose(rng)
                    .unwrap()
                    .to_string(),
            ]);
        }
        1 | 2 => {
            v.push(
                if rng.random_bool(0.5) {
                    "dispatch"
                } else {
                    "combine"
                }
                .into(),
            );
            some_flags(
                rng,
                &mut v,
                &[
                    "--hidden",
                    "--experts",
                    "--top-k",
                    "--groups",
                    "--topk-groups",
                ],
            );
            if rng.random_bool(0.5) {
                v.extend(["--kernels".into(), "low-latency".into()]);
            }
        }
        3 => {
            v.push("moe".into());
            some_flags(rng, &mut v, &["--hidden", "--experts", "--top-k", "--ffn"]);
            if rng.random_bool(0.5) {
                v.push("--fused".into());
            }
        }
        _ => attention_args(rng, &mut v),
    }
    if rng.random_bool(0.3) {
        let hw = embedded_names(Kind::Hardware);
        v.extend(["--hardware".into(), hw.choose(rng).unwrap().clone()]);
    }
    v
}

/// `twin kernel attention`'s arguments: a kind, the required shape flags and some
/// optional ones, with edge numbers.
fn attention_args(rng: &mut ChaCha8Rng, v: &mut Vec<String>) {
    let num = number;
    v.push("attention".into());
    let kind = [
        "dense-decode",
        "sparse-decode",
        "dense-prefill",
        "sparse-prefill",
    ];
    v.extend(["--kind".into(), kind.choose(rng).unwrap().to_string()]);
    for f in [
        "--heads",
        "--q-tokens",
        "--dqk",
        "--dv",
        "--kv-bytes",
        "--context",
        "--top-k",
        "--batch",
    ] {
        if ["--heads", "--q-tokens", "--dqk", "--dv", "--kv-bytes"].contains(&f)
            || rng.random_bool(0.4)
        {
            v.push(format!("{f}={}", num(rng)));
        }
    }
}
