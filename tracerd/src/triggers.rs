//! Dumps that trigger themselves: the `[triggers]` rules, checked in user space on each
//! event as it arrives from the kernel buffer (no extra kernel work), rate-limited per rule,
//! and the pending dump that is taken once the settle delay has passed.
//!
//! A check costs a match on the event kind and a few compares; nothing is allocated unless
//! a rule fires and is not suppressed. A pause is recorded when it ends, which is too late
//! for an operator who wants the dump while the service is stuck: the pause rule also looks
//! at the pauses still going on (the daemon hands them over periodically) and fires once a
//! pause has lasted its threshold; the record of that pause's end then fires nothing more.
use std::collections::HashMap;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::config_error::ConfigError;
use crate::dump::TriggerInfo;
use crate::record::{Payload, Record};
use crate::syscalls::{errno_name, errno_number, signal_name, syscall_name, syscall_number};

/// Signals that mean the process crashed on its own (not a kill from outside).
const FATAL_SIGNALS: [u8; 5] = [
    libc::SIGSEGV as u8,
    libc::SIGABRT as u8,
    libc::SIGBUS as u8,
    libc::SIGILL as u8,
    libc::SIGFPE as u8,
];
/// Process states as recorded (bpf/events.h `tracerd_process_state`).
const STATE_PAUSED: u8 = 1;
const STATE_EXITED: u8 = 2;
const STATE_KILLED: u8 = 3;

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct TriggerConfig {
    /// At most one dump per rule in this interval; triggers within it are counted as suppressed.
    pub min_interval_ms: u64,
    /// Delay between the triggering event and the dump, so that its consequences are in it.
    pub settle_ms: u64,
    /// A target killed by its own SIGSEGV, SIGABRT, SIGBUS, SIGILL or SIGFPE.
    pub fatal_signal: bool,
    /// A target exiting with a non-zero status.
    pub nonzero_exit: bool,
    /// A target killed by the OOM killer.
    pub oom_kill: bool,
    /// A pause (stopped, frozen, uninterruptible) longer than this; 0 = off.
    pub pause_ms: u64,
    /// Failed syscalls matching every field given.
    pub syscall: Vec<SyscallRule>,
}

impl Default for TriggerConfig {
    fn default() -> Self {
        TriggerConfig {
            min_interval_ms: 60_000,
            settle_ms: 2_000,
            fatal_signal: true,
            nonzero_exit: false,
            oom_kill: false,
            pause_ms: 0,
            syscall: Vec::new(),
        }
    }
}

/// A failed-syscall rule; a field left out matches anything.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SyscallRule {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub syscall: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub errno: Option<String>,
    /// Glob (`*`, `?`, `[...]`) on the path argument of the call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
}

impl SyscallRule {
    /// "SYSCALL:ERRNO:PATHGLOB", each part optional (`--trigger-syscall openat:ENOENT:/data/*`).
    pub fn parse(spec: &str) -> Result<SyscallRule, ConfigError> {
        let mut parts = spec.splitn(3, ':');
        let mut part = || parts.next().filter(|s| !s.is_empty()).map(str::to_string);
        let rule = SyscallRule {
            syscall: part(),
            errno: part(),
            path: part(),
        };
        if rule == SyscallRule::default() {
            return Err(ConfigError(format!(
                "--trigger-syscall '{spec}': give at least one of SYSCALL:ERRNO:PATHGLOB"
            )));
        }
        Ok(rule)
    }

    fn name(&self) -> String {
        let any = |v: &Option<String>| v.clone().unwrap_or_else(|| "*".into());
        format!(
            "syscall({} {} {})",
            any(&self.syscall),
            any(&self.errno),
            any(&self.path)
        )
    }
}

enum Rule {
    FatalSignal,
    NonzeroExit,
    OomKill,
    Pause {
        min_ns: u64,
    },
    Syscall {
        nr: Option<u16>,
        errno: Option<i32>,
        path: Option<glob::Pattern>,
    },
}

struct RuleState {
    name: String,
    rule: Rule,
    last_fired: Option<Instant>,
    fired: u64,
    suppressed: u64,
    suppressed_since_fired: u64,
}

/// Counts of one rule, for metrics.
pub struct RuleCounts<'a> {
    pub rule: &'a str,
    pub fired: u64,
    pub suppressed: u64,
}

struct Pending {
    due: Instant,
    info: TriggerInfo,
}

