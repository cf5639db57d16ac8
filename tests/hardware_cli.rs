//! The hardware users plan for (A100, H20, MI300X, MI325X, MI355X, B300): each loads and
//! validates, carries its kernel fits from the hardware its `kernels_from` names (and
//! says so once in `twin forward`), and prices a memory-bound kernel by its own
//! datasheet bandwidth.

mod common;

use common::*;
use serde_json::Value;

/// The six files of issue 20 part 5, with the hardware each carries its fits from.
const NEW: [(&str, &str); 6] = [
    ("a100", "h100"),
    ("h20", "h100"),
    ("mi300x", "h100"),
    ("mi325x", "h100"),
    ("mi355x", "b200"),
    ("b300", "b200"),
];

fn raw(name: &str) -> toml::Value {
    let path = repo().join(format!("scenarios/hardware/{name}.toml"));
    toml::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// `twin forward --json` on `hardware` (a small decode step of the default model).
fn forward_json(hardware: &str, extra: &[&str]) -> Value {
    let mut args = vec!["forward", "--hardware", hardware, "--json", "--no-band"];
    args.extend_from_slice(extra);
    json(&twin(&args))
}

#[test]
fn every_new_hardware_is_listed_and_forward_prices_it_naming_the_carry_once() {
    let list = twin(&["list"]);
    assert!(list.status.success(), "{}", stderr(&list));
    let listed = stdout(&list);
    for (name, from) in NEW {
        assert!(listed.contains(name), "`twin list` lacks {name}:\n{listed}");
        let o = twin(&["forward", "--hardware", name]);
        assert!(o.status.success(), "forward on {name}: {}", stderr(&o));
        let text = stdout(&o);
        let line = format!(
            "kernel fits: carried from {from} by datasheet ratio (no public kernel benchmark of {name})"
        );
        assert_eq!(
            text.lines()
                .filter(|l| l.starts_with("kernel fits:"))
                .count(),
            1,
            "{name}:\n{text}"
        );
        assert!(
            text.lines().any(|l| l == line),
            "{name} lacks `{line}`:\n{text}"
        );
        assert!(
            text.contains(&format!(
                "cost parameters carried from {from} by datasheet ratio"
            )),
            "{name}: the cost-model line names the carry:\n{text}"
        );
    }
}

#[test]
fn hardware_with_its_own_fits_prints_no_kernel_fits_line() {
    for name in ["h100", "gb300", "b200", "cpu-host"] {
        let o = twin(&["forward", "--hardware", name, "--model", "tiny-moe"]);
        assert!(o.status.success(), "forward on {name}: {}", stderr(&o));
        assert!(
            !stdout(&o).contains("kernel fits:"),
            "{name}:\n{}",
            stdout(&o)
        );
    }
}

#[test]
fn a_file_without_cost_and_kernels_from_says_it_prices_at_the_defaults() {
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(repo().join("scenarios/hardware/cpu-host.toml"))
        .unwrap()
        .replace("name = \"cpu-host\"", "name = \"bare\"");
    let path = dir.path().join("bare.toml");
    std::fs::write(&path, text).unwrap();
    let o = twin(&[
        "forward",
        "--hardware",
        path.to_str().unwrap(),
        "--model",
        "tiny-moe",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let lines: Vec<String> = stdout(&o)
        .lines()
        .filter(|l| l.starts_with("kernel fits:"))
        .map(str::to_string)
        .collect();
    assert_eq!(
        lines,
        ["kernel fits: built-in defaults (no [cost] table and no kernels_from in bare)"]
    );
}

/// The `[cost]` of `twin forward --json`'s cost model is not printed; the carried
/// values show in a `--set`-free comparison: a carried hardware prices every op with
/// the source's efficiencies, so an op bound by memory scales by bandwidth alone.
#[test]
fn a_carried_key_has_the_sources_value_and_a_key_set_in_the_file_wins() {
    // Carried: mi300x sets no [cost], so its attention.mem_eff is h100's 0.90222; a
    // decode attention kernel bound by memory reads the same bytes on both.
    let k = |hw: &str, extra: &[&str]| -> Value {
        let mut args = vec![
            "kernel",
            "attention",
            "--hardware",
            hw,
            "--kind",
            "dense-decode",
            "--batch",
            "128",
            "--heads",
            "16",
            "--q-tokens",
            "1",
            "--context",
            "8192",
            "--dqk",
            "576",
            "--dv",
            "512",
            "--kv-bytes",
            "1152",
            "--json",
        ];
        args.extend_from_slice(extra);
        json(&twin(&args))
    };
    let h100 = k("h100", &[]);
    let mi = k("mi300x", &[]);
    assert_eq!(h100["bound"], "memory");
    assert_eq!(mi["bound"], "memory");
    let m_h100 = h100["memory_us"].as_f64().unwrap();
    let m_mi = mi["memory_us"].as_f64().unwrap();
    // By hand: memory time = bytes / (HBM bandwidth x attention.mem_eff), the bytes
    // the same on both GPUs and mem_eff carried, so the ratio is 3.35 / 5.3.
    let want = 3.35e12 / 5.3e12;
    assert!(
        (m_mi / m_h100 - want).abs() < 1e-9,
        "mi300x/h100 memory time {} against {want}",
        m_mi / m_h100
    );
    // And the bytes: 128 requests x 8192 entries x 1152 bytes of KV (plus the small
    // query reads) at 5.3 TB/s x 0.90222.
    let kv_us = 128.0 * 8192.0 * 1152.0 / (5.3e12 * 0.90222) * 1e6;
    assert!(
        m_mi >= kv_us && m_mi < kv_us * 1.01,
        "mi300x memory {m_mi} us against the KV read alone {kv_us} us"
    );
    // A key the file sets wins over the carried one.
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(repo().join("scenarios/hardware/mi300x.toml"))
        .unwrap()
        .replace(
            "[provenance]",
            "[cost]\n\"attention.mem_eff\" = 0.5\n\n[provenance]",
        )
        .replace(
            "[provenance]\n",
            "[provenance]\n\"cost.attention.mem_eff\" = \"assumed: a test's own value\"\n",
        );
    let path = dir.path().join("mi300x-own.toml");
    std::fs::write(&path, text).unwrap();
    let own = k(path.to_str().unwrap(), &[]);
    let m_own = own["memory_us"].as_f64().unwrap();
    assert!(
        (m_own / m_mi - 0.90222 / 0.5).abs() < 1e-9,
        "own mem_eff 0.5 against carried 0.90222: {m_own} vs {m_mi}"
    );
    let o = twin(&["forward", "--hardware", path.to_str().unwrap()]);
    let text = stdout(&o);
    assert!(
        text.contains("(no public kernel benchmark of mi300x); 1 cost keys set in mi300x itself"),
        "{text}"
    );
}

#[test]
fn every_new_file_gives_every_field_a_source_and_names_its_kernels_from() {
    for (name, from) in NEW {
        let doc = raw(name);
        assert_eq!(doc["name"].as_str(), Some(name));
        assert_eq!(doc["kernels_from"].as_str(), Some(from), "{name}");
        let prov = doc["provenance"].as_table().unwrap();
        let why = prov["kernels_from"].as_str().unwrap();
        assert!(why.starts_with("assumed: "), "{name}: {why}");
        // The files set no [cost] of their own: every fit is carried, none inherited
        // silently.
        assert!(doc.get("cost").is_none(), "{name} has its own [cost]");
        assert!(
            prov.keys().all(|k| !k.starts_with("cost.")),
            "{name}: provenance of a cost key it does not set"
        );
    }
    // AMD files say that no AMD kernel table exists.
    for name in ["mi300x", "mi325x", "mi355x"] {
        let why = raw(name)["provenance"]["kernels_from"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(why.contains("No AMD kernel table exists"), "{name}: {why}");
    }
    // FP4 only where the GPU has it; the A100's FP8 is its BF16 rate (no FP8 cores).
    for (name, fp4) in [
        ("a100", false),
        ("h20", false),
        ("mi300x", false),
        ("mi325x", false),
        ("mi355x", true),
        ("b300", true),
    ] {
        assert_eq!(
            raw(name)["tensor"].get("fp4_flops_per_s").is_some(),
            fp4,
            "{name}"
        );
    }
    let a100 = raw("a100");
    assert_eq!(
        a100["tensor"]["fp8_flops_per_s"].as_float(),
        a100["tensor"]["bf16_flops_per_s"].as_float()
    );
}

#[test]
fn the_forward_json_of_a_carried_hardware_prices_the_datasheet_it_names() {
    // The same decode step on mi300x and mi325x (the same die, carried from the same
    // h100 fits): the second has more bandwidth, so the step is no slower.
    let a = forward_json("mi300x", &[]);
    let b = forward_json("mi325x", &[]);
    let step = |v: &Value| v["step_ms"].as_f64().unwrap();
    assert!(step(&b) <= step(&a), "{} vs {}", step(&b), step(&a));
    assert!(a["cost_model"]
        .as_str()
        .unwrap()
        .contains("carried from h100 by datasheet ratio"));
    // The in-situ terms are h100's, carried, and say where they come from.
    assert!(
        a["in_situ"]
            .as_str()
            .unwrap()
            .contains("carried: from h100"),
        "{}",
        a["in_situ"]
    );
}

#[test]
fn unknown_and_self_kernels_from_are_refused_clearly() {
    fails_with(
        &[
            "forward",
            "--hardware",
            "mi300x",
            "--set",
            "hardware.kernels_from=h1000",
        ],
        &[
            "kernels_from = \"h1000\"",
            "unknown hardware `h1000`",
            "known:",
            "h100",
        ],
    );
    fails_with(
        &[
            "forward",
            "--hardware",
            "mi300x",
            "--set",
            "hardware.kernels_from=mi300x",
        ],
        &["kernels_from", "cannot carry kernel fits from itself"],
    );
    // A chain: a100 carries from h100; naming a100 is refused with the way out.
    fails_with(
        &[
            "forward",
            "--hardware",
            "mi300x",
            "--set",
            "hardware.kernels_from=a100",
        ],
        &[
            "a100 itself carries kernel fits from h100",
            "chains are refused",
            "kernels_from = \"h100\"",
        ],
    );
    // A source with no fits to carry.
    fails_with(
        &[
            "forward",
            "--hardware",
            "mi300x",
            "--set",
            "hardware.kernels_from=cpu-host",
        ],
        &["cpu-host has no [cost] table", "gb300"],
    );
}

/// The band of a GPU that carries its kernel fits says whose spreads it draws.
#[test]
fn a_carrying_gpu_band_names_whose_spreads_it_draws() {
    let o = twin(&["forward", "--hardware", "mi300x"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(
        text.lines().any(|l| l.starts_with("band p10-p90:")
            && l.contains("(from kernel-fit spreads of h100, carried to mi300x")),
        "{text}"
    );
    // Hardware with its own fits names only itself.
    let text = stdout(&twin(&["forward", "--hardware", "h100"]));
    assert!(
        text.contains("kernel-fit spreads of h100;")
            || text.contains("kernel-fit spreads of h100)"),
        "{text}"
    );
}

/// A hardware file's `in_situ.CATEGORY` spreads move the in-situ terms in the band's
/// draws, and the band line names them; a category without an in-situ term is carried
/// but not drawn.
#[test]
fn in_situ_spreads_widen_the_band_and_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(repo().join("scenarios/hardware/h800.toml")).unwrap();
    let with = text.replace(
        "[cost.spread]\n",
        "[cost.spread]\n\"in_situ.moe\" = 1.0\n\"in_situ.indexer\" = 1.0\n",
    );
    assert_ne!(with, text, "h800.toml has no [cost.spread] table");
    let path = dir.path().join("h800-spread.toml");
    std::fs::write(&path, with).unwrap();
    let step = [
        "forward",
        "--model",
        "deepseek-v3",
        "--phase",
        "decode",
        "--dep",
        "128",
        "--batch-per-rank",
        "128",
        "--context",
        "4096",
        "--set",
        "model.moe.balanced=true",
        "--hardware",
    ];
    let band = |hw: &str| {
        let mut args = step.to_vec();
        args.push(hw);
        let o = twin(&args);
        assert!(o.status.success(), "{}", stderr(&o));
        let text = stdout(&o);
        let line = text
            .lines()
            .find(|l| l.starts_with("band p10-p90: "))
            .unwrap_or_else(|| panic!("{text}"))
            .to_string();
        let (lo, hi) = line["band p10-p90: ".len()..]
            .split_once(" ms")
            .unwrap()
            .0
            .split_once('-')
            .unwrap();
        (lo.parse::<f64>().unwrap(), hi.parse::<f64>().unwrap(), line)
    };
    let (lo0, hi0, line0) = band("h800");
    let (lo1, hi1, line1) = band(path.to_str().unwrap());
    assert!(!line0.contains("in-situ spreads"), "{line0}");
    assert!(line1.contains("; in-situ spreads of moe)"), "{line1}");
    // A factor of e^(+-1.28) on a seventh of the step: the band grows by far more than
    // the sampling noise of 64 draws' p10 and p90.
    assert!(hi1 - lo1 > 1.5 * (hi0 - lo0), "{line0}\n{line1}");
    // The same spreads from the command line, as quoted keys.
    let mut args = step.to_vec();
    args.extend([
        "h800",
        "--set",
        r#"hardware.cost.spread."in_situ.moe"=1.0"#,
        "--set",
        r#"hardware.cost.spread."in_situ.indexer"=1.0"#,
    ]);
    let o = twin(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).lines().any(|l| l == line1), "{}", stdout(&o));
}

/// The PCIe cards planners also serve on (issue 40 part 6): listed, and a TP2 decode
/// step of Llama-3.1-8B priced with its all-reduces over PCIe. One request at 1000
/// cached tokens: 32 layers x 2 all-reduces of 1 token x 2 x 4096 B = 8192 B; TP2 moves
/// 2 x (1/2) x 8192 = 8192 bus bytes each, at 0.44 of the PCIe link (32 GB/s Gen4,
/// 64 GB/s Gen5), after NCCL's 42 us latency over PCIe.
#[test]
fn pcie_cards_are_listed_and_price_a_tp2_llama_decode_over_pcie() {
    let listed = stdout(&twin(&["list"]));
    for (name, link) in [("l40s", 3.2e10), ("l4", 3.2e10), ("rtx-pro-6000", 6.4e10)] {
        assert!(listed.contains(name), "`twin list` lacks {name}:\n{listed}");
        let v = forward_json(
            name,
            &[
                "--model",
                "llama-3.1-8b",
                "--tp",
                "2",
                "--requests",
                "1",
                "--context",
                "1000",
            ],
        );
        let step = v["step_ms"].as_f64().unwrap();
        assert!(step.is_finite() && step > 0.0, "{name}: {v}");
        let comm = v["comm"]["total_ms"].as_f64().unwrap();
        let want = 64.0 * (42e-6 + 8192.0 / (link * 0.44)) * 1e3;
        assert!(
            (comm - want).abs() < 1e-9 * want,
            "{name}: {comm} ms, want {want} ms"
        );
        assert_eq!(v["comm"]["kernels"], "all-reduce", "{name}");
    }
}

/// Every number of the PCIe files says where it comes from, their own all-reduce
/// included, and none has NVLink's FP4 where the GPU lacks it.
#[test]
fn pcie_files_give_every_number_a_source() {
    fn leaves(prefix: &str, t: &toml::Table, out: &mut Vec<String>) {
        for (k, v) in t {
            if k == "provenance" || k == "name" || k == "description" {
                continue;
            }
            let path = if prefix.is_empty() {
                k.clone()
            } else {
                format!("{prefix}.{k}")
            };
            match v {
                toml::Value::Table(sub) => leaves(&path, sub, out),
                _ => out.push(path),
            }
        }
    }
    for (name, fp4) in [("l40s", false), ("l4", false), ("rtx-pro-6000", true)] {
        let doc = raw(name);
        let mut fields = Vec::new();
        leaves("", doc.as_table().unwrap(), &mut fields);
        let prov = doc["provenance"].as_table().unwrap();
        for f in &fields {
            let why = prov
                .get(f)
                .and_then(|v| v.as_str())
                .unwrap_or_else(|| panic!("{name}: {f} has no provenance"));
            assert!(
                ["published: ", "derived: ", "assumed: ", "secondary: "]
                    .iter()
                    .any(|p| why.starts_with(p)),
                "{name} {f}: {why}"
            );
        }
        assert_eq!(
            doc["tensor"].get("fp4_flops_per_s").is_some(),
            fp4,
            "{name}"
        );
        assert!(
            doc["description"].as_str().unwrap().contains("no NVLink"),
            "{name}"
        );
    }
}
