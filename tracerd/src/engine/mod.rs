//! The tracing engine: loads and attaches the BPF programs, fills their configuration
//! maps, owns every link, and drives the ring-buffer consumer. The daemon and the
//! reproducer's test runs both trace through this one type. Function uprobes and their
//! links are `uprobes`'.
//!
//! Failed syscalls are caught by fexit programs on the entry points of
//! bpf/fexit_syscalls.h where the kernel loads them (chosen before loading), so syscalls of
//! other processes, and other syscalls, pay nothing; else by the sys_exit tracepoint.
use std::cell::{Cell, RefCell};
use std::mem::MaybeUninit;
use std::ops::ControlFlow;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use libbpf_rs::skel::{OpenSkel, Skel, SkelBuilder};
use libbpf_rs::{MapCore, MapFlags, OpenObject, RingBufferBuilder};

pub use tracedump::dump::{KernelCounters, OpenFile, SyscallCount};
use tracedump::process::ProcInfo;
use tracedump::syscalls::syscall_arg_table;

use crate::bpf::{OpenTracerSkel, TracerSkel, TracerSkelBuilder};
use crate::cgroup::TargetCgroup;
use crate::config::{Config, FunctionSpec, SyscallHook};
use crate::kernel;
use crate::procs::{exe_key, scan_targets};
use crate::recorder::Recorder;
use crate::skel::OwnedSkel;
use crate::uprobes::{counter_entries, Uprobes};

mod functions;
mod tables;
pub use functions::check_functions;

/// Most records one poll or drain takes before `run`'s requests get their turn. libbpf's
/// consume loop goes on while records keep coming: on a host where the kernel fills the
/// buffer faster than a starved daemon empties it, a dump or status request would otherwise
/// wait for minutes (seen in scripts/bench-soak on a machine loaded 6x its cores).
const CONSUME_BUDGET: usize = 16_384;
/// Rounds of [`CONSUME_BUDGET`] records the drain at the end takes at most.
const FINAL_DRAIN_ROUNDS: usize = 64;

pub struct Engine {
    skel: OwnedSkel<TracerSkel<'static>>,
    /// in a cell: the poll loop detaches functions past the call limit while it borrows
    /// the ring buffer's map
    uprobes: RefCell<Uprobes>,
    initial_processes: Vec<ProcInfo>,
    /// how often the watched connections' receive counters are read (see `look_at_connections`);
    /// a reload's gap_ms changes it
    look_every: Cell<Duration>,
    /// the cgroups the target selection names (resolved at start; a reload keeps them)
    cgroups: Vec<TargetCgroup>,
    /// how failed syscalls are caught, in words (for the log)
    syscall_hook: String,
    /// the silence that makes a network gap (flows.rs reads it when a flow leaves the table)
    gap_ms: Cell<u64>,
}

fn check_host() -> Result<()> {
    if !nix::unistd::geteuid().is_root() {
        bail!("tracerd must run as root (it loads BPF programs): run it with sudo or as a systemd service");
    }
    if !std::path::Path::new("/sys/kernel/btf/vmlinux").exists() {
        bail!("this kernel has no BTF (/sys/kernel/btf/vmlinux is missing): tracerd needs CONFIG_DEBUG_INFO_BTF=y");
    }
    Ok(())
}

