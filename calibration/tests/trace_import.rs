//! Trace import: layer structure of the two real traces, and every figure of hand-made
//! traces derived by hand.

use calibration::trace::{self, import, import_bytes, LayerSource, Rules, TraceError};
use spec::insitu::{Category, LayerBreakdown, Stream};
use std::io::Write as _;
use std::path::{Path, PathBuf};

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/traces")
        .join(name)
}

fn shipped() -> Rules {
    Rules::shipped().unwrap()
}

const US: f64 = 1e-6;

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-12 + 1e-9 * b.abs()
}

fn assert_close(what: &str, a: f64, b: f64) {
    assert!(close(a, b), "{what}: {a} != {b}");
}

#[test]
fn the_vllm_trace_has_36_layers_and_almost_nothing_unmapped() {
    let r = import(
        &data("vllm-b200-gpt-oss-120b-tp8-prefill.json.gz"),
        &shipped(),
    )
    .unwrap();
    assert_eq!(r.layers_found, 36);
    assert_eq!(
        r.layer_source,
        LayerSource::LayerOps("vllm::unified_attention_with_output".to_string())
    );
    assert!(r.unmapped_share <= 0.02, "unmapped {:?}", r.unmapped);
    assert_eq!(r.streams.len(), 1);
    assert_eq!(r.streams[0].role, Stream::Compute);
    // One stream: no bubbles, and all communication is exposed.
    assert_eq!(r.layer.category(Category::Bubble), 0.0);
    assert!(r.layer.get(Stream::Compute, Category::Allreduce) > 0.0);
    assert_close(
        "exposed",
        r.exposed_comm_s,
        r.layer.category(Category::Allreduce),
    );
    // Every layer holds its MoE GEMMs and its attention kernels.
    for l in &r.per_layer {
        assert!(
            l.breakdown.get(Stream::Compute, Category::Moe) > 0.0,
            "layer {}",
            l.index
        );
        assert!(
            l.breakdown.get(Stream::Compute, Category::Attention) > 0.0,
            "layer {}",
            l.index
        );
    }
    // The compute stream's time adds up to the window, layer by layer, up to the few
    // microseconds by which the profiler's memcpy and kernel slices overlap on one stream
    // (op times are summed, idle time is what no op covers).
    for l in &r.per_layer {
        let b = &l.breakdown;
        let sum = b.stream(Stream::Compute) + l.unmapped_s;
        assert!(
            sum >= b.layer_s * (1.0 - 1e-9) && sum <= b.layer_s * 1.01,
            "layer {}: {sum} vs {}",
            l.index,
            b.layer_s
        );
    }
}

#[test]
fn the_hf_trace_has_24_layers_and_almost_nothing_unmapped() {
    let r = import(&data("hf-h100-qwen1.5-0.5b-prefill.json.gz"), &shipped()).unwrap();
    assert_eq!(r.layers_found, 24);
    assert_eq!(
        r.layer_source,
        LayerSource::LayerOps("aten::scaled_dot_product_attention".to_string())
    );
    assert!(r.unmapped_share <= 0.02, "unmapped {:?}", r.unmapped);
    // Each layer: one FlashAttention kernel; all layers the same op count.
    let ops = r.per_layer[0].ops;
    assert!(r.per_layer.iter().all(|l| l.ops == ops));
    assert!(r.layer.get(Stream::Compute, Category::Gemm) > 0.0);
    assert!(r.outside_layers_s > 0.0 && r.outside_layers_s < r.kernel_s);
}

