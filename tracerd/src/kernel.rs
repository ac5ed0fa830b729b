//! What the running kernel offers the BPF programs, probed once before anything is loaded
//! (so a path the kernel lacks is never tried), and the one-line error that names the
//! program and the refused feature when the kernel turns a program down. Owns libbpf's
//! log callback: messages go to the `libbpf` log target and, while a load or attach is
//! being diagnosed, into a bounded buffer that the error is made from.
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::{Mutex, OnceLock};

use libbpf_rs::libbpf_sys;

/// uprobe-multi links (Linux 6.6+): one link for many functions of a binary. Probed the way
/// libbpf does: a two-instruction program and a link on "/" (not a regular file), which a
/// kernel that knows the link type rejects with EBADF and an older one with EINVAL.
pub fn uprobe_multi_links() -> bool {
    static PROBED: OnceLock<bool> = OnceLock::new();
    *PROBED.get_or_init(probe_uprobe_multi_links)
}

fn probe_uprobe_multi_links() -> bool {
    let prog = match probe_program(
        libbpf_sys::BPF_PROG_TYPE_KPROBE,
        libbpf_sys::BPF_TRACE_UPROBE_MULTI,
        0,
    ) {
        Ok(prog) => prog,
        Err(e) => {
            log::debug!("uprobe-multi probe: the probe program did not load ({e})");
            return false;
        }
    };
    let offset: std::os::raw::c_ulong = 0;
    let mut link_opts = libbpf_sys::bpf_link_create_opts {
        sz: std::mem::size_of::<libbpf_sys::bpf_link_create_opts>() as _,
        ..Default::default()
    };
    link_opts.__bindgen_anon_1.uprobe_multi = libbpf_sys::bpf_link_create_opts__bindgen_ty_1__bindgen_ty_3 {
        path: c"/".as_ptr(),
        offsets: &offset,
        cnt: 1,
        ..Default::default()
    };
    // SAFETY: prog is our fd; the options point at locals that outlive the call.
    let link = unsafe {
        libbpf_sys::bpf_link_create(
            prog.as_raw_fd(),
            -1,
            libbpf_sys::BPF_TRACE_UPROBE_MULTI,
            &link_opts,
        )
    };
    let err = std::io::Error::last_os_error();
    close_link(link);
    let supported = link >= 0 || err.raw_os_error() == Some(libc::EBADF);
    log::debug!(
        "uprobe-multi probe: {} ({err})",
        if supported { "supported" } else { "not supported" }
    );
    supported
}

/// fexit programs on syscall entry points: loaded and attached (Debian 12's 6.1 and 6.12 do;
/// this machine's 6.18 refuses them at load). Probed with a two-instruction fexit program on
/// close's entry point, linked and closed again.
pub fn fexit_programs() -> bool {
    static PROBED: OnceLock<bool> = OnceLock::new();
    *PROBED.get_or_init(probe_fexit)
}

fn probe_fexit() -> bool {
    let Some(btf_id) = VmlinuxBtf::load().and_then(|btf| btf.function("__x64_sys_close")) else {
        log::debug!("fexit probe: no BTF for __x64_sys_close");
        return false;
    };
    let prog = match probe_program(
        libbpf_sys::BPF_PROG_TYPE_TRACING,
        libbpf_sys::BPF_TRACE_FEXIT,
        btf_id,
    ) {
        Ok(prog) => prog,
        Err(e) => {
            log::debug!("fexit probe: not loaded ({e})");
            return false;
        }
    };
    // SAFETY: prog is our fd; a NULL name is how tracing programs are attached.
    let link = unsafe { libbpf_sys::bpf_raw_tracepoint_open(std::ptr::null(), prog.as_raw_fd()) };
    let err = std::io::Error::last_os_error();
    close_link(link);
    log::debug!(
        "fexit probe: {}",
        if link >= 0 {
            "attached".to_string()
        } else {
            format!("not attached ({err})")
        }
    );
    link >= 0
}

