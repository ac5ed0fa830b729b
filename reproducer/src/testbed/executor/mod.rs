//! One run of a scenario with a fault plan: network, tracing session, injector, nodes (with
//! their seccomp supervisors), workload and oracle, then a teardown that leaves nothing
//! behind. Each mechanism gets the same plan. Faults without a context are injected from
//! here as soon as they become current (and their node is up); faults with one are injected
//! by the probes.
//!
//! Here the run's options, report and state, its course (`run`, `drive`) and its teardown;
//! the node processes in `node_procs`, the faults fired in `firing`, the tracing session's
//! configuration in `trace_config`.
use std::collections::BTreeSet;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use super::injector::{boottime_ns, Injector, NodeInfo};
use super::netbed::Netbed;
use super::nodes::{self, Launch};
use super::runas::RunAs;
use super::supervisor::{Shared, SyscallFired};
use crate::model::plan::{FaultPlan, Planned};
use crate::model::resolve_binary;
use crate::model::scenario::{Placeholders, Scenario};

mod firing;
mod node_procs;
mod trace_config;

use trace_config::trace_config;
pub use trace_config::PROFILE_GAP_MS;

#[derive(Clone, Debug, Default)]
pub struct RunOptions {
    pub keep: bool,
    /// where kept runs go (default: the system temp dir)
    pub base_dir: Option<PathBuf>,
    /// functions to trace besides the schedule's contexts (BINARY:SYMBOL or SYMBOL of the
    /// node's own binary), so a run's trace can be compared with production
    pub trace_functions: Vec<(usize, String)>,
    /// a profile run: the trace counts every syscall per process and every call of the
    /// traced functions, records no function events, and skips (counts) functions whose
    /// uprobe cannot be attached
    pub profiling: bool,
    /// a profile run: detach a function's uprobe once it was called this often (0 = never;
    /// `analysis::profile::detach_after_calls`)
    pub detach_functions_after_calls: u64,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct Fired {
    pub fault: usize,
    pub kind: String,
    pub node: String,
    /// milliseconds since the first node was started
    pub at_ms: u64,
    pub pid: u32,
    pub tid: u32,
    /// the context probe that completed it, or the path of a failed call
    pub detail: String,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct RunReport {
    pub bug: bool,
    pub timed_out: bool,
    pub fired: Vec<Fired>,
    pub faults: usize,
    /// context probes entered, as "fault N: function (step k)"
    pub context: Vec<String>,
    pub workdir: PathBuf,
    pub trace: Option<PathBuf>,
    pub kept: bool,
    /// every node process started, restarts included: (node, pid)
    pub launched: Vec<(String, u32)>,
    /// per fault: matching calls seen while it was current (syscall faults), so a caller
    /// can tell "the Nth call never came" from "it came and failed"
    pub matched: Vec<u32>,
    /// per fault: the later matching calls a persistent syscall fault (`until`) failed
    /// after the call it fired at
    pub failed_after: Vec<u32>,
    /// from the first node's start to the trace dump: the span the trace's counts cover
    pub duration_ms: u64,
    /// CLOCK_BOOTTIME when every node was ready (the workload's start): what fault-free runs
    /// do before it is start-up, after it running (the profile's exits are told apart so)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_ns: Option<u64>,
    /// per fault: its `matched` calls by `ready_ns` (made during start-up), so the search
    /// keeps its Nth-call walk out of them; empty when no node got ready, and in older files
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub matched_at_ready: Vec<u32>,
    /// a node did not start (it exited or never became ready) and the run ended there, without
    /// workload or oracle: which node, why, and which faults had fired by then
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_started: Option<String>,
}

/// A node that exited or never became ready: with faults injected, a result of the run
/// (the fault stopped it), not an error of the test bed.
#[derive(Debug)]
pub struct NotStarted(pub String);

impl std::fmt::Display for NotStarted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for NotStarted {}

struct NodeProc {
    child: Option<Child>,
    pid: u32,
    ready: bool,
}

struct Run<'a> {
    scenario: &'a Scenario,
    plan: &'a FaultPlan,
    workdir: PathBuf,
    vars: Placeholders,
    injector: Injector,
    session: tracerd::session::TraceSession,
    shared: Arc<Shared>,
    fired_rx: crossbeam_channel::Receiver<SyscallFired>,
    supervisors: Vec<std::thread::JoinHandle<()>>,
    procs: Vec<NodeProc>,
    notify_syscalls: Vec<Vec<u32>>,
    started: Instant,
    started_boot_ns: u64,
    report: RunReport,
    resumes: Vec<(Instant, u32)>,
    /// per node: the account it runs as
    users: Vec<Option<RunAs>>,
    /// last: fields drop in order, and the injector's TC hooks must go while the veths they
    /// sit on (and the run namespace this thread is in) still exist
    netbed: Netbed,
}

/// Refuses a scenario whose programs are not there, before anything starts.
fn check_programs(scenario: &Scenario) -> Result<()> {
    let setup = scenario
        .setup
        .iter()
        .enumerate()
        .map(|(i, s)| (format!("setup {}", i + 1), &s.command));
    let commands = scenario
        .nodes
        .iter()
        .map(|n| (format!("node {}", n.name), &n.command))
        .chain(setup)
        .chain([
            ("[workload]".to_string(), &scenario.workload.command),
            ("[oracle]".to_string(), &scenario.oracle.command),
        ]);
    for (what, argv) in commands {
        let program = &argv[0];
        if program.contains('{') {
            continue;
        }
        if !resolve_binary(program).is_file() {
            bail!(
                "scenario {}: {what}: program '{program}' not found{}",
                scenario.name,
                if program.contains('/') { "" } else { " on PATH" }
            );
        }
    }
    Ok(())
}

/// Runs `scenario` once with `plan`; returns what happened.
pub fn run(scenario: &Scenario, plan: &FaultPlan, opts: &RunOptions) -> Result<RunReport> {
    check_programs(scenario)?;
    crate::interrupt::install()?;
    nodes::become_subreaper();
    let base = opts.base_dir.clone().unwrap_or_else(std::env::temp_dir);
    std::fs::create_dir_all(&base).with_context(|| format!("run directory {}", base.display()))?;
    let workdir = tempfile::Builder::new()
        .prefix("reproducer-run-")
        .tempdir_in(&base)?
        .keep();
    let result = run_in(scenario, plan, &workdir, opts);
    let swept = nodes::sweep(Duration::from_secs(10));
    let mut report = match result.and_then(|r| swept.map(|()| r)) {
        Ok(r) => r,
        Err(e) => {
            // a run that failed leaves nothing behind, its directory included
            let _ = std::fs::remove_dir_all(&workdir);
            return Err(e);
        }
    };
    if !opts.keep {
        let _ = std::fs::remove_dir_all(&workdir);
        report.trace = None;
    }
    report.kept = opts.keep;
    Ok(report)
}

/// Exit 0 is the bug and any other exit its absence; an oracle that cannot run or does
/// not finish makes the run an error (a search on a broken oracle is wasted time).
fn oracle_verdict(status: Option<std::process::ExitStatus>, log: &Path) -> Result<bool> {
    use std::os::unix::process::ExitStatusExt;
    let Some(status) = status else {
        bail!(
            "the oracle did not finish within 60 s; its log ends: {}",
            nodes::log_tail(log, 5)
        )
    };
    match (status.code(), status.signal()) {
        (Some(0), _) => Ok(true),
        (Some(126 | 127), _) => bail!(
            "the oracle could not be started (exit {}); its log ends: {}",
            status.code().unwrap_or(0),
            nodes::log_tail(log, 5)
        ),
        (None, Some(sig)) => bail!(
            "the oracle was killed by signal {sig}; its log ends: {}",
            nodes::log_tail(log, 5)
        ),
        _ => Ok(false),
    }
}

fn run_in(scenario: &Scenario, plan: &FaultPlan, workdir: &Path, opts: &RunOptions) -> Result<RunReport> {
    // from here on this thread is in the run's namespace, if it has one (see netbed)
    let netbed = Netbed::create(scenario)?;
    let mut vars = Placeholders {
        workdir: workdir.display().to_string(),
        ..Default::default()
    };
    let users = scenario
        .nodes
        .iter()
        .map(|n| n.user.as_deref().map(RunAs::lookup).transpose())
        .collect::<Result<Vec<_>>>()?;
    if scenario.has_users() {
        // the accounts must reach the run directory and read what setup writes there
        std::fs::set_permissions(workdir, std::fs::Permissions::from_mode(0o755))?;
    }
    let mut infos = Vec::new();
    for (n, user) in scenario.nodes.iter().zip(&users) {
        std::fs::create_dir_all(workdir.join(&n.name))?;
        if let Some(u) = user {
            u.check_reachable(&workdir.join(&n.name))?;
            u.own(&workdir.join(&n.name))?;
        }
        if n.address.is_some() {
            vars.addresses.insert(n.name.clone(), n.ips());
        }
        let binary = resolve_binary(&vars.expand(&n.command[0])?);
        let net = netbed.of(&n.name);
        infos.push(NodeInfo {
            binary,
            addresses: n.ips(),
            host_veth: net.map(|x| x.host_veth.clone()),
        });
    }
    super::setup::run_setup(scenario, workdir, &vars)?;
    let session = tracerd::session::TraceSession::start(trace_config(plan, &infos, opts))
        .context("starting the run's tracing")?;
    let injector = Injector::start(plan, &infos)?;
    let (fired_tx, fired_rx) = crossbeam_channel::unbounded();
    let mut patterns = Vec::new();
    for f in &plan.faults {
        let glob = match &f.action {
            Planned::Syscall { path: Some(p), .. } => {
                let glob = vars.expand(&crate::analysis::profile::path_glob(p))?;
                Some(glob::Pattern::new(&glob).context("a fault's path glob")?)
            }
            _ => None,
        };
        patterns.push(glob);
    }
    let shared = Arc::new(Shared::new(
        plan.clone(),
        patterns,
        injector.state_handle()?,
        fired_tx,
    ));
    let notify_syscalls = (0..scenario.nodes.len())
        .map(|i| {
            let nrs = plan
                .faults
                .iter()
                .filter(|f| f.node == i)
                .filter_map(|f| match f.action {
                    Planned::Syscall { nr, .. } => Some(nr),
                    _ => None,
                });
            nrs.collect::<BTreeSet<_>>().into_iter().collect()
        })
        .collect();
    let report = RunReport {
        bug: false,
        timed_out: false,
        fired: Vec::new(),
        faults: plan.len(),
        context: Vec::new(),
        workdir: workdir.to_path_buf(),
        trace: None,
        kept: opts.keep,
        launched: Vec::new(),
        matched: Vec::new(),
        failed_after: Vec::new(),
        duration_ms: 0,
        ready_ns: None,
        matched_at_ready: Vec::new(),
        not_started: None,
    };
    let mut run = Run {
        scenario,
        plan,
        workdir: workdir.to_path_buf(),
        vars,
        injector,
        session,
        shared,
        fired_rx,
        supervisors: Vec::new(),
        procs: Vec::new(),
        notify_syscalls,
        started: Instant::now(),
        started_boot_ns: boottime_ns(),
        report,
        resumes: Vec::new(),
        users,
        netbed,
    };
    let outcome = match run.drive() {
        Err(e) if !plan.faults.is_empty() && e.downcast_ref::<NotStarted>().is_some() => {
            run.end_not_started(&e)
        }
        other => other,
    };
    // the report outlives the run; the run's teardown is its Drop, also on a panic
    let report = run.report.clone();
    drop(run);
    outcome?;
    Ok(report)
}

impl Run<'_> {
    fn deadline(&self) -> Instant {
        self.started + Duration::from_secs(self.scenario.run_timeout_s)
    }