/// twin-two-streams.json, derived by hand (us):
/// layer 0 [1000, 1100): compute attention [1000,1030) moe [1040,1070); comm dispatch
/// [1020,1050) combine [1080,1090). Compute busy 60, comm busy 40, union [1000,1070) +
/// [1080,1090) = 80 so launch 20; compute idle while comm works [1030,1040) + [1080,1090)
/// = 20; comm idle while compute works [1000,1020) + [1050,1070) = 40; exposed
/// communication = the same 20 as compute's bubble.
/// layer 1 [1100, 1200): compute gemm (args.category wins over the name) [1100,1150),
/// mystery_kernel (unmapped) [1160,1170); comm nothing: launch 40, compute bubble 0, comm
/// bubble 60, exposed 0, unmapped 10.
/// Outside: twin::gemm [1200,1210). Kernel time 30+30+30+10+50+10+10 = 170.
#[test]
fn a_twin_written_trace_imports_to_its_exact_numbers() {
    let r = import(&data("twin-two-streams.json"), &shipped()).unwrap();
    assert_eq!(r.producer.as_deref(), Some("twin forward"));
    assert_eq!(r.layers_found, 2);
    assert_eq!(
        r.layer_source,
        LayerSource::GpuRanges("layer 0".to_string())
    );
    assert_eq!(r.micro_batches, 2);
    assert_eq!(r.events, 11);
    assert_eq!(r.gpu_ops, 7);
    assert_close("span", r.span_s, 210.0 * US);
    assert_close("busy", r.gpu_busy_s, 150.0 * US);
    assert_close("kernel", r.kernel_s, 170.0 * US);
    assert_close("outside", r.outside_layers_s, 10.0 * US);
    let roles: Vec<_> = r.streams.iter().map(|s| (s.stream, s.role)).collect();
    assert_eq!(roles, vec![(0, Stream::Compute), (1, Stream::Comm)]);

    let l0 = &r.per_layer[0].breakdown;
    let want0 = [
        (Stream::Compute, Category::Attention, 30.0),
        (Stream::Compute, Category::Moe, 30.0),
        (Stream::Compute, Category::Bubble, 20.0),
        (Stream::Compute, Category::Launch, 20.0),
        (Stream::Comm, Category::Dispatch, 30.0),
        (Stream::Comm, Category::Combine, 10.0),
        (Stream::Comm, Category::Bubble, 40.0),
    ];
    check(l0, &want0, 100.0);
    assert_close("exposed 0", r.per_layer[0].exposed_comm_s, 20.0 * US);
    let l1 = &r.per_layer[1].breakdown;
    let want1 = [
        (Stream::Compute, Category::Gemm, 50.0),
        (Stream::Compute, Category::Launch, 40.0),
        (Stream::Comm, Category::Bubble, 60.0),
    ];
    check(l1, &want1, 100.0);
    assert_close("unmapped 1", r.per_layer[1].unmapped_s, 10.0 * US);
    assert_eq!(r.per_layer[1].exposed_comm_s, 0.0);

    // The mean layer: halves of the sums.
    let mean = [
        (Stream::Compute, Category::Moe, 15.0),
        (Stream::Compute, Category::Attention, 15.0),
        (Stream::Compute, Category::Gemm, 25.0),
        (Stream::Compute, Category::Bubble, 10.0),
        (Stream::Compute, Category::Launch, 30.0),
        (Stream::Comm, Category::Dispatch, 15.0),
        (Stream::Comm, Category::Combine, 5.0),
        (Stream::Comm, Category::Bubble, 50.0),
    ];
    check(&r.layer, &mean, 100.0);
    assert_eq!(r.layer.layers, 2.0);
    assert_close("mean exposed", r.exposed_comm_s, 10.0 * US);
    assert_close("mean unmapped", r.unmapped_in_layer_s, 5.0 * US);

    assert_eq!(r.unmapped.len(), 1);
    assert_eq!(r.unmapped[0].name, "mystery_kernel");
    assert_eq!(r.unmapped[0].count, 1);
    assert_close("share", r.unmapped_share, 10.0 / 170.0);
}

fn check(b: &LayerBreakdown, want: &[(Stream, Category, f64)], layer_us: f64) {
    assert_close("layer_s", b.layer_s, layer_us * US);
    for &(s, c, us) in want {
        assert_close(&format!("{s:?} {c:?}"), b.get(s, c), us * US);
    }
    assert_eq!(b.entries.len(), want.len(), "{:?}", b.entries);
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(bytes).unwrap();
    e.finish().unwrap()
}