/// A thread paused now (an entry of the kernel's map of paused threads).
#[derive(Clone, Copy, Debug)]
pub struct OngoingPause {
    pub pid: u32,
    pub tid: u32,
    /// CLOCK_BOOTTIME
    pub start_ns: u64,
    pub cause: u8,
    pub comm: [u8; 16],
}

pub struct Triggers {
    rules: Vec<RuleState>,
    min_interval: Duration,
    settle: Duration,
    pending: Option<Pending>,
    /// /proc/vmstat oom_kill when last read: a kernel SIGKILL is the OOM killer's when it grew
    oom_kills: u64,
    has_syscall_rules: bool,
    /// the pause rule's threshold, if there is one
    pause_min_ns: Option<u64>,
    /// pauses (tid, start) the pause rule took while they went on, with how many looks in a
    /// row missed them; one missed twice has ended and its end record was seen (records are
    /// drained before each look), so it is forgotten
    ongoing_taken: HashMap<(u32, u64), u8>,
}

/// Validates `c`, naming the rule at fault.
pub fn validate(c: &TriggerConfig, origin: &str) -> Result<(), ConfigError> {
    compile(c, origin).map(|_| ())
}

fn compile(c: &TriggerConfig, origin: &str) -> Result<Vec<RuleState>, ConfigError> {
    let mut rules = Vec::new();
    let mut add = |name: String, rule| {
        rules.push(RuleState {
            name,
            rule,
            last_fired: None,
            fired: 0,
            suppressed: 0,
            suppressed_since_fired: 0,
        })
    };
    if c.fatal_signal {
        add("fatal_signal".into(), Rule::FatalSignal);
    }
    if c.nonzero_exit {
        add("nonzero_exit".into(), Rule::NonzeroExit);
    }
    if c.oom_kill {
        add("oom_kill".into(), Rule::OomKill);
    }
    if c.pause_ms > 0 {
        add(
            "pause".into(),
            Rule::Pause {
                min_ns: c.pause_ms.saturating_mul(1_000_000),
            },
        );
    }
    for (i, s) in c.syscall.iter().enumerate() {
        let bad = |what: &str| ConfigError(format!("config {origin}: triggers.syscall[{i}]: {what}"));
        if *s == SyscallRule::default() {
            return Err(bad("give at least one of syscall, errno, path"));
        }
        let nr = match &s.syscall {
            Some(n) => Some(syscall_number(n).ok_or_else(|| bad(&format!("unknown syscall '{n}'")))? as u16),
            None => None,
        };
        let errno = match &s.errno {
            Some(e) => Some(
                errno_number(e)
                    .ok_or_else(|| bad(&format!("unknown errno '{e}' (use a name like ENOENT)")))?
                    as i32,
            ),
            None => None,
        };
        let path = match &s.path {
            Some(p) => Some(glob::Pattern::new(p).map_err(|e| bad(&format!("path glob '{p}': {e}")))?),
            None => None,
        };
        add(s.name(), Rule::Syscall { nr, errno, path });
    }
    Ok(rules)
}

fn comm_str(comm: &[u8; 16]) -> String {
    let end = comm.iter().position(|&b| b == 0).unwrap_or(16);
    String::from_utf8_lossy(&comm[..end]).into_owned()
}