impl Engine {
    /// Loads, configures and attaches everything `config` asks for. Returns only once every
    /// probe is attached; a uprobe that cannot be attached is an error.
    pub fn start(config: &Config) -> Result<Engine> {
        check_host()?;
        let functions = config.function_specs()?;
        check_functions(config, &functions)?;
        let cgroups = crate::cgroup::resolve_targets(config)?;
        kernel::route_libbpf_logs();
        let uprobe_multi = kernel::uprobe_multi_links();
        let functions_at_start = functions.len();
        let mut sections = Vec::new();
        let mut syscall_hook = String::new();
        let mut skel = OwnedSkel::new(|storage| {
            let mut open = Self::open(storage, config, &functions, uprobe_multi)?;
            set_target_cgroups(&mut open, &cgroups)?;
            syscall_hook = choose_syscall_hook(&mut open, config);
            sections = kernel::sections(open.open_object());
            kernel::diagnose("loading the BPF programs", &sections, || open.load())
        })?;
        fill_static_maps(&skel, config)?;
        skel.progs
            .fill_conn_slots
            .test_run(libbpf_rs::ProgramInput::default())
            .context("stacking the free connection slots")?;
        for cg in &cgroups {
            skel.maps
                .target_cgroups
                .update(&cg.id.to_ne_bytes(), &[1], MapFlags::ANY)?;
        }
        kernel::diagnose("attaching the BPF programs", &sections, || skel.attach())?;
        // Seed after attaching, so that a fork between the scan and the attach is not missed.
        let initial_processes = if config.has_targets() {
            scan_targets(config, &cgroups)
        } else {
            Vec::new()
        };
        for p in &initial_processes {
            register_target(&skel, p.pid)?;
        }
        register_datagram_holders(&skel)?;
        let uprobes = Uprobes::new(
            functions,
            counter_entries(functions_at_start),
            uprobe_multi,
            config.detach_functions_after_calls,
        );
        let engine = Engine {
            skel,
            uprobes: RefCell::new(uprobes),
            initial_processes,
            look_every: Cell::new(look_period(config.gap_ms)),
            cgroups,
            syscall_hook,
            gap_ms: Cell::new(config.gap_ms),
        };
        engine.look_at_connections()?;
        engine
            .uprobes
            .borrow_mut()
            .attach_all(&engine.hit_programs(), config.tolerate_unattachable_functions)?;
        for p in &engine.initial_processes {
            engine.probe_functions_in_root_of(p.pid)?;
        }
        log::info!("{}", kernel::summary());
        log::info!("failed syscalls caught by {}", engine.syscall_hook);
        Ok(engine)
    }

