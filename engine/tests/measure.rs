//! Every calibration op measured on each device present: the CPU always, the GPU where
//! one is usable (`common::gpu`).

mod common;

use engine::op::{CopyShape, GatherPlacement, GatherShape, OpSpec};
use engine::{Backend, Device, TimingConfig};

fn measures_every_calibration_op(dev: &mut dyn Backend, gpu: bool) {
    let cfg = TimingConfig {
        warmup: gpu as usize,
        reps: if gpu { 3 } else { 2 },
        max_seconds: if gpu { 1.0 } else { 0.1 },
        min_reps: 1,
        rotate: true,
        thread_cpu: false,
    };
    for op in &common::calibration_ops(gpu) {
        let m = dev
            .measure(op, &cfg)
            .unwrap_or_else(|e| panic!("{op:?}: {e}"));
        assert!(m.stats.median_s > 0.0 && m.bytes > 0, "{op:?}");
        assert!(m.achieved_bytes_per_s > 0.0, "{op:?}");
        assert_eq!(m.point, op.point());
        if let OpSpec::Gather(g) = op {
            let want = match g.placement {
                GatherPlacement::Host4k | GatherPlacement::Host2m => "thp=",
                GatherPlacement::Device | GatherPlacement::Mapped => "placement=",
            };
            assert!(m.note.contains(want), "{}", m.note);
        }
        eprintln!(
            "{} {} {}: {:.3e} s, {:.1} GB/s, {:.1} GFLOP/s",
            m.point.op,
            m.point.shape,
            m.point.dtype,
            m.stats.median_s,
            m.achieved_bytes_per_s / 1e9,
            m.achieved_flops_per_s / 1e9
        );
    }
    let peers = OpSpec::AllToAll(CopyShape {
        bytes: 4096,
        peers: 2,
    });
    assert!(
        dev.measure(&peers, &cfg).is_err(),
        "NCCL is not implemented"
    );
}

#[test]
fn every_calibration_op_measures_on_the_cpu() {
    let mut cpu = Device::Cpu.open().unwrap();
    measures_every_calibration_op(cpu.as_mut(), false);
    let device_table = OpSpec::Gather(GatherShape {
        placement: GatherPlacement::Device,
        table_bytes: 4096,
        row_bytes: 256,
        rows: 4,
    });
    let e = cpu
        .measure(&device_table, &TimingConfig::SMOKE)
        .unwrap_err();
    assert!(e.to_string().contains("needs a GPU"), "{e}");
}

/// A live-model op goes through the serving ops (on a scratch handle of the device).
#[test]
fn a_live_op_measures_through_the_serving_ops() {
    use engine::op::AddShape;
    let mut cpu = Device::Cpu.open().unwrap();
    let add = OpSpec::Add(AddShape { rows: 4, dim: 16 });
    let m = cpu.measure(&add, &TimingConfig::SMOKE).unwrap();
    assert!(m.stats.median_s > 0.0 && m.bytes > 0);
    assert_eq!((m.point, m.note), (add.point(), String::new()));
}

#[test]
fn every_calibration_op_measures_on_the_gpu() {
    let Some(mut gpu) = common::gpu() else { return };
    measures_every_calibration_op(gpu.as_mut(), true);
}

#[test]
fn the_cpu_device_says_what_it_is_and_copies() {
    let mut cpu = Device::Cpu.open().unwrap();
    let src: Vec<u8> = (0..1000u32).map(|i| i as u8).collect();
    assert_eq!(cpu.run_copy(&src).unwrap(), src);
    assert!(cpu.info().cache_bytes > 0);
    assert!(cpu.info().device.starts_with("cpu: "));
    assert!(cpu.describe().starts_with("cpu ("), "{}", cpu.describe());
}
