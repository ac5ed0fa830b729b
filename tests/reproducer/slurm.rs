//! Attempts as Slurm batch jobs (`reproduce --runner slurm`) on a real single-host Slurm:
//! Debian's slurmctld, slurmd and munged, configured by the test in a temp directory (its
//! own ports, munge key and socket, state and logs; this host the one node, with two CPUs),
//! started and stopped by it. The daemons run as root, and so do the jobs, as an attempt
//! needs. A bug-benchmark case is reproduced through it with two jobs at once, and the
//! search finds the schedule `--jobs 2` finds on this host; a Ctrl-C cancels the jobs.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::*;
use crate::replay::*;

const DAEMONS: [&str; 3] = ["/usr/sbin/munged", "/usr/sbin/slurmctld", "/usr/sbin/slurmd"];

/// A private single-host Slurm; dropped: its jobs cancelled, its daemons stopped, its
/// directory removed.
struct Slurm {
    dir: tempfile::TempDir,
    daemons: Vec<Child>,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl Slurm {
    fn start() -> Slurm {
        for d in DAEMONS {
            assert!(
                Path::new(d).exists(),
                "{d} is missing: apt-get install slurmd slurmctld munge slurm-client (scripts/test does)"
            );
        }
        let dir = tempfile::tempdir().unwrap();
        let mut slurm = Slurm {
            dir,
            daemons: Vec::new(),
        };
        let d = slurm.dir.path().to_path_buf();
        for sub in ["munge", "state", "spool", "log"] {
            std::fs::create_dir(d.join(sub)).unwrap();
        }
        let key: Vec<u8> = (0..1024).map(|_| rand_byte()).collect();
        let key_file = d.join("munge/munge.key");
        std::fs::write(&key_file, key).unwrap();
        set_mode(&key_file, 0o400);
        let socket = d.join("munge/munge.socket");
        slurm.spawn(
            "munged",
            Command::new(DAEMONS[0]).arg("--foreground").arg("--force").args([
                format!("--key-file={}", key_file.display()),
                format!("--socket={}", socket.display()),
                format!("--pid-file={}", d.join("munge/munged.pid").display()),
                format!("--log-file={}", d.join("log/munged.log").display()),
                format!("--seed-file={}", d.join("munge/munged.seed").display()),
            ]),
        );
        slurm.wait_until("munged's socket", || socket.exists());
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .unwrap()
            .trim()
            .to_string();
        let conf = format!(
            "ClusterName=reproducertest
SlurmctldHost={host}(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
AuthType=auth/munge
AuthInfo=socket={socket}
CredType=cred/munge
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd.pid
SlurmctldLogFile={d}/log/slurmctld.log
SlurmdLogFile={d}/log/slurmd.log
MailProg=/bin/true
# no cgroup delegation here: processes tracked by parentage, no task binding
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
MpiDefault=none
ReturnToService=2
KillWait=10
NodeName={host} NodeAddr=127.0.0.1 CPUs=2 State=UNKNOWN
PartitionName=attempts Nodes=ALL Default=YES MaxTime=INFINITE State=UP
",
            ctld_port = free_port(),
            slurmd_port = free_port(),
            socket = socket.display(),
            d = d.display(),
        );
        std::fs::write(slurm.conf(), conf).unwrap();
        let conf = slurm.conf();
        slurm.spawn(
            "slurmctld",
            Command::new(DAEMONS[1]).arg("-D").arg("-c").arg("-f").arg(&conf),
        );
        slurm.spawn("slurmd", Command::new(DAEMONS[2]).arg("-D").arg("-f").arg(&conf));
        slurm.wait_until("the node idle in sinfo", || {
            slurm.client("sinfo", &["-h", "-o", "%T"]).trim() == "idle"
        });
        slurm
    }

    fn conf(&self) -> PathBuf {
        self.dir.path().join("slurm.conf")
    }

    fn spawn(&mut self, name: &str, cmd: &mut Command) {
        let log = std::fs::File::create(self.dir.path().join(format!("log/{name}.out"))).unwrap();
        let child = cmd
            .env("SLURM_CONF", self.conf())
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {name}: {e}"));
        self.daemons.push(child);
    }

    /// A client command's stdout (empty when it failed).
    fn client(&self, name: &str, args: &[&str]) -> String {
        Command::new(name)
            .args(args)
            .env("SLURM_CONF", self.conf())
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).to_string())
            .unwrap_or_default()
    }