    /// Opens the BPF object in `storage` and sizes and configures it for `config`.
    fn open(
        storage: &'static mut MaybeUninit<OpenObject>,
        config: &Config,
        functions: &[FunctionSpec],
        uprobe_multi: bool,
    ) -> Result<OpenTracerSkel<'static>> {
        let mut open = TracerSkelBuilder::default()
            .open(storage)
            .context("opening the BPF object")?;
        let rodata = open
            .maps
            .rodata_data
            .as_deref_mut()
            .context("BPF object has no rodata")?;
        rodata.filter_targets = config.has_targets() as u32;
        rodata.self_tgid = std::process::id();
        rodata.wakeup_bytes = (config.kernel_buffer_bytes / 4) as u64;
        rodata.count_syscalls = config.count_syscalls as u32;
        rodata.function_events = config.function_events as u32;
        rodata.config_window_ns = config.config_window_ms * 1_000_000;
        rodata.typed_fd_slot = kernel::typed_fd_slot();
        rodata.conn_capacity = config.connections;
        rodata.flows_per_process = config.flows_per_process;
        let data = open
            .maps
            .data_data
            .as_deref_mut()
            .context("BPF object has no .data")?;
        data.gap_ns = config.gap_ms * 1_000_000;
        data.pause_ns = config.pause_ms * 1_000_000;
        open.maps.events.set_max_entries(config.kernel_buffer_bytes)?;
        open.maps.open_files.set_max_entries(config.open_files)?;
        open.maps.conn_slots.set_max_entries(config.connections)?;
        open.maps.free_conn_slots.set_max_entries(config.connections)?;
        open.maps.conns.set_max_entries(config.connections)?;
        open.maps.flows.set_max_entries(config.flows)?;
        open.maps.flow_counts.set_max_entries(config.flows)?;
        // bounded by MAX_FUNCTIONS; with room for the functions reloads add
        open.maps
            .function_calls
            .set_max_entries(counter_entries(functions.len()) as u32)?;
        open.maps
            .syscall_counts
            .set_max_entries(if config.count_syscalls {
                config.syscall_count_entries
            } else {
                1
            })?;
        // loaded without functions too: a reload may list some
        if !uprobe_multi {
            open.progs.function_hit_multi.set_autoload(false);
        }
        Ok(open)
    }

    /// The loaded programs and maps (for the modules that own a part of them: flows).
    pub(crate) fn skel(&self) -> &TracerSkel<'static> {
        &self.skel
    }

    /// Target processes that were already running when the engine started.
    pub fn take_initial_processes(&mut self) -> Vec<ProcInfo> {
        std::mem::take(&mut self.initial_processes)
    }

    /// How failed syscalls are caught, in words.
    pub fn syscall_hook(&self) -> &str {
        &self.syscall_hook
    }

    /// Sets the silence that is a network gap and the stop that is a pause, in the running
    /// programs (`.data`, which only user space writes: the whole section is replaced).
    pub fn set_thresholds(&self, gap_ms: u64, pause_ms: u64) -> Result<()> {
        const _: () = assert!(std::mem::size_of::<crate::bpf::types::data>() == 16);
        let mut value = [0u8; 16];
        value[..8].copy_from_slice(&(gap_ms * 1_000_000).to_ne_bytes());
        value[8..].copy_from_slice(&(pause_ms * 1_000_000).to_ne_bytes());
        self.skel
            .maps
            .data
            .update(&0u32.to_ne_bytes(), &value, MapFlags::ANY)
            .context("setting gap_ms and pause_ms in the BPF programs")?;
        self.look_every.set(look_period(gap_ms));
        self.gap_ms.set(gap_ms);
        Ok(())
    }

    /// Changes the comm, executable and unit selectors of the kernel's target set from
    /// `old`'s to `new`'s and adds the processes `new` selects now that were not traced
    /// (returned, for the process table). A process already traced stays traced until it exits.
    pub fn retarget(&self, old: &Config, new: &Config) -> Result<Vec<ProcInfo>> {
        let maps = &self.skel.maps;
        let comms = |c: &Config| -> Vec<Vec<u8>> {
            c.target_comm
                .iter()
                .map(|n| fixed_key::<16>(n.as_bytes()).to_vec())
                .collect()
        };
        let units = |c: &Config| -> Vec<Vec<u8>> {
            c.target_unit
                .iter()
                .map(|u| fixed_key::<64>(u.as_bytes()).to_vec())
                .collect()
        };
        let exes = |c: &Config| -> Result<Vec<Vec<u8>>> {
            c.target_exe
                .iter()
                .map(|e| Ok(exe_map_key(e)?.to_vec()))
                .collect()
        };
        let (old_exes, new_exes) = (exes(old)?, exes(new)?);
        swap_keys(&maps.target_comms, &comms(old), &comms(new))?;
        swap_keys(&maps.target_exes, &old_exes, &new_exes)?;
        swap_keys(&maps.target_units, &units(old), &units(new))?;
        // only processes not traced yet: on 6.1 the program's add of a pid already in the
        // set failed with another error than EEXIST (seen in a 6.1 guest), so ask first
        let mut added = scan_targets(new, &self.cgroups);
        added.retain(|p| {
            maps.targets
                .lookup(&p.pid.to_ne_bytes(), MapFlags::ANY)
                .is_ok_and(|v| v.is_none())
        });
        for p in &added {
            register_target(&self.skel, p.pid)?;
        }
        Ok(added)
    }

    /// Adds a process (and, from now on, its descendants) to the traced set.
    pub fn add_target(&self, pid: u32) -> Result<()> {
        register_target(&self.skel, pid)
    }

    /// An owned fd of the program that adds a process to the target set (see
    /// [`register_target`]), usable from other threads and from a child before it execs.
    pub fn register_target_program(&self) -> Result<std::os::fd::OwnedFd> {
        use std::os::fd::AsFd;
        Ok(self.skel.progs.register_target.as_fd().try_clone_to_owned()?)
    }

    /// Polls the kernel buffer into `recorder` until `between` breaks; `between` runs after
    /// every poll (at least every `tick`, and after at most [`CONSUME_BUDGET`] records).
    pub fn run<B>(
        &self,
        recorder: &mut Recorder,
        tick: Duration,
        mut between: impl FnMut(&Engine, &mut Recorder) -> ControlFlow<B>,
    ) -> Result<B> {
        let cell = std::cell::RefCell::new(recorder);
        let taken = Cell::new(0usize);
        let mut builder = RingBufferBuilder::new();
        builder.add(&self.skel.maps.events, |data: &[u8]| {
            cell.borrow_mut().ingest(data);
            taken.set(taken.get() + 1);
            // a negative answer ends libbpf's consume loop, this record taken
            if taken.get() >= CONSUME_BUDGET {
                -libc::EINTR
            } else {
                0
            }
        })?;
        let ring = builder.build()?;
        let within_budget = |r: libbpf_rs::Result<()>| -> Result<()> {
            taken.set(0);
            match r {
                Err(e) if e.kind() != libbpf_rs::ErrorKind::Interrupted => Err(e.into()),
                _ => Ok(()),
            }
        };
        let mut last_look = std::time::Instant::now();
        let mut last_expiry = last_look;
        loop {
            within_budget(ring.poll(tick.min(self.look_every.get())))?;
            // Before draining, so that silences that just ended are in the ring a dump reads.
            if last_look.elapsed() >= self.look_every.get() {
                self.look_at_connections()?;
                last_look = std::time::Instant::now();
            }
            self.detach_hot_functions()?;
            // Drain whatever arrived below the wakeup threshold, so commands see fresh data.
            within_budget(ring.consume())?;
            if last_expiry.elapsed() >= crate::flows::EXPIRE_EVERY {
                self.expire_flows(&mut cell.borrow_mut(), self.gap_ms.get(), boot_ns())?;
                last_expiry = std::time::Instant::now();
            }
            let execs = std::mem::take(&mut cell.borrow_mut().execs);
            for pid in execs {
                self.probe_functions_in_root_of(pid)?;
            }
            // the borrow must end before the last drain: its callback borrows the recorder
            // too (a borrow in the `if let` would live through the block and panic there)
            let flow = between(self, &mut cell.borrow_mut());
            if let ControlFlow::Break(b) = flow {
                for _ in 0..FINAL_DRAIN_ROUNDS {
                    taken.set(0);
                    match ring.consume() {
                        Err(e) if e.kind() == libbpf_rs::ErrorKind::Interrupted => continue,
                        r => return r.map(|_| b).map_err(Into::into),
                    }
                }
                return Ok(b);
            }
        }
    }
}

