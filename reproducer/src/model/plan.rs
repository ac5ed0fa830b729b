//! The fault plan: a schedule checked against its scenario, with every name (node, peer,
//! syscall, errno, signal) resolved to what the kernel mechanisms take. Built once per
//! schedule and handed as is to each mechanism of a run (trace config, injector maps,
//! seccomp supervisors, executor).
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{anyhow, bail, Result};
use tracedump::syscalls::{errno_number, signal_number, syscall_number};

use super::resolve_binary;
use super::scenario::Scenario;
use super::schedule::{Action, Context, Direction, Fault, FaultKind, Origin, Schedule, Until};
use crate::analysis::programs::is_wrapper;

/// What a planned fault does, in kernel terms.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Planned {
    Syscall {
        nr: u32,
        /// None: a short fault that fails no call
        errno: Option<i32>,
        path: Option<String>,
        nth: u32,
        /// the Nth call writes only this many bytes (the supervisor writes them)
        short: Option<u64>,
        /// every later matching call fails with errno until then
        until: Option<Until>,
    },
    Crash {
        signal: u32,
    },
    Pause {
        signal: u32,
        duration: Duration,
    },
    Partition {
        peers: Vec<usize>,
        direction: Direction,
        duration: Duration,
    },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedFault {
    /// the fault as written (names, for reports)
    pub fault: Fault,
    /// index of its node in the scenario
    pub node: usize,
    pub action: Planned,
}

impl PlannedFault {
    pub fn kind(&self) -> FaultKind {
        self.fault.kind()
    }

    pub fn context(&self) -> &Context {
        &self.fault.context
    }

