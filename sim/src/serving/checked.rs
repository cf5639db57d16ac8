//! A scenario and its workload that passed every check: the only input the simulator
//! runs ([`super::SimInput::run`]), so it checks nothing again. Built by
//! [`Checked::new`]; a change to either part is a new [`Checked`], checked again.

use super::limits::workload_problems;
use super::{ServingScenario, WorkloadConfig};
use spec::problem::Problem;

/// A scenario and workload that passed every check (fields private: only
/// [`Checked::new`] builds one).
#[derive(Debug, Clone)]
pub struct Checked {
    scenario: ServingScenario,
    workload: WorkloadConfig,
}

/// What failed the checks, by where each problem is (the scenario's, the workload's,
/// the pair's: a workload beyond the scenario's limits), with the parts given back.
#[derive(Debug)]
pub struct Refused {
    pub scenario: Vec<Problem>,
    pub workload: Vec<Problem>,
    pub pair: Vec<Problem>,
    pub parts: (ServingScenario, WorkloadConfig),
}

impl Refused {
    /// Every problem, as text, the scenario's first.
    pub fn lines(&self) -> Vec<String> {
        self.scenario
            .iter()
            .chain(&self.workload)
            .chain(&self.pair)
            .map(ToString::to_string)
            .collect()
    }
}

impl From<Box<Refused>> for super::SimError {
    /// The problems as the simulator reports an invalid scenario.
    fn from(r: Box<Refused>) -> Self {
        super::SimError::InvalidScenario(r.lines())
    }
}

impl Checked {
    /// The pair, when the scenario, the workload and the pair have no problem.
    pub fn new(
        scenario: ServingScenario,
        workload: WorkloadConfig,
    ) -> Result<Checked, Box<Refused>> {
        let r = Refused {
            scenario: scenario.problems(),
            workload: workload.problems(),
            pair: workload_problems(&scenario, &workload),
            parts: (scenario, workload),
        };
        if r.scenario.is_empty() && r.workload.is_empty() && r.pair.is_empty() {
            let (scenario, workload) = r.parts;
            return Ok(Checked { scenario, workload });
        }
        Err(Box::new(r))
    }

    pub fn scenario(&self) -> &ServingScenario {
        &self.scenario
    }

    pub fn workload(&self) -> &WorkloadConfig {
        &self.workload
    }

    /// The parts, to change (and check again).
    pub fn into_parts(self) -> (ServingScenario, WorkloadConfig) {
        (self.scenario, self.workload)
    }
}
