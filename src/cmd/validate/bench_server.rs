//! What a benchmark result file says of its server, for `twin validate bench`: the
//! engine whose terms price it (an SGLang client's file ran an SGLang server) and the
//! server's own arguments, from the per-request file (`server_info`) or from a
//! summary's hints.

use super::runs::BenchValidateArgs;
use anyhow::Result;

/// The scenario resolved for a result file, and a note when the file's server sets the
/// engine. `sglang_server`: the file ran an SGLang server (its version where the file
/// states it). Such a file is priced as that SGLang version (its host terms and the
/// terms fitted to SGLang's runs) where neither `--engine` nor `--profile` says
/// otherwise; under another engine the user names, by physics alone (that engine's
/// fitted terms do not describe this server). Any other file: the scenario's.
pub(super) fn resolve_priced(
    a: &BenchValidateArgs,
    sglang_server: Option<Option<String>>,
) -> Result<(scenario::Resolved, Option<String>)> {
    let mut req = scenario::RunRequest::of(&a.scenario, &a.set)?;
    req.pricing = a.pricing.pricing();
    let r = scenario::resolve(&req)?;
    let engine = a.pricing.engine.clone().or(r.scenario().engine.clone());
    let sglang = engine
        .as_deref()
        .map(sim::cost::host::engine_key)
        .as_deref()
        == Some("sglang");
    let Some(version) = sglang_server else {
        return Ok((r, None));
    };
    if sglang || a.pricing.profile.is_some() {
        return Ok((r, None));
    }
    if a.pricing.engine.is_some() {
        req.pricing.physics_only = true;
        return Ok((scenario::resolve(&req)?, None));
    }
    let name = version.map_or_else(|| "sglang".to_string(), |v| format!("sglang@{v}"));
    req.pricing.engine = Some(name.clone());
    let note = format!(
        "the file is SGLang's bench_serving's: priced as engine {name} (its host terms and the terms fitted to its runs), not the scenario's engine ({})",
        engine.as_deref().unwrap_or("twin")
    );
    Ok((scenario::resolve(&req)?, Some(note)))
}

/// The speculative decoding a result file's server counted (vLLM's `spec_decode_*`
/// counters, SGLang's `server_info` and acceptance), set on the scenario of `r`: its
/// drafts a step, each accepted at the file's rate, priced with the model's MTP layers,
/// and a note. A file that states none keeps the scenario's; one twin cannot price
/// (no acceptance rate, a model without MTP layers) is refused, saying why.
pub(super) fn speculative(
    sp: Option<corpus::Speculative>,
    r: &mut scenario::Resolved,
    origin: &str,
) -> Result<Option<String>> {
    let Some(sp) = sp else { return Ok(None) };
    let model = r.model.clone();
    let mut set = Ok(String::new());
    r.change(|sc, _| set = measured::setup::speculative(sc, sp, &model))?;
    set.map_err(|e| {
        anyhow::anyhow!(
            "{origin}: the file's server decoded speculatively ({} drafts a step), which twin prices with the model's MTP layers only: {e}",
            sp.draft_tokens
        )
    })?;
    Ok(Some(format!(
        "the file's server decoded speculatively: {} drafts a step, each accepted at {:.3} (its counters), priced with the model's MTP layers (serving.mtp)",
        sp.draft_tokens,
        sp.acceptance.unwrap_or(0.0)
    )))
}

/// What a summary file's server states (`corpus::clients::Hints`: SGLang's
/// `server_info`), applied to the scenario's mixed pool as `server_settings` applies a
/// per-request file's: SGLang's scheduler, the token budget (one data-parallel
/// replica), the running cap, the mixed chunk, the receive interval. Each change is a
/// note.
pub(super) fn summary_settings(
    hints: &corpus::clients::Hints,
    sc: &mut sim::serving::ServingScenario,
    notes: &mut Vec<String>,
) {
    if sc.serving.mode != sim::serving::Mode::Aggregated {
        return;
    }
    if hints.engine == Some(corpus::EngineName::Sglang) {
        sglang_scheduler(sc, notes);
    }
    let s = &hints.settings;
    let replicas = hints.workers.as_ref().and_then(|w| w.count).unwrap_or(1);
    let pool = &mut sc.serving.decode;
    if let Some(c) = s.max_batched_tokens.filter(|&c| c > 0 && replicas == 1) {
        pool.chunk_tokens_per_rank = c;
        notes.push(format!(
            "the file's server: a budget of {c} tokens a step (serving.decode.chunk_tokens_per_rank)"
        ));
    }
    if let Some(m) = s.max_running.filter(|&m| m > 0) {
        pool.max_batch_per_rank = m;
        notes.push(format!(
            "the file's server: {m} requests running at most (serving.decode.max_batch_per_rank)"
        ));
    }
    if s.mixed_chunk == Some(true) {
        sc.serving.mixed_chunk = Some(true);
        notes.push("the file's server: mixed chunks on (serving.mixed_chunk)".into());
    }
    if let Some(n) = s.scheduler_recv_interval {
        sc.serving.scheduler_recv_interval = Some(n);
        notes.push(format!(
            "the file's server: new requests taken every {n} decode steps (serving.scheduler_recv_interval)"
        ));
    }
}

