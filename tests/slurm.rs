//! `deploy/slurm/plan.sbatch` on a real scheduler: a one-node Slurm cluster (Debian's
//! `slurm-wlm` and `munge`, which `.ci/run` installs) started by the test in a temporary
//! folder, the job array submitted and waited for (bounded), its shards merged with
//! `twin plan merge`, the answer byte-identical to the unsharded plan; the daemons are
//! stopped after. Where Slurm is not installed or the test is not root, it says so and
//! passes, unless `TWIN_REQUIRE_SLURM` is set (CI sets it once the install succeeded).

mod common;

use common::repo;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The daemons of the test's cluster, stopped when it ends however it ends.
struct Cluster {
    dir: PathBuf,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for pid in ["slurmd.pid", "slurmctld.pid"] {
            let Ok(p) = std::fs::read_to_string(self.dir.join(pid)) else {
                continue;
            };
            let p = p.trim();
            let _ = Command::new("kill").arg(p).status();
            // Gone within 15 s, or killed: its ports are free for the next run.
            let t = Instant::now();
            while ok(Command::new("kill").args(["-0", p])) {
                if t.elapsed() > Duration::from_secs(15) {
                    let _ = Command::new("kill").args(["-9", p]).status();
                    break;
                }
                std::thread::sleep(Duration::from_millis(200));
            }
        }
    }
}

fn ok(cmd: &mut Command) -> bool {
    cmd.stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn text(cmd: &mut Command) -> String {
    let o = cmd.output().expect("runs");
    assert!(
        o.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Why the cluster cannot run here, if it cannot.
fn unavailable() -> Option<String> {
    for bin in ["slurmctld", "slurmd", "sbatch", "squeue", "munged"] {
        if !ok(Command::new("sh").args(["-c", &format!("command -v {bin}")])) {
            return Some(format!(
                "`{bin}` is not installed (Debian: slurm-wlm, munge)"
            ));
        }
    }
    let uid = text(Command::new("id").arg("-u"));
    (uid.trim() != "0").then(|| "the daemons need root".to_string())
}

/// munged, started if no daemon answers.
fn munge_up() {
    let answers = || ok(Command::new("sh").args(["-c", "munge -n | unmunge"]));
    if answers() {
        return;
    }
    let _ = std::fs::create_dir_all("/run/munge");
    let _ = Command::new("chown")
        .args(["munge:munge", "/run/munge"])
        .status();
    if !ok(Command::new("runuser").args(["-u", "munge", "--", "munged"])) {
        let _ = Command::new("munged").arg("--force").status();
    }
    let t = Instant::now();
    while !answers() {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "munged does not answer"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn write_conf(dir: &Path) -> PathBuf {
    let host = text(Command::new("hostname").arg("-s")).trim().to_string();
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let d = dir.display();
    for sub in ["state", "spool"] {
        std::fs::create_dir_all(dir.join(sub)).unwrap();
    }
    let conf = format!(
        "ClusterName=twintest\nSlurmctldHost={host}\nSlurmctldPort=16817\nSlurmdPort=16818\n\
         AuthType=auth/munge\nProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\n\
         JobAcctGatherType=jobacct_gather/none\nSelectType=select/cons_tres\n\
         SelectTypeParameters=CR_Core\nSlurmUser=root\nSlurmdUser=root\nMpiDefault=none\n\
         StateSaveLocation={d}/state\nSlurmdSpoolDir={d}/spool\n\
         SlurmctldPidFile={d}/slurmctld.pid\nSlurmdPidFile={d}/slurmd.pid\n\
         SlurmctldLogFile={d}/slurmctld.log\nSlurmdLogFile={d}/slurmd.log\nReturnToService=2\n\
         NodeName={host} CPUs={cpus} RealMemory=1000 State=UNKNOWN\n\
         PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP\n"
    );
    let p = dir.join("slurm.conf");
    std::fs::write(&p, conf).unwrap();
    p
}

#[test]
#[allow(clippy::too_many_lines)] // a test reads as one story; tests are exempt
fn the_slurm_array_merges_into_the_unsharded_plan() {
    if let Some(why) = unavailable() {
        assert!(
            std::env::var_os("TWIN_REQUIRE_SLURM").is_none(),
            "TWIN_REQUIRE_SLURM is set but {why}"
        );
        eprintln!("skipped: {why}");
        return;
    }
    munge_up();
    let tmp = tempfile::tempdir().unwrap();
    let conf = write_conf(tmp.path());
    let slurm = |bin: &str| {
        let mut c = Command::new(bin);
        c.env("SLURM_CONF", &conf);
        c
    };
    let cluster = Cluster {
        dir: tmp.path().to_path_buf(),
    };
    assert!(
        ok(slurm("slurmctld").arg("-f").arg(&conf)),
        "slurmctld does not start"
    );
    assert!(
        ok(slurm("slurmd").arg("-f").arg(&conf)),
        "slurmd does not start"
    );
    let t = Instant::now();
    while !text(slurm("sinfo").args(["-h", "-o", "%T"])).contains("idle") {
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "the node never comes up"
        );
        std::thread::sleep(Duration::from_millis(500));
    }

    // The array as shipped (8 tasks), one CPU each, a short plan of the small space.
    let work = tmp.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    let twin = PathBuf::from(env!("CARGO_BIN_EXE_twin"));
    let path = format!(
        "{}:{}",
        twin.parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let space = repo().join("examples/plan-space-small.toml");
    let args = "--duration 20 --set warmup_s=5";
    let id = text(
        slurm("sbatch")
            .current_dir(&work)
            .env("PATH", &path)
            .env("SPACE", &space)
            .env("TWIN_PLAN_ARGS", args)
            .args([
                "--parsable",
                "--cpus-per-task=1",
                "--mem=200M",
                "--export=ALL",
            ])
            .arg(repo().join("deploy/slurm/plan.sbatch")),
    );
    let id = id.trim().split(';').next().unwrap().to_string();
    let t = Instant::now();
    while !text(slurm("squeue").args(["-h", "-j", &id]))
        .trim()
        .is_empty()
    {
        if t.elapsed() > Duration::from_secs(900) {
            let _ = slurm("scancel").arg(&id).status();
            panic!("the array did not finish in 15 minutes");
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    let shards: Vec<PathBuf> = (0..8)
        .map(|i| work.join(format!("results/plan-{i}.jsonl")))
        .collect();
    for (i, s) in shards.iter().enumerate() {
        let log = std::fs::read_to_string(work.join(format!("twin-plan-{id}_{i}.log")))
            .unwrap_or_default();
        assert!(s.exists(), "task {i} wrote no shard; its log:\n{log}");
    }
    let merged = text(
        Command::new(&twin)
            .args(["plan", "merge", "--json"])
            .args(&shards),
    );
    let whole = text(
        Command::new(&twin)
            .args([
                "plan",
                "gb300-nvl72-v4.1-flash-agentx",
                "--slo",
                "tpot_p90_ms=20",
                "--space",
            ])
            .arg(&space)
            .args(args.split(' '))
            .arg("--json"),
    );
    assert!(
        merged == whole,
        "the merged plan differs from the unsharded one"
    );
    drop(cluster);
}