    fn log_of(&self, name: &str) -> PathBuf {
        self.workdir.join(format!("{name}.log"))
    }

    /// Ends a run whose node did not start: what fired until then, the trace, run.json.
    fn end_not_started(&mut self, e: &anyhow::Error) -> Result<()> {
        let events = self.injector.poll(Duration::from_millis(50))?;
        self.handle_probe_events(events);
        let fired: Vec<String> = self
            .report
            .fired
            .iter()
            .map(|f| format!("fault {} fired in pid {}", f.fault, f.pid))
            .collect();
        let fired = if fired.is_empty() {
            "no fault had fired".to_string()
        } else {
            fired.join(", ")
        };
        self.report.not_started = Some(format!("{e}; {fired} before it was ready"));
        self.finish_report()
    }

    fn drive(&mut self) -> Result<()> {
        self.started_boot_ns = boottime_ns();
        for i in 0..self.scenario.nodes.len() {
            self.launch(i)?;
        }
        self.report.ready_ns = Some(boottime_ns());
        self.report.matched_at_ready = self.shared.counts.lock().map(|c| c.clone()).unwrap_or_default();
        self.shared.ready.store(true, std::sync::atomic::Ordering::SeqCst);
        let argv = self.vars.expand_all(&self.scenario.workload.command)?;
        let mut workload = nodes::spawn(&Launch {
            argv: &argv,
            log: &self.log_of("workload"),
            netns: None,
            cwd: &self.workdir,
            seccomp: None,
            register: &[],
            trace: None,
            user: None,
        })?;
        self.started = Instant::now();
        loop {
            if crate::interrupt::requested() {
                nodes::kill_group(workload.id());
                let _ = workload.wait();
                bail!("interrupted");
            }
            let events = match self.injector.poll(Duration::from_millis(10)) {
                Err(e) if crate::interrupt::requested() => bail!("interrupted ({e})"),
                other => other?,
            };
            self.handle_probe_events(events);
            self.fire_contextless()?;
            self.resume_due(false);
            self.watch_nodes()?;
            if workload.try_wait()?.is_some() {
                break;
            }
            if Instant::now() >= self.deadline() {
                self.report.timed_out = true;
                nodes::kill_group(workload.id());
                let _ = workload.wait();
                break;
            }
        }
        // let late probe reports arrive, and end pauses before asking the oracle
        let events = self.injector.poll(Duration::from_millis(50))?;
        self.handle_probe_events(events);
        self.resume_due(true);
        let argv = self.vars.expand_all(&self.scenario.oracle.command)?;
        let status = nodes::run_until(
            &argv,
            None,
            &self.workdir,
            &self.log_of("oracle"),
            Instant::now() + Duration::from_secs(60),
        )?;
        self.report.bug = oracle_verdict(status, &self.log_of("oracle"))?;
        self.finish_report()
    }

