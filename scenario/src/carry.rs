//! Kernel fits carried from another hardware (`kernels_from`), in one place: at load.
//!
//! The `[cost]` coefficients of a hardware file are fractions of that GPU's datasheet
//! peaks (efficiencies), fixed latencies and in-situ factors (`sim::cost::params`), so
//! a GPU without kernel benchmarks of its own can take another's by datasheet ratio:
//! the same fractions, applied to its own peaks. Every `[cost]` and `[cost.spread]`
//! key the file does not set is taken from the `kernels_from` hardware, with the
//! provenance `carried: from SRC by datasheet ratio (SRC's provenance of that key)`;
//! keys the file sets keep their own value and provenance.

use super::{clip, find_file, parse_located, Kind};
use anyhow::{anyhow, bail, Result};
use spec::hardware::Hardware;

/// The provenance a carried key gets.
fn carried_provenance(src: &str, src_provenance: Option<&str>) -> String {
    format!(
        "carried: from {src} by datasheet ratio ({})",
        src_provenance.unwrap_or("no provenance given")
    )
}

/// The provenance key under which a carrying hardware records the datasheet ratios
/// its carried fractions are applied at (`kernels_from`'s own provenance).
pub const RATIO: &str = "kernels_from";

/// The datasheet ratios a carry applies, in words: `mi300x/h100: HBM bandwidth 1.58x,
/// dense BF16 1.32x`.
fn datasheet_ratio(hw: &Hardware, src: &Hardware) -> String {
    format!(
        "{}/{}: HBM bandwidth {:.2}x, dense BF16 {:.2}x",
        hw.name,
        src.name,
        hw.hbm.bytes_per_s / src.hbm.bytes_per_s,
        hw.tensor.bf16_flops_per_s / src.tensor.bf16_flops_per_s
    )
}

/// Fills `hw`'s `[cost]` and `[cost.spread]` from its `kernels_from` hardware (nothing
/// when it names none). `origin` is where `hw` was read, for messages.
pub fn kernel_fits(hw: &mut Hardware, origin: &str) -> Result<()> {
    let Some(src_name) = hw.kernels_from.clone() else {
        return Ok(());
    };
    let src = load_source(hw, &src_name, origin)?;
    hw.provenance
        .insert(RATIO.into(), datasheet_ratio(hw, &src));
    for (k, v) in &src.cost.values {
        if hw.cost.values.contains_key(k) {
            continue;
        }
        hw.cost.values.insert(k.clone(), *v);
        let path = format!("cost.{k}");
        let prov = carried_provenance(&src_name, src.provenance.get(&path).map(String::as_str));
        hw.provenance.insert(path, prov);
    }
    if let Some(src_spread) = &src.cost.spread {
        let own = hw.cost.spread.get_or_insert_with(Default::default);
        for (k, v) in src_spread {
            if own.contains_key(k) {
                continue;
            }
            own.insert(k.clone(), *v);
            let path = format!("cost.spread.{k}");
            let prov = carried_provenance(&src_name, src.provenance.get(&path).map(String::as_str));
            hw.provenance.insert(path, prov);
        }
    }
    Ok(())
}

