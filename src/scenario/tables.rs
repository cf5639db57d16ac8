//! `--engine NAME[@VERSION]` (and a scenario's `engine`): the serving engine whose
//! measured kernel tables price the GPU's kernels. twin ships one profile per GPU,
//! engine and version (`scenarios/kernel-tables/<hardware>-<engine>-<version>.toml.gz`,
//! fitted by `twin calibrate --from-tables`); a path to such a file (`.toml` or
//! `.toml.gz`) works too. `twin` (the default) is twin's own kernel model.

use super::embedded;
use anyhow::{anyhow, bail, Context, Result};
use sim::cost::tables::KernelTables;
use sim::Hardware;
use std::io::Read;
use std::sync::{Arc, Mutex};

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

/// The tables `choice` names for `hw`, or `None` for twin's own kernel model.
pub fn engine_tables(hw: &Hardware, choice: &str) -> Result<Option<Arc<KernelTables>>> {
    let choice = choice.trim();
    if choice.is_empty() || choice == OWN {
        return Ok(None);
    }
    static CACHE: Mutex<Vec<(String, String, Arc<KernelTables>)>> = Mutex::new(Vec::new());
    if let Some(t) = CACHE.lock().ok().and_then(|c| {
        c.iter()
            .find(|(h, c, _)| h == &hw.name && c == choice)
            .map(|x| x.2.clone())
    }) {
        return Ok(Some(t));
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
    Ok(Some(t))
}

/// The shipped tables of `choice` on the hardware `hw` carries its kernels from
/// (`kernels_from`), when `hw` has none of its own.
fn carried_from(hw: &Hardware, choice: &str) -> Option<(String, Vec<u8>)> {
    let from = hw.kernels_from.as_deref()?;
    if choice.contains('/') || choice.ends_with(".toml") || choice.ends_with(".gz") {
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
    if choice.contains('/') || choice.ends_with(".toml") || choice.ends_with(".gz") {
        let bytes =
            std::fs::read(choice).with_context(|| format!("--engine {choice}: cannot read it"))?;
        return Ok((choice.to_string(), bytes));
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