    /// Completes the report with the calls counted, the run's duration and its trace, and
    /// writes it as run.json: what the injector did, for whoever reads this run later (the
    /// diagnosis feedback, a developer).
    fn finish_report(&mut self) -> Result<()> {
        self.report.matched = self.shared.counts.lock().map(|c| c.clone()).unwrap_or_default();
        self.report.failed_after = self
            .shared
            .failed_after
            .lock()
            .map(|c| c.clone())
            .unwrap_or_default();
        let trace_dir = self.workdir.join("trace");
        std::fs::create_dir_all(&trace_dir)?;
        self.report.duration_ms = boottime_ns().saturating_sub(self.started_boot_ns) / 1_000_000;
        self.report.trace = Some(self.session.dump(&trace_dir)?);
        std::fs::write(
            self.workdir.join("run.json"),
            serde_json::to_vec_pretty(&self.report)?,
        )?;
        Ok(())
    }
}

/// Tears the run down: paused nodes resumed, every node process group killed and reaped,
/// leftovers swept, the seccomp supervisors stopped — then the fields drop (the tracing
/// session, the injector's links and hooks, the netbed last).
impl Drop for Run<'_> {
    fn drop(&mut self) {
        self.resume_due(true);
        for p in self.procs.drain(..) {
            nodes::kill_group(p.pid);
            if let Some(mut c) = p.child {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
        if let Err(e) = nodes::sweep(Duration::from_secs(10)) {
            log::warn!("cleanup: {e:#}");
        }
        self.shared.stop.store(true, Ordering::Relaxed);
        for s in self.supervisors.drain(..) {
            let _ = s.join();
        }
    }
}
