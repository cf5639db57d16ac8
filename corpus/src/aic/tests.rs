use super::*;

const HEADER: &str = "id,silicon_data_source,backend,backend_version,model_path,system,precision,mode,isl,osl,gemm_quant_mode,moe_quant_mode,batch_size,tp_size,pp_size,attention_dp_size,moe_tp_size,moe_ep_size,prefill_batch_size,prefill_num_workers,prefill_tp_size,prefill_pp_size,prefill_attention_dp_size,prefill_moe_tp_size,prefill_moe_ep_size,decode_batch_size,decode_num_workers,decode_tp_size,decode_pp_size,decode_attention_dp_size,decode_moe_tp_size,decode_moe_ep_size,silicon_ttft_ms,silicon_tpot_ms";

fn csv(rows: &[&str]) -> String {
    format!("{HEADER}\n{}\n", rows.join("\n"))
}

/// InferenceX's gpt-oss scripts for TensorRT-LLM set a 20,000-token step budget and
/// 85% of free memory for the KV cache (an 8K prompt fits a step beside 64 decodes;
/// TensorRT-LLM's own default budget, 8192, would not hold it).
#[test]
fn an_inferencex_gpt_oss_trtllm_row_carries_its_scripts_budget() {
    let text = csv(&["2026_04_06_gpt_oss_120b_h200_sxm_trtllm_fp4_agg_8192x1024_c64_tp2_ep1_444,source_file=2026-04-06.csv; model=GPT-OSS-120B; silicon_concurrency=64; measured=2025-11-02T00:00:00.000Z; wip=False,trtllm,,openai/gpt-oss-120b,h200_sxm,fp4,agg,8192,1024,nvfp4,nvfp4,64,2,1,1,2,1,,,,,,,,,,,,,,,770.1,21.96"]);
    let imp = import(&text).unwrap();
    assert!(imp.refused.is_empty(), "{:?}", imp.refused);
    // The H200 script leaves the KV cache at the model's dtype (B200's: FP8).
    assert_eq!(imp.records[0].model.kv, None);
    let s = &imp.records[0].engine.settings;
    assert_eq!(s.max_batched_tokens, Some(20000));
    // It exports TRTLLM_ENABLE_PDL=1 (from 2025-09-19; the row is of 2025-11-02).
    assert_eq!(s.pdl, Some(true));
    assert_eq!(s.memory_fraction, Some(0.85));
    assert_eq!(s.prefix_caching, Some(false));
}

/// A TensorRT-LLM row of a per-tensor FP8 (or NVFP4) checkpoint serves the FP8 KV
/// cache ModelOpt wrote into it; vLLM's row of the same checkpoint keeps the model's
/// dtype, and a BF16 TensorRT-LLM row too.
#[test]
fn a_trtllm_modelopt_checkpoint_serves_an_fp8_kv_cache() {
    let row = |id: &str, engine: &str, q: &str, ttft: u32| {
        format!("{id},source_file=Qwen_Qwen3-32B.csv; silicon_concurrency=8,{engine},1.0.0rc3,Qwen/Qwen3-32B,h100_sxm,{q},agg,1024,128,{q},{q},8,1,1,1,1,1,,,,,,,,,,,,,,,{ttft}.0,10.0")
    };
    let text = csv(&[
        &row("a", "trtllm", "fp8", 100),
        &row("b", "vllm", "fp8", 110),
        &row("c", "trtllm", "", 120),
    ]);
    let imp = import(&text).unwrap();
    assert!(imp.refused.is_empty(), "{:?}", imp.refused);
    let kv: Vec<Option<Format>> = imp.records.iter().map(|r| r.model.kv).collect();
    assert_eq!(kv, [Some(Format::Fp8Tensor), None, None]);
}

