//! `validate bench`'s read-back steps: the server's steps read from a benchmark file's
//! token times ([`live::bench::steps`]) beside twin's, its decode steps priced exactly,
//! and the front end the token times allow, as text and JSON.

use anyhow::{bail, Context, Result};

/// Prices the run of `r` with the front end the token times of `other` (another run of
/// the same deployment) allow under `r`'s scheduler: the middle of the range (where the
/// bounds cross, the middle of the two). The note that says so.
pub(super) fn front_end_from(
    other: &std::path::Path,
    r: &mut scenario::Resolved,
) -> Result<String> {
    let name = other.display().to_string();
    let text =
        super::runs::read_maybe_gzip(other).with_context(|| format!("cannot read {name}"))?;
    let bench = live::bench::Bench::parse(&text, &name)?;
    let ahead = r.scenario().schedules_ahead();
    let Some(f) = bench.front_end_bounds(ahead) else {
        let why = live::bench::steps::unreadable(&bench)
            .unwrap_or("no request of it bounds the front end from both sides");
        bail!("--front-end-from {name}: no front end read from it: {why}");
    };
    let mid = 0.5 * (f.lower_s + f.upper_s);
    r.change(|sc, _| sc.serving.frontend_s = Some(mid))?;
    Ok(format!(
        "front end {:.1} ms (serving.frontend_s), read from {name}: the middle of {:.1}-{:.1} ms, what its token times allow{}; a calibration from the deployment's own runs, not twin's prediction",
        1e3 * mid,
        1e3 * f.lower_s.min(f.upper_s),
        1e3 * f.lower_s.max(f.upper_s),
        if f.lower_s > f.upper_s { " (its bounds cross: no constant front end fits it)" } else { "" }
    ))
}

/// The server's steps read back from a benchmark file ([`live::bench::steps`]) beside
/// twin's of the same kind, or why they cannot be read.
pub(super) enum StepsBeside {
    Read(Beside),
    Unreadable(&'static str),
}

/// What a file's steps say, read back, beside twin's.
pub(super) struct Beside {
    /// Steps read, those run back to back (compared), bursts delivered late.
    read: usize,
    continued: usize,
    bunched: usize,
    kinds: Vec<live::bench::steps::StepKind>,
    /// The front end the token times allow under the scenario's scheduler, and
    /// whether it forms steps ahead; twin's (`serving.frontend_s`), seconds.
    front_end: Option<live::bench::steps::FrontEndBounds>,
    ahead: bool,
    twin_front_end_s: f64,
    /// The read-back decode steps, each priced exactly at its batch.
    decodes: Option<live::bench::steps::DecodesPriced>,
}

impl StepsBeside {
    pub(super) fn of(
        bench: &live::bench::Bench,
        twin: &[sim::serving::SimStep],
        r: &scenario::Resolved,
    ) -> StepsBeside {
        use live::bench::steps;
        let sc = r.scenario();
        let ahead = sc.schedules_ahead();
        let Some(back) = bench.read_back(ahead) else {
            return StepsBeside::Unreadable(steps::unreadable(bench).unwrap_or("no tokens"));
        };
        let (_, mixed) = r.pool_costs(&r.params);
        let read = &back.steps;
        StepsBeside::Read(Beside {
            read: read.steps.len(),
            continued: read.steps.iter().filter(|s| s.continued).count(),
            bunched: read.bunched,
            kinds: steps::beside(read, twin),
            front_end: back.front_end,
            ahead,
            twin_front_end_s: sc.frontend_s(),
            decodes: steps::price_decodes(&mixed, sc.serving.decode.dep as usize, &back.decodes),
        })
    }

    /// The read-back decode steps' mean absolute error priced exactly (null where
    /// the file's steps cannot be read).
    pub(super) fn step_mape(&self) -> serde_json::Value {
        match self {
            StepsBeside::Read(Beside {
                decodes: Some(d), ..
            }) => serde_json::json!(d.mape),
            _ => serde_json::Value::Null,
        }
    }

    /// Kinds printed in the table (the JSON holds them all).
    const SHOWN: usize = 8;