    /// The jobs in the queue and their states, one "ID STATE" a line.
    fn queue(&self) -> String {
        self.client("squeue", &["-h", "-o", "%i %T"])
    }

    fn wait_until(&self, what: &str, mut done: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !done() {
            assert!(
                Instant::now() < deadline,
                "no {what} after 60 s:\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn logs(&self) -> String {
        let mut all = String::new();
        for name in [
            "munged.log",
            "slurmctld.log",
            "slurmd.log",
            "munged.out",
            "slurmctld.out",
            "slurmd.out",
        ] {
            let text = std::fs::read_to_string(self.dir.path().join("log").join(name)).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(15).collect();
            all += &format!("--- {name}\n");
            for l in tail.into_iter().rev() {
                all += l;
                all.push('\n');
            }
        }
        all
    }
}

impl Drop for Slurm {
    fn drop(&mut self) {
        let _ = Command::new("scancel")
            .args(["--full", "--user=root"])
            .env("SLURM_CONF", self.conf())
            .status();
        let deadline = Instant::now() + Duration::from_secs(30);
        while !self.queue().trim().is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(200));
        }
        for child in self.daemons.iter_mut().rev() {
            // SAFETY: kill(2) of our own child
            unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
            let deadline = Instant::now() + Duration::from_secs(10);
            while child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn rand_byte() -> u8 {
    let mut b = [0u8; 1];
    // SAFETY: getrandom(2) into a one-byte buffer
    unsafe { libc::getrandom(b.as_mut_ptr().cast(), 1, 0) };
    b[0]
}

fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// The schedule without its comments.
fn schedule_of(out: &Path) -> String {
    std::fs::read_to_string(out.join("schedule.toml"))
        .unwrap_or_else(|e| panic!("{}: {e}", out.join("schedule.toml").display()))
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .collect::<Vec<_>>()
        .join("\n")
}

/// A fast case whose nodes have addresses (runs on the host network go one at a time).
const CASE: &str = "nth-connect";

/// The case's profile and production dump, and its search with `--jobs 2` on this host
/// (scripts/bench-repro), in `out/CASE/`.
fn prepare_case(out: &Path) -> PathBuf {
    let status = Command::new(workspace_root().join("scripts/bench-repro"))
        .env("BENCH_NO_BUILD", "1")
        .env("TRACERD", tracerd_bin())
        .env("REPRODUCER", reproducer_bin())
        .args(["--out", out.to_str().unwrap(), "--jobs", "2", CASE])
        .status()
        .expect("running scripts/bench-repro");
    assert!(status.success(), "bench-repro --jobs 2 {CASE}: {status}");
    out.join(CASE)
}

/// `reproducer reproduce` of the case prepared in `case`, on `slurm`, into `out`.
fn reproduce_on_slurm(slurm: &Slurm, case: &Path, out: &Path) -> Command {
    let mut dumps: Vec<PathBuf> = std::fs::read_dir(case.join("dumps"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "tdump"))
        .collect();
    dumps.sort();
    let mut cmd = reproducer_cmd();
    cmd.arg("reproduce")
        .arg("--scenario")
        .arg(
            workspace_root()
                .join("tests/bugbench")
                .join(CASE)
                .join("scenario.toml"),
        )
        .arg("--profile")
        .arg(case.join("profile.json"))
        .arg("--trace")
        .args(&dumps)
        .args(["--jobs", "2", "--runner", "slurm", "--out"])
        .arg(out)
        // the case's programs, on the jobs' PATH too (sbatch passes the environment on)
        .env("PATH", bugbench_path())
        .env("SLURM_CONF", slurm.conf());
    cmd
}

/// Starts `cmd`, its stdout and stderr into `log`.
fn spawn_logged(mut cmd: Command, log: &Path) -> Child {
    let file = std::fs::File::create(log).unwrap();
    cmd.stdin(Stdio::null())
        .stdout(file.try_clone().unwrap())
        .stderr(file)
        .spawn()
        .expect("starting reproducer reproduce")
}

fn bugbench_path() -> String {
    format!(
        "{}:{}",
        workspace_root().join("target/bugbench/bin").display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

#[test]
#[ignore = "system test: needs root (runs Slurm's daemons, loads BPF programs); scripts/test runs it"]
fn a_case_through_slurm_with_two_jobs_at_once_finds_the_schedule_of_jobs_2_and_ctrl_c_cancels_its_jobs() {
    require_root();
    let work = tempfile::tempdir().unwrap();
    let case = prepare_case(work.path());
    let slurm = Slurm::start();
    reproduces_with_two_jobs_at_once(&slurm, &case, work.path());
    ctrl_c_cancels_the_search_s_job(&slurm, &case, work.path());
}

fn reproduces_with_two_jobs_at_once(slurm: &Slurm, case: &Path, work: &Path) {
    let out = case.join("out-slurm");
    let log_file = work.join("reproduce.log");
    let mut child = Reaped(spawn_logged(reproduce_on_slurm(slurm, case, &out), &log_file));
    // two jobs of the search running at once, seen in the queue
    let mut most_running = 0;
    let status = loop {
        if let Some(status) = child.0.try_wait().unwrap() {
            break status;
        }
        let running = slurm.queue().lines().filter(|l| l.ends_with(" RUNNING")).count();
        most_running = most_running.max(running);
        std::thread::sleep(Duration::from_millis(100));
    };
    let log = std::fs::read_to_string(&log_file).unwrap();
    assert!(status.success(), "{log}\n{}", slurm.logs());
    assert!(log.contains("reproduced: "), "{log}");
    assert_eq!(
        schedule_of(&out),
        schedule_of(&case.join("out")),
        "the schedule --jobs 2 found on this host"
    );
    let result: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("result.json")).unwrap()).unwrap();
    assert_eq!(result["reproduced"], true, "{result:#}");
    assert_eq!(most_running, 2, "two attempts ran at once as Slurm jobs");
    // every attempt's run was a job: its output files are in the attempt's directory
    let first = out.join("attempts/001");
    assert!(
        first.join("slurm-job.err").is_file() && first.join("attempt-report.json").is_file(),
        "{}",
        first.display()
    );
    assert_eq!(slurm.queue().trim(), "", "no job left in the queue");
}

fn ctrl_c_cancels_the_search_s_job(slurm: &Slurm, case: &Path, work: &Path) {
    // both CPUs taken: the search's first job waits in the queue
    // its output in Slurm's directory, not sbatch's default slurm-N.out where the test runs
    let output = format!("--output={}", slurm.dir.path().join("log/blocker.out").display());
    let blocker = slurm.client(
        "sbatch",
        &["--parsable", "--cpus-per-task=2", &output, "--wrap=sleep 300"],
    );
    let blocker = blocker.trim().to_string();
    assert!(!blocker.is_empty(), "{}", slurm.logs());
    let running = format!("{blocker} RUNNING");
    slurm.wait_until("the blocking job running", || slurm.queue().trim() == running);
    let out = case.join("out-interrupted");
    let log_file = work.join("interrupted.log");
    let mut child = Reaped(spawn_logged(reproduce_on_slurm(slurm, case, &out), &log_file));
    slurm.wait_until("a job of the search pending", || {
        slurm.queue().lines().any(|l| l.ends_with(" PENDING"))
    });
    child.signal(libc::SIGINT);
    let status = child.0.wait().unwrap();
    let log = std::fs::read_to_string(&log_file).unwrap();
    assert!(!status.success(), "{status}: {log}");
    assert!(log.contains("interrupted"), "{status}: {log}");
    assert_eq!(slurm.queue().trim(), running, "the search's job was cancelled");
}
