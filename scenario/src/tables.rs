//! `--engine NAME[@VERSION]` (and a scenario's `engine`): the serving engine whose
//! measured kernel tables price the GPU's kernels. twin ships one profile per GPU,
//! engine and version (`scenarios/kernel-tables/<hardware>-<engine>-<version>.toml.gz`,
//! fitted by `twin calibrate --from-tables`); a path to such a file (`.toml` or
//! `.toml.gz`) works too. `twin` (the default) is twin's own kernel model.

use super::embedded;
use anyhow::{anyhow, bail, Context, Result};
use sim::cost::tables::KernelTables;
use spec::hardware::Hardware;
use std::io::Read;
use std::sync::{Arc, Mutex};

/// The profile a folder of measured tables holds (`twin calibrate --tables-out DIR`
/// writes it; `--engine DIR` reads it).
pub const MEASURED_PROFILE: &str = calibration::tables::measure::PROFILE;

/// The name of "no tables": twin's own kernel model.
pub const OWN: &str = "twin";

const FOLDER: &str = "kernel-tables/";

/// The shipped profiles as `(hardware, engine, version)`.
pub fn shipped() -> Vec<(String, String, String)> {
    embedded::BLOBS
        .iter()
        .filter_map(|(rel, _)| {
            let stem = rel.strip_prefix(FOLDER)?.strip_suffix(".toml.gz")?;
            let mut it = stem.splitn(3, '-');
            Some((it.next()?.into(), it.next()?.into(), it.next()?.into()))
        })
        .collect()
}

/// What prices an engine's kernels on a GPU: its measured tables (`Some`), or twin's
/// own kernel model (`None`); and, when that is not what was named, why, in words.
pub type EngineTables = (Option<Arc<KernelTables>>, Option<String>);

/// The tables `choice` names for `hw`: the engine's shipped tables on this GPU (the
/// named version, else the nearest shipped one), or a profile path; `None` for twin's
/// own kernel model, which also prices an engine without tables on this GPU (its
/// scheduler and host terms still apply: they follow the engine's name), said in the
/// note. A path that cannot be read is an error.
pub fn engine_tables(hw: &Hardware, choice: &str) -> Result<EngineTables> {
    let choice = choice.trim();
    if choice.is_empty() || choice == OWN {
        return Ok((None, None));
    }
    if is_path(choice) {
        return Ok((Some(load(hw, choice)?), None));
    }
    let (engine, version) = match choice.split_once('@') {
        Some((e, v)) => (e, Some(v)),
        None => (choice, None),
    };
    let gpu = tables_gpu(hw, engine);
    let Some(nearest) = nearest_shipped(&gpu, engine, version) else {
        // SGLang without tables of its own on this GPU: vLLM's, as the runs corpus
        // prices such runs (measured/src/setup.rs).
        if engine == "sglang" {
            if let Some(v) = nearest_shipped(&tables_gpu(hw, "vllm"), "vllm", None) {
                return Ok((
                    Some(load(hw, &format!("vllm@{v}"))?),
                    Some(format!(
                        "kernels priced by vLLM {v}'s tables, the nearest shipped for {}: no SGLang tables of it are shipped, and both engines run FlashInfer/FlashAttention attention and CUTLASS/DeepGEMM GEMMs",
                        hw.name
                    )),
                ));
            }
        }
        let others: Vec<String> = shipped()
            .into_iter()
            .filter(|(h, _, _)| h == &gpu)
            .map(|(_, e, v)| format!("{e}@{v}"))
            .collect();
        return Ok((
            None,
            Some(format!(
                "kernels priced by twin's own model: no {engine} kernel tables are shipped for {}{}",
                hw.name,
                if others.is_empty() {
                    String::new()
                } else {
                    format!(" (it has {}: --engine one of them prices with its tables)", others.join(", "))
                }
            )),
        ));
    };
    let named = format!("{engine}@{nearest}");
    let note = match version {
        Some(v) if v != nearest => Some(format!(
            "kernels priced by {engine} {nearest}'s tables, the nearest shipped for {} ({engine} {v} has none)",
            hw.name
        )),
        _ => None,
    };
    Ok((Some(load(hw, &named)?), note))
}

/// The GPU whose shipped tables of `engine` price `hw`: its own, else those of the GPU
/// it carries its kernels from (`kernels_from`, carried by datasheet ratio in `load`).
fn tables_gpu(hw: &Hardware, engine: &str) -> String {
    let has = |g: &str| shipped().iter().any(|(h, e, _)| h == g && e == engine);
    match hw.kernels_from.as_deref() {
        Some(from) if !has(&hw.name) && has(from) => from.to_string(),
        _ => hw.name.clone(),
    }
}