/// SGLang's scheduler for an SGLang server's file, said in a note where the scenario
/// had another.
fn sglang_scheduler(sc: &mut sim::serving::ServingScenario, notes: &mut Vec<String>) {
    use sim::serving::scheduler::{Scheduler, SchedulerChoice};
    if sc.scheduler() != Scheduler::Sglang {
        sc.serving.scheduler = SchedulerChoice::Sglang;
        notes.push("the file is SGLang's bench_serving's: SGLang's scheduler forms the steps (serving.scheduler = sglang)".into());
    }
}

/// What the result file says of its server, applied to the scenario's mixed pool: an
/// SGLang client's file ran an SGLang server (its scheduler), and SGLang records its
/// server's arguments (`server_info`): the token budget, the running cap, the overlap
/// scheduler. Each change is a note.
pub(super) fn server_settings(
    bench: &live::bench::Bench,
    sc: &mut sim::serving::ServingScenario,
    notes: &mut Vec<String>,
) {
    use sim::serving::workload::bench::Client;
    if bench.client != Client::Sglang || sc.serving.mode != sim::serving::Mode::Aggregated {
        return;
    }
    sglang_scheduler(sc, notes);
    let Some(si) = &bench.server else { return };
    let pool = &mut sc.serving.decode;
    let dp = si.dp_size.unwrap_or(1).max(1);
    if let Some(c) = si.chunked_prefill_size.filter(|&c| c > 0 && dp == 1) {
        pool.chunk_tokens_per_rank = c.min(u32::MAX as u64) as u32;
        notes.push(format!(
            "server_info: chunked_prefill_size {c} (serving.decode.chunk_tokens_per_rank)"
        ));
    }
    if let Some(m) = si.max_running_requests.filter(|&m| m > 0) {
        pool.max_batch_per_rank = m.min(u32::MAX as u64) as u32;
        notes.push(format!(
            "server_info: max_running_requests {m} (serving.decode.max_batch_per_rank)"
        ));
    }
    if let Some(off) = si.disable_overlap_schedule {
        sc.serving.async_scheduling = Some(!off);
    }
    if si.enable_mixed_chunk == Some(true) {
        sc.serving.mixed_chunk = Some(true);
        notes.push("server_info: enable_mixed_chunk on (serving.mixed_chunk)".into());
    }
    if let Some(v) = &si.version {
        notes.push(format!("server_info: SGLang {v}"));
    }
}

#[cfg(test)]
mod tests {
    use super::server_settings;
    use std::io::Read;

    /// An SGLang result file whose server ran `--enable-mixed-chunk` runs its decodes
    /// beside its prefills (`serving.mixed_chunk`), said in a note; one without keeps
    /// the scenario's.
    #[test]
    fn an_sglang_files_mixed_chunk_is_taken() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut text = String::new();
        flate2::read::GzDecoder::new(
            std::fs::File::open(
                root.join("tests/fixtures/bench/sglang-llama31-70b-h100-tp8-in1024-c100.jsonl.gz"),
            )
            .unwrap(),
        )
        .read_to_string(&mut text)
        .unwrap();
        let scenario =
            std::fs::read_to_string(root.join("scenarios/h100-llama-3.1-70b-tp8.toml")).unwrap();
        for (on, want) in [(false, None), (true, Some(true))] {
            let file = text.replace(
                "\"enable_mixed_chunk\": false",
                &format!("\"enable_mixed_chunk\": {on}"),
            );
            let bench = live::bench::Bench::parse(&file, "fixture").unwrap();
            let mut sc: sim::serving::ServingScenario = toml::from_str(&scenario).unwrap();
            let mut notes = Vec::new();
            server_settings(&bench, &mut sc, &mut notes);
            assert_eq!(sc.serving.mixed_chunk, want, "{notes:?}");
            let said = notes.iter().any(|n| n.contains("enable_mixed_chunk"));
            assert_eq!(said, on, "{notes:?}");
        }
    }
}