/// Leaves to be loaded either the fexit programs whose entry points this kernel has (when
/// `config` and the kernel allow fexit) or the sys_exit tracepoint program; says which.
fn choose_syscall_hook(open: &mut OpenTracerSkel<'static>, config: &Config) -> String {
    let btf =
        (config.syscall_hook == SyscallHook::Auto && !config.count_syscalls && kernel::fexit_programs())
            .then(kernel::VmlinuxBtf::load)
            .flatten();
    let (mut hooked, mut missing) = (0, Vec::new());
    for mut prog in open.open_object_mut().progs_mut() {
        let section = prog.section().to_string_lossy().into_owned();
        let Some(function) = section.strip_prefix("fexit/") else {
            continue;
        };
        let present = btf.as_ref().is_some_and(|b| b.function(function).is_some());
        prog.set_autoload(present);
        if present {
            hooked += 1;
        } else if btf.is_some() {
            missing.push(function.to_string());
        }
    }
    if hooked == 0 {
        return "the sys_exit tracepoint (every syscall)".into();
    }
    open.progs.on_sys_exit.set_autoload(false);
    let mut words = format!("fexit programs on {hooked} syscall entry points");
    if !missing.is_empty() {
        words += &format!(" (not in this kernel: {})", missing.join(", "));
    }
    words
}

/// Adds `pid` to the kernel's target set. Always through the `register_target` program,
/// never by writing the map: the program also keeps the per-slot counts that let every other
/// process skip the set (see `is_target` in bpf/tracer/targets.h).
fn register_target(skel: &TracerSkel, pid: u32) -> Result<()> {
    let mut args = u64::from(pid).to_ne_bytes();
    let input = libbpf_rs::ProgramInput {
        context_in: Some(&mut args),
        ..Default::default()
    };
    let out = skel
        .progs
        .register_target
        .test_run(input)
        .with_context(|| format!("adding process {pid} to the traced set"))?;
    if out.return_value != 0 {
        bail!("adding process {pid} to the traced set: the set is full (65536 processes)");
    }
    Ok(())
}

/// Tells the kernel which processes hold a datagram socket made before the programs were
/// attached (see `may_hold_datagrams` in bpf/tracer/targets.h). Twice: a child forked from
/// such a process before the first pass marked it inherits nothing in the kernel, and the
/// second pass, which lists processes after the first one ended, finds it.
fn register_datagram_holders(skel: &TracerSkel) -> Result<()> {
    for _ in 0..2 {
        for pid in crate::datagram_holders::datagram_socket_holders() {
            let mut args = u64::from(pid).to_ne_bytes();
            let input = libbpf_rs::ProgramInput {
                context_in: Some(&mut args),
                ..Default::default()
            };
            skel.progs
                .register_datagram_process
                .test_run(input)
                .with_context(|| format!("noting process {pid}'s datagram sockets"))?;
        }
    }
    Ok(())
}