/// InferenceX's gpt-oss vLLM script for B200 runs the MXFP4 experts on MXFP8
/// activations (`VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8=1`) and, from 2025-12-05, an FP8
/// KV cache; the H200 script sets neither. TensorRT-LLM's B200 script: FP8 KV.
#[test]
fn an_inferencex_gpt_oss_vllm_b200_row_carries_its_scripts_experts_and_kv() {
    let row = |id: &str, system: &str, date: &str, ttft: u32| {
        format!("{id},source_file=2026-03-25.csv; model=GPT-OSS-120B; silicon_concurrency=8; measured={date}T00:00:00Z; wip=False,vllm,,openai/gpt-oss-120b,{system},fp4,agg,1024,1024,nvfp4,nvfp4,8,2,1,1,2,1,,,,,,,,,,,,,,,{ttft}.0,5.0")
    };
    let text = csv(&[
        &row("a_c8_tp2_ep1_1", "b200_sxm", "2026-02-25", 100),
        &row("b_c8_tp2_ep1_2", "b200_sxm", "2025-11-02", 110),
        &row("c_c8_tp2_ep1_3", "h200_sxm", "2026-02-25", 120),
        &row("d_c8_tp2_ep1_4", "b200_sxm", "2026-02-25", 130).replace(",vllm,", ",trtllm,"),
    ]);
    let imp = import(&text).unwrap();
    assert!(imp.refused.is_empty(), "{:?}", imp.refused);
    let got: Vec<(Option<bool>, Option<Format>)> = imp
        .records
        .iter()
        .map(|r| (r.engine.settings.expert_activations_fp8, r.model.kv))
        .collect();
    assert_eq!(
        got,
        [
            (Some(true), Some(Format::Fp8Tensor)),
            (Some(true), None),
            (None, None),
            // TensorRT-LLM's B200 script: an FP8 KV cache; its MoE backend (TRTLLM)
            // takes MXFP8 on Blackwell whatever the row (`deployed_experts_format`).
            (None, Some(Format::Fp8Tensor)),
        ]
    );
}

/// InferenceX's gpt-oss vLLM scripts for H100 and H200 export `VLLM_MXFP4_USE_MARLIN=1`
/// from their move to vLLM 0.13.0 (2026-01-02): rows of a 0.13-or-later image run
/// Marlin's expert kernels; rows of an older image or none, B200's rows and
/// TensorRT-LLM's keep the engine's default.
#[test]
fn inferencex_gpt_oss_vllm_hopper_rows_from_0_13_run_marlin_experts() {
    let row = |id: &str, system: &str, version: &str, ttft: u32| {
        format!("{id},source_file=2026-03-25.csv; model=GPT-OSS-120B; silicon_concurrency=8; measured=2026-03-27T00:00:00Z; wip=False,vllm,{version},openai/gpt-oss-120b,{system},fp4,agg,1024,1024,nvfp4,nvfp4,8,2,1,1,2,1,,,,,,,,,,,,,,,{ttft}.0,5.0")
    };
    let text = csv(&[
        &row("a_c8_tp2_ep1_1", "h100_sxm", "0.18.0", 100),
        &row("b_c8_tp2_ep1_2", "h200_sxm", "0.13.0", 110),
        &row("c_c8_tp2_ep1_3", "h200_sxm", "0.11.2", 120),
        &row("d_c8_tp2_ep1_4", "h100_sxm", "", 130),
        &row("e_c8_tp2_ep1_5", "b200_sxm", "0.18.0", 140),
        &row("f_c8_tp2_ep1_6", "h200_sxm", "0.18.0", 150).replace(",vllm,", ",trtllm,"),
    ]);
    let imp = import(&text).unwrap();
    assert!(imp.refused.is_empty(), "{:?}", imp.refused);
    let got: Vec<Option<spec::kernel::MoeKernel>> = imp
        .records
        .iter()
        .map(|r| r.engine.settings.moe_kernel)
        .collect();
    let marlin = Some(spec::kernel::MoeKernel::Marlin);
    assert_eq!(got, [marlin, marlin, None, None, None, None]);
}

/// InferenceX's Llama-70B TensorRT-LLM scripts hold prompts back for a fuller batch at
/// 1k/1k below TP8 (20 iterations, 0.9 of `max_num_tokens` 16384); other lengths, TP8
/// and vLLM's rows do not.
#[test]
fn inferencex_llama_70b_trtllm_1k1k_rows_below_tp8_wait_for_a_batch() {
    let row = |id: &str, engine: &str, isl: u32, osl: u32, tp: u32, ttft: u32| {
        format!("{id}_c8_tp{tp}_ep1_{ttft},source_file=2026-03-25.csv; model=Llama-3.3-70B-Instruct-FP8; silicon_concurrency=8; measured=2025-10-29T00:00:00Z; wip=False,{engine},,meta-llama/Llama-3.1-70B,h200_sxm,fp8,agg,{isl},{osl},fp8,,8,{tp},1,1,1,1,,,,,,,,,,,,,,,{ttft}.0,5.0")
    };
    let text = csv(&[
        &row("a", "trtllm", 1024, 1024, 4, 100),
        &row("b", "trtllm", 1024, 1024, 8, 110),
        &row("c", "trtllm", 1024, 8192, 4, 120),
        &row("d", "vllm", 1024, 1024, 4, 130),
    ]);
    let imp = import(&text).unwrap();
    assert!(imp.refused.is_empty(), "{:?}", imp.refused);
    let got: Vec<(Option<u32>, Option<f64>)> = imp
        .records
        .iter()
        .map(|r| {
            let s = &r.engine.settings;
            (s.batch_wait_iters, s.batch_wait_tokens_ratio)
        })
        .collect();
    assert_eq!(
        got,
        [
            (Some(20), Some(0.9)),
            (None, None),
            (None, None),
            (None, None)
        ]
    );
}

