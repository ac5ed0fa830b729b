//! The synthetic timelines the tests diagnose (the diagnosis is pure, so every rule is
//! checked without root): events of a two-node scenario, built with `at` from the `What`s
//! below, and in [`three_nodes`] timelines with a dump time and three nodes.
use tracedump::event::{
    Event, FunctionHit, NetworkGap, PauseCause, ProcessChange, Sender, State, SyscallFailure, What,
};

use crate::analysis::diagnose::{Diagnosis, FaultGuess};
use crate::analysis::timeline::{TimedEvent, Timeline};
use crate::model::scenario::Scenario;

pub const SEC: u64 = 1_000_000_000;
pub const SCENARIO: &str = "name = \"kv\"\n\
    [[nodes]]\nname = \"db1\"\ncommand = [\"kv\"]\naddress = \"10.7.0.1\"\n\
    [[nodes]]\nname = \"db2\"\ncommand = [\"kv\"]\naddress = \"10.7.0.2\"\n\
    [workload]\ncommand = [\"true\"]\n[oracle]\ncommand = [\"true\"]\n";

pub fn scenario() -> Scenario {
    Scenario::parse(SCENARIO, "t").unwrap()
}

pub fn at(secs: f64, node: Option<usize>, pid: u32, what: What) -> TimedEvent {
    let at_ns = (secs * SEC as f64) as u64;
    let event = Event {
        ts_ns: at_ns,
        realtime_ns: at_ns,
        host: "h".into(),
        pid,
        tid: pid,
        comm: "kv".into(),
        what,
    };
    TimedEvent {
        at_ns,
        node,
        dump: 0,
        event,
    }
}

pub fn failure(syscall: &str, errno: &str, path: Option<&str>) -> What {
    What::SyscallFailure(SyscallFailure {
        syscall: syscall.into(),
        ret: -1,
        errno: Some(errno.into()),
        fd: None,
        path: path.map(String::from),
        peer: None,
    })
}

pub fn killed(signal: i32, sender: Option<u32>) -> What {
    What::ProcessState(ProcessChange {
        state: State::Killed { core_dumped: false },
        signal: Some(signal as u32),
        sender: sender.map(|pid| Sender {
            pid,
            comm: Some("killer".into()),
        }),
        ongoing: false,
    })
}

pub fn exited(code: i32) -> What {
    What::ProcessState(ProcessChange {
        state: State::Exited { code },
        signal: None,
        sender: None,
        ongoing: false,
    })
}

pub fn paused(ms: u64) -> What {
    What::ProcessState(ProcessChange {
        state: State::Paused {
            cause: PauseCause::Stopped,
            duration_ms: ms,
        },
        signal: Some(libc::SIGSTOP as u32),
        sender: None,
        ongoing: false,
    })
}

pub fn gap(local: &str, peer: &str, ms: u64) -> What {
    What::NetworkGap(NetworkGap {
        local: Some(local.parse().unwrap()),
        peer: Some(peer.parse().unwrap()),
        duration_ms: ms,
        packets: 9,
        ongoing: false,
        busy_ms: 0,
        busy_packets: 0,
        protocol: 6,
        sent: None,
        sent_before: None,
    })
}

pub fn function(name: &str) -> What {
    What::Function(FunctionHit {
        binary: Some("/opt/kv".into()),
        function: Some(name.into()),
    })
}

pub fn timeline(mut events: Vec<TimedEvent>) -> Timeline {
    events.sort_by_key(|e| e.at_ns);
    Timeline {
        events,
        dumps: Vec::new(),
        functions: Vec::new(),
        environments: Vec::new(),
        flows: Vec::new(),
    }
}

pub fn causes(d: &Diagnosis) -> Vec<&FaultGuess> {
    d.causes().map(|c| &c.guess).collect()
}

/// Timelines with a dump time (`DUMP_AT`) and three nodes, a, b and c, at 10.9.0.1-3: the
/// gap, consequence and routine-failure rules.
pub mod three_nodes {
    use tracedump::event::{Event, NetworkGap, ProcessChange, State, SyscallFailure, What};

    use crate::analysis::diagnose::{Candidate, Diagnosis, FaultGuess, Verdict};
    use crate::analysis::timeline::{DumpInfo, TimedEvent, Timeline};
    use crate::model::scenario::Scenario;

    pub const S: u64 = 1_000_000_000;
    pub const DUMP_AT: u64 = 200 * S;

    pub fn scenario() -> Scenario {
        let node = |n: &str, i: u8| {
            format!("[[nodes]]\nname = \"{n}\"\ncommand = [\"srv\", \"{n}\"]\naddress = \"10.9.0.{i}\"\nmatch = \"{n}\"\n")
        };
        let text = format!(
            "name = \"t\"\n{}{}{}[workload]\ncommand = [\"true\"]\n[oracle]\ncommand = [\"false\"]\n",
            node("a", 1),
            node("b", 2),
            node("c", 3)
        );
        Scenario::parse(&text, "t").unwrap()
    }

    pub fn event(at_ns: u64, node: usize, what: What) -> TimedEvent {
        let pid = 100 + node as u32;
        TimedEvent {
            at_ns,
            node: Some(node),
            dump: 0,
            event: Event {
                ts_ns: at_ns,
                realtime_ns: at_ns,
                host: "h".into(),
                pid,
                tid: pid,
                comm: "srv".into(),
                what,
            },
        }
    }

    pub fn gap(
        at_ns: u64,
        node: usize,
        local: &str,
        peer: &str,
        ms: u64,
        packets: u64,
        ongoing: bool,
    ) -> TimedEvent {
        let g = NetworkGap {
            local: Some(local.parse().unwrap()),
            peer: Some(peer.parse().unwrap()),
            duration_ms: ms,
            packets,
            ongoing,
            busy_ms: 0,
            busy_packets: 0,
            protocol: 6,
            sent: None,
            sent_before: None,
        };
        event(at_ns, node, What::NetworkGap(g))
    }

    pub fn failure(at_ns: u64, node: usize, syscall: &str, errno: &str, path: Option<&str>) -> TimedEvent {
        let f = SyscallFailure {
            syscall: syscall.into(),
            ret: -1,
            errno: Some(errno.into()),
            fd: None,
            path: path.map(String::from),
            peer: None,
        };
        event(at_ns, node, What::SyscallFailure(f))
    }

    pub fn state(at_ns: u64, node: usize, state: State) -> TimedEvent {
        event(
            at_ns,
            node,
            What::ProcessState(ProcessChange {
                state,
                signal: None,
                sender: None,
                ongoing: false,
            }),
        )
    }

    pub fn timeline(mut events: Vec<TimedEvent>) -> Timeline {
        events.sort_by_key(|e| e.at_ns);
        let dump = DumpInfo {
            path: "d.tdump".into(),
            host: "h".into(),
            events: events.len(),
            mapped_processes: 3,
            processes: 3,
            nodes: Vec::new(),
            interfaces: Vec::new(),
            taken_ns: DUMP_AT,
            lost_events: 0,
            process_starts: Default::default(),
            parents: Default::default(),
            node_starts: Vec::new(),
            workdir: None,
        };
        Timeline {
            events,
            dumps: vec![dump],
            functions: Vec::new(),
            environments: Vec::new(),
            flows: Vec::new(),
        }
    }

    pub fn partitions(d: &Diagnosis, verdict: Verdict) -> Vec<&Candidate> {
        d.candidates
            .iter()
            .filter(|c| matches!(c.guess, FaultGuess::Partition { .. }) && c.verdict == verdict)
            .collect()
    }
}