    /// The signal a process fault sends, if it is one.
    pub fn signal(&self) -> Option<u32> {
        match self.action {
            Planned::Crash { signal } | Planned::Pause { signal, .. } => Some(signal),
            _ => None,
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FaultPlan {
    pub faults: Vec<PlannedFault>,
}

impl FaultPlan {
    /// Checks `schedule` against `scenario`; errors name the fault and field (and the line,
    /// when `origin` has the file's text).
    pub fn new(schedule: &Schedule, scenario: &Scenario, origin: &Origin) -> Result<FaultPlan> {
        let faults = schedule
            .faults
            .iter()
            .enumerate()
            .map(|(i, f)| plan_fault(f, i, scenario, origin))
            .collect::<Result<_>>()?;
        Ok(FaultPlan { faults })
    }

    /// Refuses a context function the binary does not define, before any run starts (for
    /// a schedule a user wrote; the search's name functions its traces saw): a name is
    /// looked up in the node's program, or in BINARY for `BINARY:SYMBOL`.
    pub fn check_functions(&self, scenario: &Scenario, origin: &Origin) -> Result<()> {
        let mut known: HashMap<PathBuf, HashSet<String>> = HashMap::new();
        for (i, f) in self.faults.iter().enumerate() {
            let program = &scenario.nodes[f.node].command[0];
            for func in &f.context().after_functions {
                let (binary, symbol) = match func.rsplit_once(':') {
                    Some((b, s)) if !b.is_empty() => (PathBuf::from(b), s),
                    // a program named through a placeholder is only known at run time
                    _ if program.contains('{') => continue,
                    _ => (resolve_binary(program), func.as_str()),
                };
                let at = || origin.at(i, "after_functions");
                if !known.contains_key(&binary) {
                    let names = function_names(&binary).map_err(|e| anyhow!("{}: {e:#}", at()))?;
                    known.insert(binary.clone(), names);
                }
                if !known[&binary].contains(symbol) {
                    let hint = if is_wrapper(&binary) {
                        "; the node's program is a wrapper: write BINARY:SYMBOL"
                    } else {
                        ""
                    };
                    bail!(
                        "{}: no function '{symbol}' in {} ({} functions){hint}",
                        at(),
                        binary.display(),
                        known[&binary].len()
                    );
                }
            }
        }
        Ok(())
    }

    pub fn len(&self) -> usize {
        self.faults.len()
    }

    pub fn is_empty(&self) -> bool {
        self.faults.is_empty()
    }
}

/// Every function name `binary` defines, aliases included (.symtab, .dynsym, Go's table):
/// the names a uprobe can be attached by.
fn function_names(binary: &Path) -> Result<HashSet<String>> {
    Ok(tracedump::elf::Binary::read(binary)?
        .functions()?
        .into_iter()
        .map(|d| d.symbol.name)
        .collect())
}

fn plan_fault(f: &Fault, index: usize, scenario: &Scenario, origin: &Origin) -> Result<PlannedFault> {
    let at = |field: &str| origin.at(index, field);
    let node_of = |name: &str, field: &str| {
        scenario
            .node_index(name)
            .ok_or_else(|| anyhow!("{}: no node '{name}' in scenario {}", at(field), scenario.name))
    };
    let node = node_of(&f.node, "node")?;
    let signal = |name: &Option<String>, default: &str| {
        let name = name.as_deref().unwrap_or(default);
        signal_number(name).ok_or_else(|| anyhow!("{}: unknown signal '{name}'", at("signal")))
    };
    let action = match &f.action {
        Action::Syscall {
            syscall,
            errno,
            path,
            nth,
            short,
            until,
        } => Planned::Syscall {
            nr: syscall_number(syscall)
                .ok_or_else(|| anyhow!("{}: unknown syscall '{syscall}'", at("syscall")))?,
            errno: match errno {
                Some(e) => Some(
                    errno_number(e).ok_or_else(|| anyhow!("{}: unknown errno '{e}'", at("errno")))? as i32,
                ),
                None => None,
            },
            path: path.clone(),
            nth: *nth,
            short: *short,
            until: *until,
        },
        Action::Crash { signal: s } => Planned::Crash {
            signal: signal(s, "SIGKILL")?,
        },
        Action::Pause {
            signal: s,
            duration_ms,
        } => Planned::Pause {
            signal: signal(s, "SIGSTOP")?,
            duration: Duration::from_millis(*duration_ms),
        },
        Action::Partition {
            peers,
            direction,
            duration_ms,
        } => {
            let mut indexes = Vec::new();
            for p in peers {
                let i = node_of(p, "peers")?;
                if scenario.nodes[i].address.is_none() || scenario.nodes[node].address.is_none() {
                    bail!(
                        "{}: partitions need both nodes to have an address (their own network namespace)",
                        at("peers")
                    );
                }
                indexes.push(i);
            }
            Planned::Partition {
                peers: indexes,
                direction: *direction,
                duration: Duration::from_millis(*duration_ms),
            }
        }
    };
    Ok(PlannedFault {
        fault: f.clone(),
        node,
        action,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SCENARIO: &str = "name = \"kv\"\n[[nodes]]\nname = \"db1\"\ncommand = [\"kv\"]\naddress = \"10.9.0.1\"\n\
        [[nodes]]\nname = \"db2\"\ncommand = [\"kv\"]\naddress = \"10.9.0.2\"\n[[nodes]]\nname = \"cli\"\ncommand = [\"c\"]\n\
        [workload]\ncommand = [\"true\"]\n[oracle]\ncommand = [\"true\"]\n";

    fn plan(schedule: &str) -> Result<FaultPlan> {
        let scenario = Scenario::parse(SCENARIO, "sc.toml").unwrap();
        FaultPlan::new(
            &Schedule::parse(schedule, "s.toml")?,
            &scenario,
            &Origin::file("s.toml", schedule),
        )
    }

    #[test]
    fn resolves_names_to_numbers() {
        let p = plan(
            "[[faults]]\nnode = \"db2\"\nkind = \"syscall\"\nsyscall = \"write\"\nerrno = \"ENOSPC\"\n\
             [[faults]]\nnode = \"db1\"\nkind = \"pause\"\nduration_ms = 20\n\
             [[faults]]\nnode = \"db1\"\nkind = \"partition\"\npeers = [\"db2\"]\nduration_ms = 30\n",
        )
        .unwrap();
        assert_eq!(p.faults[0].node, 1);
        assert_eq!(
            p.faults[0].action,
            Planned::Syscall {
                nr: 1,
                errno: Some(28),
                path: None,
                nth: 1,
                short: None,
                until: None,
            }
        );
        assert_eq!(
            p.faults[1].action,
            Planned::Pause {
                signal: 19,
                duration: Duration::from_millis(20)
            }
        );
        assert_eq!(p.faults[1].signal(), Some(19));
        assert_eq!(
            p.faults[2].action,
            Planned::Partition {
                peers: vec![1],
                direction: Direction::Both,
                duration: Duration::from_millis(30)
            }
        );
        let crash = plan("[[faults]]\nnode = \"db1\"\nkind = \"crash\"\n").unwrap();
        assert_eq!(crash.faults[0].action, Planned::Crash { signal: 9 });
    }

    #[test]
    fn names_the_line_of_what_the_scenario_does_not_know() {
        let e =
            plan("[[faults]]\nnode = \"db1\"\nkind = \"syscall\"\nsyscall = \"wrte\"\nerrno = \"ENOSPC\"\n")
                .unwrap_err()
                .to_string();
        assert_eq!(
            e,
            "schedule s.toml, line 4: fault 1 field syscall: unknown syscall 'wrte'"
        );
        let e = plan("[[faults]]\nnode = \"db9\"\nkind = \"crash\"\n")
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "schedule s.toml, line 2: fault 1 field node: no node 'db9' in scenario kv"
        );
        let e = plan("[[faults]]\nnode = \"db1\"\nkind = \"crash\"\nsignal = \"SIGNOPE\"\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("line 4") && e.contains("unknown signal 'SIGNOPE'"),
            "{e}"
        );
        let e =
            plan("[[faults]]\nnode = \"db1\"\nkind = \"syscall\"\nsyscall = \"write\"\nerrno = \"EWHAT\"\n")
                .unwrap_err()
                .to_string();
        assert!(e.contains("line 5") && e.contains("EWHAT"), "{e}");
        let e =
            plan("[[faults]]\nnode = \"db1\"\nkind = \"partition\"\npeers = [\"cli\"]\nduration_ms = 5\n")
                .unwrap_err()
                .to_string();
        assert!(
            e.contains("line 4") && e.contains("both nodes to have an address"),
            "{e}"
        );
        let schedule = Schedule::parse("[[faults]]\nnode = \"db9\"\nkind = \"crash\"\n", "x").unwrap();
        let scenario = Scenario::parse(SCENARIO, "sc.toml").unwrap();
        let origin = Origin {
            name: "of the search".into(),
            text: None,
        };
        let e = FaultPlan::new(&schedule, &scenario, &origin)
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "schedule of the search: fault 1 field node: no node 'db9' in scenario kv"
        );
    }
}