/// InferenceX's Qwen3.5 SGLang scripts for Blackwell take new requests every 30
/// decode steps from 16 users up and every 10 below; the H200 script every step.
#[test]
fn an_inferencex_qwen35_sglang_row_carries_its_scripts_receive_interval() {
    let row = |id: &str, system: &str, conc: u32| {
        format!("{id},source_file=2026-03-25.csv; silicon_concurrency={conc},sglang,0.5.9,Qwen/Qwen3.5-397B-A17B,{system},fp8,agg,1024,1024,fp8,fp8_block,{conc},8,1,1,8,8,,,,,,,,,,,,,,,300.0,10.0")
    };
    // The B300 configs of SGLang 0.5.10: the FP8 script polls every 10 iterations at
    // any concurrency, with 0.8 of the memory; the NVFP4 script keeps the rule.
    let b300 = |id: &str, precision: &str, conc: u32, ttft: f64| {
        format!("{id},db-dump/2026-04-27; config_id=716; silicon_concurrency={conc}; measured=2026-04-17T00:00:00.000Z; workflow_run_id=765; lmsysorg/sglang:v0.5.10.post1-cu130,sglang,0.5.10.post1,Qwen/Qwen3.5-397B-A17B,b300_sxm,{precision},agg,1024,1024,{precision},{precision},{conc},4,1,1,4,1,,,,,,,,,,,,,,,{ttft},10.0")
    };
    let text = csv(&[
        &row("a_c64_tp8_0_ep8_0_1", "b200_sxm", 64),
        &row("b_c8_tp8_0_ep8_0_2", "b300_sxm", 8),
        &row("c_c64_tp8_0_ep8_0_3", "h200_sxm", 64),
        &b300("d_c64_cfg716", "fp8", 64, 310.0),
        &b300("e_c64_cfg736", "fp4", 64, 320.0),
    ]);
    let imp = import(&text).unwrap();
    assert!(imp.refused.is_empty(), "{:?}", imp.refused);
    let every: Vec<(Option<u32>, Option<f64>)> = imp
        .records
        .iter()
        .map(|r| {
            (
                r.engine.settings.scheduler_recv_interval,
                r.engine.settings.memory_fraction,
            )
        })
        .collect();
    assert_eq!(
        every,
        [
            (Some(30), Some(0.82)),
            (Some(10), Some(0.82)),
            (None, Some(0.82)),
            (Some(10), Some(0.8)),
            (Some(30), Some(0.8)),
        ]
    );
}

/// The Qwen3.5 rows of image `lmsysorg/sglang:v0.5.9-cu130` at TP4 with the experts
/// sliced four ways ran InferenceX's MTP config: three chained EAGLE drafts a step,
/// 0.8 of the memory, the concurrency as the running cap, no acceptance given. The
/// same layout on the `-amd64` image, and expert parallelism on this image, did not.
#[test]
fn qwen35_rows_of_the_mtp_config_carry_its_speculative_decoding() {
    let row = |id: &str, image: &str, moe_tp: u32, moe_ep: u32| {
        format!("{id},source_file=2026-03-25.csv; model=Qwen3.5-397B; silicon_concurrency=8; measured=2026-03-20T22:08:23Z; wip=False; image={image},sglang,0.5.9,Qwen/Qwen3.5-397B-A17B,b200_sxm,fp8,agg,1024,1024,fp8,fp8_block,8,4,1,1,{moe_tp},{moe_ep},,,,,,,,,,,,,,,300.0,10.0")
    };
    let text = csv(&[
        &row("a_c8_tp4_0_ep1_0_1", "lmsysorg/sglang:v0.5.9-cu130", 4, 1),
        &row(
            "b_c8_tp4_0_ep1_0_2",
            "lmsysorg/sglang:v0.5.9-cu130-amd64",
            4,
            1,
        ),
        &row("c_c8_tp4_0_ep4_0_3", "lmsysorg/sglang:v0.5.9-cu130", 1, 4),
    ]);
    let imp = import(&text).unwrap();
    assert!(imp.refused.is_empty(), "{:?}", imp.refused);
    let s = &imp.records[0].engine.settings;
    assert_eq!(
        s.speculative,
        Some(Speculative {
            method: SpecMethod::Mtp,
            draft_tokens: 3,
            acceptance: None,
        })
    );
    assert_eq!((s.memory_fraction, s.max_running), (Some(0.8), Some(8)));
    assert!(imp.records[0]
        .provenance
        .notes
        .iter()
        .any(|n| n.contains("qwen3.5-fp8-b200-sglang-mtp")));
    for r in &imp.records[1..] {
        assert_eq!(r.engine.settings.speculative, None, "{}", r.id);
        assert_eq!(r.engine.settings.memory_fraction, Some(0.82), "{}", r.id);
    }
}

