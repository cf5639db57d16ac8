//! What launching costs on this GPU, measured with the smallest kernel here
//! (`device_copy` of 16 bytes, one block): a chain of kernels launched one by one
//! (eager), and the same chain captured once and replayed as a CUDA graph, timed by
//! CUDA events on a stream of its own (stream capture does not work on the legacy
//! default stream the serving device uses). The cost model's `launch.eager_s`,
//! `launch.graph_node_s` and `launch.graph_s` are not published for data-centre GPUs;
//! this measures them (`cargo run --release -p engine --example launch_costs`).

use super::context::{kerr, CudaDevice};
use crate::stats::Stats;
use crate::Result;
use cudarc::driver::{sys, CudaFunction, CudaSlice, CudaStream, LaunchConfig, PushKernelArg};
use std::sync::Arc;
use std::time::Instant;

/// Launch costs on one GPU, seconds (medians over the repetitions).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LaunchCosts {
    /// Host time to issue one eager launch.
    pub eager_host_s: f64,
    /// GPU time per kernel of an eagerly launched chain (the kernel and its gap).
    pub eager_gpu_s: f64,
    /// GPU time per kernel of the chain replayed as a graph (the kernel and its gap).
    pub graph_node_s: f64,
    /// GPU time of one replay beyond its kernels.
    pub graph_s: f64,
    /// Chain lengths the two graph sizes had (the node time is their difference).
    pub chains: (usize, usize),
}

/// The tiny kernel on its own stream: 16 bytes copied by one block.
struct Tiny {
    f: CudaFunction,
    s: Arc<CudaStream>,
    src: CudaSlice<u8>,
    dst: CudaSlice<u8>,
}

impl Tiny {
    fn chain(&mut self, k: usize) -> Result<()> {
        let cfg = LaunchConfig {
            grid_dim: (1, 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        let n16: i64 = 1;
        for _ in 0..k {
            let mut b = self.s.launch_builder(&self.f);
            b.arg(&self.src).arg(&mut self.dst).arg(&n16);
            // SAFETY: matches device_copy; both buffers hold 16 bytes (one word).
            unsafe { b.launch(cfg) }.map_err(|e| kerr("device_copy", e))?;
        }
        Ok(())
    }

    /// GPU seconds of `work` on the stream, between two events.
    fn gpu_s(&mut self, work: impl FnOnce(&mut Tiny) -> Result<()>) -> Result<f64> {
        let flags = Some(sys::CUevent_flags::CU_EVENT_DEFAULT);
        let e0 = self
            .s
            .record_event(flags)
            .map_err(|e| kerr("launch_costs", e))?;
        work(self)?;
        let e1 = self
            .s
            .record_event(flags)
            .map_err(|e| kerr("launch_costs", e))?;
        let ms = e0.elapsed_ms(&e1).map_err(|e| kerr("launch_costs", e))?;
        Ok(f64::from(ms) * 1e-3)
    }

    /// Median GPU seconds of one replay of a graph of `k` kernels (after one replay to
    /// warm it).
    fn replay_s(&mut self, k: usize, reps: usize) -> Result<f64> {
        self.s
            .begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
            .map_err(|e| kerr("launch_costs: begin_capture", e))?;
        let captured = self.chain(k);
        let graph = self
            .s
            .end_capture(sys::CUgraphInstantiate_flags(0))
            .map_err(|e| kerr("launch_costs: end_capture", e))?;
        captured?;
        let g = graph.ok_or_else(|| kerr("launch_costs", "the capture made no graph"))?;
        g.upload().map_err(|e| kerr("launch_costs: upload", e))?;
        g.launch()
            .map_err(|e| kerr("launch_costs: graph launch", e))?;
        let mut t = Vec::with_capacity(reps);
        for _ in 0..reps {
            t.push(self.gpu_s(|_| g.launch().map_err(|e| kerr("launch_costs", e)))?);
        }
        Ok(Stats::from_samples(&t).median_s)
    }
}

impl CudaDevice {
    /// Launch costs from chains of `short` and `long` tiny kernels, `reps` times each.
    pub fn launch_costs(&mut self, short: usize, long: usize, reps: usize) -> Result<LaunchCosts> {
        if short == 0 || long <= short || reps == 0 {
            return Err(kerr(
                "launch_costs",
                "chains must be 0 < short < long, with at least one repetition",
            ));
        }
        let f = self.func(&kernels::COPY, "device_copy")?;
        let s = self.ctx.new_stream().map_err(|e| kerr("launch_costs", e))?;
        let src = s
            .alloc_zeros::<u8>(16)
            .map_err(|e| kerr("launch_costs", e))?;
        let dst = s
            .alloc_zeros::<u8>(16)
            .map_err(|e| kerr("launch_costs", e))?;
        let mut tiny = Tiny { f, s, src, dst };
        tiny.chain(long)?;
        let (mut host, mut gpu) = (Vec::new(), Vec::new());
        for _ in 0..reps {
            let mut h = 0.0;
            gpu.push(
                tiny.gpu_s(|t| {
                    let t0 = Instant::now();
                    t.chain(long)?;
                    h = t0.elapsed().as_secs_f64();
                    Ok(())
                })? / long as f64,
            );
            host.push(h / long as f64);
        }
        let t_short = tiny.replay_s(short, reps)?;
        let t_long = tiny.replay_s(long, reps)?;
        let (graph_s, graph_node_s) = graph_split((short, t_short), (long, t_long));
        Ok(LaunchCosts {
            eager_host_s: Stats::from_samples(&host).median_s,
            eager_gpu_s: Stats::from_samples(&gpu).median_s,
            graph_node_s,
            graph_s,
            chains: (short, long),
        })
    }
}

/// A replay's fixed time and time per node from replays of two chain lengths, each
/// `(kernels, seconds)`: the node time is the slope between them (never negative), the
/// fixed time what the shorter replay holds beyond its nodes.
fn graph_split((short, t_short): (usize, f64), (long, t_long): (usize, f64)) -> (f64, f64) {
    let node = ((t_long - t_short) / (long - short) as f64).max(0.0);
    ((t_short - short as f64 * node).max(0.0), node)
}

#[cfg(test)]
mod tests {
    use super::graph_split;

    /// 8 kernels replay in 20 us and 264 in 168.48 us: 0.58 us a node, and 20 - 4.64 =
    /// 15.36 us fixed. A longer chain that replays faster gives no negative node time.
    #[test]
    fn the_node_time_is_the_slope_between_two_chains() {
        let (fixed, node) = graph_split((8, 20e-6), (264, 168.48e-6));
        assert!((node - 0.58e-6).abs() < 1e-12, "{node}");
        assert!((fixed - 15.36e-6).abs() < 1e-12, "{fixed}");
        assert_eq!(graph_split((8, 20e-6), (264, 19e-6)), (20e-6, 0.0));
    }
}