/// The `kernels_from` hardware, read and checked as it stands in its own file (not
/// carried in turn): refused when it is unknown, carries itself (a chain, or a cycle
/// back to `hw`), or has no kernel fits to carry.
fn load_source(hw: &Hardware, src_name: &str, origin: &str) -> Result<Hardware> {
    let at = format!("{origin}: kernels_from = \"{}\"", clip(src_name));
    let (src_origin, text) =
        find_file(Kind::Hardware, src_name).map_err(|e| anyhow!("{at}: {e}"))?;
    let parsed =
        parse_located::<Hardware>(&src_origin, &text, &[]).map_err(|e| anyhow!("{at}: {e}"))?;
    let problems = sim::validate::hardware(&parsed.value);
    let src = parsed.check(problems).map_err(|e| anyhow!("{at}: {e}"))?;
    if let Some(next) = &src.kernels_from {
        let back =
            *next == hw.name || find_file(Kind::Hardware, next).is_ok_and(|(o, _)| o == origin);
        if back {
            bail!(
                "{at}: a cycle: {} carries kernel fits from {}, which carries them from {} again; name the hardware the fits were made on",
                hw.name,
                src.name,
                hw.name
            );
        }
        bail!(
            "{at}: {} itself carries kernel fits from {}; chains are refused, name the hardware the fits were made on (kernels_from = \"{}\")",
            src.name,
            clip(next),
            clip(next)
        );
    }
    if src.cost.values.is_empty() && src.cost.spread.as_ref().is_none_or(|s| s.is_empty()) {
        bail!(
            "{at}: {} has no [cost] table, no kernel fits to carry; name a hardware with fits: {}",
            src.name,
            with_fits().join(", ")
        );
    }
    Ok(src)
}

/// The embedded hardware with kernel fits of their own (a `[cost]` table, no
/// `kernels_from`): what `kernels_from` may name.
fn with_fits() -> Vec<String> {
    super::embedded_names(Kind::Hardware)
        .into_iter()
        .filter(|n| {
            let Ok((o, t)) = find_file(Kind::Hardware, n) else {
                return false;
            };
            parse_located::<Hardware>(&o, &t, &[])
                .map(|p| p.value.kernels_from.is_none() && !p.value.cost.values.is_empty())
                .unwrap_or(false)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A hardware file's text: h100's, renamed, with `extra` lines put after `name`.
    fn variant(name: &str, extra: &str) -> String {
        let base = crate::embedded_file("hardware/h100.toml").unwrap();
        base.replacen("name = \"h100\"", &format!("name = \"{name}\"\n{extra}"), 1)
    }

    fn write(dir: &std::path::Path, file: &str, text: &str) -> String {
        let p = dir.join(file);
        std::fs::write(&p, text).unwrap();
        p.display().to_string()
    }

    #[test]
    fn carried_provenance_names_the_source_and_its_reason() {
        assert_eq!(
            carried_provenance("h100", Some("assumed: the H800's fit")),
            "carried: from h100 by datasheet ratio (assumed: the H800's fit)"
        );
        assert_eq!(
            carried_provenance("h100", None),
            "carried: from h100 by datasheet ratio (no provenance given)"
        );
    }

    #[test]
    fn a_chain_and_a_cycle_are_refused_with_the_way_out() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a.toml").display().to_string();
        let b = write(
            dir.path(),
            "b.toml",
            &variant("b", &format!("kernels_from = \"{a}\"")),
        );
        write(
            dir.path(),
            "a.toml",
            &variant("a", &format!("kernels_from = \"{b}\"")),
        );
        let e = crate::load_hardware(&a, &[]).unwrap_err().to_string();
        assert!(e.contains("a cycle: a carries kernel fits from b"), "{e}");
        // A chain: c -> a (which carries from b).
        let c = write(
            dir.path(),
            "c.toml",
            &variant("c", &format!("kernels_from = \"{a}\"")),
        );
        let e = crate::load_hardware(&c, &[]).unwrap_err().to_string();
        assert!(e.contains("a itself carries kernel fits from"), "{e}");
        assert!(e.contains("chains are refused"), "{e}");
    }

    #[test]
    fn a_source_without_fits_is_refused_naming_those_with_fits() {
        let dir = tempfile::tempdir().unwrap();
        let p = write(
            dir.path(),
            "x.toml",
            &variant("x", "kernels_from = \"cpu-host\""),
        );
        let e = crate::load_hardware(&p, &[]).unwrap_err().to_string();
        assert!(e.contains("cpu-host has no [cost] table"), "{e}");
        assert!(e.contains("h100") && e.contains("gb300"), "{e}");
        assert!(!with_fits().contains(&"cpu-host".to_string()));
        assert!(!with_fits().contains(&"mi300x".to_string()));
    }
}