/// An InferenceX row measured after the warm-up was added: lengths uniform on
/// [floor(0.8 x 8192), 8192] = [6553, 8192] and [819, 1024]; 10 x 128 prompts, 2 x
/// 128 warm-up; version from the image's tag; MiniMax's block FP8 and FP8 KV; 2 x
/// ISL batched tokens.
#[test]
fn an_inferencex_row_reads_as_its_client_ran_it() {
    let text = csv(&["m_b300_vllm_c128_cfg733,db-dump/2026-04-27; config_id=733; silicon_concurrency=128; measured=2026-04-17T00:00:00.000Z; workflow_run_id=758; vllm/vllm-openai:v0.19.0-cu130,vllm,,MiniMaxAI/MiniMax-M2.5,b300_sxm,fp8,agg,8192,1024,fp8,fp8,128,4,1,1,4,1,,,,,,,,,,,,,,,972.3,33.4"]);
    let imp = import(&text).unwrap();
    assert!(imp.refused.is_empty(), "{:?}", imp.refused);
    let r = &imp.records[0];
    assert_eq!(r.engine.version.as_deref(), Some("0.19.0"));
    assert_eq!(
        r.engine.image.as_deref(),
        Some("vllm/vllm-openai:v0.19.0-cu130")
    );
    assert_eq!(r.engine.settings.max_batched_tokens, Some(16384));
    assert_eq!(r.engine.settings.prefix_caching, Some(false));
    assert_eq!(
        (r.model.gemm, r.model.moe, r.model.kv),
        (
            Format::Fp8Block,
            Some(Format::Fp8Block),
            Some(Format::Fp8Tensor)
        )
    );
    assert_eq!(r.gpu.hardware, "b300");
    assert_eq!(r.provenance.measured.as_deref(), Some("2026-04-17"));
    assert_eq!(
        r.client.input,
        Lengths::Uniform {
            low: 6553,
            high: 8192
        }
    );
    assert_eq!(
        r.client.output,
        Lengths::Uniform {
            low: 819,
            high: 1024
        }
    );
    assert_eq!(
        (r.client.num_prompts, r.client.warmup_requests),
        (Some(1280), 256)
    );
    assert_eq!(r.client.load, Load::ClosedLoop { concurrency: 128 });
    assert_eq!(r.figure(Metric::TtftMs, Stat::Center), Some(972.3));
    let Layout::Aggregated { workers } = &r.layout else {
        panic!()
    };
    assert_eq!(
        (workers.count, workers.tp, workers.moe_tp, workers.moe_ep),
        (Some(1), 4, 4, 1)
    );
    assert!(r.problems().is_empty());
}

