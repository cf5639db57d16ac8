//! Worker threads: one per rank, owning its executor (model shard, KV cache, device),
//! running the steps the scheduler sends; one KV link per decode rank, receiving KV
//! hand-overs through a bounded channel and timing them.
//!
//! On a CPU, ranks get disjoint cores when there are enough (each rank's rayon pool
//! is pinned to its cores with `sched_setaffinity`), so a prefill group and a decode
//! group, or the ranks of a DEP group, do not share cores.

use crate::LiveError;
use engine::serve::TracedCall;
use engine::serve::{Exchange, Executor, ModelConfig, Seq, SeqOut, Shard, Solo, ThreadExchange};
use engine::Device;
use sim::serving::IdleMode;
use std::collections::HashMap;
use std::sync::mpsc::{self, Receiver, Sender, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

/// Bytes per KV hand-over message.
pub const KV_CHUNK_BYTES: usize = 1 << 20;
/// Messages a KV link holds before the sender blocks.
pub const KV_LINK_MESSAGES: usize = 4;

/// Work for a rank.
pub enum Cmd {
    Step {
        seq: u64,
        prefill: Vec<Seq>,
        decode: Vec<Seq>,
        drafts: usize,
        /// Which passes the group runs (every rank of a DEP group runs them, with or
        /// without rows of its own: the exchanges inside are collective).
        passes: (bool, bool),
        /// Requests whose handed-over KV must be written in before the step.
        imports: Vec<u32>,
        /// Record the passes' op calls with their times (`Reply::Step::calls`).
        trace: bool,
    },
    /// Send request `req`'s KV (`pages` here) to decode link `link` for `to_pages`.
    Export {
        req: u32,
        pages: Vec<u32>,
        link: usize,
        to_pages: Vec<u32>,
    },
    Stop,
}

/// What workers report.
pub enum Reply {
    Ready {
        rank: usize,
        /// The device as calibration names it (on a CPU, with this rank's threads).
        device: String,
    },
    Step {
        rank: usize,
        seq: u64,
        outs: Vec<SeqOut>,
        start: Instant,
        end: Instant,
        prefill_s: f64,
        decode_s: f64,
        import_s: f64,
        /// CPU time of the passes on a one-thread rank (its wall time less what other
        /// processes took of its core); `None` with several threads.
        cpu_s: Option<f64>,
        /// The passes' op calls with their times, when the step was traced.
        calls: Vec<TracedCall>,
    },
    Exported {
        req: u32,
    },
    Transferred {
        req: u32,
        bytes: u64,
        start: Instant,
        end: Instant,
    },
    Failed {
        who: String,
        error: String,
    },
}

struct KvMsg {
    req: u32,
    to_pages: Vec<u32>,
    bytes: Vec<u8>,
    last: bool,
    start: Instant,
}

/// KV that arrived, waiting to be written into the decode rank's cache.
type Staged = Arc<Mutex<HashMap<u32, (Vec<u32>, Vec<u8>)>>>;

/// A rank to start: its global index, group, rank in group, and cores.
#[derive(Debug, Clone)]
pub struct RankSpec {
    pub index: usize,
    pub group: usize,
    pub rank: usize,
    pub ranks: usize,
    pub cores: Vec<usize>,
    pub pages: usize,
    /// Index of this rank's KV link (decode ranks of disaggregated runs).
    pub link: Option<usize>,
}

pub struct Workers {
    cmds: Vec<Sender<Cmd>>,
    handles: Vec<JoinHandle<()>>,
    pub replies: Receiver<Reply>,
    /// Device name reported by each rank, by global index.
    pub devices: Vec<String>,
}

/// Pins the calling thread to `cores` (no-op when empty or unsupported).
pub fn pin(cores: &[usize]) {
    #[cfg(target_os = "linux")]
    if !cores.is_empty() {
        // SAFETY: a zeroed cpu_set_t is valid; CPU_SET writes within it; the call only
        // reads the set.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            for &c in cores {
                libc::CPU_SET(c, &mut set);
            }
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = cores;
}

pub use engine::stats::thread_cpu_s;

/// Cores per rank: disjoint sets when every rank can have one, else none (unpinned).
pub fn core_sets(ranks: usize, cores: usize) -> Vec<Vec<usize>> {
    if ranks == 0 || ranks > cores {
        return vec![Vec::new(); ranks];
    }
    let per = cores / ranks;
    (0..ranks)
        .map(|r| (r * per..(r + 1) * per).collect())
        .collect()
}

fn worker_error(e: impl std::fmt::Display) -> String {
    e.to_string()
}

impl Workers {
    /// Starts every rank (building its executor on its own thread) and the KV links of
    /// `links` decode ranks; waits until all are ready.
    pub fn start(
        device: Device,
        model: &ModelConfig,
        seed: u64,
        specs: &[RankSpec],
        links: usize,
        idle: IdleMode,
    ) -> Result<Workers, LiveError> {
        let (reply_tx, replies) = mpsc::channel();
        let mut cmds = Vec::new();
        let mut handles = Vec::new();
        let exchanges = dep_exchanges(specs);
        let (link_tx, staged) = start_links(links, &reply_tx, &mut handles)?;
        for s in specs {
            let (tx, rx) = mpsc::channel();
            cmds.push(tx);
            let ex: Box<dyn Exchange + Send> = match exchanges.get(&s.group) {
                Some(v) => Box::new(v[s.rank].clone()),
                None => Box::new(Solo),
            };
            let spec = s.clone();
            let model = model.clone();
            let reply = reply_tx.clone();
            let links = link_tx.clone();
            let st = s.link.map(|l| staged[l].clone());
            handles.push(
                std::thread::Builder::new()
                    .name(format!("rank-{}", s.index))
                    .spawn(move || {
                        rank_loop(Rank {
                            device,
                            model,
                            seed,
                            spec,
                            ex,
                            rx,
                            reply,
                            links,
                            staged: st,
                            idle,
                        })
                    })
                    .map_err(|e| LiveError::Worker(format!("cannot start a rank thread: {e}")))?,
            );
        }
        drop(reply_tx);
        let w = Workers {
            cmds,
            handles,
            replies,
            devices: vec![String::new(); specs.len()],
        };
        w.wait_ready()
    }

    /// Waits for every rank's ready reply, noting its device name; stops the workers
    /// when one fails.
    fn wait_ready(mut self) -> Result<Workers, LiveError> {
        let mut ready = 0;
        while ready < self.devices.len() {
            match self.replies.recv() {
                Ok(Reply::Ready { rank, device }) => {
                    self.devices[rank] = device;
                    ready += 1;
                }
                Ok(Reply::Failed { who, error }) => {
                    self.stop();
                    return Err(LiveError::Worker(format!("{who}: {error}")));
                }
                Ok(_) => {}
                Err(_) => {
                    return Err(LiveError::Worker(
                        "a rank thread ended while starting".into(),
                    ))
                }
            }
        }
        Ok(self)
    }

    pub fn send(&self, rank: usize, cmd: Cmd) -> Result<(), LiveError> {
        self.cmds[rank]
            .send(cmd)
            .map_err(|_| LiveError::Worker(format!("rank {rank} has stopped")))
    }

    /// Stops every worker and waits for them.
    pub fn stop(self) {
        for c in &self.cmds {
            let _ = c.send(Cmd::Stop);
        }
        drop(self.cmds);
        for h in self.handles {
            let _ = h.join();
        }
    }
}

/// The DEP exchanges, one per group of several ranks, by group.
fn dep_exchanges(specs: &[RankSpec]) -> HashMap<usize, Vec<ThreadExchange>> {
    let mut exchanges: HashMap<usize, Vec<ThreadExchange>> = HashMap::new();
    for s in specs.iter().filter(|s| s.ranks > 1) {
        exchanges
            .entry(s.group)
            .or_insert_with(|| ThreadExchange::group(s.ranks));
    }
    exchanges
}

/// Starts `links` KV link threads (their handles pushed onto `handles`): a bounded
/// channel per decode rank, drained by its link thread. Returns the links' senders and
/// the KV staged by each.
fn start_links(
    links: usize,
    reply_tx: &Sender<Reply>,
    handles: &mut Vec<JoinHandle<()>>,
) -> Result<(Vec<SyncSender<KvMsg>>, Vec<Staged>), LiveError> {
    let mut link_tx: Vec<SyncSender<KvMsg>> = Vec::new();
    let mut staged: Vec<Staged> = Vec::new();
    for l in 0..links {
        let (tx, rx) = mpsc::sync_channel::<KvMsg>(KV_LINK_MESSAGES);
        link_tx.push(tx);
        let st: Staged = Arc::default();
        staged.push(st.clone());
        let reply = reply_tx.clone();
        handles.push(
            std::thread::Builder::new()
                .name(format!("kv-link-{l}"))
                .spawn(move || link_loop(rx, st, reply))
                .map_err(|e| LiveError::Worker(format!("cannot start a KV link: {e}")))?,
        );
    }
    Ok((link_tx, staged))
}

/// Tells the coordinator that `spec`'s rank stopped on `error`.
fn failed(reply: &Sender<Reply>, spec: &RankSpec, error: String) {
    let who = format!(
        "rank {} (group {}, rank {} of {})",
        spec.index, spec.group, spec.rank, spec.ranks
    );
    let _ = reply.send(Reply::Failed { who, error });
}

/// What a rank's thread needs: how to build its executor (device, model, seed and
/// spec), its group's exchange, its commands and replies, the KV links it sends to and
/// the KV staged for it.
struct Rank {
    device: Device,
    model: ModelConfig,
    seed: u64,
    spec: RankSpec,
    ex: Box<dyn Exchange + Send>,
    rx: Receiver<Cmd>,
    reply: Sender<Reply>,
    links: Vec<SyncSender<KvMsg>>,
    staged: Option<Staged>,
    idle: IdleMode,
}

/// A short busy wait: spin hints, then a yield (so a spinning thread gives way at once
/// where the machine has fewer cores than threads).
pub fn spin_pause() {
    for _ in 0..64 {
        std::hint::spin_loop();
    }
    std::thread::yield_now();
}

/// The rank's next command (`None` once the coordinator is gone). Spinning, the
/// calling thread polls and the rank's other pool threads spin beside it, so the next
/// step finds every core of the rank awake; sleeping, the thread blocks.
fn next_cmd(rx: &Receiver<Cmd>, idle: IdleMode) -> Option<Cmd> {
    use std::sync::atomic::{AtomicBool, Ordering};
    if idle == IdleMode::Sleep {
        return rx.recv().ok();
    }
    let got = AtomicBool::new(false);
    rayon::in_place_scope(|s| {
        for _ in 1..rayon::current_num_threads() {
            s.spawn(|_| {
                while !got.load(Ordering::Acquire) {
                    spin_pause();
                }
            });
        }
        let cmd = loop {
            match rx.try_recv() {
                Ok(c) => break Some(c),
                Err(mpsc::TryRecvError::Empty) => spin_pause(),
                Err(mpsc::TryRecvError::Disconnected) => break None,
            }
        };
        got.store(true, Ordering::Release);
        cmd
    })
}

fn rank_loop(rank: Rank) {
    let fail = |error: String| failed(&rank.reply, &rank.spec, error);
    pin(&rank.spec.cores);
    let cores = rank.spec.cores.clone();
    let threads = cores.len().max(1);
    let index = rank.spec.index;
    let pool = match rayon::ThreadPoolBuilder::new()
        .num_threads(if cores.is_empty() { 0 } else { threads })
        .thread_name(move |i| format!("rank-{index}-{i}"))
        .start_handler(move |_| pin(&cores))
        .build()
    {
        Ok(p) => p,
        Err(e) => return fail(format!("thread pool: {e}")),
    };
    // The whole loop runs on one of the pool's threads: a step's ops then split over
    // the pool without a hop from another thread (a wake-up per step).
    pool.install(move || serve_rank(rank));
}

/// The device as calibration names it.
fn device_name(device: Device) -> String {
    match device {
        Device::Cpu => {
            use engine::Backend;
            engine::cpu::CpuBackend::new().info().device.clone()
        }
        Device::Cuda(n) => format!("cuda:{n}"),
    }
}

/// Opens the device and builds the rank's shard of the model on it.
fn open_executor(
    device: Device,
    model: ModelConfig,
    seed: u64,
    spec: &RankSpec,
) -> Result<Executor, String> {
    let dev: Box<dyn engine::serve::ServeDevice> = match device {
        Device::Cpu => Box::new(engine::serve::CpuDevice::new()),
        Device::Cuda(n) => {
            Box::new(engine::serve::cuda::CudaDevice::open(n).map_err(worker_error)?)
        }
    };
    let shard = Shard {
        seed,
        rank: spec.rank,
        ranks: spec.ranks,
        pages: spec.pages,
    };
    Executor::new(dev, model, shard).map_err(worker_error)
}

/// A step's outputs and its import, prefill and decode seconds and CPU seconds, and
/// its traced calls.
type StepTimes = (Vec<SeqOut>, f64, f64, f64, f64, Vec<TracedCall>);

/// A rank's executor, with the KV staged for it and the KV links it sends to.
struct RankState {
    exec: Executor,
    staged: Option<Staged>,
    links: Vec<SyncSender<KvMsg>>,
}

impl RankState {
    /// Writes in the KV of `imports`, then runs the passes of `passes` (their calls
    /// traced when `trace`).
    fn step(
        &mut self,
        ex: &mut dyn Exchange,
        start: Instant,
        imports: Vec<u32>,
        (prefill, decode): (&[Seq], &[Seq]),
        (drafts, passes, trace): (usize, (bool, bool), bool),
    ) -> Result<StepTimes, String> {
        let exec = &mut self.exec;
        for req in imports {
            let got = self
                .staged
                .as_ref()
                .and_then(|s| s.lock().unwrap_or_else(|e| e.into_inner()).remove(&req));
            let (pages, bytes) = got.ok_or(format!("no KV staged for request {req}"))?;
            exec.import_kv(&pages, &bytes).map_err(worker_error)?;
        }
        exec.set_trace(trace);
        let t0 = Instant::now();
        let c0 = thread_cpu_s();
        if passes.0 {
            exec.forward(prefill, 0, ex).map_err(worker_error)?;
        }
        let t1 = Instant::now();
        let outs = if passes.1 {
            exec.forward(decode, drafts, ex).map_err(worker_error)?
        } else {
            Vec::new()
        };
        let t2 = Instant::now();
        let cpu = thread_cpu_s() - c0;
        let calls = if trace {
            let c = exec.take_trace_spans();
            exec.set_trace(false);
            c
        } else {
            Vec::new()
        };
        Ok((
            outs,
            (t0 - start).as_secs_f64(),
            (t1 - t0).as_secs_f64(),
            (t2 - t1).as_secs_f64(),
            cpu,
            calls,
        ))
    }

    /// Sends request `req`'s KV (`pages` here) to decode link `link` for `to_pages`, in
    /// chunks.
    fn export(
        &mut self,
        req: u32,
        pages: &[u32],
        link: usize,
        to_pages: Vec<u32>,
    ) -> Result<(), String> {
        let start = Instant::now();
        let bytes = self.exec.export_kv(pages).map_err(|e| e.to_string())?;
        let Some(tx) = self.links.get(link) else {
            return Err(format!("no KV link {link}"));
        };
        let n = bytes.len().div_ceil(KV_CHUNK_BYTES).max(1);
        for (i, chunk) in bytes
            .chunks(KV_CHUNK_BYTES)
            .chain(std::iter::once(&[][..]))
            .take(n)
            .enumerate()
        {
            let msg = KvMsg {
                req,
                to_pages: if i == 0 { to_pages.clone() } else { Vec::new() },
                bytes: chunk.to_vec(),
                last: i + 1 == n,
                start,
            };
            if tx.send(msg).is_err() {
                return Err("the KV link closed".into());
            }
        }
        Ok(())
    }
}

fn serve_rank(mut rank: Rank) {
    let fail = |error: String| failed(&rank.reply, &rank.spec, error);
    let device_name = device_name(rank.device);
    let exec = match open_executor(rank.device, rank.model, rank.seed, &rank.spec) {
        Ok(e) => e,
        Err(e) => return fail(e),
    };
    let mut state = RankState {
        exec,
        staged: rank.staged,
        links: rank.links,
    };
    let _ = rank.reply.send(Reply::Ready {
        rank: rank.spec.index,
        device: device_name,
    });
    // An unpinned rank shares its cores with the others: it blocks instead of spinning.
    let idle = if rank.spec.cores.is_empty() {
        IdleMode::Sleep
    } else {
        rank.idle
    };
    while let Some(cmd) = next_cmd(&rank.rx, idle) {
        let done = match cmd {
            Cmd::Stop => break,
            Cmd::Step {
                seq,
                prefill,
                decode,
                drafts,
                passes,
                imports,
                trace,
            } => {
                let start = Instant::now();
                let r = state.step(
                    rank.ex.as_mut(),
                    start,
                    imports,
                    (&prefill, &decode),
                    (drafts, passes, trace),
                );
                r.map(|(outs, import_s, prefill_s, decode_s, cpu, calls)| {
                    let _ = rank.reply.send(Reply::Step {
                        rank: rank.spec.index,
                        seq,
                        outs,
                        start,
                        end: Instant::now(),
                        prefill_s,
                        decode_s,
                        import_s,
                        cpu_s: (rayon::current_num_threads() == 1 && cpu.is_finite())
                            .then_some(cpu),
                        calls,
                    });
                })
            }
            Cmd::Export {
                req,
                pages,
                link,
                to_pages,
            } => state.export(req, &pages, link, to_pages).map(|()| {
                let _ = rank.reply.send(Reply::Exported { req });
            }),
        };
        if let Err(e) = done {
            return fail(e);
        }
    }
}

fn link_loop(rx: Receiver<KvMsg>, staged: Staged, reply: Sender<Reply>) {
    let mut partial: HashMap<u32, (Vec<u32>, Vec<u8>)> = HashMap::new();
    while let Ok(m) = rx.recv() {
        let e = partial.entry(m.req).or_default();
        if !m.to_pages.is_empty() {
            e.0 = m.to_pages;
        }
        e.1.extend_from_slice(&m.bytes);
        if m.last {
            let (pages, bytes) = partial.remove(&m.req).unwrap_or_default();
            let n = bytes.len() as u64;
            staged
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(m.req, (pages, bytes));
            let _ = reply.send(Reply::Transferred {
                req: m.req,
                bytes: n,
                start: m.start,
                end: Instant::now(),
            });
        }
    }
}
