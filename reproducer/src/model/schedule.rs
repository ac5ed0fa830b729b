//! The fault schedule: the TOML file users write (format in docs/reproducer.md "Schedule file"), read
//! into typed faults — each one a node, a context (when and where) and an action (what) —
//! and written back from them. Parsing checks what a fault alone can tell (fields that
//! belong to its kind); names that need the scenario are checked when a [`FaultPlan`] is
//! built from it. Every mistake reads "FILE, line L: fault N field F: ...".
//!
//! [`FaultPlan`]: super::plan::FaultPlan
use std::path::Path;
use std::time::Duration;

use anyhow::{anyhow, bail, Result};
use serde::{Deserialize, Serialize};

use super::toml_error::{line_of_key, toml_error};

#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum FaultKind {
    Syscall,
    Crash,
    Pause,
    Partition,
}

impl FaultKind {
    pub fn name(self) -> &'static str {
        match self {
            FaultKind::Syscall => "syscall",
            FaultKind::Crash => "crash",
            FaultKind::Pause => "pause",
            FaultKind::Partition => "partition",
        }
    }
}

#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq, Hash)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    #[default]
    Both,
    Out,
    In,
}

/// How long a persistent syscall fault lasts from the call it fired at: every matching call
/// of its node fails until then, as on a full or dead disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Until {
    /// until the run ends (restarts of the node included)
    End,
    /// for this long
    For(Duration),
}

impl Until {
    /// `"end"`, or a duration such as `"2s"`, `"500ms"`, `"1m 30s"`.
    pub fn parse(text: &str) -> Result<Until> {
        if text == "end" {
            return Ok(Until::End);
        }
        match humantime::parse_duration(text) {
            Ok(d) if !d.is_zero() => Ok(Until::For(d)),
            Ok(_) => bail!("a duration of 0 fails nothing after the call; write a longer one or \"end\""),
            Err(_) => bail!("'{text}' is neither \"end\" nor a duration such as \"2s\" or \"500ms\""),
        }
    }

    /// The text `parse` reads back.
    pub fn text(self) -> String {
        match self {
            Until::End => "end".into(),
            Until::For(d) => humantime::format_duration(d).to_string(),
        }
    }
}

/// Syscalls a short fault can cut: the supervisor does the first bytes of the write itself.
pub const SHORT_SYSCALLS: [&str; 2] = ["write", "pwrite64"];

/// When and where a fault fires: after these functions were entered, in order, since the
/// previous fault fired; a crash, pause or partition `offset` bytes into the last of them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Context {
    pub after_functions: Vec<String>,
    pub offset: Option<u64>,
    /// syscall faults: the Nth matching call is counted among the calls made once every node
    /// is ready, not from its node's start (production's failure came after start-up)
    pub after_ready: bool,
}

/// What a fault does.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// the Nth matching call (since the previous fault) fails with `errno` without running,
    /// or with `short` writes only its first `short` bytes and returns that count; with
    /// `until`, every later matching call of the node fails with `errno` until then
    Syscall {
        syscall: String,
        /// None only for a short fault without `until` (it fails no call)
        errno: Option<String>,
        path: Option<String>,
        nth: u32,
        short: Option<u64>,
        until: Option<Until>,
    },
    /// default SIGKILL
    Crash { signal: Option<String> },
    /// default SIGSTOP; SIGCONT after `duration_ms`
    Pause {
        signal: Option<String>,
        duration_ms: u64,
    },
    Partition {
        peers: Vec<String>,
        direction: Direction,
        duration_ms: u64,
    },
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Fault {
    pub node: String,
    pub context: Context,
    pub action: Action,
}

