//! The simulator's one input check: `Checked::new` takes a scenario and its workload
//! only when neither has a problem and the workload fits the scenario's limits, and
//! says whose each problem is.

mod common;

use common::*;
use sim::serving::*;

fn valid() -> (ServingScenario, WorkloadConfig) {
    let sc = scenario(Mode::Disaggregated, pool(1, 1), pool(1, 1), 2.0, 0.0);
    (sc, closed_loop(4, 100.0, 10.0))
}

#[test]
fn a_valid_run_is_taken_as_it_is() {
    let (sc, wl) = valid();
    let run = Checked::new(sc.clone(), wl.clone()).expect("valid");
    assert_eq!(run.scenario().fidelity.cohort, sc.fidelity.cohort);
    assert_eq!(run.workload().name, wl.name);
    let (back_sc, back_wl) = run.into_parts();
    assert_eq!(back_sc.duration_s, sc.duration_s);
    assert_eq!(back_wl.closed_loop.map(|c| c.concurrency), Some(4));
}

#[test]
fn each_problem_is_the_scenarios_the_workloads_or_the_pairs() {
    let (mut sc, mut wl) = valid();
    sc.fidelity.cohort = 0;
    wl.closed_loop.as_mut().unwrap().concurrency = 0;
    let r = Checked::new(sc, wl).unwrap_err();
    assert_eq!(r.scenario.len(), 1, "{:?}", r.lines());
    assert_eq!(r.scenario[0], "fidelity.cohort: must be in 1..=1024");
    assert_eq!(r.workload.len(), 1, "{:?}", r.lines());
    assert!(r.workload[0]
        .to_string()
        .starts_with("closed_loop.concurrency: must be >= 1"));
    assert!(r.pair.is_empty());
    // The lines read the scenario's first, and the parts come back unchanged.
    assert_eq!(r.lines()[0], "fidelity.cohort: must be in 1..=1024");
    assert_eq!(r.parts.0.fidelity.cohort, 0);

    // A valid workload beyond the scenario's limits is the pair's problem.
    let (mut sc, wl) = valid();
    sc.limits.max_sessions = 2;
    let r = Checked::new(sc, wl).unwrap_err();
    assert!(r.scenario.is_empty() && r.workload.is_empty());
    assert_eq!(r.pair.len(), 1, "{:?}", r.lines());
    assert!(
        r.pair[0].to_string().contains("max_sessions"),
        "{:?}",
        r.lines()
    );
    // As the simulator reports an invalid scenario.
    let e = SimError::from(
        Checked::new(valid().0, {
            let mut w = valid().1;
            w.closed_loop.as_mut().unwrap().concurrency = 0;
            w
        })
        .unwrap_err(),
    );
    assert!(
        e.to_string()
            .starts_with("invalid scenario:\n  closed_loop.concurrency"),
        "{e}"
    );
}
