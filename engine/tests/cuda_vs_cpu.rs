//! Each CUDA kernel against its CPU twin. Runs only where a GPU is usable; otherwise it
//! prints why it skipped. With `TWIN_REQUIRE_GPU=1` a missing GPU fails instead.
//! (`measure.rs` times every calibration op on each device present.)

mod common;

use common::gpu;
use engine::{Device, EngineError};
use kernels::check::{close, topk_valid};
use kernels::{
    cpu, AttnModeKind, AttnProblem, GatherProblem, IndexerProblem, MoeProblem, WeightDtype,
};

#[test]
fn open_without_gpu_is_a_clear_error_not_a_panic() {
    match Device::parse("cuda:0").unwrap().open() {
        Ok(b) => eprintln!(
            "GPU present ({}); error path not exercised here",
            b.info().device
        ),
        Err(e) => {
            let msg = e.to_string();
            assert!(
                msg.contains("use --device cpu")
                    || matches!(e, EngineError::Kernels(kernels::KernelError::NoNvrtc(_))),
                "{msg}"
            );
            if matches!(e, EngineError::NoDriver(_)) {
                assert!(
                    msg.starts_with("no CUDA driver found (libcuda.so)"),
                    "{msg}"
                );
            }
        }
    }
}

#[test]
fn moe_matches_cpu() {
    let Some(mut g) = gpu() else { return };
    for (i, dtype) in WeightDtype::ALL.into_iter().enumerate() {
        for (tokens, touched) in [(1, 4), (9, 2), (17, 1)] {
            let p = MoeProblem::random(dtype, 6, touched, tokens, 40, 768, 30 + i as u64);
            let want = cpu::moe(&p).unwrap();
            let got = g.run_moe(&p).unwrap();
            let scale = want.iter().fold(0f32, |m, v| m.max(v.abs()));
            close(&got, &want, 1e-5 * scale, 1e-4)
                .unwrap_or_else(|e| panic!("{dtype:?} tokens={tokens}: {e}"));
        }
    }
}

#[test]
fn fp8_quant_matches_cpu() {
    let Some(mut g) = gpu() else { return };
    // Seeded bf16 values over several magnitudes (and zeros); 3 blocks' worth and more.
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let x: Vec<u16> = (0..200_008)
        .map(|i| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let v = ((state % 20_001) as f32 / 10_000.0 - 1.0) * 10f32.powi((i % 7) - 3);
            kernels::dtype::f32_to_bf16(if i % 97 == 0 { 0.0 } else { v })
        })
        .collect();
    let (want, want_scale) = cpu::fp8_quant(&x).unwrap();
    let (got, got_scale) = g.run_fp8_quant(&x).unwrap();
    assert_eq!(got_scale, want_scale);
    // Same code, or the neighbour where the value lies exactly between two (the GPU
    // rounds ties to even, the CPU twin to the smaller magnitude).
    let bad: Vec<usize> = (0..x.len())
        .filter(|&i| {
            let (a, b) = (got[i], want[i]);
            a != b && !((a ^ b) & 0x80 == 0 && (a & 0x7f).abs_diff(b & 0x7f) == 1)
        })
        .collect();
    assert!(
        bad.is_empty(),
        "{} codes differ, first at {:?}",
        bad.len(),
        &bad[..bad.len().min(5)]
    );
    let near = (0..x.len()).filter(|&i| got[i] != want[i]).count();
    assert!(near * 1000 < x.len(), "{near} codes one step apart");
    assert!(g.run_fp8_quant(&x[..12]).is_err());
}

#[test]
fn attention_matches_cpu() {
    let Some(mut g) = gpu() else { return };
    for (i, mode) in [
        AttnModeKind::Dense,
        AttnModeKind::Sparse(64),
        AttnModeKind::Window(50),
    ]
    .into_iter()
    .enumerate()
    {
        for (dim, page) in [(64, 16), (512, 64)] {
            let mut p = AttnProblem::random(3, 5, dim, 333, page, mode, 50 + i as u64);
            p.seq_lens[2] = 100; // a shorter row
            let want = cpu::attention(&p).unwrap();
            let got = g.run_attention(&p).unwrap();
            close(&got, &want, 1e-4, 1e-3).unwrap_or_else(|e| panic!("{mode:?} dim={dim}: {e}"));
        }
    }
}

#[test]
fn indexer_matches_cpu() {
    let Some(mut g) = gpu() else { return };
    for (n_pos, topk) in [(5000, 256), (100, 128)] {
        let p = IndexerProblem::random(2, 16, 128, n_pos, topk, 70);
        let want = cpu::indexer(&p).unwrap();
        let got = g.run_indexer(&p).unwrap();
        let scale = want.scores.iter().fold(0f32, |m, v| m.max(v.abs()));
        close(&got.scores, &want.scores, 1e-5 * scale, 1e-4).unwrap();
        // The GPU's selection must be a valid top-k of the GPU's own scores.
        topk_valid(&got.topk, &got.scores, p.batch, p.n_pos, p.topk).unwrap();
    }
}