/// Of `engine`'s versions shipped for the tables GPU `gpu`, `want` or the nearest to it
/// (the latest when none is asked): [`nearest_version`].
fn nearest_shipped(gpu: &str, engine: &str, want: Option<&str>) -> Option<String> {
    let here: Vec<String> = shipped()
        .into_iter()
        .filter(|(h, e, _)| h == gpu && e == engine)
        .map(|(_, _, v)| v)
        .collect();
    nearest_version(&here, want)
}

/// Whether an `--engine` value is a profile's path (or a folder holding the profile
/// `twin calibrate --tables-out` writes).
pub fn is_path(choice: &str) -> bool {
    choice.contains('/')
        || choice.ends_with(".toml")
        || choice.ends_with(".gz")
        || std::path::Path::new(choice)
            .join(MEASURED_PROFILE)
            .is_file()
}

/// Of shipped versions, `want` if shipped, else the nearest to it (by their numeric
/// parts, the later on a tie), or the latest when none is asked or `want` is no release
/// number (a nightly or a named build: `nightly-dev-...`, `gpt-oss-dev`).
fn nearest_version(shipped: &[String], want: Option<&str>) -> Option<String> {
    let parts = |v: &str| -> Vec<f64> {
        v.split(|c: char| !c.is_ascii_digit())
            .filter(|p| !p.is_empty())
            .map(|p| p.parse().unwrap_or(0.0))
            .collect()
    };
    let key = |v: &str| {
        let p = parts(v);
        p.iter()
            .take(4)
            .enumerate()
            .map(|(i, x)| x * 1e3f64.powi(3 - i as i32))
            .sum::<f64>()
    };
    let mut sorted = shipped.to_vec();
    sorted.sort_by(|a, b| key(a).total_cmp(&key(b)).then(a.cmp(b)));
    match want {
        Some(w) if sorted.iter().any(|v| v == w) => Some(w.to_string()),
        Some(w) if w.starts_with(|c: char| c.is_ascii_digit()) => sorted
            .iter()
            .rev()
            .min_by(|a, b| (key(a) - key(w)).abs().total_cmp(&(key(b) - key(w)).abs()))
            .cloned(),
        _ => sorted.last().cloned(),
    }
}

/// The shipped tables (or the profile at a path) `choice` names for `hw`, cached.
fn load(hw: &Hardware, choice: &str) -> Result<Arc<KernelTables>> {
    static CACHE: Mutex<Vec<(String, String, Arc<KernelTables>)>> = Mutex::new(Vec::new());
    if let Some(t) = CACHE.lock().ok().and_then(|c| {
        c.iter()
            .find(|(h, c, _)| h == &hw.name && c == choice)
            .map(|x| x.2.clone())
    }) {
        return Ok(t);
    }
    let (origin, bytes, carried) = match locate(hw, choice) {
        Ok((o, b)) => (o, b, false),
        Err(e) => match carried_from(hw, choice) {
            Some((o, b)) => (o, b, true),
            None => return Err(e),
        },
    };
    let mut t = parse(&origin, &bytes)?;
    if carried {
        // The fits are efficiencies of the sibling's datasheet: priced on this GPU's
        // own rates, as `kernels_from` carries the hardware file's `[cost]`.
        t.system = format!("{}, carried to {} by datasheet ratio", t.system, hw.name);
        t.hardware = hw.name.clone();
    }
    if !is_path(choice) {
        borrow_nvfp4(hw, &mut t)?;
    }
    let t = Arc::new(t);
    if t.hardware != hw.name {
        bail!(
            "--engine {choice}: {origin} holds tables of {} ({}), not of {}",
            t.hardware,
            t.system,
            hw.name
        );
    }
    if let Ok(mut c) = CACHE.lock() {
        c.push((hw.name.clone(), choice.to_string(), t.clone()));
    }
    Ok(t)
}

/// Shipped tables whose NVFP4 GEMM rows time an untuned kernel
/// ([`KernelTables::nvfp4_rows_untuned`]: TensorRT-LLM's) price NVFP4 dense GEMMs by
/// the same GPU's shipped vLLM fit, where there is one: both engines run CUTLASS FP4
/// GEMMs, and vLLM's rows were timed with the kernel vLLM selects.
fn borrow_nvfp4(hw: &Hardware, t: &mut KernelTables) -> Result<()> {
    use sim::cost::tables::format::Format;
    if !t.nvfp4_rows_untuned() || t.gemm_fit(Format::Nvfp4).is_none() {
        return Ok(());
    }
    let Some(v) = nearest_shipped(&tables_gpu(hw, "vllm"), "vllm", None) else {
        return Ok(());
    };
    let donor = load(hw, &format!("vllm@{v}"))?;
    t.borrow_gemm_fit(
        Format::Nvfp4,
        &donor,
        "its own NVFP4 rows were timed outside TensorRT-LLM's autotuner (the default tactic; a server autotunes)",
    );
    Ok(())
}

