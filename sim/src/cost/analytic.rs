//! Analytic (roofline) cost model. In progress.
use super::{CostModel, CostParams, Layout, StepCost, StepShape};
use crate::{Hardware, Model};

pub struct AnalyticCostModel {
    pub hardware: Hardware,
    pub model: Model,
    pub layout: Layout,
    pub params: CostParams,
}

impl AnalyticCostModel {
    pub fn new(hardware: Hardware, model: Model, layout: Layout, params: CostParams) -> Self {
        AnalyticCostModel { hardware, model, layout, params }
    }
}

impl CostModel for AnalyticCostModel {
    fn step(&self, _shape: &StepShape<'_>) -> StepCost {
        StepCost::default()
    }
    fn describe(&self) -> String {
        self.params.source.clone()
    }
}

impl super::KvCapacity for AnalyticCostModel {
    fn kv_capacity_tokens_per_rank(&self) -> u64 {
        1_000_000
    }
}