#[test]
fn gather_and_copy_match_cpu() {
    let Some(mut g) = gpu() else { return };
    let p = GatherProblem::random(4096, 256, 10_000, 80);
    assert!(g.run_gather(&p).unwrap() == cpu::gather(&p).unwrap());
    let src: Vec<u8> = (0..(1 << 20) + 48).map(|i: u32| (i * 7) as u8).collect();
    assert!(g.run_copy(&src).unwrap() == src);
}

/// The tiny model's rank 0 of 1 on `dev`, weights from seed 7, 32 KV pages.
fn tiny_executor(dev: Box<dyn engine::serve::ServeDevice>) -> engine::serve::Executor {
    let shard = engine::serve::Shard {
        seed: 7,
        rank: 0,
        ranks: 1,
        pages: 32,
    };
    engine::serve::Executor::new(dev, common::tiny(), shard).unwrap()
}

/// The prompt both GPU serving tests run (40 tokens), and its first 39 as a prefill on
/// pages 3, 1, 2.
fn prompt() -> Vec<u32> {
    (0..40u32).map(|i| (i * 37 + 11) % 512).collect()
}

fn prefill(p: &[u32]) -> engine::serve::Seq {
    engine::serve::Seq {
        tokens: p[..39].to_vec(),
        start: 0,
        pages: vec![3, 1, 2],
        accept: None,
    }
}

/// The serving device: every live-model op, and a whole forward pass of a small model,
/// on the GPU against the CPU device.
#[test]
fn serving_device_runs_the_model_like_the_cpu() {
    use engine::serve::{Seq, Solo};
    use engine::{CpuDevice, CudaDevice};
    if gpu().is_none() {
        return;
    }
    let run = |dev: Box<dyn engine::serve::ServeDevice>| {
        let mut e = tiny_executor(dev);
        let p = prompt();
        e.forward(&[prefill(&p)], 0, &mut Solo).unwrap();
        let out = e
            .forward(
                &[Seq {
                    tokens: vec![p[39], 5],
                    start: 39,
                    pages: vec![3, 1, 2],
                    accept: Some(1),
                }],
                1,
                &mut Solo,
            )
            .unwrap();
        (out, e.export_kv(&[3, 1]).unwrap())
    };
    let (cpu_out, cpu_kv) = run(Box::new(CpuDevice::new()));
    let (gpu_out, gpu_kv) = run(Box::new(CudaDevice::open(0).unwrap()));
    // Greedy tokens agree (summation order could only flip a near tie).
    assert_eq!(gpu_out, cpu_out);
    // KV entries: fp8 codes within one step of each other (rounding of nearly equal
    // scaled values), scales close.
    assert_eq!(gpu_kv.len(), cpu_kv.len());
    let differing = gpu_kv.iter().zip(&cpu_kv).filter(|(a, b)| a != b).count();
    assert!(
        differing * 100 < cpu_kv.len(),
        "{differing} of {} KV bytes differ",
        cpu_kv.len()
    );
}

/// A traced pass on the GPU: the same calls as on the CPU, each timed by CUDA events on
/// the GPU's timeline (finite, positive, ends in order), together no longer than the
/// pass as the host saw it.
#[test]
fn traced_pass_times_its_calls_by_gpu_events() {
    use engine::serve::Solo;
    use engine::{CpuDevice, CudaDevice};
    if gpu().is_none() {
        return;
    }
    let traced = |dev: Box<dyn engine::serve::ServeDevice>| {
        let mut e = tiny_executor(dev);
        e.set_trace(true);
        let t0 = std::time::Instant::now();
        e.forward(&[prefill(&prompt())], 0, &mut Solo).unwrap();
        let wall = t0.elapsed().as_secs_f64();
        (e.take_trace_spans(), wall)
    };
    let (cpu, _) = traced(Box::new(CpuDevice::new()));
    let (gpu, wall) = traced(Box::new(CudaDevice::open(0).unwrap()));
    let calls =
        |v: &[engine::serve::TracedCall]| v.iter().map(|c| c.call.clone()).collect::<Vec<_>>();
    assert_eq!(calls(&gpu), calls(&cpu));
    assert!(
        gpu.iter().all(|c| c.dur_s.is_finite() && c.dur_s > 0.0),
        "{gpu:?}"
    );
    assert!(gpu.windows(2).all(|w| w[0].end_s <= w[1].end_s), "{gpu:?}");
    let sum: f64 = gpu.iter().map(|c| c.dur_s).sum();
    assert!(sum <= wall * 1.01, "calls {sum} s, pass {wall} s");
    eprintln!(
        "{} calls: {:.1} µs on the GPU, pass {:.1} µs",
        gpu.len(),
        sum * 1e6,
        wall * 1e6
    );
}