/// A gap-analysis row: fixed lengths, no version, BF16; its concurrency 288 over a
/// batch of 144 per replica makes 2 instances. Before InferenceX's warm-up
/// (2025-10-29) an InferenceX row has none.
#[test]
fn internal_rows_are_fixed_length_and_replicas_come_from_the_concurrency() {
    let text = csv(&[
        "q_gb200_c288,source_file=qwen3_32b.csv; silicon_concurrency=288,trtllm,,Qwen/Qwen3-32B,gb200,bf16,agg,2000,500,,,144,2,1,0,0,0,,,,,,,,,,,,,,,300.0,20.0",
        "l_h100_c16_tp4_ep1_260,source_file=2026-04-06.csv; model=Llama-3.1-70B; silicon_concurrency=16; measured=2025-10-29T00:00:00.000Z; wip=False,vllm,,meta-llama/Llama-3.1-70B,h100_sxm,fp8,agg,1024,1024,fp8,fp8,16,4,1,1,4,1,,,,,,,,,,,,,,,121.4,13.2",
    ]);
    let imp = import(&text).unwrap();
    let (q, l) = (&imp.records[0], &imp.records[1]);
    assert_eq!(q.client.input, Lengths::Fixed { tokens: 2000 });
    assert_eq!(q.client.load, Load::ClosedLoop { concurrency: 288 });
    let Layout::Aggregated { workers } = &q.layout else {
        panic!()
    };
    assert_eq!((workers.count, workers.tp), (Some(2), 2));
    assert_eq!((q.model.gemm, q.model.moe), (Format::Bf16, None));
    assert_eq!(q.engine.version, None);
    assert_eq!(l.client.warmup_requests, 0);
    assert_eq!(l.model.gemm, Format::Fp8Tensor);
}

/// The same measurement twice (one copy rounded to 0.01 ms) is one record; the
/// export's mis-lowered TP16 layout gives way to the row id's TP4/EP4; a row whose
/// layout cannot run and has no id suffix says so; an unknown model is refused with
/// its line.
#[test]
fn duplicates_fold_layouts_are_repaired_and_bad_rows_are_named() {
    let text = csv(&[
        "q35_b200_c64_cfg615,db-dump/2026-04-27; config_id=615; silicon_concurrency=64; measured=2026-04-01T00:00:00.000Z,sglang,0.5.9,Qwen/Qwen3.5-397B-A17B,b200_sxm,fp8,agg,8192,1024,fp8,fp8_block,64,16,1,1,4,4,,,,,,,,,,,,,,,1000.004,40.001",
        "2026_03_25_q35_b200_sxm_sglang_fp8_agg_8192x1024_c64_tp4_0_ep4_0_337,source_file=2026-03-25.csv; silicon_concurrency=64,sglang,0.5.9,Qwen/Qwen3.5-397B-A17B,b200_sxm,fp8,agg,8192,1024,fp8,fp8_block,64,4,1,1,1,4,,,,,,,,,,,,,,,1000.0,40.0",
        "x_c8,source_file=2026-04-06.csv; silicon_concurrency=8,vllm,0.18.0,Qwen/Qwen3.5-397B-A17B,b200_sxm,fp8,agg,1024,1024,fp8,fp8,2,4,1,4,1,16,,,,,,,,,,,,,,,50.0,10.0",
        "y,source_file=a.csv,vllm,,some/Model,h100_sxm,bf16,agg,10,10,,,1,1,1,1,1,1,,,,,,,,,,,,,,,1.0,1.0",
    ]);
    let imp = import(&text).unwrap();
    assert_eq!((imp.records.len(), imp.duplicates), (2, 1));
    let kept = &imp.records[0];
    assert_eq!(
        kept.id,
        "2026_03_25_q35_b200_sxm_sglang_fp8_agg_8192x1024_c64_tp4_0_ep4_0_337"
    );
    assert!(kept
        .provenance
        .notes
        .iter()
        .any(|n| n.contains("q35_b200_c64_cfg615")));
    let bad = &imp.records[1];
    assert!(
        bad.provenance
            .notes
            .iter()
            .any(|n| n.contains("mis-lowered")),
        "{:?}",
        bad.provenance.notes
    );
    assert_eq!(imp.refused.len(), 1);
    assert!(
        imp.refused[0].starts_with("line 5 (y): model `some/Model`"),
        "{:?}",
        imp.refused
    );
    assert_eq!(id_tp_ep("a_c64_tp4_0_ep4_0_337"), Some((4, 4)));
    assert_eq!(id_tp_ep("a_c64_tp2_ep1_1899"), Some((2, 1)));
    assert_eq!(id_tp_ep("a_c64_cfg615"), None);
}