/// The shipped tables of `choice` on the hardware `hw` carries its kernels from
/// (`kernels_from`), when `hw` has none of its own.
fn carried_from(hw: &Hardware, choice: &str) -> Option<(String, Vec<u8>)> {
    let from = hw.kernels_from.as_deref()?;
    if is_path(choice) {
        return None;
    }
    let sibling = Hardware {
        name: from.to_string(),
        ..hw.clone()
    };
    locate(&sibling, choice).ok()
}

/// The file `choice` names: `(origin, bytes)`.
fn locate(hw: &Hardware, choice: &str) -> Result<(String, Vec<u8>)> {
    if is_path(choice) {
        // A folder `twin calibrate --tables-out` wrote: its fitted profile.
        let file = match std::path::Path::new(choice) {
            p if p.is_dir() => p.join(MEASURED_PROFILE),
            p => p.to_path_buf(),
        };
        let bytes = std::fs::read(&file).with_context(|| {
            if file == std::path::Path::new(choice) {
                format!("--engine {choice}: cannot read it")
            } else {
                format!("--engine {choice}: cannot read {}", file.display())
            }
        })?;
        return Ok((file.display().to_string(), bytes));
    }
    let (engine, version) = match choice.split_once('@') {
        Some((e, v)) => (e, Some(v)),
        None => (choice, None),
    };
    let all = shipped();
    let mut here: Vec<&(String, String, String)> = all
        .iter()
        .filter(|(h, e, v)| h == &hw.name && e == engine && version.is_none_or(|x| x == v))
        .collect();
    here.sort();
    let Some((h, e, v)) = here.last() else {
        let for_hw: Vec<String> = all
            .iter()
            .filter(|(h, _, _)| h == &hw.name)
            .map(|(_, e, v)| format!("{e}@{v}"))
            .collect();
        bail!(
            "--engine {choice}: no shipped kernel tables of {engine}{} on {}; {}; or give a \
             profile fitted by `twin calibrate --from-tables` as a path",
            version.map(|v| format!(" {v}")).unwrap_or_default(),
            hw.name,
            if for_hw.is_empty() {
                format!(
                    "shipped for: {}",
                    all.iter()
                        .map(|(h, e, v)| format!("{h} {e}@{v}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            } else {
                format!("{} has: {}", hw.name, for_hw.join(", "))
            }
        );
    };
    let rel = format!("{FOLDER}{h}-{e}-{v}.toml.gz");
    let bytes = embedded::BLOBS
        .iter()
        .find(|(p, _)| *p == rel)
        .map(|(_, b)| b.to_vec())
        .ok_or_else(|| anyhow!("{rel}: not embedded"))?;
    Ok((format!("scenarios/{rel} (embedded)"), bytes))
}

fn parse(origin: &str, bytes: &[u8]) -> Result<KernelTables> {
    let text = if bytes.starts_with(&[0x1f, 0x8b]) {
        let mut s = String::new();
        flate2::read::GzDecoder::new(bytes)
            .read_to_string(&mut s)
            .with_context(|| format!("{origin}: not a readable gzip file"))?;
        s
    } else {
        String::from_utf8(bytes.to_vec()).map_err(|_| anyhow!("{origin}: not UTF-8 text"))?
    };
    let t: KernelTables =
        toml::from_str(&text).map_err(|e| anyhow!("{origin}: not a kernel-table profile: {e}"))?;
    t.check()
        .map_err(|e| anyhow!("{origin}: invalid kernel-table profile: {e}"))?;
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::nearest_version;

    /// A shipped version is itself; a release number takes the nearest (the later on a
    /// tie); no version, a nightly or a named build take the latest.
    #[test]
    fn versions_resolve_to_the_nearest_shipped_release() {
        let shipped: Vec<String> = ["0.14.0", "0.19.0", "0.24.0"].map(String::from).to_vec();
        let near = |w: Option<&str>| nearest_version(&shipped, w).unwrap();
        assert_eq!(near(Some("0.19.0")), "0.19.0");
        assert_eq!(near(Some("0.12.0")), "0.14.0");
        assert_eq!(near(Some("0.18.0")), "0.19.0");
        assert_eq!(near(Some("0.22.0")), "0.24.0");
        assert_eq!(near(None), "0.24.0");
        assert_eq!(near(Some("nightly-5b8c30d62b754b57")), "0.24.0");
        assert_eq!(near(Some("gpt-oss-dev")), "0.24.0");
    }
}
