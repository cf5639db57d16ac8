//! The CPU device's calibration side: what it runs on, and the calibration kernels (the
//! kernels' CPU twins on rayon) timed on the host clock.

use crate::device::{not_a_kernel, DeviceInfo};
use crate::hugepage::HostRegion;
use crate::op::GatherShape;
use crate::stats::{time_host, Stats, TimingConfig};
use crate::{EngineError, GatherPlacement, OpSpec, Result};
use kernels::{cpu, AttnProblem, IndexerProblem, MoeProblem};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::hint::black_box;

/// Host memory the rotation copies of one op may use.
const MEM_CAP: u64 = 512 << 20;
/// Distinct index sets a gather rotates over.
const GATHER_INDEX_SETS: usize = 4;

/// The CPU model and threads, the OS kernel and the last-level cache.
pub(super) fn host_info() -> DeviceInfo {
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| std::env::consts::ARCH.to_string());
    let os = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| format!("linux {}", s.trim()))
        .unwrap_or_else(|_| std::env::consts::OS.to_string());
    DeviceInfo {
        device: format!("cpu: {model} ({} threads)", rayon::current_num_threads()),
        driver: os,
        cache_bytes: last_level_cache_bytes(),
        rotation_cap_bytes: MEM_CAP,
    }
}

/// Largest cache of cpu0 from sysfs (32 MiB when unknown).
pub fn last_level_cache_bytes() -> u64 {
    let mut best = 0u64;
    for i in 0..8 {
        let path = format!("/sys/devices/system/cpu/cpu0/cache/index{i}/size");
        if let Ok(s) = std::fs::read_to_string(path) {
            let s = s.trim();
            let (num, mult) = match s.chars().last() {
                Some('K') => (&s[..s.len() - 1], 1024),
                Some('M') => (&s[..s.len() - 1], 1 << 20),
                Some('G') => (&s[..s.len() - 1], 1 << 30),
                _ => (s, 1),
            };
            if let Ok(n) = num.parse::<u64>() {
                best = best.max(n * mult);
            }
        }
    }
    if best == 0 {
        32 << 20
    } else {
        best
    }
}

/// Times the calibration kernel `op` over `copies` input copies: its statistics and a
/// note (the page facts of a gather's table).
pub(super) fn time_on_host(
    op: &OpSpec,
    cfg: &TimingConfig,
    copies: usize,
) -> Result<(Stats, String)> {
    let stats = match *op {
        OpSpec::MoeDecode(s) | OpSpec::GroupedGemm(s) => {
            let probs: Vec<MoeProblem> = (0..copies).map(|c| s.problem(c as u64)).collect();
            time_host(cfg, |i| {
                black_box(cpu::moe(&probs[i % copies])?);
                Ok(())
            })?
        }
        OpSpec::Attention(s) => {
            let probs: Vec<AttnProblem> = (0..copies).map(|c| s.problem(c as u64)).collect();
            time_host(cfg, |i| {
                black_box(cpu::attention(&probs[i % copies])?);
                Ok(())
            })?
        }
        OpSpec::Indexer(s) => {
            let probs: Vec<IndexerProblem> = (0..copies).map(|c| s.problem(c as u64)).collect();
            time_host(cfg, |i| {
                black_box(cpu::indexer(&probs[i % copies])?);
                Ok(())
            })?
        }
        OpSpec::Gather(s) => return time_gather(&s, cfg),
        OpSpec::AllToAll(s) => {
            let n = s.bytes as usize;
            let srcs: Vec<Vec<u8>> = (0..copies).map(|c| random_bytes(n, c as u64)).collect();
            // Non-zero fill touches every page now, so no page fault is timed.
            let mut dsts: Vec<Vec<u8>> = (0..copies).map(|_| vec![1u8; n]).collect();
            time_host(cfg, |i| {
                cpu::copy(&srcs[i % copies], &mut dsts[i % copies])?;
                black_box(&dsts[i % copies]);
                Ok(())
            })?
        }
        OpSpec::StreamRead(s) => {
            let bufs: Vec<Vec<u8>> = (0..copies)
                .map(|c| random_bytes(s.bytes as usize, c as u64))
                .collect();
            time_host(cfg, |i| {
                black_box(cpu::stream_read(&bufs[i % copies]));
                Ok(())
            })?
        }
        OpSpec::Gemm(s) => {
            let (a, b) = s.inputs();
            time_host(cfg, |_| {
                black_box(cpu::gemm(&a, &b, s.m, s.n, s.k)?);
                Ok(())
            })?
        }
        ref live => return Err(not_a_kernel(live)),
    };
    Ok((stats, String::new()))
}

/// A gather from a host table in 4 KiB or 2 MiB pages; the note says which pages the
/// table got.
fn time_gather(s: &GatherShape, cfg: &TimingConfig) -> Result<(Stats, String)> {
    let huge = match s.placement {
        GatherPlacement::Host4k => false,
        GatherPlacement::Host2m => true,
        other => {
            return Err(EngineError::Unsupported(format!(
                "gather placement {} needs a GPU; the CPU backend has host4k and host2m",
                other.name()
            )))
        }
    };
    let n_rows = s.table_rows();
    let mut table = HostRegion::new(n_rows * s.row_bytes, huge)?;
    fill_pattern(table.as_mut_slice());
    let mut rng = ChaCha8Rng::seed_from_u64(42);
    let sets: Vec<Vec<u64>> = (0..GATHER_INDEX_SETS)
        .map(|_| kernels::random_indices(&mut rng, n_rows, s.rows))
        .collect();
    let mut out = vec![1u8; s.rows * s.row_bytes];
    let st = time_host(cfg, |i| {
        cpu::gather_into(
            table.as_slice(),
            s.row_bytes,
            &sets[i % GATHER_INDEX_SETS],
            &mut out,
        )?;
        black_box(&out);
        Ok(())
    })?;
    Ok((st, table.note()))
}

/// Fills with a cheap position-dependent pattern (every page written).
fn fill_pattern(buf: &mut [u8]) {
    use rayon::prelude::*;
    buf.par_chunks_mut(1 << 16)
        .enumerate()
        .for_each(|(c, chunk)| {
            for (i, b) in chunk.iter_mut().enumerate() {
                *b = (c.wrapping_mul(31) ^ i.wrapping_mul(7)) as u8;
            }
        });
}

fn random_bytes(n: usize, seed: u64) -> Vec<u8> {
    let mut v = vec![0u8; n];
    ChaCha8Rng::seed_from_u64(seed).fill(&mut v[..]);
    v
}
