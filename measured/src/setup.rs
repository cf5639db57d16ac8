//! One record as the run twin simulates: the hardware; the model as served (its
//! config imported with the record's formats); the engine's scheduler and host terms
//! and the nearest shipped kernel tables; the layout as pools; the client as a
//! benchmark workload. A record twin cannot run as measured is refused with the one
//! reason, never approximated silently.

use super::load::Base;
use super::MeasuredError;
use corpus::{EngineName, Format, Layout, Lengths, Load, RunRecord, Workers};
use hf::{ImportOptions, WeightChoice};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use scenario::{Parts, Resolved};
use sim::cost::CostParams;
use sim::serving::workload::bench::{BenchClient, Client};
use sim::serving::{Mode, PoolConfig, ServingScenario, WorkloadConfig};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use MeasuredError as E;

/// Values built once per key, or why they could not be.
type Built<T> = Mutex<HashMap<String, Result<Arc<T>, MeasuredError>>>;

/// Hardware, models and cost parameters built once and shared by the records (and
/// the threads) that use them.
#[derive(Default)]
pub struct Cache {
    hardware: Built<spec::hardware::Hardware>,
    models: Built<spec::model::Model>,
    params: Built<(CostParams, String)>,
}

/// The value of `key` in `map`, built by `make` on first use.
fn cached<T>(
    map: &Built<T>,
    key: &str,
    make: impl FnOnce() -> Result<T, MeasuredError>,
) -> Result<Arc<T>, MeasuredError> {
    if let Some(v) = map.lock().unwrap_or_else(|e| e.into_inner()).get(key) {
        return v.clone();
    }
    let v = make().map(Arc::new);
    map.lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(key.to_string(), v.clone());
    v
}

/// A record ready to simulate.
#[derive(Clone)]
pub struct Setup {
    pub resolved: Resolved,
    /// What prices it, in one line (the scheduler, host terms and kernel tables, and
    /// which engine's they are when the record's own are not shipped).
    pub pricing: String,
}

/// The record `rec` as a checked run under `seed` (its lengths drawn from a stream
/// of `seed` and the record's id).
pub fn setup(
    rec: &RunRecord,
    base: &Base,
    cache: &Cache,
    seed: u64,
) -> Result<Setup, MeasuredError> {
    let hw = cached(&cache.hardware, &rec.gpu.hardware, || {
        scenario::load_hardware(&rec.gpu.hardware, &[]).map_err(|e| E::Load(format!("{e:#}")))
    })?;
    let model = model_of(rec, base, cache)?;
    let priced = pricing(rec, &hw, &model, cache)?;
    let (mode, prefill, decode) = pools(rec, &hw, model.moe.is_some())?;
    let mut sc = scenario(rec, &hw, &model, seed)?;
    sc.serving.mode = mode;
    sc.serving.prefill = prefill;
    sc.serving.decode = decode;
    sc.serving.gpus = Some(sc.gpus());
    sc.serving.gpu_memory_utilization = rec.engine.settings.memory_fraction;
    sc.serving.scheduler_recv_interval = rec.engine.settings.scheduler_recv_interval;
    sc.serving.mixed_chunk = rec.engine.settings.mixed_chunk;
    sc.moe_kernel = rec.engine.settings.moe_kernel;
    sc.pdl = rec.engine.settings.pdl;
    sc.serving.batch_wait_iters = rec.engine.settings.batch_wait_iters;
    sc.serving.batch_wait_tokens_ratio = rec.engine.settings.batch_wait_tokens_ratio;
    sc.serving.adp_balance = rec.engine.settings.adp_balance;
    let mut pricing = priced.1.clone();
    if let Some(sp) = rec.engine.settings.speculative {
        pricing.push_str(&speculative(&mut sc, sp, &model)?);
    }
    let mut bench = client(rec, seed)?;
    // The client counted each prompt without what the server's tokenizer adds.
    bench.special_tokens = model.prompt_special_tokens;
    let workload = WorkloadConfig::bench_run(&format!("{}: {}", rec.client.tool, rec.id), bench);
    let resolved = scenario::resolve_parts(Parts {
        origin: "record".into(),
        scenario: sc,
        workload,
        hardware: (*hw).clone(),
        model: (*model).clone(),
        params: priced.0.clone(),
        notes: Vec::new(),
    })
    .map_err(|e| E::Invalid(format!("{e:#}")))?;
    Ok(Setup { resolved, pricing })
}