fn read_oom_kills() -> u64 {
    let text = std::fs::read_to_string("/proc/vmstat").unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix("oom_kill "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

impl Triggers {
    pub fn new(c: &TriggerConfig) -> Result<Triggers, ConfigError> {
        let rules = compile(c, "triggers")?;
        Ok(Triggers {
            has_syscall_rules: rules.iter().any(|r| matches!(r.rule, Rule::Syscall { .. })),
            pause_min_ns: rules.iter().find_map(|r| match r.rule {
                Rule::Pause { min_ns } => Some(min_ns),
                _ => None,
            }),
            ongoing_taken: HashMap::new(),
            rules,
            min_interval: Duration::from_millis(c.min_interval_ms),
            settle: Duration::from_millis(c.settle_ms),
            pending: None,
            oom_kills: read_oom_kills(),
        })
    }

    /// Whether `check` looks at the paths of failed syscalls (any syscall rule).
    pub fn wants_paths(&self) -> bool {
        self.has_syscall_rules
    }

    /// Whether `check_ongoing_pauses` has anything to do (there is a pause rule).
    pub fn watches_ongoing_pauses(&self) -> bool {
        self.pause_min_ns.is_some()
    }

    /// Fires the pause rule for each pause in `paused` (every thread paused now) that has
    /// lasted past the threshold at `now_ns` (CLOCK_BOOTTIME), once per pause.
    pub fn check_ongoing_pauses(&mut self, paused: impl IntoIterator<Item = OngoingPause>, now_ns: u64) {
        let Some(min_ns) = self.pause_min_ns else {
            return;
        };
        for missed in self.ongoing_taken.values_mut() {
            *missed += 1;
        }
        for p in paused {
            if let Some(missed) = self.ongoing_taken.get_mut(&(p.tid, p.start_ns)) {
                *missed = 0;
                continue;
            }
            let duration_ns = now_ns.saturating_sub(p.start_ns);
            if duration_ns <= min_ns {
                continue;
            }
            self.ongoing_taken.insert((p.tid, p.start_ns), 0);
            self.check_process(&Record {
                ts_ns: p.start_ns,
                pid: p.pid,
                tid: p.tid,
                comm: p.comm,
                payload: Payload::ProcessState {
                    state: STATE_PAUSED,
                    cause: p.cause,
                    signal: 0,
                    core_dumped: false,
                    ongoing: true,
                    exit_code: 0,
                    sender_pid: 0,
                    duration_ns,
                    sender_comm: Default::default(),
                },
            });
        }
        self.ongoing_taken.retain(|_, missed| *missed < 2);
    }

    /// Checks one event; `path` is the path argument of a failed syscall, if it had one.
    pub fn check(&mut self, r: &Record, path: Option<&[u8]>) {
        match r.payload {
            Payload::ProcessState { .. } => self.check_process(r),
            // a short read or write (ret >= 0) is no failed call
            Payload::SyscallFailure { nr, ret, .. } if self.has_syscall_rules && ret < 0 => {
                let path = path.and_then(|p| std::str::from_utf8(p).ok());
                for i in 0..self.rules.len() {
                    if let Rule::Syscall {
                        nr: want_nr,
                        errno,
                        path: glob,
                    } = &self.rules[i].rule
                    {
                        let hit = want_nr.is_none_or(|n| n == nr)
                            && errno.is_none_or(|e| -e == ret)
                            && glob.as_ref().is_none_or(|g| path.is_some_and(|p| g.matches(p)));
                        if hit {
                            self.fire(i, r, || {
                                format!(
                                    "{}({}) = {}",
                                    syscall_name(nr as u32),
                                    path.unwrap_or(""),
                                    errno_name(-(ret as i64))
                                )
                            });
                        }
                    }
                }
            }
            _ => {}
        }
    }

    fn check_process(&mut self, r: &Record) {
        let Payload::ProcessState {
            state,
            signal,
            sender_pid,
            exit_code,
            duration_ns,
            ongoing,
            ..
        } = r.payload
        else {
            return;
        };
        // the end of a pause the rule already took while it went on
        let taken =
            state == STATE_PAUSED && !ongoing && self.ongoing_taken.remove(&(r.tid, r.ts_ns)).is_some();
        for i in 0..self.rules.len() {
            let hit = match self.rules[i].rule {
                Rule::FatalSignal => {
                    state == STATE_KILLED
                        && FATAL_SIGNALS.contains(&signal)
                        && (sender_pid == 0 || sender_pid == r.pid)
                }
                Rule::NonzeroExit => state == STATE_EXITED && exit_code != 0,
                // the OOM killer's SIGKILL comes from the kernel (no sender); /proc/vmstat
                // tells it apart from other kernel kills, read only on such a kill
                Rule::OomKill => {
                    state == STATE_KILLED
                        && signal == libc::SIGKILL as u8
                        && sender_pid == 0
                        && self.oom_kill_happened()
                }
                Rule::Pause { min_ns } => state == STATE_PAUSED && duration_ns > min_ns && !taken,
                Rule::Syscall { .. } => false,
            };
            if hit {
                self.fire(i, r, || match state {
                    STATE_KILLED => format!("killed by {}", signal_name(signal as u32)),
                    STATE_EXITED => format!("exited with code {exit_code}"),
                    _ if ongoing => format!("paused {} ms, still paused", duration_ns / 1_000_000),
                    _ => format!("paused {} ms", duration_ns / 1_000_000),
                });
            }
        }
    }

    fn oom_kill_happened(&mut self) -> bool {
        let now = read_oom_kills();
        let grew = now > self.oom_kills;
        self.oom_kills = now;
        grew
    }

    fn fire(&mut self, i: usize, r: &Record, detail: impl FnOnce() -> String) {
        let now = Instant::now();
        let rule = &mut self.rules[i];
        if rule
            .last_fired
            .is_some_and(|t| now.duration_since(t) < self.min_interval)
        {
            rule.suppressed += 1;
            rule.suppressed_since_fired += 1;
            return;
        }
        rule.fired += 1;
        rule.last_fired = Some(now);
        let suppressed_before = std::mem::take(&mut rule.suppressed_since_fired);
        match &mut self.pending {
            // one dump for everything that fires while it settles
            Some(p) => p.info.joined.push(rule.name.clone()),
            None => {
                let info = TriggerInfo {
                    rule: rule.name.clone(),
                    ts_ns: r.ts_ns,
                    pid: r.pid,
                    tid: r.tid,
                    comm: comm_str(&r.comm),
                    event: detail(),
                    suppressed_before,
                    joined: Vec::new(),
                };
                log::info!(
                    "trigger {}: {} {} (pid {}); dump in {} ms",
                    info.rule,
                    info.comm,
                    info.event,
                    info.pid,
                    self.settle.as_millis()
                );
                self.pending = Some(Pending {
                    due: now + self.settle,
                    info,
                });
            }
        }
    }

    /// The trigger whose dump is due now, if any.
    pub fn take_due(&mut self, now: Instant) -> Option<TriggerInfo> {
        if self.pending.as_ref().is_some_and(|p| p.due <= now) {
            return self.pending.take().map(|p| p.info);
        }
        None
    }

    /// The dump of `info` could not be written: its rules (and those that joined it) may fire
    /// again at their next event instead of waiting out `min_interval_ms`.
    pub fn dump_failed(&mut self, info: &TriggerInfo) {
        for rule in &mut self.rules {
            if rule.name == info.rule || info.joined.contains(&rule.name) {
                rule.last_fired = None;
            }
        }
    }

    /// Takes over what `old` counted and waits for, rule by rule (a reload that keeps a rule
    /// keeps its counts and its rate limit), and its pending dump.
    pub fn carry_over(&mut self, old: Triggers) {
        for rule in &mut self.rules {
            if let Some(before) = old.rules.iter().find(|r| r.name == rule.name) {
                rule.last_fired = before.last_fired;
                rule.fired = before.fired;
                rule.suppressed = before.suppressed;
                rule.suppressed_since_fired = before.suppressed_since_fired;
            }
        }
        self.pending = old.pending;
        self.ongoing_taken = old.ongoing_taken;
        self.oom_kills = old.oom_kills;
    }

    pub fn counts(&self) -> impl Iterator<Item = RuleCounts<'_>> {
        self.rules.iter().map(|r| RuleCounts {
            rule: &r.name,
            fired: r.fired,
            suppressed: r.suppressed,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn killed(pid: u32, signal: i32, sender_pid: u32) -> Record {
        Record {
            ts_ns: 1,
            pid,
            tid: pid,
            comm: *b"crash\0\0\0\0\0\0\0\0\0\0\0",
            payload: Payload::ProcessState {
                state: STATE_KILLED,
                cause: 0,
                signal: signal as u8,
                core_dumped: false,
                ongoing: false,
                exit_code: 0,
                sender_pid,
                duration_ns: 0,
                sender_comm: Default::default(),
            },
        }
    }

    #[test]
    fn rate_limit_counts_suppressed_and_settles() {
        let c = TriggerConfig {
            min_interval_ms: 60_000,
            settle_ms: 0,
            ..TriggerConfig::default()
        };
        let mut t = Triggers::new(&c).unwrap();
        t.check(&killed(7, libc::SIGSEGV, 0), None);
        t.check(&killed(8, libc::SIGSEGV, 8), None);
        t.check(&killed(9, libc::SIGSEGV, 1234), None);
        t.check(&killed(10, libc::SIGKILL, 0), None);
        let info = t.take_due(Instant::now()).expect("the first crash fires");
        assert_eq!(
            (info.rule.as_str(), info.pid, info.event.as_str()),
            ("fatal_signal", 7, "killed by SIGSEGV")
        );
        assert!(t.take_due(Instant::now()).is_none());
        let c = t.counts().next().unwrap();
        assert_eq!(
            (c.fired, c.suppressed),
            (1, 1),
            "a SEGV sent by another process is not a crash"
        );
    }

    #[test]
    fn a_pause_fires_while_it_goes_on_and_its_end_fires_nothing_more() {
        let c = TriggerConfig {
            fatal_signal: false,
            pause_ms: 400,
            min_interval_ms: 0,
            settle_ms: 0,
            ..TriggerConfig::default()
        };
        let mut t = Triggers::new(&c).unwrap();
        assert!(t.watches_ongoing_pauses());
        let ms = 1_000_000u64;
        let paused = |start_ns| OngoingPause {
            pid: 7,
            tid: 7,
            start_ns,
            cause: 0,
            comm: *b"stuck\0\0\0\0\0\0\0\0\0\0\0",
        };
        let ended = |start_ns, duration_ns| Record {
            ts_ns: start_ns,
            pid: 7,
            tid: 7,
            payload: Payload::ProcessState {
                state: STATE_PAUSED,
                cause: 0,
                signal: 19,
                core_dumped: false,
                ongoing: false,
                exit_code: 0,
                sender_pid: 1,
                duration_ns,
                sender_comm: Default::default(),
            },
            ..Record::default()
        };
        t.check_ongoing_pauses([paused(1000 * ms)], 1300 * ms);
        assert!(t.take_due(Instant::now()).is_none(), "not yet past the threshold");
        t.check_ongoing_pauses([paused(1000 * ms)], 1500 * ms);
        let info = t.take_due(Instant::now()).expect("fires while the pause goes on");
        assert_eq!(
            (info.rule.as_str(), info.pid, info.event.as_str()),
            ("pause", 7, "paused 500 ms, still paused")
        );
        t.check_ongoing_pauses([paused(1000 * ms)], 1600 * ms);
        t.check_ongoing_pauses([], 1700 * ms);
        t.check(&ended(1000 * ms, 650 * ms), None);
        assert!(t.take_due(Instant::now()).is_none(), "its end fires nothing more");
        assert_eq!(t.counts().next().map(|c| (c.fired, c.suppressed)), Some((1, 0)));
        assert!(t.ongoing_taken.is_empty());
        // a pause seen only when it ended fires at its end, as before
        t.check(&ended(2000 * ms, 450 * ms), None);
        assert!(t.take_due(Instant::now()).is_some());
        // a look that missed an ended pause twice forgets it
        t.check_ongoing_pauses([paused(3000 * ms)], 3500 * ms);
        assert!(t.take_due(Instant::now()).is_some());
        t.check_ongoing_pauses([], 3600 * ms);
        t.check_ongoing_pauses([], 3700 * ms);
        assert!(t.ongoing_taken.is_empty());
    }

    #[test]
    fn syscall_rules_match_every_field_given() {
        let c = TriggerConfig {
            fatal_signal: false,
            settle_ms: 0,
            syscall: vec![SyscallRule {
                syscall: Some("openat".into()),
                errno: Some("ENOENT".into()),
                path: Some("/data/*.db".into()),
            }],
            ..TriggerConfig::default()
        };
        let mut t = Triggers::new(&c).unwrap();
        let nr = syscall_number("openat").unwrap() as u16;
        let fail = |nr, ret| Record {
            payload: Payload::SyscallFailure {
                nr,
                ret,
                fd: -1,
                open_id: 0,
                blob: Default::default(),
                requested: 0,
            },
            ..Record::default()
        };
        t.check(&fail(nr, -2), Some(b"/etc/x.db"));
        t.check(&fail(nr, -13), Some(b"/data/a.db"));
        t.check(&fail(nr + 1, -2), Some(b"/data/a.db"));
        assert!(t.take_due(Instant::now()).is_none());
        t.check(&fail(nr, -2), Some(b"/data/a.db"));
        let info = t.take_due(Instant::now()).unwrap();
        assert_eq!(info.event, "openat(/data/a.db) = ENOENT");
        assert!(SyscallRule::parse("::").is_err());
        assert_eq!(
            SyscallRule::parse("write:ENOSPC").unwrap().errno.as_deref(),
            Some("ENOSPC")
        );
        let bad = TriggerConfig {
            syscall: vec![SyscallRule {
                syscall: Some("nope".into()),
                ..Default::default()
            }],
            ..Default::default()
        };
        assert!(validate(&bad, "f").unwrap_err().0.contains("triggers.syscall[0]"));
    }
}
