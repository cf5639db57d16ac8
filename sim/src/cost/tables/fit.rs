//! One family and key's fit of a kernel-table profile: its physics parameters, the
//! correction over its shape axes and along its sweep axis, and its errors; the price
//! of a shape under it.

use super::family::{Family, Prepared, Shape};
use super::grid::{self, Axis, Grid};
use serde::{Deserialize, Serialize};
use spec::hardware::Hardware;
use std::collections::{BTreeMap, HashMap};
use std::sync::OnceLock;

/// Errors of a fit on rows, as fractions (`measured`-relative).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Errors {
    pub rows: usize,
    /// Median of |predicted / measured - 1|.
    pub median: f64,
    /// Share of rows within 20%.
    pub within_20: f64,
}

/// One family and key's fit.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Fit {
    pub family: Family,
    pub key: String,
    /// Physics parameters by name ([`Family::params`]).
    pub params: BTreeMap<String, f64>,
    /// The correction: ln(measured / physics) over the family's shape axes.
    pub correction: Grid,
    /// Finer corrections along the family's sweep axis (MoE: token-expert pairs), one
    /// per measured configuration (the other axes' values), fitted to what the
    /// coarse correction leaves; a configuration the tables lack has none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sweeps: Vec<Sweep>,
    /// Training rows: physics alone and with the correction.
    pub fit_physics: Errors,
    pub fit: Errors,
    /// Held-out rows (every fifth distinct shape): physics alone and corrected.
    pub check_physics: Errors,
    pub check: Errors,
    /// Leave-one-out over the distinct shapes, where they are few.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leave_one_out: Option<Errors>,
    #[serde(skip)]
    prepared: OnceLock<Prepared>,
    #[serde(skip)]
    sweep_index: OnceLock<HashMap<Vec<i64>, usize>>,
}

/// One configuration's correction along the sweep axis. Stored as one line of text,
/// `AT; LO STEP N; VALUES`: the other axes' coordinates (log2, comma-separated), the
/// sweep axis, and the values as [`grid::encode`] writes them.
#[derive(Debug, Clone, PartialEq)]
pub struct Sweep {
    /// The other axes' coordinates (log2), in feature order without the sweep axis.
    pub at: Vec<f64>,
    pub grid: Grid,
}

impl Serialize for Sweep {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let at: Vec<String> = self.at.iter().map(|x| format!("{x:.6}")).collect();
        let a = self.grid.axes.first().copied().unwrap_or(Axis {
            lo: 0.0,
            step: 1.0,
            n: 0,
        });
        s.serialize_str(&format!(
            "{}; {} {} {}; {}",
            at.join(","),
            a.lo,
            a.step,
            a.n,
            grid::encode(&self.grid.values)
        ))
    }
}

impl<'de> Deserialize<'de> for Sweep {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Sweep, D::Error> {
        let text = String::deserialize(d)?;
        parse_sweep(&text).map_err(|e| serde::de::Error::custom(format!("sweep {text:?}: {e}")))
    }
}

fn parse_sweep(text: &str) -> Result<Sweep, String> {
    let parts: Vec<&str> = text.split(';').map(str::trim).collect();
    let [at, axis, values] = parts[..] else {
        return Err("expected `AT; LO STEP N; VALUES`".into());
    };
    let at = at
        .split(',')
        .map(|x| {
            x.trim()
                .parse::<f64>()
                .map_err(|_| format!("bad coordinate {x:?}"))
        })
        .collect::<Result<Vec<f64>, String>>()?;
    let ax: Vec<&str> = axis.split_ascii_whitespace().collect();
    let [lo, step, n] = ax[..] else {
        return Err("expected the axis as `LO STEP N`".into());
    };
    let num = |x: &str| {
        x.parse::<f64>()
            .map_err(|_| format!("bad axis value {x:?}"))
    };
    let axis = Axis {
        lo: num(lo)?,
        step: num(step)?,
        n: n.parse().map_err(|_| format!("bad node count {n:?}"))?,
    };
    let values = grid::decode(values).map_err(|e| e.to_string())?;
    if values.len() != axis.n {
        return Err(format!("{} values for {} nodes", values.len(), axis.n));
    }
    Ok(Sweep {
        at,
        grid: Grid {
            axes: vec![axis],
            values,
        },
    })
}

/// A configuration's identity: its coordinates to 1e-6.
pub fn config_key(at: &[f64]) -> Vec<i64> {
    at.iter().map(|x| (x * 1e6).round() as i64).collect()
}

