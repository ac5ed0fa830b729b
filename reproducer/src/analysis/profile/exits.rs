//! Exits as norms: which process deaths would be symptoms (a non-zero exit status, a death
//! by the process's own signal or one from its own node), told the same way by a profile
//! run and by the diagnosis, with the phase of the run they happen in. A helper that exits
//! with status 1 in every fault-free run (a `grep` that finds nothing while a node starts)
//! is recorded in the profile, and the diagnosis takes it as normal, not as a symptom.
use tracedump::event::{ProcessChange, State};
use tracedump::syscalls::signal_name;

/// Signals a process raises on itself (a crash of its own making, not an injected one).
pub const SELF_SIGNALS: [i32; 6] = [
    libc::SIGSEGV,
    libc::SIGABRT,
    libc::SIGBUS,
    libc::SIGFPE,
    libc::SIGILL,
    libc::SIGSYS,
];

/// Phase of an exit before every node of the run was ready.
pub const STARTUP: &str = "start-up";
/// Phase of an exit once every node was ready.
pub const RUNNING: &str = "running";

/// Whether a death by `signo` is a kill from outside (a fault, not a symptom): a signal
/// that is not of the process's own making, sent by a process of another node or none.
pub fn is_kill_from_outside(signo: u32, from_outside: bool) -> bool {
    from_outside && !SELF_SIGNALS.contains(&(signo as i32))
}

/// The status of a death that is a symptom unless fault-free runs show it: "status N" for a
/// non-zero exit, the signal's name for a death by a signal not from outside; None for a
/// clean exit, a kill from outside (`from_outside`: its sender is of another node or none),
/// and states that are no death.
pub fn symptom_status(p: &ProcessChange, from_outside: bool) -> Option<String> {
    match p.state {
        State::Exited { code } if code != 0 => Some(format!("status {code}")),
        State::Killed { .. } => {
            let signo = p.signal.unwrap_or(libc::SIGKILL as u32);
            (!is_kill_from_outside(signo, from_outside)).then(|| signal_name(signo).to_string())
        }
        _ => None,
    }
}

/// The phase of an exit `since_node_start_ns` after its node's first process started, when
/// fault-free runs had every node ready `startup_ns` after that start (None: not known, and
/// the exit matches a norm of either phase).
pub fn phase(since_node_start_ns: Option<u64>, startup_ns: Option<u64>) -> Option<&'static str> {
    match (since_node_start_ns, startup_ns) {
        (Some(since), Some(startup)) => Some(if since <= startup { STARTUP } else { RUNNING }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracedump::event::Sender;

    fn change(state: State, signal: Option<i32>) -> ProcessChange {
        ProcessChange {
            state,
            signal: signal.map(|s| s as u32),
            sender: Some(Sender { pid: 1, comm: None }),
            ongoing: false,
        }
    }

    #[test]
    fn deaths_that_would_be_symptoms_have_a_status() {
        let exited = |code| change(State::Exited { code }, None);
        let killed = |s| change(State::Killed { core_dumped: false }, Some(s));
        assert_eq!(symptom_status(&exited(1), true).as_deref(), Some("status 1"));
        assert_eq!(symptom_status(&exited(0), false), None);
        assert_eq!(
            symptom_status(&killed(libc::SIGSEGV), true).as_deref(),
            Some("SIGSEGV"),
            "a crash of its own making, whoever sent it"
        );
        assert_eq!(symptom_status(&killed(libc::SIGKILL), true), None, "a fault");
        assert_eq!(
            symptom_status(&killed(libc::SIGPIPE), false).as_deref(),
            Some("SIGPIPE")
        );
        assert_eq!(phase(Some(5), Some(5)), Some(STARTUP));
        assert_eq!(phase(Some(6), Some(5)), Some(RUNNING));
        assert_eq!(phase(None, Some(5)), None);
    }
}