/// Sets the levels the kernel looks at for `cgroups` (see `in_target_cgroup` in
/// bpf/tracer/targets.h); without any, the move-between-cgroups program is not loaded.
fn set_target_cgroups(open: &mut OpenTracerSkel<'static>, cgroups: &[TargetCgroup]) -> Result<()> {
    let rodata = open
        .maps
        .rodata_data
        .as_deref_mut()
        .context("BPF object has no rodata")?;
    rodata.target_cgroup_count = cgroups.len() as u32;
    rodata.cgroup_level_min = cgroups.iter().map(|c| c.level).min().unwrap_or(0);
    rodata.cgroup_level_max = cgroups.iter().map(|c| c.level).max().unwrap_or(0);
    if cgroups.is_empty() {
        open.progs.on_cgroup_attach.set_autoload(false);
    }
    Ok(())
}

/// The period of `look_at_connections`: a tenth of the gap threshold, between 10 and 250 ms.
/// Each look walks the connection slots ever used, so looking more often than that precision
/// needs is CPU spent on a host with many connections. A silence's end is known to within
/// this period.
fn look_period(gap_ms: u64) -> Duration {
    Duration::from_millis((gap_ms / 10).clamp(10, 250))
}

/// CLOCK_BOOTTIME now, ns: the kernel's time stamps' clock.
pub fn boot_ns() -> u64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_BOOTTIME)
        .map(|t| t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64)
        .unwrap_or(0)
}

/// Sum of a per-CPU u64 value.
fn sum_per_cpu(values: &[Vec<u8>]) -> u64 {
    values
        .iter()
        .filter_map(|v| v.get(..8))
        .map(|b| u64::from_ne_bytes(b.try_into().unwrap_or([0; 8])))
        .sum()
}

fn fill_static_maps(skel: &TracerSkel<'_>, config: &Config) -> Result<()> {
    for (nr, kind, index) in syscall_arg_table() {
        let value = [kind as u8, index, 0, 0];
        skel.maps
            .syscall_args
            .update(&nr.to_ne_bytes(), &value, MapFlags::ANY)?;
    }
    for comm in &config.target_comm {
        let key = fixed_key::<16>(comm.as_bytes());
        skel.maps.target_comms.update(&key, &[1], MapFlags::ANY)?;
    }
    for exe in &config.target_exe {
        skel.maps
            .target_exes
            .update(&exe_map_key(exe)?, &[1], MapFlags::ANY)?;
    }
    for unit in &config.target_unit {
        let key = fixed_key::<64>(unit.as_bytes());
        skel.maps.target_units.update(&key, &[1], MapFlags::ANY)?;
    }
    Ok(())
}

/// Makes `map`'s keys (each with the value 1) `after` instead of `before`.
fn swap_keys(map: &libbpf_rs::MapMut, before: &[Vec<u8>], after: &[Vec<u8>]) -> Result<()> {
    for key in before.iter().filter(|k| !after.contains(k)) {
        let _ = map.delete(key);
    }
    for key in after.iter().filter(|k| !before.contains(k)) {
        map.update(key, &[1], MapFlags::ANY)?;
    }
    Ok(())
}

/// `bytes` NUL-padded to N (names the config validated to fit: comm 15, unit 63 bytes).
fn fixed_key<const N: usize>(bytes: &[u8]) -> [u8; N] {
    let mut key = [0u8; N];
    let n = bytes.len().min(N);
    key[..n].copy_from_slice(&bytes[..n]);
    key
}

/// The `target_exes` key of an executable: its device and inode.
fn exe_map_key(exe: &std::path::Path) -> Result<[u8; 16]> {
    let (dev, ino) = exe_key(exe).with_context(|| format!("target_exe {}", exe.display()))?;
    let mut key = [0u8; 16];
    key[..8].copy_from_slice(&dev.to_ne_bytes());
    key[8..].copy_from_slice(&ino.to_ne_bytes());
    Ok(key)
}