/// Sets the speculative decoding a record's server ran on its scenario: `sp`'s drafts a
/// step, each accepted at `sp`'s rate; what it set, for the pricing line. A record that
/// gives no rate is not priced: a speculative step's output hangs on it, and it is the
/// workload's as much as the model's (a benchmark's random prompts are not a chat's).
pub fn speculative(
    sc: &mut ServingScenario,
    sp: corpus::Speculative,
    model: &spec::model::Model,
) -> Result<String, MeasuredError> {
    let n = sp.draft_tokens;
    let Some(a) = sp.acceptance else {
        return Err(E::NotModelled(format!(
            "the server ran speculative decoding ({n} MTP drafts a step) and the record gives no acceptance rate, on which a step's output hangs (engine.settings.speculative.acceptance)"
        )));
    };
    if model.mtp.is_none() {
        return Err(E::NotModelled(format!(
            "the server drafted with the model's MTP layers, which {} does not have",
            model.name
        )));
    }
    sc.serving.mtp.draft_tokens = Some(n);
    sc.serving.mtp.acceptance = Some(vec![a; n as usize]);
    Ok(format!(
        "; speculative decoding: {n} MTP drafts a step, each accepted at {a:.3} (the record's)"
    ))
}

/// The `--weights` choice of a record's formats.
fn weights(gemm: Format, moe: Option<Format>) -> Result<WeightChoice, MeasuredError> {
    Ok(match (gemm, moe.unwrap_or(gemm)) {
        (Format::Bf16, Format::Bf16) => WeightChoice::Bf16,
        (Format::Bf16, Format::Mxfp4) => WeightChoice::Mxfp4,
        (Format::Fp8Block, Format::Fp8Block) => WeightChoice::Fp8,
        (Format::Fp8Tensor, Format::Fp8Tensor) => WeightChoice::Fp8Tensor,
        (Format::Nvfp4, Format::Nvfp4) => WeightChoice::Fp4,
        (g, m) => {
            return Err(E::NotModelled(format!(
                "weights {} with routed experts {}: twin imports a checkpoint in one format, or BF16 with MXFP4 experts",
                g.key(),
                m.key()
            )))
        }
    })
}

/// The record's model as served.
fn model_of(
    rec: &RunRecord,
    base: &Base,
    cache: &Cache,
) -> Result<Arc<spec::model::Model>, MeasuredError> {
    let m = &rec.model;
    let fp8_experts = rec.engine.settings.expert_activations_fp8 == Some(true);
    let key = format!(
        "{}|{:?}|{:?}|{:?}|{fp8_experts}",
        m.config, m.gemm, m.moe, m.kv
    );
    cached(&cache.models, &key, || {
        let mut model = imported(rec, base)?;
        // The server quantises the routed experts' activations to 8 bits.
        if let (true, Some(moe)) = (fp8_experts, model.moe.as_mut()) {
            moe.activation_dtype = spec::dtype::Dtype::Fp8;
        }
        Ok(model)
    })
}

/// The record's model file or Hugging Face config, as the checkpoint's formats say.
fn imported(rec: &RunRecord, base: &Base) -> Result<spec::model::Model, MeasuredError> {
    let m = &rec.model;
    if !m.config.ends_with(".json") {
        return scenario::load_model(&m.config, &[]).map_err(|e| E::Load(format!("{e:#}")));
    }
    let (origin, text) = base
        .text(&m.config)
        .map_err(|e| E::Load(format!("model: {e:#}")))?;
    let name =
        m.id.rsplit('/')
            .next()
            .unwrap_or(&m.id)
            .to_ascii_lowercase();
    let opts = ImportOptions {
        weights: Some(weights(m.gemm, m.moe)?),
        kv_dtype: m.kv.map(|k| match k {
            Format::Bf16 => spec::dtype::Dtype::Bf16,
            _ => spec::dtype::Dtype::Fp8,
        }),
        name: Some(format!("{name}-{}", corpus::filter::precision(rec))),
        quant: None,
    };
    let model = hf::import(&origin, &text, &opts).map_err(|e| E::Load(format!("model: {e:#}")))?;
    let problems = sim::validate::model(&model);
    if !problems.is_empty() {
        let p: Vec<String> = problems.iter().map(|p| p.to_string()).collect();
        return Err(E::Invalid(format!("model {}: {}", m.id, p.join("; "))));
    }
    Ok(model)
}