#[test]
fn gzip_and_plain_read_the_same() {
    let plain = std::fs::read(data("twin-two-streams.json")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let gz = dir.path().join("t.json.gz");
    std::fs::write(&gz, gzip(&plain)).unwrap();
    let a = import(&data("twin-two-streams.json"), &shipped()).unwrap();
    let b = import(&gz, &shipped()).unwrap();
    assert_eq!(a.per_layer.len(), b.per_layer.len());
    assert_eq!(a.layer, b.layer);
    assert_eq!(a.events, b.events);
    assert_eq!(a.kernel_s, b.kernel_s);
}

fn err(bytes: &[u8], name: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join(name);
    std::fs::write(&p, bytes).unwrap();
    let e = import(&p, &shipped()).unwrap_err().to_string();
    let shown = p.display().to_string();
    assert!(e.starts_with(&shown), "{e}");
    e[shown.len()..].to_string()
}

#[test]
fn corrupt_files_get_errors_naming_the_file_and_the_event() {
    let k = r#"{"ph":"X","cat":"kernel","name":"k","ts":1,"dur":2,"args":{"stream":7}}"#;
    // Bad gzip: the header, then garbage.
    let e = err(&[0x1f, 0x8b, 8, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9], "a.json.gz");
    assert!(e.starts_with(": not a valid gzip stream"), "{e}");
    // A gzip stream cut short.
    let whole = gzip(format!("[{k},{k}]").as_bytes());
    let e = err(&whole[..whole.len() / 2], "cut.json.gz");
    assert!(e.starts_with(": not a valid gzip stream"), "{e}");
    // .gz that is not gzip.
    let e = err(b"[]", "b.json.gz");
    assert!(e.contains("does not start with the gzip header"), "{e}");
    // JSON cut inside the third event.
    let text = format!(r#"{{"traceEvents": [{k},{k},{{"ph":"X","na"#);
    let e = err(text.as_bytes(), "c.json");
    assert!(e.starts_with(": invalid trace JSON in event 2:"), "{e}");
    // A kernel without ts; one without dur.
    let text = format!(r#"[{k},{{"ph":"X","cat":"kernel","name":"late","dur":3}}]"#);
    let e = err(text.as_bytes(), "d.json");
    assert_eq!(
        e,
        ": event 1 (\"late\"): a complete (ph \"X\") `kernel` event without `ts`"
    );
    let text = format!(r#"[{k},{k},{{"ph":"X","cat":"cpu_op","name":"x","ts":3}}]"#);
    let e = err(text.as_bytes(), "e.json");
    assert!(
        e.starts_with(": event 2 (\"x\"):") && e.ends_with("without `dur`"),
        "{e}"
    );
    // ts that is not a number.
    let text = format!(r#"[{k},{{"ph":"X","cat":"kernel","name":"s","ts":"soon","dur":1}}]"#);
    let e = err(text.as_bytes(), "f.json");
    assert!(e.starts_with(": invalid trace JSON in event 1:"), "{e}");
    // No traceEvents; no GPU activity; an unknown args.category.
    assert!(err(br#"{"foo": 1}"#, "g.json").contains("no `traceEvents`"));
    assert!(err(
        br#"[{"ph":"X","cat":"cpu_op","name":"x","ts":1,"dur":1}]"#,
        "h.json"
    )
    .contains("no GPU activity"));
    let text =
        r#"[{"ph":"X","cat":"kernel","name":"k","ts":1,"dur":2,"args":{"category":"flops"}}]"#;
    assert!(err(text.as_bytes(), "i.json").contains("args.category \"flops\""));
    // A missing file.
    let e = import(Path::new("/nonexistent/t.json"), &shipped()).unwrap_err();
    assert!(matches!(e, TraceError::Io { .. }), "{e}");
}

/// A Kineto-shaped trace: per layer a CPU `vllm::unified_attention_with_output` op and
/// launches linked by correlation; the kernel sequence is embedding, then per layer
/// norm, qkv GEMM, attention, o GEMM, all-reduce; then the LM head.
fn kineto(layers: usize, extra_before_attention: &str) -> String {
    let mut ev = Vec::new();
    let mut t = 0.0;
    let mut corr = 0;
    let mut kernel = |ev: &mut Vec<String>, name: &str, t: &mut f64, cpu_ts: f64| {
        corr += 1;
        ev.push(format!(r#"{{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":1,"tid":1,"ts":{cpu_ts},"dur":0.5,"args":{{"correlation":{corr}}}}}"#));
        ev.push(format!(r#"{{"ph":"X","cat":"kernel","name":"{name}","pid":0,"tid":7,"ts":{t},"dur":10,"args":{{"stream":7,"correlation":{corr}}}}}"#));
        *t += 10.0;
    };
    kernel(
        &mut ev,
        "void at::native::(anonymous namespace)::indexSelectLargeIndex<c10::BFloat16>",
        &mut t,
        0.0,
    );
    for l in 0..layers {
        let base = 100.0 * (l + 1) as f64;
        kernel(
            &mut ev,
            "void vllm::rms_norm_kernel<c10::BFloat16>",
            &mut t,
            base,
        );
        kernel(
            &mut ev,
            "nvjet_tst_64x64_64x16_2x1_2cta_v_bz_bias_TNT",
            &mut t,
            base + 1.0,
        );
        if !extra_before_attention.is_empty() {
            kernel(&mut ev, extra_before_attention, &mut t, base + 2.0);
        }
        ev.push(format!(r#"{{"ph":"X","cat":"cpu_op","name":"vllm::unified_attention_with_output","pid":1,"tid":1,"ts":{},"dur":5}}"#, base + 3.0));
        kernel(
            &mut ev,
            "fmhaSm100aKernel_QkvE4m3OBfloat16H64PagedKvCausalP16VarSeqQ128Kv128PersistentContext",
            &mut t,
            base + 4.0,
        );
        kernel(
            &mut ev,
            "nvjet_tst_64x16_64x16_2x4_2cta_h_bz_bias_TNT",
            &mut t,
            base + 10.0,
        );
        kernel(
            &mut ev,
            "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
            &mut t,
            base + 11.0,
        );
    }
    kernel(
        &mut ev,
        "nvjet_tst_192x8_64x8_4x1_v_bz_TNT",
        &mut t,
        10_000.0,
    );
    format!("[{}]", ev.join(",\n"))
}

#[test]
fn layer_ops_mark_layers_cut_where_the_sequence_repeats() {
    // 3 layers of 5 kernels of 10 us each after a 10 us embedding, then a 10 us LM head.
    let r = import_bytes(kineto(3, "").as_bytes(), "k.json", &shipped()).unwrap();
    assert_eq!(r.layers_found, 3);
    assert!(matches!(r.layer_source, LayerSource::LayerOps(_)));
    for (i, l) in r.per_layer.iter().enumerate() {
        assert_eq!(l.ops, 5, "layer {i}");
        assert_close("start", l.start_s, (10.0 + 50.0 * i as f64) * US);
    }
    // Mean layer, by hand: norm 10 elementwise, two GEMMs 20, attention 10, all-reduce 10
    // (exposed: one stream), no gaps.
    let want = [
        (Stream::Compute, Category::Attention, 10.0),
        (Stream::Compute, Category::Gemm, 20.0),
        (Stream::Compute, Category::Elementwise, 10.0),
        (Stream::Compute, Category::Allreduce, 10.0),
    ];
    check(&r.layer, &want, 50.0);
    assert_close("exposed", r.exposed_comm_s, 10.0 * US);
    assert_close("outside", r.outside_layers_s, 20.0 * US);
    // A bare array, no thread names: one stream, compute.
    assert_eq!(r.streams.len(), 1);
    assert_eq!(r.streams[0].role, Stream::Compute);
}

#[test]
fn without_cpu_marks_attention_kernels_mark_the_layers() {
    // The same kernels with the CPU side dropped: 4 layers found from the attention kernels.
    let text = kineto(4, "");
    let kept: Vec<&str> = text
        .trim_start_matches('[')
        .trim_end_matches(']')
        .split(",\n")
        .filter(|e| e.contains(r#""cat":"kernel""#))
        .collect();
    let text = format!(r#"{{"traceEvents":[{}]}}"#, kept.join(","));
    let r = import_bytes(text.as_bytes(), "k.json", &shipped()).unwrap();
    assert_eq!(r.layer_source, LayerSource::AttentionKernels);
    assert_eq!(r.layers_found, 4);
    assert!(r.per_layer.iter().all(|l| l.ops == 5));
}

#[test]
fn a_user_rules_file_is_tried_first_and_its_errors_name_it() {
    let extra = "zz_custom_kernel_x";
    let text = kineto(2, extra);
    let r = import_bytes(text.as_bytes(), "k.json", &shipped()).unwrap();
    assert_eq!(r.unmapped.len(), 1);
    assert_eq!(r.unmapped[0].name, extra);
    assert_eq!(r.unmapped[0].count, 2);
    // 2 x 10 us of 2 x 60 + 20 us.
    assert_close("share", r.unmapped_share, 20.0 / 140.0);

    let dir = tempfile::tempdir().unwrap();
    let mine = dir.path().join("mine.toml");
    // Maps the custom kernel, and overrides the shipped rule for nvjet GEMMs.
    std::fs::write(
        &mine,
        "[[rule]]\nmatch = '^zz_custom'\ncategory = \"elementwise\"\n[[rule]]\nmatch = '^nvjet_tst_64x16'\ncategory = \"moe\"\n",
    )
    .unwrap();
    let rules = Rules::with_user_file(&mine).unwrap();
    let r = import_bytes(text.as_bytes(), "k.json", &rules).unwrap();
    assert!(r.unmapped.is_empty());
    assert_close(
        "moe",
        r.layer.get(Stream::Compute, Category::Moe),
        10.0 * US,
    );
    assert_close(
        "gemm",
        r.layer.get(Stream::Compute, Category::Gemm),
        10.0 * US,
    );
    assert_close(
        "elementwise",
        r.layer.get(Stream::Compute, Category::Elementwise),
        20.0 * US,
    );

    std::fs::write(&mine, "[[rule]]\nmatch = 'ok'\ncategory = \"gemm\"\n[[rule]]\nmatch = 'x['\ncategory = \"gemm\"\n").unwrap();
    let e = Rules::with_user_file(&mine).unwrap_err().to_string();
    let want = format!(
        "{}: rule 2 (match = \"x[\"): bad regular expression",
        mine.display()
    );
    assert!(e.starts_with(&want), "{e}");
    std::fs::write(&mine, "[[rule]]\nmatch = 'ok'\ncategory = \"speed\"\n").unwrap();
    let e = Rules::with_user_file(&mine).unwrap_err().to_string();
    assert!(
        e.contains("rule 1 (match = \"ok\"): unknown category \"speed\""),
        "{e}"
    );
    std::fs::write(&mine, "[structure]\nlayer_ops = ['(']\n").unwrap();
    let e = Rules::with_user_file(&mine).unwrap_err().to_string();
    assert!(e.contains("structure.layer_ops[0]"), "{e}");
}

#[test]
fn cpu_layer_ranges_reach_their_kernels_through_correlation() {
    // Two CPU ranges "model.layers.0/1" around the launches of two kernels each.
    let mut ev = Vec::new();
    for (i, (cpu, gpu)) in [(0.0, 100.0), (10.0, 130.0)].iter().enumerate() {
        ev.push(format!(r#"{{"ph":"X","cat":"user_annotation","name":"model.layers.{i}","pid":1,"tid":1,"ts":{cpu},"dur":5}}"#));
        for j in 0..2 {
            let c = i * 2 + j;
            ev.push(format!(r#"{{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":1,"tid":1,"ts":{},"dur":1,"args":{{"correlation":{c}}}}}"#, cpu + 1.0 + j as f64));
            ev.push(format!(r#"{{"ph":"X","cat":"kernel","name":"sm90_xmma_gemm_bf16","pid":0,"tid":7,"ts":{},"dur":10,"args":{{"stream":7,"correlation":{c}}}}}"#, gpu + 12.0 * j as f64));
        }
    }
    let r = import_bytes(
        format!("[{}]", ev.join(",")).as_bytes(),
        "r.json",
        &shipped(),
    )
    .unwrap();
    assert_eq!(
        r.layer_source,
        LayerSource::CpuRanges("model.layers.0".to_string())
    );
    assert_eq!(r.layers_found, 2);
    // Layer window: first kernel start to last kernel end, 22 us, 2 us of it a gap.
    check(
        &r.per_layer[0].breakdown,
        &[
            (Stream::Compute, Category::Gemm, 20.0),
            (Stream::Compute, Category::Launch, 2.0),
        ],
        22.0,
    );
}

#[test]
fn the_shipped_rules_parse() {
    let r = trace::rules::parse(trace::rules::SHIPPED, trace::rules::SHIPPED_NAME).unwrap();
    assert!(r.rules.len() > 40);
    assert!(!r.layer_ops.is_empty() && !r.layer_ranges.is_empty());
}
