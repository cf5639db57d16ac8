//! The kernel-fit words `forward` prints: one line, only when the hardware's kernel
//! fits are not its own (carried from another hardware by `kernels_from`), or when it
//! has none at all and prices at the built-in defaults.

use anyhow::Result;
use scenario::{embedded_file, load_hardware, Overrides};
use spec::hardware::Hardware;

/// Shipped hardware without a `[cost]` table whose output stays as it was: `cpu-host`
/// is the live engine's device, priced by a calibration profile of the machine
/// (`twin calibrate --plan live`), not by kernel fits (its file's header says so).
const QUIET_WITHOUT_FITS: [&str; 1] = ["cpu-host"];

/// Public kernel-benchmark rows priced on hardware `name` (`--hardware NAME` in their
/// `twin kernel` command) in `scenarios/published/kernels-public.csv`.
fn public_rows(name: &str) -> usize {
    let needle = format!("--hardware {name} ");
    embedded_file("published/kernels-public.csv")
        .unwrap_or("")
        .lines()
        .filter(|l| !l.starts_with('#') && l.contains(&needle))
        .count()
}

/// The line, or `None` when the hardware's kernel fits are its own.
pub fn line(hw: &Hardware) -> Option<String> {
    if let Some(from) = &hw.kernels_from {
        let why = match public_rows(&hw.name) {
            0 => format!("no public kernel benchmark of {}", hw.name),
            n => format!(
                "{n} public kernel-benchmark rows of {} exist: fit them with `twin validate published kernels-public --fit`",
                hw.name
            ),
        };
        let own = hw
            .cost
            .keys()
            .map(|k| format!("cost.{k}"))
            .chain(
                hw.cost
                    .spread
                    .iter()
                    .flat_map(|s| s.keys().map(|k| format!("cost.spread.{k}"))),
            )
            .filter(|p| {
                !hw.provenance
                    .get(p)
                    .is_some_and(|v| v.starts_with("carried:"))
            })
            .count();
        let set = match own {
            0 => String::new(),
            n => format!("; {n} cost keys set in {} itself", hw.name),
        };
        return Some(format!(
            "kernel fits: carried from {from} by datasheet ratio ({why}){set}"
        ));
    }
    let no_fits = hw.cost.is_empty() && hw.cost.spread.as_ref().is_none_or(|s| s.is_empty());
    (no_fits && !QUIET_WITHOUT_FITS.contains(&hw.name.as_str())).then(|| {
        format!(
            "kernel fits: built-in defaults (no [cost] table and no kernels_from in {})",
            hw.name
        )
    })
}

/// Appends the line for hardware `name` with `forward`'s `--set` list (its
/// `hardware.*` entries) to `text`, when there is one.
pub fn push_line(text: &mut String, name: &str, set: &[String]) -> Result<()> {
    let sets = Overrides::parse(set)?;
    if let Some(l) = line(&load_hardware(name, &sets.hardware)?) {
        text.push_str(&l);
        text.push('\n');
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_fits_say_nothing_carried_and_missing_fits_say_so() {
        let h100 = load_hardware("h100", &[]).unwrap();
        assert_eq!(line(&h100), None);
        let cpu = load_hardware("cpu-host", &[]).unwrap();
        assert_eq!(line(&cpu), None, "cpu-host's output stays as it was");
        let mut bare = cpu.clone();
        bare.name = "my-gpu".into();
        assert_eq!(
            line(&bare).as_deref(),
            Some("kernel fits: built-in defaults (no [cost] table and no kernels_from in my-gpu)")
        );
        let mi = load_hardware("mi300x", &[]).unwrap();
        assert_eq!(
            line(&mi).as_deref(),
            Some("kernel fits: carried from h100 by datasheet ratio (no public kernel benchmark of mi300x)")
        );
    }

    #[test]
    fn public_rows_count_the_hardware_named_in_kernels_public() {
        assert!(public_rows("h800") > 0);
        assert!(public_rows("gb200") > 0);
        assert_eq!(public_rows("mi300x"), 0);
        // `h20` is not a prefix match of `h200`'s rows.
        assert_eq!(public_rows("h20"), 0);
    }
}
