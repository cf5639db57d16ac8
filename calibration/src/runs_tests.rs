//! Tests of `runs.rs`: the fit, its cross-validation and its bands, by hand.

use super::*;

fn term(key: &'static str, log: bool, prior: f64, sd: f64) -> Term {
    Term {
        key,
        log,
        prior,
        sd,
        step: 0.1,
    }
}

/// An observation of metric 0 without a curve: `y0` at the priors, its gradient, and
/// the log of what was measured.
fn obs(y0: f64, grad: Vec<f64>, target: f64) -> Obs {
    Obs {
        metric: 0,
        y0,
        grad,
        target,
        curve: None,
    }
}

/// An observation made exactly by the linear model at the true values `v`.
fn made(y0: f64, grad: Vec<f64>, v: &[f64], terms: &[Term]) -> Obs {
    let mut o = obs(y0, grad, 0.0);
    let v0: Vec<f64> = terms.iter().map(|t| t.prior).collect();
    o.target = o.value(v, &v0).ln();
    o
}

/// Observations made by a known model: Y = y0 + g_f (f - 1) + g_s s, truth f = 1.3
/// (a factor), s = 0.02 s. Under weak priors the fit recovers both; with no
/// observation the priors stand.
#[test]
fn known_terms_are_recovered_and_priors_stand_alone() {
    let terms = [term("f", true, 1.0, 1e3), term("s", false, 0.0, 1e3)];
    let truth = [1.3, 0.02];
    let obs: Vec<Obs> = [
        (10.0, 8.0, 1.0),
        (20.0, 5.0, 1.0),
        (5.0, 1.0, 1.0),
        (40.0, 30.0, 1.0),
    ]
    .iter()
    .map(|&(y0, gf, gs)| made(y0, vec![gf, gs * 1e3], &truth, &terms))
    .collect();
    let refs: Vec<&Obs> = obs.iter().collect();
    let p = fit(&refs, &terms, &[1.0]);
    assert!((p[0].exp() - 1.3).abs() < 1e-4, "{p:?}");
    assert!((p[1] - 0.02).abs() < 1e-5, "{p:?}");
    assert_eq!(fit(&[], &terms, &[1.0]), vec![0.0, 0.0]);
}

/// A seconds term the data would drive negative is held at zero: Y = 10 + 1000 s
/// with a target of 9 wants s = -1 ms.
#[test]
fn seconds_stay_non_negative() {
    let terms = [term("s", false, 0.0, 1e3)];
    let o = [obs(10.0, vec![1e3], 9f64.ln())];
    let refs: Vec<&Obs> = o.iter().collect();
    assert_eq!(fit(&refs, &terms, &[1.0]), vec![0.0]);
}

/// A held-out fold never enters its own fit: fold "b" (which alone would want a
/// factor of 3) is predicted by the terms of fold "a" alone (1.2), and the other
/// way round. Y = 10 f: b's residual is ln(30) - ln(12).
#[test]
fn a_held_out_fold_never_enters_its_own_fit() {
    let terms = [term("f", true, 1.0, 1e3)];
    let obs = vec![
        made(10.0, vec![10.0], &[1.2], &terms),
        made(10.0, vec![10.0], &[1.2], &terms),
        made(10.0, vec![10.0], &[3.0], &terms),
    ];
    let fold = vec!["a".to_string(), "a".into(), "b".into()];
    let r = cross_validate(&obs, &fold, &terms, &[1.0]);
    assert!((r[2] - (30f64.ln() - 12f64.ln())).abs() < 1e-4, "{r:?}");
    assert!((r[0] - (12f64.ln() - 30f64.ln())).abs() < 1e-4, "{r:?}");
}

/// The ridge: one observation wanting a factor of e (ln 1) against a prior sd of 1
/// on ln f, with the model's log-slope 1 at the prior (Y = y0 f near f = 1): the
/// minimum of (ln f - 1)^2 + (ln f)^2 is ln f = 1/2 for a model exactly linear in
/// ln f; the value-linear model bends it, so between 0.4 and 0.6.
#[test]
fn the_ridge_pulls_towards_the_prior() {
    let terms = [term("f", true, 1.0, 1.0)];
    let o = [obs(1.0, vec![1.0], 1.0)];
    let refs: Vec<&Obs> = o.iter().collect();
    let p = fit(&refs, &terms, &[1.0]);
    assert!(p[0] > 0.4 && p[0] < 0.6, "{p:?}");
}