/// A 2026-04-06 export row whose TP4/EP4 came out as attention DP 4 with 16 experts'
/// ranks and a batch of 8 per attention rank: a vLLM one is TP4 with its experts over
/// the four GPUs (InferenceX's vLLM scripts run no data parallelism) and the client's 32
/// users on one instance; a TensorRT-LLM one keeps its attention DP (its search space's
/// `dp-attn`), 2 ranks of a batch of 32 for 64 users, balanced as its script sets.
#[test]
fn an_exports_attention_dp_is_kept_for_tensorrt_llm_and_dropped_for_vllm() {
    let text = csv(&[
        "2026_04_06_m_h100_sxm_vllm_fp8_agg_8192x1024_c32_tp4_ep4_1322,source_file=2026-04-06.csv; silicon_concurrency=32,vllm,0.18.0,MiniMaxAI/MiniMax-M2.5,h100_sxm,fp8,agg,8192,1024,fp8,fp8,8,4,1,4,1,16,,,,,,,,,,,,,,,3000.0,29.8",
        "2026_04_06_g_b200_sxm_trtllm_fp4_agg_1024x1024_c64_tp2_ep2_1994,source_file=2026-04-06.csv; silicon_concurrency=64,trtllm,1.2.0rc2,openai/gpt-oss-120b,b200_sxm,fp4,agg,1024,1024,bf16,nvfp4,32,2,1,2,1,4,,,,,,,,,,,,,,,100.0,10.0",
    ]);
    let imp = import(&text).unwrap();
    let w = |i: usize| {
        let w = match &imp.records[i].layout {
            Layout::Aggregated { workers } => *workers,
            other => panic!("{other:?}"),
        };
        (w.count, w.tp, w.attention_dp, w.moe_tp, w.moe_ep)
    };
    assert_eq!(w(0), (Some(1), 4, 1, 1, 4));
    assert_eq!(imp.records[0].concurrency(), Some(32));
    assert!(imp.records[0]
        .provenance
        .notes
        .iter()
        .any(|n| n.contains("attention DP 4, which InferenceX's vLLM scripts do not run")));
    assert_eq!(w(1), (Some(1), 1, 2, 1, 2));
    assert!(imp.records[1]
        .provenance
        .notes
        .iter()
        .any(|n| n.contains("TP2/EP2 with attention DP")));
    // The B200 script balances prompts over the attention-DP ranks.
    assert_eq!(imp.records[1].engine.settings.adp_balance, Some(true));
    assert_eq!(imp.records[0].engine.settings.adp_balance, None);
}

/// A gap-analysis row reads with the server settings AIConfigurator's generator writes
/// for its batch (hand-derived from the rules quoted in `served::gap_analysis_settings`):
/// TensorRT-LLM batch 16 at 4096 tokens: 16 + 4096 + 1500 = 5612 tokens a step (5632,
/// the next multiple of 32, from 2026-01-29), 16 running, memory 0.80; vLLM the same
/// budget without the rounding; SGLang 0.5.1.post1 its defaults, a later SGLang at most
/// 4096 + 1500 = 5596 prompt tokens a prefill batch with decode mixed in.
#[test]
fn gap_analysis_rows_carry_the_generators_settings() {
    let text = csv(&[
        "t_c16,source_file=Qwen_Qwen3-32B.csv; silicon_concurrency=16,trtllm,1.0.0rc3,Qwen/Qwen3-32B,h100_sxm,bf16,agg,4096,128,,,16,2,1,1,1,1,,,,,,,,,,,,,,,500.0,20.0",
        "t2_c16,source_file=qwen3_32b.csv; silicon_concurrency=16; measured=2026-03-22,trtllm,1.3.0rc1,Qwen/Qwen3-32B,h100_sxm,bf16,agg,4096,129,,,16,2,1,1,1,1,,,,,,,,,,,,,,,500.0,20.0",
        "v_c16,source_file=Qwen_Qwen3-32B.csv; silicon_concurrency=16,vllm,0.12.0,Qwen/Qwen3-32B,h100_sxm,bf16,agg,4096,130,,,16,2,1,1,1,1,,,,,,,,,,,,,,,500.0,20.0",
        "s1_c16,source_file=Qwen_Qwen3-32B.csv; silicon_concurrency=16,sglang,0.5.1.post1,Qwen/Qwen3-32B,h100_sxm,bf16,agg,4096,131,,,16,2,1,1,1,1,,,,,,,,,,,,,,,500.0,20.0",
        "s6_c16,source_file=Qwen_Qwen3-32B.csv; silicon_concurrency=16,sglang,0.5.6.post2,Qwen/Qwen3-32B,h100_sxm,bf16,agg,4096,132,,,16,2,1,1,1,1,,,,,,,,,,,,,,,500.0,20.0",
    ]);
    let imp = import(&text).unwrap();
    let s = |i: usize| {
        let s = &imp.records[i].engine.settings;
        (
            s.max_batched_tokens,
            s.max_running,
            s.memory_fraction,
            s.max_prefill_tokens,
            s.mixed_chunk,
        )
    };
    assert_eq!(s(0), (Some(5612), Some(16), Some(0.80), None, None));
    assert_eq!(s(1), (Some(5632), Some(16), Some(0.80), None, None));
    assert_eq!(s(2), (Some(5612), Some(16), None, None, None));
    assert_eq!(s(3), (None, None, None, None, None));
    assert_eq!(s(4), (None, None, None, Some(5596), Some(true)));
    assert!(imp.records[0]
        .provenance
        .notes
        .iter()
        .any(|n| n.contains("5612 tokens a step")));
}