    pub(super) fn json(&self) -> serde_json::Value {
        match self {
            StepsBeside::Read(r) => serde_json::json!({
                "decode_steps_priced": r.decodes,
                "read": r.read, "back_to_back": r.continued, "bunched": r.bunched,
                "kinds": r.kinds,
                "front_end": r.front_end.as_ref().map(|f| serde_json::json!({
                    "lower_ms": 1e3 * f.lower_s, "lower_n": f.lower_n,
                    "upper_ms": 1e3 * f.upper_s, "upper_n": f.upper_n,
                    "steps_formed_ahead": r.ahead, "twin_ms": 1e3 * r.twin_front_end_s,
                })),
            }),
            StepsBeside::Unreadable(why) => serde_json::json!({ "unreadable": why }),
        }
    }

    pub(super) fn text(&self) -> String {
        let r = match self {
            StepsBeside::Read(r) => r,
            StepsBeside::Unreadable(why) => {
                return format!("steps: not read back from the file: {why}\n")
            }
        };
        let mut out = format!(
            "steps read back from the file's token times: {} ({} back to back, compared; late bursts left out: {}), beside twin's that decoded, as a client sees them\n  {:<34} {:>8} {:>9} {:>8} {:>9} {:>8}\n",
            r.read, r.continued, r.bunched, "step", "measured", "p50 ms", "twin", "p50 ms", "error"
        );
        let kinds = &r.kinds;
        for k in kinds.iter().take(Self::SHOWN) {
            let err = if k.twin_steps > 0 {
                format!(
                    "{:+.1}%",
                    100.0 * live::compare::rel(k.twin_ms_p50, k.measured_ms_p50)
                )
            } else {
                "-".into()
            };
            let twin_ms = if k.twin_steps > 0 {
                format!("{:.2}", k.twin_ms_p50)
            } else {
                "-".into()
            };
            out += &format!(
                "  {:<34} {:>8} {:>9.2} {:>8} {:>9} {:>8}\n",
                k.kind, k.measured_steps, k.measured_ms_p50, k.twin_steps, twin_ms, err
            );
        }
        if kinds.len() > Self::SHOWN {
            out += &format!("  ... {} kinds more in --json\n", kinds.len() - Self::SHOWN);
        }
        if let Some(d) = &r.decodes {
            out += &decodes_line(d);
        }
        if let Some(f) = &r.front_end {
            out += &front_end_line(f, r.ahead, r.twin_front_end_s);
        }
        out
    }
}

/// The read-back decode steps priced exactly, in a line: the error and the commonest
/// batch sizes.
fn decodes_line(d: &live::bench::steps::DecodesPriced) -> String {
    let kinds: Vec<String> = d
        .kinds
        .iter()
        .take(3)
        .map(|k| {
            format!(
                "{} {:.2} ms against twin's {:.2} ({})",
                k.kind.trim_start_matches("decode, "),
                k.measured_ms_mean,
                k.twin_ms_mean,
                k.steps
            )
        })
        .collect();
    format!(
        "decode steps priced exactly (each read-back step's batch at its requests' contexts): {} steps, mean |error| {:.1}%, twin's total {:+.1}%; by batch (mean, steps): {}\n",
        d.steps,
        100.0 * d.mape,
        100.0 * d.bias,
        kinds.join(", ")
    )
}

/// The front end a file's token times allow beside twin's, in a line.
fn front_end_line(f: &live::bench::steps::FrontEndBounds, ahead: bool, twin_s: f64) -> String {
    let formed = if ahead {
        "each step formed when the one before starts"
    } else {
        "each step formed when the one before ends"
    };
    let range = if f.lower_s <= f.upper_s {
        format!("{:.1}-{:.1} ms", 1e3 * f.lower_s, 1e3 * f.upper_s)
    } else {
        format!(
            "no constant one (at least {:.1} ms, at most {:.1})",
            1e3 * f.lower_s,
            1e3 * f.upper_s
        )
    };
    format!(
        "front end the token times allow ({formed}, as the scenario's scheduler): {range}, from the 90th percentile of {} lower bounds and the least of {} upper; twin's {:.1} ms (serving.frontend_s)\n",
        f.lower_n,
        f.upper_n,
        1e3 * twin_s
    )
}