/// Typed loads of an fd table's slot (bpf/tracer/fd_table.h: a pointer to a non-struct type
/// read as untrusted memory; 6.18 allows it, 6.12 does not). Probed by loading the same code
/// in its own small object (bpf/fd_table_probe.bpf.c), never attached; without it the tracer
/// copies the slot with a helper.
pub fn typed_fd_slot() -> bool {
    static PROBED: OnceLock<bool> = OnceLock::new();
    *PROBED.get_or_init(probe_typed_fd_slot)
}

mod fd_table_probe {
    #![allow(clippy::all, non_camel_case_types, dead_code)]
    include!(concat!(env!("OUT_DIR"), "/fd_table_probe.skel.rs"));
}

fn probe_typed_fd_slot() -> bool {
    use libbpf_rs::skel::{OpenSkel, SkelBuilder};
    // a refusal is the expected answer on older kernels: its verifier log goes to the debug
    // log, not to stderr (libbpf's default), where `tracerd kernel` and tests would print it
    route_libbpf_logs();
    let mut storage = std::mem::MaybeUninit::uninit();
    let loaded = fd_table_probe::FdTableProbeSkelBuilder::default()
        .open(&mut storage)
        .and_then(|open| open.load());
    log::debug!(
        "typed fd slot probe: {}",
        match &loaded {
            Ok(_) => "loaded".to_string(),
            Err(e) => format!("not loaded ({e})"),
        }
    );
    loaded.is_ok()
}

