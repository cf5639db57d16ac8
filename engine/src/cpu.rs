//! CPU backend: the kernels' CPU twins on a rayon pool, timed on the host clock.

use crate::hugepage::HostRegion;
use crate::stats::time_host;
use crate::EngineError;
use crate::{Backend, DeviceInfo, GatherPlacement, Measurement, OpSpec, Result, TimingConfig};
use kernels::{cpu, AttnProblem, GatherProblem, IndexerOutput, IndexerProblem, MoeProblem};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::hint::black_box;

/// Host memory the rotation copies of one op may use.
const MEM_CAP: u64 = 512 << 20;
/// Distinct index sets a gather rotates over.
const GATHER_INDEX_SETS: usize = 4;

pub struct CpuBackend {
    info: DeviceInfo,
}

impl Default for CpuBackend {
    fn default() -> Self {
        Self::new()
    }
}

impl CpuBackend {
    pub fn new() -> CpuBackend {
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
        CpuBackend {
            info: DeviceInfo {
                device: format!("cpu: {model} ({} threads)", rayon::current_num_threads()),
                driver: os,
                cache_bytes: last_level_cache_bytes(),
            },
        }
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

impl Backend for CpuBackend {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    fn moe(&mut self, p: &MoeProblem) -> Result<Vec<f32>> {
        Ok(cpu::moe(p)?)
    }

    fn attention(&mut self, p: &AttnProblem) -> Result<Vec<f32>> {
        Ok(cpu::attention(p)?)
    }

    fn indexer(&mut self, p: &IndexerProblem) -> Result<IndexerOutput> {
        Ok(cpu::indexer(p)?)
    }

    fn gather(&mut self, p: &GatherProblem) -> Result<Vec<u8>> {
        Ok(cpu::gather(p)?)
    }

    fn copy(&mut self, src: &[u8]) -> Result<Vec<u8>> {
        let mut dst = vec![0u8; src.len()];
        cpu::copy(src, &mut dst)?;
        Ok(dst)
    }

    fn measure(&mut self, op: &OpSpec, cfg: &TimingConfig) -> Result<Measurement> {
        let copies = op.prepare(cfg, self.info.cache_bytes, MEM_CAP)?;
        let mut note = String::new();
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
            OpSpec::Gather(s) => {
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
                note = table.note();
                st
            }
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
            ref live => {
                let mut dev = crate::serve::device::CpuDevice::new();
                crate::op::live::measure_on(&mut dev, live, cfg, copies)?
            }
        };
        Ok(Measurement::new(
            op.point(),
            stats,
            op.bytes(),
            op.flops(),
            note,
        ))
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::op::*;
    use kernels::{AttnModeKind, WeightDtype};

    #[test]
    fn measures_every_op_kind() {
        let mut b = CpuBackend::new();
        let cfg = TimingConfig {
            warmup: 0,
            reps: 2,
            max_seconds: 0.1,
            min_reps: 1,
            rotate: true,
            thread_cpu: false,
        };
        let ops = [
            OpSpec::MoeDecode(MoeShape {
                dtype: WeightDtype::Int4,
                tokens: 1,
                experts: 2,
                n_out: 32,
                k_in: 256,
            }),
            OpSpec::GroupedGemm(MoeShape {
                dtype: WeightDtype::Bf16,
                tokens: 16,
                experts: 1,
                n_out: 16,
                k_in: 256,
            }),
            OpSpec::Attention(AttnShape::decode(
                AttnModeKind::Window(16),
                1,
                2,
                64,
                64,
                16,
            )),
            OpSpec::Indexer(IndexerShape {
                batch: 1,
                heads: 2,
                dim: 64,
                positions: 100,
                topk: 8,
            }),
            OpSpec::Gather(GatherShape {
                placement: GatherPlacement::Host2m,
                table_bytes: 4 << 20,
                row_bytes: 256,
                rows: 64,
            }),
            OpSpec::AllToAll(CopyShape {
                bytes: 4096,
                peers: 1,
            }),
            OpSpec::StreamRead(StreamShape { bytes: 1 << 16 }),
            OpSpec::Gemm(GemmShape { m: 8, n: 8, k: 8 }),
        ];
        for op in &ops {
            let m = b.measure(op, &cfg).unwrap();
            assert!(m.stats.median_s > 0.0 && m.bytes > 0, "{op:?}");
            assert!(m.achieved_bytes_per_s > 0.0);
            assert_eq!(m.point, op.point());
        }
        let g = b.measure(&ops[4], &cfg).unwrap();
        assert!(g.note.contains("thp="), "{}", g.note);
        let e = b
            .measure(
                &OpSpec::Gather(GatherShape {
                    placement: GatherPlacement::Device,
                    table_bytes: 4096,
                    row_bytes: 256,
                    rows: 4,
                }),
                &cfg,
            )
            .unwrap_err();
        assert!(e.to_string().contains("needs a GPU"));
        assert!(b
            .measure(
                &OpSpec::AllToAll(CopyShape {
                    bytes: 4096,
                    peers: 2
                }),
                &cfg
            )
            .is_err());
    }

    #[test]
    fn runs_match_twins() {
        let mut b = CpuBackend::new();
        let src: Vec<u8> = (0..1000u32).map(|i| i as u8).collect();
        assert_eq!(b.copy(&src).unwrap(), src);
        assert!(b.info().cache_bytes > 0);
        assert!(b.info().device.starts_with("cpu: "));
    }
}