/// A term along a curve: the prediction is the curve's (its gradient unused), and
/// the fit finds the value the measurement needs even where the curve first falls
/// from the prior (a linear fit from the prior would walk the wrong way) and lies
/// between its points. Curve (s, Y): (0, 10), (0.01, 8), (0.05, 20), (0.1, 25); the
/// measured 22 lies at s = 0.07 by hand (20 + 5 x 0.02 / 0.05).
#[test]
fn a_term_along_a_curve_is_searched() {
    let terms = [term("f", true, 1.0, 1e-9), term("s", false, 0.01, 1e3)];
    let curve = Curve {
        term: 1,
        points: vec![(0.0, 10.0), (0.01, 8.0), (0.05, 20.0), (0.1, 25.0)],
    };
    let o = Obs {
        metric: 0,
        y0: 8.0,
        grad: vec![0.0, -200.0],
        target: 22f64.ln(),
        curve: Some(curve.clone()),
    };
    assert_eq!(o.value(&[1.0, 0.03], &[1.0, 0.01]), 14.0);
    assert_eq!(curve.at(-1.0), 10.0);
    assert_eq!(curve.at(1.0), 25.0);
    let p = fit(&[&o], &terms, &[1.0]);
    assert!((p[1] - 0.07).abs() < 1e-3, "{p:?}");
    assert_eq!(p[0], 0.0);
    // Pinned, the term stays at its prior and the curve gives the prior's value.
    let pinned = [terms[0], term("s", false, 0.01, 1e-9)];
    let q = fit(&[&o], &pinned, &[1.0]);
    assert!(q[0].abs() < 1e-9 && (q[1] - 0.01).abs() < 1e-9, "{q:?}");
}

#[test]
fn a_band_for_an_unseen_fold_carries_the_spread_between_folds() {
    // One fold: its own residuals' band.
    let r = [-0.2, -0.1, 0.0, 0.1, 0.2];
    assert_eq!(band_unseen(&r, &["a"; 5]), band(&r));
    // Two folds, no spread within: medians -0.1 and +0.1, mean 0, sd of the
    // medians 0.1414, widened by sqrt(1 + 1/2): 0.1732. The band is that normal's
    // p10-p90 (+-1.2816 sd: +-0.222) as the 41-point grid gives it, between the
    // grid's neighbouring points around +-1.2816 (+-1.2206 and +-1.3580 sd).
    let r = [-0.1, -0.1, 0.1, 0.1];
    let (lo, hi) = band_unseen(&r, &["a", "a", "b", "b"]).unwrap();
    let sd = (0.02f64 * 1.5).sqrt();
    assert!((lo.ln() + hi.ln()).abs() < 1e-12);
    assert!(
        hi.ln() > 1.2206 * sd && hi.ln() < 1.3580 * sd,
        "{}",
        hi.ln() / sd
    );
    // Pooling the same residuals would give only +-0.1: the folds' own range.
    let (plo, phi) = band(&r).unwrap();
    assert!(phi.ln() <= 0.1 + 1e-12 && plo.ln() >= -0.1 - 1e-12);
    assert_eq!(band_unseen(&[], &[]), None);
}

#[test]
fn a_robust_band_is_not_set_by_one_far_fold() {
    // Five folds with medians 0, 0, 0.1, -0.1 and 3 (no spread within): the robust
    // centre is 0 and the median absolute deviation 0.1, so the spread is 0.14826 x
    // sqrt(1.2) = 0.1624 and the band about +-1.28 of it (+-0.21); the far fold
    // leaves it there, where it sets the ordinary band's spread (sd 1.33).
    let r = [0.0, 0.0, 0.1, -0.1, 3.0];
    let f = ["a", "b", "c", "d", "e"];
    let (lo, hi) = band_unseen_robust(&r, &f).unwrap();
    assert!(lo.ln() > -0.23 && lo.ln() < -0.19, "{lo}");
    assert!(hi.ln() > 0.19 && hi.ln() < 0.23, "{hi}");
    let (lo, hi) = band_unseen(&r, &f).unwrap();
    assert!(hi.ln() - lo.ln() > 3.0, "{lo} {hi}");
    // One fold: its own residuals' band, as the ordinary one.
    let r = [-0.2, -0.1, 0.0, 0.1, 0.2];
    assert_eq!(band_unseen_robust(&r, &["a"; 5]), band(&r));
}

#[test]
fn quantiles_and_bands_by_hand() {
    let xs = [0.0, 1.0, 2.0, 3.0, 4.0];
    assert_eq!(quantile(&xs, 0.5), Some(2.0));
    assert!(quantile(&xs, 0.1).unwrap() < quantile(&xs, 0.9).unwrap());
    let (lo, hi) = band(&[0.0; 3]).unwrap();
    assert_eq!((lo, hi), (1.0, 1.0));
    assert_eq!(quantile(&[], 0.5), None);
}