/// Loads a two-instruction program (r0 = 0; exit) of `prog_type` for `attach_type`: what a
/// probe needs to ask the kernel whether it accepts a kind of program or link.
fn probe_program(prog_type: u32, attach_type: u32, attach_btf_id: u32) -> std::io::Result<OwnedFd> {
    // struct bpf_insn, little endian
    let insns: [u64; 2] = [0xb7, 0x95];
    let mut load_opts = libbpf_sys::bpf_prog_load_opts {
        sz: std::mem::size_of::<libbpf_sys::bpf_prog_load_opts>() as _,
        expected_attach_type: attach_type,
        attach_btf_id,
        ..Default::default()
    };
    // SAFETY: valid instructions, a NUL-terminated license and options of the declared size.
    let fd = unsafe {
        libbpf_sys::bpf_prog_load(
            prog_type,
            std::ptr::null(),
            c"GPL".as_ptr(),
            insns.as_ptr().cast(),
            insns.len() as _,
            &mut load_opts,
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a fresh fd that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Closes a probe's link, if it was made.
fn close_link(link: i32) {
    if link >= 0 {
        // SAFETY: a fresh fd that nothing else owns.
        drop(unsafe { OwnedFd::from_raw_fd(link) });
    }
}

/// The kernel's own BTF, for looking up the functions fexit programs attach to.
pub struct VmlinuxBtf(*mut libbpf_sys::btf);

impl VmlinuxBtf {
    pub fn load() -> Option<VmlinuxBtf> {
        // SAFETY: no arguments; a null or error pointer is checked below.
        let btf = unsafe { libbpf_sys::btf__load_vmlinux_btf() };
        // libbpf 1.x returns NULL (errno set) when the kernel has no BTF
        (!btf.is_null()).then_some(VmlinuxBtf(btf))
    }

    /// The BTF id of kernel function `name`, if the kernel has it.
    pub fn function(&self, name: &str) -> Option<u32> {
        let name = std::ffi::CString::new(name).ok()?;
        // SAFETY: self.0 is a live BTF object; name is NUL-terminated.
        let id =
            unsafe { libbpf_sys::btf__find_by_name_kind(self.0, name.as_ptr(), libbpf_sys::BTF_KIND_FUNC) };
        u32::try_from(id).ok().filter(|&id| id > 0)
    }
}

impl Drop for VmlinuxBtf {
    fn drop(&mut self) {
        // SAFETY: loaded by btf__load_vmlinux_btf, freed once.
        unsafe { libbpf_sys::btf__free(self.0) }
    }
}

/// The paths chosen on this kernel, for the log and `tracerd kernel`.
pub fn summary() -> String {
    let uprobes = if uprobe_multi_links() {
        "uprobe-multi links"
    } else {
        "single uprobes (no uprobe-multi links before Linux 6.6)"
    };
    let failures = if fexit_programs() {
        "fexit on syscall entry points"
    } else {
        "sys_exit tracepoint"
    };
    let fd_slots = if typed_fd_slot() {
        "typed loads"
    } else {
        "helper copies (no typed loads of them on this kernel)"
    };
    format!(
        "kernel {}: failed syscalls: {failures}; function probes: {uprobes}; fd table slots: {fd_slots}; process end: sched_process_exit + signal->live",
        release()
    )
}

pub fn release() -> String {
    nix::sys::utsname::uname()
        .map(|u| u.release().to_string_lossy().into_owned())
        .unwrap_or_else(|_| "?".into())
}

/// libbpf messages captured while `diagnose` runs; bounded (a verifier log can be megabytes).
static CAPTURE: Mutex<Option<Vec<String>>> = Mutex::new(None);
const CAPTURE_BYTES: usize = 1 << 20;

fn print(level: libbpf_rs::PrintLevel, msg: String) {
    let trimmed = msg.trim_end();
    match level {
        libbpf_rs::PrintLevel::Warn => log::debug!(target: "libbpf", "{trimmed}"),
        _ => log::trace!(target: "libbpf", "{trimmed}"),
    }
    if let Ok(mut guard) = CAPTURE.lock() {
        if let Some(buf) = guard.as_mut() {
            if buf.iter().map(String::len).sum::<usize>() + msg.len() <= CAPTURE_BYTES {
                buf.push(msg);
            }
        }
    }
}

/// Routes libbpf's messages to the `libbpf` log target (RUST_LOG=libbpf=debug shows them).
pub fn route_libbpf_logs() {
    libbpf_rs::set_print(Some((libbpf_rs::PrintLevel::Info, print)));
}

/// Runs a load or attach step; when it fails, the error names the program the kernel refused,
/// its attach point and the verifier's reason, in one line. `sections` maps program names to
/// their ELF sections (attach points).
pub fn diagnose<T>(
    what: &str,
    sections: &[(String, String)],
    step: impl FnOnce() -> Result<T, libbpf_rs::Error>,
) -> anyhow::Result<T> {
    route_libbpf_logs();
    if let Ok(mut g) = CAPTURE.lock() {
        *g = Some(Vec::new());
    }
    let result = step();
    let messages = CAPTURE.lock().ok().and_then(|mut g| g.take()).unwrap_or_default();
    result.map_err(|e| anyhow::anyhow!("{}", refusal(what, sections, &messages, &e.to_string())))
}

/// The one-line error for a failed step, from libbpf's messages.
pub fn refusal(what: &str, sections: &[(String, String)], messages: &[String], error: &str) -> String {
    let Some(prog) = messages.iter().find_map(|m| failed_program(m)) else {
        return format!("{what}: {error} (RUST_LOG=libbpf=debug shows libbpf's messages)");
    };
    let section = sections
        .iter()
        .find(|(name, _)| *name == prog)
        .map(|(_, s)| s.as_str())
        .unwrap_or("?");
    let reason = messages
        .iter()
        .filter(|m| m.contains(&format!("prog '{prog}':")))
        .find_map(|m| verifier_reason(m))
        .unwrap_or_else(|| error.to_string());
    format!(
        "{what}: this kernel ({}) refuses BPF program {prog} ({}): {reason}",
        release(),
        feature_of(section)
    )
}

/// The program a libbpf failure message is about.
fn failed_program(msg: &str) -> Option<String> {
    let rest = msg
        .strip_prefix("libbpf: ")
        .unwrap_or(msg)
        .strip_prefix("prog '")?;
    let (name, tail) = rest.split_once("':")?;
    let failed = [
        "load failed",
        "failed to attach",
        "failed to auto-attach",
        "failed to load",
        "failed to resolve",
    ];
    failed.iter().any(|f| tail.contains(f)).then(|| name.to_string())
}

/// The verifier's complaint in a "-- BEGIN PROG LOAD LOG --" message: its last lines that are
/// not the instruction trace or the closing statistics.
fn verifier_reason(msg: &str) -> Option<String> {
    let (_, log) = msg.split_once("-- BEGIN PROG LOAD LOG --")?;
    let log = log.split("-- END PROG LOAD LOG --").next().unwrap_or(log);
    let is_noise = |l: &str| {
        let l = l.trim();
        l.is_empty()
            || l.starts_with(';')
            || l.starts_with("processed ")
            || l.starts_with("verification time")
            || l.starts_with("stack depth")
            || l.starts_with("mark_precise")
            || l.split_once(':')
                .is_some_and(|(n, _)| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()))
    };
    let lines: Vec<&str> = log.lines().map(str::trim).filter(|l| !is_noise(l)).collect();
    let tail = &lines[lines.len().saturating_sub(2)..];
    (!tail.is_empty()).then(|| tail.join(": "))
}

/// What an ELF section asks of the kernel, in words.
fn feature_of(section: &str) -> String {
    match section.split_once('/') {
        Some(("tp_btf", tp)) => format!("BTF tracepoint {tp}"),
        Some(("raw_tp" | "raw_tracepoint", tp)) => format!("raw tracepoint {tp}"),
        Some(("fentry" | "fexit", f)) => format!("{} on {f}", section.split('/').next().unwrap_or("")),
        _ if section.starts_with("uprobe.multi") => "uprobe-multi link".to_string(),
        _ if section.starts_with("uprobe") => "uprobe".to_string(),
        _ if section == "tc" => "TC classifier".to_string(),
        _ => section.to_string(),
    }
}

/// (name, section) of every program of an opened object, for `diagnose`.
pub fn sections(obj: &libbpf_rs::OpenObject) -> Vec<(String, String)> {
    obj.progs()
        .map(|p| {
            (
                p.name().to_string_lossy().into_owned(),
                p.section().to_string_lossy().into_owned(),
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_the_refused_program_and_the_verifier_reason() {
        // as libbpf printed them on Debian 12's 6.1 for the group_dead version of the program
        let messages = vec![
            "libbpf: prog 'on_process_exit': BPF program load failed: -EACCES\n".to_string(),
            "libbpf: prog 'on_process_exit': -- BEGIN PROG LOAD LOG --\nreg type unsupported for arg#0 function on_process_exit#585\n0: R1=ctx(off=0,imm=0) R10=fp0\n; int BPF_PROG(on_process_exit, struct task_struct *p, bool group_dead)\n0: (79) r2 = *(u64 *)(r1 +8)\nfunc 'sched_process_exit' doesn't have 2-th argument\ninvalid bpf_context access off=8 size=8\nprocessed 1 insns (limit 1000000) max_states_per_insn 0 total_states 0 peak_states 0 mark_read 0\n-- END PROG LOAD LOG --\n".to_string(),
            "libbpf: prog 'on_process_exit': failed to load: -EACCES\n".to_string(),
        ];
        let sections = vec![(
            "on_process_exit".to_string(),
            "tp_btf/sched_process_exit".to_string(),
        )];
        let line = refusal(
            "loading the BPF programs",
            &sections,
            &messages,
            "Permission denied (os error 13)",
        );
        assert!(!line.contains('\n'), "{line}");
        assert!(
            line.contains("BPF program on_process_exit (BTF tracepoint sched_process_exit)"),
            "{line}"
        );
        assert!(line.contains("func 'sched_process_exit' doesn't have 2-th argument: invalid bpf_context access off=8 size=8"), "{line}");
    }

    #[test]
    fn attach_failures_name_the_program() {
        let messages = vec!["libbpf: prog 'on_tcp_probe': failed to auto-attach: -2\n".to_string()];
        let sections = vec![("on_tcp_probe".to_string(), "tp_btf/tcp_probe".to_string())];
        let line = refusal(
            "attaching",
            &sections,
            &messages,
            "No such file or directory (os error 2)",
        );
        assert!(
            line.contains("BPF program on_tcp_probe (BTF tracepoint tcp_probe): No such file or directory"),
            "{line}"
        );
    }

    #[test]
    fn without_libbpf_messages_the_error_is_kept() {
        let line = refusal("loading", &[], &[], "Permission denied (os error 13)");
        assert!(
            line.starts_with("loading: Permission denied (os error 13)"),
            "{line}"
        );
    }
}