impl Fit {
    pub fn new(family: Family, key: String, params: Vec<f64>, correction: Grid) -> Fit {
        let params = family
            .params()
            .iter()
            .zip(params)
            .map(|(p, v)| (p.0.to_string(), v))
            .collect();
        Fit {
            family,
            key,
            params,
            correction,
            fit_physics: Errors::default(),
            fit: Errors::default(),
            check_physics: Errors::default(),
            check: Errors::default(),
            leave_one_out: None,
            sweeps: Vec::new(),
            prepared: OnceLock::new(),
            sweep_index: OnceLock::new(),
        }
    }

    /// The parameters in [`Family::params`] order (a missing one at its start value).
    pub fn param_vec(&self) -> Vec<f64> {
        self.family
            .params()
            .iter()
            .map(|p| self.params.get(p.0).copied().unwrap_or(p.1))
            .collect()
    }

    fn prepared(&self) -> &Prepared {
        self.prepared
            .get_or_init(|| Prepared::new(self.family, self.param_vec()))
    }

    /// The physics price of `shape`, seconds.
    pub fn physics(&self, hw: &Hardware, shape: &Shape) -> f64 {
        shape.physics(hw, self.prepared())
    }

    /// The corrected price of `shape`, seconds: of the shape itself, or of the shape
    /// the tables measured in its stead ([`Self::measured_equivalent`]).
    pub fn price(&self, hw: &Hardware, shape: &Shape) -> f64 {
        let equivalent = self.measured_equivalent(shape);
        let shape = equivalent.as_ref().unwrap_or(shape);
        let x = shape.features();
        self.physics(hw, shape) * (self.correction.at(&x) + self.sweep_at(&x)).exp()
    }

    /// For an MoE shard whose experts are sliced over GPUs where every row of this fit
    /// timed whole experts (the correction's slicing axis, `hidden x tp / inter`, has
    /// one node; the shard lies past it and its whole experts do not), the shard of
    /// whole experts that does the same work ([`Shape::moe_whole_experts`]); `None`
    /// otherwise. Without one sliced
    /// row, the tile physics of narrower expert GEMMs rests on parameters fitted to
    /// whole experts alone. TensorRT-LLM's MXFP4 tables time whole experts only, and
    /// at TP4 priced gpt-oss-120b's prefill experts at 2.5x the same work on whole
    /// experts, where the runs corpus measures the two layouts alike (H200, TP4 with
    /// experts sliced 4 ways or spread over 4 GPUs: TPOT 4.98 and 4.94 ms at 4 users of
    /// 1k prompts, 5.13 ms both at 4 users of 8k prompts).
    pub fn measured_equivalent(&self, shape: &Shape) -> Option<Shape> {
        const SLICING_AXIS: usize = 3;
        if self.family != Family::Moe {
            return None;
        }
        let axis = self.correction.axes.get(SLICING_AXIS)?;
        if axis.n != 1 || *shape.features().get(SLICING_AXIS)? <= axis.lo + 1e-6 {
            return None;
        }
        let whole = shape.moe_whole_experts()?;
        (whole.features()[SLICING_AXIS] <= axis.lo + 1e-6).then_some(whole)
    }

    /// The time an MoE shard's useful arithmetic takes at this fit's compute
    /// efficiency (`compute_eff` of the format's tensor rate), seconds: the floor the
    /// kernel's arithmetic rate sets at large batches, without its memory side,
    /// padding or fixed costs. `None` for other families.
    pub fn compute_floor(&self, hw: &Hardware, shape: &Shape) -> Option<f64> {
        let Shape::Moe { format, .. } = *shape else {
            return None;
        };
        let eff = *self.params.get("compute_eff")?;
        Some(shape.moe_flops()? / (format.rate(hw) * eff))
    }

    /// The sweep correction at `x`, 0 where the configuration was not measured.
    pub fn sweep_at(&self, x: &[f64]) -> f64 {
        let Some(axis) = self.family.sweep_axis() else {
            return 0.0;
        };
        if self.sweeps.is_empty() {
            return 0.0;
        }
        let index = self.sweep_index.get_or_init(|| {
            self.sweeps
                .iter()
                .enumerate()
                .map(|(i, s)| (config_key(&s.at), i))
                .collect()
        });
        let (at, along) = split_sweep(x, axis);
        index
            .get(&config_key(&at))
            .map_or(0.0, |&i| self.sweeps[i].grid.at(&[along]))
    }
}

/// `x` without its sweep axis, and the sweep axis's value.
pub fn split_sweep(x: &[f64], axis: usize) -> (Vec<f64>, f64) {
    let at = x
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != axis)
        .map(|(_, v)| *v)
        .collect();
    (at, x[axis])
}

impl PartialEq for Fit {
    fn eq(&self, o: &Fit) -> bool {
        (
            self.family,
            &self.key,
            &self.params,
            &self.correction,
            &self.sweeps,
        ) == (o.family, &o.key, &o.params, &o.correction, &o.sweeps)
    }
}