/// The record's cost parameters and the line that says what they are.
fn pricing(
    rec: &RunRecord,
    hw: &spec::hardware::Hardware,
    model: &spec::model::Model,
    cache: &Cache,
) -> Result<Arc<(CostParams, String)>, MeasuredError> {
    // The engine's tables, the nearest shipped version to the record's (SGLang's by
    // vLLM's where it has none: `scenario::tables::engine_tables`, which says so).
    let tables = rec.engine.choice();
    let own = rec.engine.name.key();
    // The line names the record's engine and version: they are part of the key, so
    // that records priced in parallel read the same line whichever came first; an
    // expert kernel of the record's own prices its model's experts.
    let kernel = rec.engine.settings.moe_kernel;
    let deployed = kernel.or(scenario::usual_moe_kernel(Some(own), hw, model));
    // The line also says a linear-attention model's host time: its own model then too.
    let of_model = if deployed.is_some() || model.linear_attention_layers() > 0 {
        format!("{:?}", rec.model)
    } else {
        String::new()
    };
    let pdl = rec.engine.settings.pdl == Some(true);
    let key = format!("{}|{tables}|{own}|{kernel:?}|{of_model}|{pdl}", hw.name);
    cached(&cache.params, &key, || {
        let mut p = scenario::cost_params(hw, None, &[], Some(&tables), true)
            .map_err(|e| E::Load(format!("{e:#}")))?;
        scenario::apply_moe_kernel(&mut p, hw, model, Some(own), kernel);
        scenario::apply_pdl(&mut p, pdl);
        if let Some(h) = sim::cost::host::Host::of_engine(own) {
            p.host = h;
        }
        if let Some(m) = sim::cost::memory::KvMemory::of_engine(own) {
            p.memory = m;
        }
        let line = format!("{} (record: {})", p.source, rec.engine.label());
        Ok((p, line))
    })
}

/// The engine's defaults where the record gives no setting: (running requests per
/// instance, tokens per step).
fn engine_defaults(engine: EngineName, hw: &spec::hardware::Hardware) -> (u32, u32) {
    match engine {
        // vLLM's API server on a GPU of >= 70 GiB: max_num_seqs 1024,
        // max_num_batched_tokens 8192 (vllm/engine/arg_utils.py get_batch_defaults).
        EngineName::Vllm => (1024, 8192),
        // SGLang sizes max_running_requests from the KV pool (no cap here) and
        // chunked_prefill_size by GPU memory: 8192 below 160 GB, 16384 above
        // (python/sglang/srt/server_args.py; assumed for the versions of the corpus).
        EngineName::Sglang => (
            4096,
            if hw.hbm.capacity.as_f64() >= 160e9 {
                16384
            } else {
                8192
            },
        ),
        // TensorRT-LLM's LLM API: max_batch_size 2048, max_num_tokens 8192
        // (tensorrt_llm/llmapi/llm_args.py).
        EngineName::Trtllm => (2048, 8192),
    }
}