impl Fault {
    pub fn kind(&self) -> FaultKind {
        match self.action {
            Action::Syscall { .. } => FaultKind::Syscall,
            Action::Crash { .. } => FaultKind::Crash,
            Action::Pause { .. } => FaultKind::Pause,
            Action::Partition { .. } => FaultKind::Partition,
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Schedule {
    pub faults: Vec<Fault>,
}

/// Where a schedule came from, to name the file, line and field of a mistake.
#[derive(Clone, Debug)]
pub struct Origin {
    pub name: String,
    /// the file's text, when there is one (a schedule the search built has none)
    pub text: Option<String>,
}

impl Origin {
    pub fn file(name: &str, text: &str) -> Origin {
        Origin {
            name: name.to_string(),
            text: Some(text.to_string()),
        }
    }

    /// "schedule FILE, line L: fault N field F"
    pub fn at(&self, index: usize, field: &str) -> String {
        match self
            .text
            .as_deref()
            .and_then(|t| line_of_key(t, "faults", index, field))
        {
            Some(l) => format!(
                "schedule {}, line {l}: fault {} field {field}",
                self.name,
                index + 1
            ),
            None => format!("schedule {}: fault {} field {field}", self.name, index + 1),
        }
    }
}

/// One fault as written in the file (every field of every kind).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
struct Entry {
    node: String,
    kind: FaultKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    syscall: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    errno: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    path: Option<String>,
    /// syscall faults only; written only for them (a crash or pause has no Nth call)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    nth: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    short: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    until: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    after_functions: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    offset: Option<u64>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    after_ready: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    signal: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    duration_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    peers: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    direction: Option<Direction>,
}

#[derive(Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    faults: Vec<Entry>,
}

impl Entry {
    fn into_fault(self, index: usize, origin: &Origin) -> Result<Fault> {
        let at = |field: &str| origin.at(index, field);
        let kind = self.kind;
        let only = |present: bool, field: &str, kinds: &str| -> Result<()> {
            if present {
                bail!(
                    "{}: {field} applies to {kinds} faults only, not to a {} fault",
                    at(field),
                    kind.name()
                );
            }
            Ok(())
        };
        if self.nth == Some(0) {
            bail!("{}: nth counts from 1", at("nth"));
        }
        if self.offset.is_some() && self.after_functions.is_empty() {
            bail!(
                "{}: an offset needs after_functions (it is an offset into the last one)",
                at("offset")
            );
        }
        let syscall_only = [
            ("syscall", self.syscall.is_some()),
            ("errno", self.errno.is_some()),
            ("path", self.path.is_some()),
            ("nth", self.nth.is_some_and(|n| n != 1)),
            ("short", self.short.is_some()),
            ("until", self.until.is_some()),
            ("after_ready", self.after_ready),
        ];
        if kind != FaultKind::Syscall {
            for (field, present) in syscall_only {
                only(present, field, "syscall")?;
            }
        }
        if !matches!(kind, FaultKind::Crash | FaultKind::Pause) {
            only(self.signal.is_some(), "signal", "crash and pause")?;
        }
        if !matches!(kind, FaultKind::Pause | FaultKind::Partition) {
            only(self.duration_ms.is_some(), "duration_ms", "pause and partition")?;
        }
        if kind != FaultKind::Partition {
            only(!self.peers.is_empty(), "peers", "partition")?;
            only(self.direction.is_some(), "direction", "partition")?;
        }
        let duration = |what: &str| {
            self.duration_ms
                .ok_or_else(|| anyhow!("{}: a {what} needs duration_ms", at("duration_ms")))
        };
        let action = match kind {
            FaultKind::Syscall => {
                if self.offset.is_some() {
                    bail!(
                        "{}: syscall faults fire at the call itself; offset is for crash and pause",
                        at("offset")
                    );
                }
                let syscall = self
                    .syscall
                    .clone()
                    .ok_or_else(|| anyhow!("{}: a syscall fault needs syscall", at("syscall")))?;
                let until = match &self.until {
                    Some(t) => Some(Until::parse(t).map_err(|e| anyhow!("{}: {e}", at("until")))?),
                    None => None,
                };
                self.check_short(&syscall, until.is_some(), &at)?;
                let errno = match (&self.errno, self.short, until) {
                    (Some(e), _, _) => Some(e.clone()),
                    (None, Some(_), None) => None,
                    (None, _, _) => bail!("{}: a syscall fault needs errno", at("errno")),
                };
                Action::Syscall {
                    syscall,
                    errno,
                    path: self.path.clone(),
                    nth: self.nth.unwrap_or(1),
                    short: self.short,
                    until,
                }
            }
            FaultKind::Crash => Action::Crash {
                signal: self.signal.clone(),
            },
            FaultKind::Pause => Action::Pause {
                signal: self.signal.clone(),
                duration_ms: duration("pause")?,
            },
            FaultKind::Partition => {
                let duration_ms = duration("partition")?;
                if self.peers.is_empty() {
                    bail!("{}: a partition needs peers", at("peers"));
                }
                Action::Partition {
                    peers: self.peers.clone(),
                    direction: self.direction.unwrap_or_default(),
                    duration_ms,
                }
            }
        };
        let context = Context {
            after_functions: self.after_functions,
            offset: self.offset,
            after_ready: self.after_ready,
        };
        Ok(Fault {
            node: self.node,
            context,
            action,
        })
    }

    /// A short fault: a write the supervisor can do in part, and an errno only when later
    /// calls fail (with `until`).
    fn check_short(&self, syscall: &str, has_until: bool, at: &dyn Fn(&str) -> String) -> Result<()> {
        let Some(bytes) = self.short else {
            return Ok(());
        };
        if bytes == 0 {
            bail!(
                "{}: short counts the bytes the call still writes, at least 1",
                at("short")
            );
        }
        if !SHORT_SYSCALLS.contains(&syscall) {
            bail!(
                "{}: short applies to {} only, not to {syscall}",
                at("short"),
                SHORT_SYSCALLS.join(" and ")
            );
        }
        if self.errno.is_some() && !has_until {
            bail!(
                "{}: a short fault without until fails no call: remove errno, or add until = \"end\" to fail every later call",
                at("errno")
            );
        }
        Ok(())
    }

    fn of(f: &Fault) -> Entry {
        let mut e = Entry {
            node: f.node.clone(),
            kind: f.kind(),
            syscall: None,
            errno: None,
            path: None,
            nth: None,
            short: None,
            until: None,
            after_functions: f.context.after_functions.clone(),
            offset: f.context.offset,
            after_ready: f.context.after_ready,
            signal: None,
            duration_ms: None,
            peers: Vec::new(),
            direction: None,
        };
        match &f.action {
            Action::Syscall {
                syscall,
                errno,
                path,
                nth,
                short,
                until,
            } => {
                e.syscall = Some(syscall.clone());
                e.errno = errno.clone();
                e.path = path.clone();
                e.nth = Some(*nth);
                e.short = *short;
                e.until = until.map(Until::text);
            }
            Action::Crash { signal } => e.signal = signal.clone(),
            Action::Pause { signal, duration_ms } => {
                e.signal = signal.clone();
                e.duration_ms = Some(*duration_ms);
            }
            Action::Partition {
                peers,
                direction,
                duration_ms,
            } => {
                e.peers = peers.clone();
                e.direction = Some(*direction);
                e.duration_ms = Some(*duration_ms);
            }
        }
        e
    }
}

impl Schedule {
    /// Reads a schedule file; also returns its origin (for the plan's error messages).
    pub fn load(path: &Path) -> Result<(Schedule, Origin)> {
        let text = std::fs::read_to_string(path).map_err(|e| anyhow!("schedule {}: {e}", path.display()))?;
        let origin = Origin::file(&path.display().to_string(), &text);
        Ok((Self::parse(&text, &origin.name)?, origin))
    }

    pub fn parse(text: &str, name: &str) -> Result<Schedule> {
        let file: File =
            toml::from_str(text).map_err(|e| toml_error(&e, text, &format!("schedule {name}")))?;
        let origin = Origin::file(name, text);
        let faults = file
            .faults
            .into_iter()
            .enumerate()
            .map(|(i, e)| e.into_fault(i, &origin))
            .collect::<Result<_>>()?;
        Ok(Schedule { faults })
    }

    /// The schedule as a file users can read, edit and replay.
    pub fn to_toml(&self) -> String {
        let file = File {
            faults: self.faults.iter().map(Entry::of).collect(),
        };
        // a struct of strings, numbers and lists always serializes
        toml::to_string(&file).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL_KINDS: &str = r#"
[[faults]]
node = "db1"
kind = "syscall"
syscall = "write"
errno = "ENOSPC"
path = "{workdir}/db1/*"
nth = 3
after_functions = ["flush"]

[[faults]]
node = "db2"
kind = "crash"
after_functions = ["a", "b"]
offset = 12

[[faults]]
node = "db1"
kind = "pause"
duration_ms = 2000

[[faults]]
node = "db1"
kind = "partition"
peers = ["db2"]
duration_ms = 5000
direction = "out"
"#;

    #[test]
    fn parses_every_kind_and_round_trips() {
        let s = Schedule::parse(ALL_KINDS, "s.toml").unwrap();
        let kinds: Vec<FaultKind> = s.faults.iter().map(Fault::kind).collect();
        assert_eq!(
            kinds,
            [
                FaultKind::Syscall,
                FaultKind::Crash,
                FaultKind::Pause,
                FaultKind::Partition
            ]
        );
        assert_eq!(
            s.faults[0].action,
            Action::Syscall {
                syscall: "write".into(),
                errno: Some("ENOSPC".into()),
                path: Some("{workdir}/db1/*".into()),
                nth: 3,
                short: None,
                until: None,
            }
        );
        assert_eq!(
            s.faults[1].context,
            Context {
                after_functions: vec!["a".into(), "b".into()],
                offset: Some(12),
                after_ready: false,
            }
        );
        assert_eq!(
            s.faults[2].action,
            Action::Pause {
                signal: None,
                duration_ms: 2000
            }
        );
        assert_eq!(
            s.faults[3].action,
            Action::Partition {
                peers: vec!["db2".into()],
                direction: Direction::Out,
                duration_ms: 5000
            }
        );
        assert_eq!(Schedule::parse(&s.to_toml(), "again").unwrap(), s);
        assert_eq!(Schedule::parse("", "empty").unwrap(), Schedule::default());
    }

    #[test]
    fn writes_the_format_users_write() {
        let s = Schedule::parse(ALL_KINDS, "s.toml").unwrap();
        let text = s.to_toml();
        assert!(
            text.starts_with("[[faults]]\nnode = \"db1\"\nkind = \"syscall\"\nsyscall = \"write\"\n"),
            "{text}"
        );
        assert!(
            text.contains("kind = \"crash\"\nafter_functions = [\"a\", \"b\"]\noffset = 12\n"),
            "{text}"
        );
    }

    fn error(text: &str) -> String {
        Schedule::parse(text, "s.toml").unwrap_err().to_string()
    }

    #[test]
    fn mistakes_name_line_and_field() {
        let e = error("[[faults]]\nnode = \"a\"\nkind = \"syscall\"\nerrno = \"EIO\"\n");
        assert_eq!(
            e,
            "schedule s.toml: fault 1 field syscall: a syscall fault needs syscall"
        );
        let e = error("[[faults]]\nnode = \"a\"\nkind = \"crash\"\nerrno = \"EIO\"\n");
        assert_eq!(e, "schedule s.toml, line 4: fault 1 field errno: errno applies to syscall faults only, not to a crash fault");
        let e = error("[[faults]]\nnode = \"a\"\nkind = \"crash\"\nnth = 2\n");
        assert!(
            e.contains("line 4") && e.contains("nth applies to syscall faults only"),
            "{e}"
        );
        let e = error("[[faults]]\nnode = \"a\"\nkind = \"pause\"\n");
        assert!(e.contains("a pause needs duration_ms"), "{e}");
        let e = error("[[faults]]\nnode = \"a\"\nkind = \"partition\"\nduration_ms = 5\n");
        assert!(e.contains("a partition needs peers"), "{e}");
        let e = error("[[faults]]\nnode = \"a\"\nkind = \"syscall\"\nsyscall = \"write\"\nerrno = \"EIO\"\nafter_functions = [\"f\"]\noffset = 3\n");
        assert!(
            e.contains("line 7") && e.contains("offset is for crash and pause"),
            "{e}"
        );
        let e = error("[[faults]]\nnode = \"a\"\nkind = \"crash\"\noffset = 3\n");
        assert!(e.contains("an offset needs after_functions"), "{e}");
        let e = error("[[faults]]\nnode = \"a\"\nkind = \"crash\"\nsignal = \"SIGKILL\"\n\n[[faults]]\nnode = \"b\"\nkind = \"crash\"\npeers = [\"a\"]\n");
        assert_eq!(e, "schedule s.toml, line 9: fault 2 field peers: peers applies to partition faults only, not to a crash fault");
        let e = error("[[faults]]\nnode = \"a\"\nkind = \"explode\"\n");
        assert!(
            e.starts_with("schedule s.toml, line 3:") && e.contains("explode"),
            "{e}"
        );
    }

    #[test]
    fn a_syscall_fault_may_count_its_calls_after_ready_and_nothing_else_may() {
        let text = "[[faults]]\nnode = \"a\"\nkind = \"syscall\"\nsyscall = \"fdatasync\"\nerrno = \"EIO\"\nafter_ready = true\n";
        let s = Schedule::parse(text, "s.toml").unwrap();
        assert!(s.faults[0].context.after_ready);
        assert!(s.to_toml().contains("after_ready = true\n"), "{}", s.to_toml());
        assert_eq!(Schedule::parse(&s.to_toml(), "t").unwrap(), s);
        let e = error("[[faults]]\nnode = \"a\"\nkind = \"crash\"\nafter_ready = true\n");
        assert!(
            e.contains("line 4") && e.contains("after_ready applies to syscall faults only"),
            "{e}"
        );
    }

    #[test]
    fn persistent_and_short_faults() {
        let s = Schedule::parse(
            "[[faults]]\nnode = \"a\"\nkind = \"syscall\"\nsyscall = \"pwrite64\"\nerrno = \"ENOSPC\"\nshort = 480\nuntil = \"end\"\n\
             [[faults]]\nnode = \"a\"\nkind = \"syscall\"\nsyscall = \"fsync\"\nerrno = \"EIO\"\nuntil = \"1s 500ms\"\n\
             [[faults]]\nnode = \"a\"\nkind = \"syscall\"\nsyscall = \"write\"\nshort = 3\n",
            "s.toml",
        )
        .unwrap();
        let actions: Vec<&Action> = s.faults.iter().map(|f| &f.action).collect();
        assert!(matches!(
            actions[0],
            Action::Syscall { errno: Some(e), short: Some(480), until: Some(Until::End), .. } if e == "ENOSPC"
        ));
        assert!(matches!(
            actions[1],
            Action::Syscall { short: None, until: Some(Until::For(d)), .. } if *d == Duration::from_millis(1500)
        ));
        assert!(matches!(
            actions[2],
            Action::Syscall {
                errno: None,
                short: Some(3),
                until: None,
                ..
            }
        ));
        let text = s.to_toml();
        assert!(text.contains("short = 480\nuntil = \"end\"\n"), "{text}");
        assert!(text.contains("until = \"1s 500ms\"\n"), "{text}");
        assert_eq!(Schedule::parse(&text, "again").unwrap(), s);
    }

    #[test]
    fn persistent_and_short_mistakes_name_line_and_field() {
        let head = "[[faults]]\nnode = \"a\"\nkind = \"syscall\"\n";
        let e = error(&format!(
            "{head}syscall = \"write\"\nerrno = \"EIO\"\nuntil = \"soon\"\n"
        ));
        assert_eq!(e, "schedule s.toml, line 6: fault 1 field until: 'soon' is neither \"end\" nor a duration such as \"2s\" or \"500ms\"");
        let e = error(&format!(
            "{head}syscall = \"write\"\nerrno = \"EIO\"\nuntil = \"0s\"\n"
        ));
        assert!(e.contains("line 6") && e.contains("a duration of 0"), "{e}");
        let e = error(&format!("{head}syscall = \"read\"\nshort = 10\n"));
        assert_eq!(
            e,
            "schedule s.toml, line 5: fault 1 field short: short applies to write and pwrite64 only, not to read"
        );
        let e = error(&format!("{head}syscall = \"write\"\nshort = 0\n"));
        assert!(e.contains("line 5") && e.contains("at least 1"), "{e}");
        let e = error(&format!(
            "{head}syscall = \"write\"\nerrno = \"ENOSPC\"\nshort = 10\n"
        ));
        assert!(e.contains("line 5") && e.contains("fails no call"), "{e}");
        let e = error(&format!("{head}syscall = \"write\"\nuntil = \"end\"\n"));
        assert!(e.contains("a syscall fault needs errno"), "{e}");
        let e = error("[[faults]]\nnode = \"a\"\nkind = \"crash\"\nuntil = \"end\"\n");
        assert!(
            e.contains("line 4") && e.contains("until applies to syscall faults only"),
            "{e}"
        );
        let e = error("[[faults]]\nnode = \"a\"\nkind = \"pause\"\nduration_ms = 5\nshort = 3\n");
        assert!(
            e.contains("line 5") && e.contains("short applies to syscall faults only"),
            "{e}"
        );
    }
}