/// Block-FP8 experts that TP would cut into partial scale blocks ran expert-parallel
/// (hand-derived: MiniMax-M2.5's and Qwen3-235B's experts are 1536 wide in 128-wide
/// blocks): vLLM at TP8 (192-wide shards) and SGLang at TP8 read as EP8, while vLLM at
/// TP4 (384 = 3 blocks, measured before the script forced EP) keeps its sliced experts,
/// and TensorRT-LLM, which the rule does not cover, keeps the export's layout. The
/// checkpoint's FP8 note is given once.
#[test]
fn block_fp8_experts_that_tp_would_cut_mid_block_run_expert_parallel() {
    let text = csv(&[
        "2026_03_28_m_h200_sxm_vllm_fp8_agg_1024x1024_c4_tp8_ep1_1,source_file=2026-03-25.csv; silicon_concurrency=4,vllm,0.18.0,MiniMaxAI/MiniMax-M2.5,h200_sxm,fp8,agg,1024,1024,fp8,fp8,4,8,1,1,8,1,,,,,,,,,,,,,,,100.0,8.0",
        "2026_03_01_m_h200_sxm_vllm_fp8_agg_1024x1024_c4_tp4_ep1_2,source_file=2026-03-25.csv; silicon_concurrency=4; measured=2026-03-01T00:00:00.000Z,vllm,0.16.0,MiniMaxAI/MiniMax-M2.5,h200_sxm,fp8,agg,1024,1024,fp8,fp8,4,4,1,1,4,1,,,,,,,,,,,,,,,100.0,12.0",
        "q_s_c8,source_file=Qwen_Qwen3-235B-A22B-FP8.csv; silicon_concurrency=8,sglang,0.5.6.post2,Qwen/Qwen3-235B-A22B-FP8,h200_sxm,fp8,agg,4096,128,fp8,fp8,8,8,1,1,8,1,,,,,,,,,,,,,,,500.0,20.0",
        "q_t_c8,source_file=Qwen_Qwen3-235B-A22B-FP8.csv; silicon_concurrency=8,trtllm,1.0.0rc3,Qwen/Qwen3-235B-A22B-FP8,h100_sxm,fp8,agg,4096,128,fp8,fp8,8,8,1,1,8,1,,,,,,,,,,,,,,,500.0,20.0",
    ]);
    let imp = import(&text).unwrap();
    let w = |i: usize| {
        let w = match &imp.records[i].layout {
            Layout::Aggregated { workers } => *workers,
            other => panic!("{other:?}"),
        };
        (w.tp, w.moe_tp, w.moe_ep)
    };
    let notes = |i: usize| imp.records[i].provenance.notes.clone();
    assert_eq!(w(0), (8, 1, 8));
    assert!(
        notes(0).iter().any(|n| n.contains(
            "1536-wide block-FP8 experts cut into 192-wide shards, not whole 128-wide scale blocks, which vLLM refuses"
        )),
        "{:?}",
        notes(0)
    );
    assert_eq!(w(1), (4, 4, 1));
    assert_eq!(w(2), (8, 1, 8));
    assert!(notes(2).iter().any(|n| n.contains("which SGLang refuses")));
    assert_eq!(w(3), (8, 8, 1));
    for i in 0..4 {
        let fp8 = notes(i)
            .iter()
            .filter(|n| n.contains("128x128-block FP8"))
            .count();
        assert_eq!(fp8, 1, "{:?}", notes(i));
    }
}