/// One side of a layout as a pool.
fn pool(w: &Workers, moe: bool, cap: (u32, u32), side: &str) -> Result<PoolConfig, MeasuredError> {
    let unsupported = |what: String| Err(E::NotModelled(format!("{side}: {what} is not modelled")));
    if w.pp > 1 {
        return unsupported(format!("pipeline parallelism (pp {})", w.pp));
    }
    let count = w
        .count
        .ok_or_else(|| E::Invalid(format!("{side}: the record gives no worker count")))?;
    let mut p = PoolConfig::default_decode();
    let (t, d) = (w.tp, w.attention_dp);
    match (d, t) {
        (1, t) => {
            p.tp = t;
            p.dep = 1;
            p.instances = count;
            p.expert_parallel = moe && t > 1 && w.moe_ep == t && w.moe_tp == 1;
            if moe && t > 1 && !p.expert_parallel && !(w.moe_tp == t && w.moe_ep == 1) {
                return unsupported(format!(
                    "routed experts split moe_tp {} x moe_ep {} inside TP{t} (twin slices each expert over the TP GPUs, or spreads them whole)",
                    w.moe_tp, w.moe_ep
                ));
            }
        }
        (d, 1) if !moe => {
            p.dep = 1;
            p.tp = 1;
            p.instances = count * d;
        }
        (d, 1) => {
            if !(w.moe_ep == d && w.moe_tp == 1) {
                return unsupported(format!(
                    "attention DP{d} with routed experts moe_tp {} x moe_ep {} (twin's DEP spreads them over the DP ranks)",
                    w.moe_tp, w.moe_ep
                ));
            }
            p.dep = d;
            p.tp = 1;
            p.instances = count;
        }
        (d, t) => return unsupported(format!("attention TP{t} inside DP{d}")),
    }
    p.max_batch_per_rank = (cap.0 / p.dep).max(1);
    p.chunk_tokens_per_rank = cap.1;
    p.max_prefill_requests_per_rank = p.max_batch_per_rank;
    Ok(p)
}

/// The record's layout as (mode, prefill pool, decode pool).
fn pools(
    rec: &RunRecord,
    hw: &spec::hardware::Hardware,
    moe: bool,
) -> Result<(Mode, PoolConfig, PoolConfig), MeasuredError> {
    let d = engine_defaults(rec.engine.name, hw);
    let s = &rec.engine.settings;
    let tokens = s.max_batched_tokens.unwrap_or(d.1);
    let cap = (
        s.max_running.unwrap_or(d.0),
        s.max_prefill_tokens.map_or(tokens, |p| p.min(tokens)),
    );
    if let Some(n) = rec
        .provenance
        .notes
        .iter()
        .find(|n| n.contains("mis-lowered"))
    {
        return Err(E::NotModelled(n.clone()));
    }
    match &rec.layout {
        Layout::Aggregated { workers } => {
            let p = pool(workers, moe, cap, "layout")?;
            Ok((Mode::Aggregated, PoolConfig::default_prefill(), p))
        }
        Layout::Disaggregated { prefill, decode } => Ok((
            Mode::Disaggregated,
            pool(prefill, moe, cap, "prefill")?,
            pool(decode, moe, cap, "decode")?,
        )),
    }
}

/// The scenario around the pools: the engine (its scheduler), no speculation, the run
/// lasting until its last request (bounded by the limit).
fn scenario(
    rec: &RunRecord,
    hw: &spec::hardware::Hardware,
    model: &spec::model::Model,
    seed: u64,
) -> Result<ServingScenario, MeasuredError> {
    let text = format!(
        "name = {:?}\nhardware = {:?}\nmodel = {:?}\nworkload = \"bench\"\nduration_s = 1.0\n[serving]\nmode = \"aggregated\"\n",
        rec.id, hw.name, model.name
    );
    let mut sc: ServingScenario =
        toml::from_str(&text).map_err(|e| E::Load(format!("scenario: {e}")))?;
    // With its version: the scheduler's defaults of that version (vLLM's async
    // scheduling from 0.14.0).
    sc.engine = Some(rec.engine.choice());
    sc.seed = seed;
    sc.warmup_s = 0.0;
    sc.duration_s = sc.limits.max_duration_s;
    sc.serving.mtp.draft_tokens = Some(0);
    Ok(sc)
}

/// `n` lengths as the record's client drew them.
fn draw(l: &Lengths, n: usize, rng: &mut ChaCha8Rng) -> Vec<u32> {
    match l {
        Lengths::Fixed { tokens } => vec![*tokens; n],
        Lengths::Uniform { low, high } => (0..n).map(|_| rng.random_range(*low..=*high)).collect(),
        Lengths::Normal { mean, stddev } => (0..n)
            .map(|_| {
                let z = sim::serving::workload::normal(rng);
                (*mean as f64 + stddev * z).round().max(1.0) as u32
            })
            .collect(),
        Lengths::Recorded { tokens } => tokens.iter().copied().cycle().take(n).collect(),
    }
}

/// The client's run as a benchmark workload: its requests' lengths drawn from a
/// stream of the seed and the record's id.
fn client(rec: &RunRecord, seed: u64) -> Result<BenchClient, MeasuredError> {
    client_of(&rec.client, &rec.id, seed)
}

/// A client's run as a benchmark workload, its lengths drawn from a stream of `seed`
/// and `key` (a record's id).
pub fn client_of(c: &corpus::Client, key: &str, seed: u64) -> Result<BenchClient, MeasuredError> {
    let recorded = |l: &Lengths| match l {
        Lengths::Recorded { tokens } => Some(tokens.len()),
        _ => None,
    };
    let n = c
        .num_prompts
        .map(|n| n as usize)
        .or_else(|| recorded(&c.input).or(recorded(&c.output)))
        .ok_or_else(|| E::Invalid("client: the record gives no prompt count".into()))?;
    if n > 1_000_000 {
        return Err(E::NotModelled(format!(
            "client: {n} prompts: more than twin simulates per record (1,000,000)"
        )));
    }
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ spec::stats::fnv1a64(key.as_bytes()));
    let inputs = draw(&c.input, n, &mut rng);
    let outputs = draw(&c.output, n, &mut rng);
    let requests = inputs
        .into_iter()
        .zip(outputs)
        .map(|(i, o)| [i, o])
        .collect();
    let (conc, rate, burst) = match &c.load {
        Load::ClosedLoop { concurrency } => (Some(*concurrency), None, 1.0),
        Load::Rate {
            req_s,
            burstiness,
            concurrency,
        } => (*concurrency, Some(*req_s), *burstiness),
        Load::Stages { .. } => {
            return Err(E::NotModelled(
                "client: a staged load (inference-perf) is not simulated by validate runs yet"
                    .into(),
            ))
        }
    };
    let mut b = BenchClient::recorded(Client::Vllm, requests, conc, rate, burst);
    b.held = c.held.clone();
    Ok(b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::Base;
    use corpus::*;

    /// Records priced in parallel share one cache: an SGLang record of B200, priced by
    /// vLLM's tables whatever its version, reads a line naming its own version whichever
    /// record was priced first (the line once came from the first one cached).
    #[test]
    fn a_pricing_line_names_its_own_records_version_whatever_the_order() {
        let rec = |v: &str| {
            let mut r = gpt_oss(None);
            r.engine.name = EngineName::Sglang;
            r.engine.version = Some(v.into());
            r
        };
        let hw = scenario::load_hardware("b200", &[]).unwrap();
        let model = scenario::load_model("gpt-oss-120b", &[]).unwrap();
        for order in [["0.5.9", "0.5.10"], ["0.5.10", "0.5.9"]] {
            let cache = Cache::default();
            for v in order {
                let line = pricing(&rec(v), &hw, &model, &cache).unwrap().1.clone();
                assert!(line.contains(&format!("(record: sglang@{v})")), "{line}");
            }
        }
    }

    /// Records of two models on one engine, version and GPU share their cost
    /// parameters, but a linear-attention model's line says its layers' host time and
    /// the other's does not, whichever was priced first.
    #[test]
    fn a_pricing_line_says_linear_attention_for_its_own_model_only() {
        let hw = scenario::load_hardware("b200", &[]).unwrap();
        let dir = env!("CARGO_MANIFEST_DIR");
        let qwen35 = scenario::load_model(
            &format!("{dir}/../scenarios/runs/models/Qwen3.5-397B-A17B/config.json"),
            &[],
        )
        .unwrap();
        let llama = scenario::load_model("llama-3.1-70b", &[]).unwrap();
        let rec = |id: &str| {
            let mut r = gpt_oss(None);
            r.model.id = id.into();
            r.model.moe = None;
            r
        };
        let (hybrid, dense) = (
            rec("Qwen/Qwen3.5-397B-A17B"),
            rec("meta-llama/Llama-3.1-70B"),
        );
        for hybrid_first in [true, false] {
            let cache = Cache::default();
            let lines = |r: &RunRecord, m: &spec::model::Model| {
                pricing(r, &hw, m, &cache).unwrap().1.clone()
            };
            let (h, d) = if hybrid_first {
                let h = lines(&hybrid, &qwen35);
                (h, lines(&dense, &llama))
            } else {
                let d = lines(&dense, &llama);
                (lines(&hybrid, &qwen35), d)
            };
            assert!(h.contains("linear attention"), "{h}");
            assert!(!d.contains("linear attention"), "{d}");
        }
    }

    /// A gpt-oss-120b record of vLLM on one B200 (its experts' activations as given).
    fn gpt_oss(fp8: Option<bool>) -> RunRecord {
        RunRecord {
            schema: SCHEMA.into(),
            id: "gpt-oss".into(),
            provenance: Provenance::default(),
            engine: Engine {
                name: EngineName::Vllm,
                version: None,
                image: None,
                settings: EngineSettings {
                    expert_activations_fp8: fp8,
                    ..Default::default()
                },
            },
            model: ModelRef {
                id: "openai/gpt-oss-120b".into(),
                config: "models/gpt-oss-120b/config.json".into(),
                gemm: Format::Bf16,
                moe: Some(Format::Mxfp4),
                kv: None,
            },
            gpu: Gpu {
                system: "b200_sxm".into(),
                hardware: "b200".into(),
            },
            layout: Layout::Aggregated {
                workers: Workers {
                    count: Some(1),
                    tp: 1,
                    pp: 1,
                    attention_dp: 1,
                    moe_tp: 1,
                    moe_ep: 1,
                    max_batch: None,
                },
            },
            client: corpus::Client {
                tool: "synthetic".into(),
                load: Load::ClosedLoop { concurrency: 4 },
                num_prompts: Some(8),
                warmup_requests: 0,
                input: Lengths::Fixed { tokens: 128 },
                output: Lengths::Fixed { tokens: 16 },
                shared_prefix: 0,
                ignore_eos: true,
                held: Vec::new(),
            },
            measured: Default::default(),
        }
    }

    /// A record's expert kernel, batch waiting and attention-DP balance reach the run it
    /// is simulated as: the scenario carries them, and the cost model's line names
    /// Marlin's fit, which a record without them does not.
    #[test]
    fn a_records_expert_kernel_and_batch_waiting_reach_its_run() {
        let (base, cache) = (Base::Embedded("runs/"), Cache::default());
        let mut rec = gpt_oss(None);
        rec.gpu = Gpu {
            system: "h100_sxm".into(),
            hardware: "h100".into(),
        };
        let plain = setup(&rec, &base, &cache, 1).unwrap();
        let s = &mut rec.engine.settings;
        s.moe_kernel = Some(spec::kernel::MoeKernel::Marlin);
        s.batch_wait_iters = Some(20);
        s.batch_wait_tokens_ratio = Some(0.9);
        s.adp_balance = Some(true);
        let set = setup(&rec, &base, &cache, 1).unwrap();
        let sc = set.resolved.scenario();
        assert_eq!(sc.moe_kernel, Some(spec::kernel::MoeKernel::Marlin));
        assert_eq!(sc.serving.batch_wait_iters, Some(20));
        assert_eq!(sc.serving.batch_wait_tokens_ratio, Some(0.9));
        assert_eq!(sc.serving.adp_balance, Some(true));
        assert!(
            set.pricing.contains("routed experts on marlin"),
            "{}",
            set.pricing
        );
        assert!(!plain.pricing.contains("marlin"), "{}", plain.pricing);
        assert_eq!(plain.resolved.scenario().serving.batch_wait_iters, None);
    }

    /// A record's speculative decoding reaches its run at the record's acceptance, one
    /// per draft, and its line says so; without a rate, or on a model without MTP
    /// layers, the record is not priced and the reason says which.
    #[test]
    fn speculative_decoding_is_priced_only_at_the_records_acceptance() {
        let hw = scenario::load_hardware("b200", &[]).unwrap();
        let mtp = scenario::load_model("deepseek-v3", &[]).unwrap();
        let none = scenario::load_model("gpt-oss-120b", &[]).unwrap();
        let mut sc = scenario(&gpt_oss(None), &hw, &mtp, 1).unwrap();
        assert_eq!(sc.serving.mtp.draft_tokens, Some(0));
        let sp = |acceptance| Speculative {
            method: SpecMethod::Mtp,
            draft_tokens: 3,
            acceptance,
        };
        let line = speculative(&mut sc, sp(Some(0.6)), &mtp).unwrap();
        assert_eq!(sc.serving.mtp.draft_tokens, Some(3));
        assert_eq!(sc.serving.mtp.acceptance, Some(vec![0.6; 3]));
        assert!(
            line.contains("3 MTP drafts a step, each accepted at 0.600 (the record's)"),
            "{line}"
        );
        let e = speculative(&mut sc, sp(None), &mtp)
            .unwrap_err()
            .to_string();
        assert!(e.contains("no acceptance rate"), "{e}");
        let e = speculative(&mut sc, sp(Some(0.6)), &none)
            .unwrap_err()
            .to_string();
        assert!(e.contains("gpt-oss-120b does not have"), "{e}");
    }

    /// A record launched with PDL (TensorRT-LLM `TRTLLM_ENABLE_PDL=1`) is priced with
    /// no gap between a graph's kernels, and its line says so; without it the
    /// hardware's gap stands.
    #[test]
    fn a_record_launched_with_pdl_leaves_no_gap_between_kernels() {
        let cache = Cache::default();
        let mut rec = gpt_oss(None);
        rec.engine.name = EngineName::Trtllm;
        let hw = scenario::load_hardware(&rec.gpu.hardware, &[]).unwrap();
        let model = model_of(&rec, &Base::Embedded("runs/"), &cache).unwrap();
        let plain = pricing(&rec, &hw, &model, &cache).unwrap();
        rec.engine.settings.pdl = Some(true);
        let pdl = pricing(&rec, &hw, &model, &cache).unwrap();
        assert!(plain.0.launch.graph_node_s > 0.0);
        assert_eq!(pdl.0.launch.graph_node_s, 0.0);
        assert_eq!(pdl.0.launch.graph_s, plain.0.launch.graph_s);
        assert!(pdl.1.contains("kernels launched with PDL"), "{}", pdl.1);
        assert!(!plain.1.contains("PDL"), "{}", plain.1);
    }

    /// A record's `expert_activations_fp8` (vLLM's MXFP8 MoE on B200) runs the routed
    /// experts on FP8 activations: gpt-oss's MXFP4 experts become W4A8, which the
    /// tables price by their `w4a8_mxfp4` rows; without it they keep BF16 (W4A16).
    #[test]
    fn fp8_expert_activations_reach_the_model() {
        let rec = gpt_oss;
        let (base, cache) = (Base::Embedded("runs/"), Cache::default());
        let act = |fp8| {
            let m = model_of(&rec(fp8), &base, &cache).unwrap();
            let moe = m.moe.as_ref().unwrap();
            (moe.activation_dtype, moe.weight_dtype, moe.scale_block)
        };
        use spec::dtype::Dtype;
        assert_eq!(act(Some(true)), (Dtype::Fp8, Dtype::Fp4, 32));
        assert_eq!(act(None), (Dtype::Bf16, Dtype::Fp4, 32));
        // The tables' format of each (`sim::cost::tables::format::Format::of_experts`).
        use sim::cost::tables::format::Format as T;
        assert_eq!(
            T::of_experts(Dtype::Fp4, 32, Dtype::Fp8),
            Some(T::W4a8Mxfp4)
        );
    }
}