/// The expert widths the importer carries are the shipped configs' own
/// (`moe_intermediate_size`, else `intermediate_size` for MiniMax-M2 and gpt-oss).
#[test]
fn checkpoint_expert_widths_are_the_configs() {
    let runs = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios/runs");
    for id in [
        "Qwen/Qwen3-235B-A22B-FP8",
        "openai/gpt-oss-120b",
        "MiniMaxAI/MiniMax-M2.5",
        "Qwen/Qwen3.5-397B-A17B",
    ] {
        let ck = super::served::checkpoint(id).unwrap();
        let text = std::fs::read_to_string(runs.join(ck.config)).unwrap();
        let cfg: serde_json::Value = serde_json::from_str(&text).unwrap();
        let cfg = cfg.get("text_config").unwrap_or(&cfg);
        let width = cfg
            .get("moe_intermediate_size")
            .or_else(|| cfg.get("intermediate_size"))
            .and_then(|v| v.as_u64())
            .unwrap();
        assert_eq!(ck.expert_ffn as u64, width, "{id}");
    }
}

/// InferenceX's MiniMax-M2.5 vLLM scripts as of each row's date (hand-made rows): on B200
/// before 2026-04-03 the script forced expert parallelism (`EP_SIZE >= 1`), set no KV
/// dtype and no token budget, kept 0.95 of the memory and ran Triton's experts; from
/// that date FP8 KV, 2 x ISL tokens a step, 0.90; H200 and H100 set neither KV nor budget
/// (H200 0.95 of the memory; H100 0.90 and 256 running requests).
#[test]
fn minimax_vllm_rows_read_the_script_of_their_date() {
    // Each row its own TTFT (`ttft`): rows of one figure would be one measurement.
    let row = |id: &str, date: &str, version: &str, system: &str, tp: u32, ep: u32, ttft: u32| {
        format!(
            "{id},source_file=2026-04-06.csv; silicon_concurrency=4; measured={date}T00:00:00.000Z,vllm,{version},MiniMaxAI/MiniMax-M2.5,{system},fp8,agg,1024,1024,fp8,fp8,4,{tp},1,1,{},{ep},,,,,,,,,,,,,,,{}.0,8.0",
            tp / ep,
            ttft
        )
    };
    let text = csv(&[
        &row("b200_old", "2026-03-11", "0.17.0", "b200_sxm", 2, 1, 101),
        &row("b200_new", "2026-04-03", "0.19.0", "b200_sxm", 2, 1, 102),
        &row("h200_old", "2026-03-01", "0.16.0", "h200_sxm", 4, 1, 103),
        &row("h100_run", "2026-03-27", "0.18.0", "h100_sxm", 4, 4, 104),
    ]);
    let imp = import(&text).unwrap();
    assert!(imp.refused.is_empty(), "{:?}", imp.refused);
    let ids = ["b200_old", "b200_new", "h200_old", "h100_run"];
    let got: Vec<&str> = imp.records.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(got.len(), 4, "{got:?}");
    let r = |i: usize| imp.records.iter().find(|r| r.id == ids[i]).unwrap();
    let w = |i: usize| match &r(i).layout {
        Layout::Aggregated { workers } => (workers.tp, workers.moe_tp, workers.moe_ep),
        other => panic!("{other:?}"),
    };
    let s = |i: usize| {
        let s = &r(i).engine.settings;
        (s.max_batched_tokens, s.memory_fraction, s.max_running)
    };
    let noted = |i: usize, text: &str| r(i).provenance.notes.iter().any(|n| n.contains(text));
    // B200, March: TP2 with its experts whole over both GPUs; BF16 KV; defaults.
    assert_eq!(w(0), (2, 1, 2));
    assert_eq!(r(0).model.kv, None);
    assert_eq!(s(0), (None, Some(0.95), None));
    assert!(noted(
        0,
        "passes --enable-expert-parallel whenever EP_SIZE >= 1"
    ));
    assert!(noted(0, "Triton's FP8 kernel"));
    // B200, April: as exported, FP8 KV, 2 x 1024 tokens a step.
    assert_eq!(w(1), (2, 2, 1));
    assert_eq!(r(1).model.kv, Some(Format::Fp8Tensor));
    assert_eq!(s(1), (Some(2048), Some(0.90), None));
    assert!(!noted(1, "EP_SIZE") && !noted(1, "Triton"));
    // H200 before its script forced EP (2026-03-13), H100 at EP4 as exported.
    assert_eq!(w(2), (4, 4, 1));
    assert_eq!((r(2).model.kv, s(2)), (None, (None, Some(0.95), None)));
    assert_eq!(w(3), (4, 1, 4));
    assert_eq!((r(3).model.kv, s(3)), (None, (None, Some(0.90), Some(256))));
}
