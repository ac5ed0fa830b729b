//! The environment worker: a thread that identifies and hashes what the recorder tells it
//! about (a process learned, forked, a configuration file opened, an exit), looks at each
//! process's libraries and limits when its start is over, and answers a dump with the
//! environments of the processes in its table, refreshed for those still alive. Nothing here
//! runs on the event path: the recorder only queues messages.
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use tracedump::environment::{ConfigFile, FileIdentity, ProcEnvironment};

use super::files::{FileRef, IdentityCache};
use super::{proc_files, storage};

/// When the loader has mapped a process's libraries: the first look, before the one at the
/// end of its start window (a process may not live that long).
const FIRST_LOOK: Duration = Duration::from_millis(300);

/// File versions whose hashes are kept (a few hundred bytes each).
const CACHE_VERSIONS: usize = 16_384;

/// Directories whose filesystem is recorded per process at most.
const MAX_DIRS: usize = 16;

/// The bounds the worker works within (from the configuration).
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// libraries and configuration files per process
    pub files: usize,
    /// bytes of contents per configuration file (0 = none)
    pub capture: u64,
    /// a process's start window
    pub window: Duration,
    /// processes tracked at most (the process table's size)
    pub processes: usize,
}

/// What a process was started as, for the worker to identify.
pub struct Learned {
    pub pid: u32,
    pub exe: Option<String>,
    pub argv: Vec<String>,
    pub cwd: Option<String>,
    pub cgroup: Option<String>,
    /// found already running (the start-up scan): its start is over, look now
    pub running: bool,
}

pub enum Msg {
    Learn(Learned),
    Fork {
        child: u32,
        parent: u32,
    },
    ConfigOpen {
        pid: u32,
        path: String,
        after_ns: u64,
    },
    Exit(u32),
    /// the environments of these pids (refreshed where alive), with the filesystems of the
    /// directories their recorded events named (pid -> directories), and what the worker
    /// dropped
    Collect(Vec<u32>, HashMap<u32, Vec<String>>, Sender<Collected>),
}

pub struct Collected {
    pub environments: Vec<(u32, ProcEnvironment)>,
    /// messages about processes the worker had no room for or did not know
    pub lost: u64,
}

struct Tracked {
    env: ProcEnvironment,
    exe: Option<String>,
    cgroup: Option<String>,
    exited: bool,
    /// it runs in tracerd's mount namespace: once it has ended, tracerd's view of a
    /// directory is its
    shared_mounts: bool,
    /// configuration files left out by the bound (libraries left out are counted per look)
    config_dropped: u32,
}

pub struct Worker {
    limits: Limits,
    tracked: HashMap<u32, Tracked>,
    cache: IdentityCache,
    looks: BinaryHeap<Reverse<(Instant, u32)>>,
    cgroup_mount: Option<PathBuf>,
    lost: u64,
}

impl Worker {
    pub fn new(limits: Limits) -> Self {
        Worker {
            limits,
            tracked: HashMap::new(),
            cache: IdentityCache::new(CACHE_VERSIONS),
            looks: BinaryHeap::new(),
            cgroup_mount: crate::cgroup::cgroup2_mount().ok(),
            lost: 0,
        }
    }

    /// Serves `rx` until the recorder is gone.
    pub fn run(mut self, rx: Receiver<Msg>) {
        loop {
            let wait = match self.looks.peek() {
                Some(Reverse((at, _))) => at.saturating_duration_since(Instant::now()),
                None => Duration::from_secs(3600),
            };
            match rx.recv_timeout(wait) {
                Ok(msg) => self.handle(msg),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return,
            }
            while let Some(&Reverse((at, pid))) = self.looks.peek() {
                if at > Instant::now() {
                    break;
                }
                self.looks.pop();
                self.look(pid);
            }
        }
    }

    pub fn handle(&mut self, msg: Msg) {
        match msg {
            Msg::Learn(l) => self.learn(l),
            Msg::Fork { child, parent } => self.fork(child, parent),
            Msg::ConfigOpen { pid, path, after_ns } => self.config_open(pid, &path, after_ns),
            Msg::Exit(pid) => {
                if let Some(t) = self.tracked.get_mut(&pid) {
                    t.exited = true;
                }
            }
            Msg::Collect(pids, touched, reply) => {
                let _ = reply.send(self.collect(&pids, &touched));
            }
        }
    }

    /// Room for one more process: an exited one is forgotten when the table is full.
    fn make_room(&mut self, pid: u32) -> bool {
        if self.tracked.contains_key(&pid) || self.tracked.len() < self.limits.processes {
            return true;
        }
        let gone = self.tracked.iter().find(|(_, t)| t.exited).map(|(&p, _)| p);
        match gone {
            Some(p) => {
                self.tracked.remove(&p);
                true
            }
            None => {
                self.lost += 1;
                false
            }
        }
    }

    fn learn(&mut self, l: Learned) {
        if !self.make_room(l.pid) {
            return;
        }
        let mut t = Tracked {
            env: ProcEnvironment::default(),
            exe: l.exe.clone(),
            cgroup: l.cgroup,
            exited: false,
            shared_mounts: shares_mount_namespace(l.pid),
            config_dropped: 0,
        };
        if let Some(exe) = &l.exe {
            let open = PathBuf::from(format!("/proc/{}/exe", l.pid));
            let fallback = proc_files::in_root_of(l.pid, exe);
            t.env.executable = [open, fallback].iter().find_map(|p| {
                let file = FileRef { shown: exe, open: p };
                self.cache.identify(&file, true, 0).map(|(id, _)| id)
            });
        }
        for (index, path) in proc_files::argument_paths(&l.argv, l.cwd.as_deref()) {
            self.add_config(&mut t, l.pid, &path, "argument", Some(index), 0);
        }
        // its working and data directories, and its root
        let mut dirs: Vec<(String, &str, Option<u32>)> = vec![("/".into(), "root", None)];
        dirs.extend(l.cwd.clone().map(|c| (c, "cwd", None)));
        dirs.extend(
            proc_files::argument_paths(&l.argv, l.cwd.as_deref())
                .into_iter()
                .map(|(i, p)| (p, "argument", Some(i))),
        );
        for (dir, role, argument) in dirs {
            add_storage(&mut t, l.pid, &dir, role, argument);
        }
        self.tracked.insert(l.pid, t);
        // a look now as well: the limits are the exec's, and a process that ends before the
        // first look still shows what the loader had mapped by the time it was learned
        self.look(l.pid);
        let now = Instant::now();
        if !l.running {
            self.looks
                .push(Reverse((now + FIRST_LOOK.min(self.limits.window), l.pid)));
            if self.limits.window > FIRST_LOOK {
                self.looks.push(Reverse((now + self.limits.window, l.pid)));
            }
        }
    }

    fn fork(&mut self, child: u32, parent: u32) {
        let Some(p) = self.tracked.get(&parent) else {
            return;
        };
        let t = Tracked {
            env: p.env.clone(),
            exe: p.exe.clone(),
            cgroup: p.cgroup.clone(),
            exited: false,
            shared_mounts: p.shared_mounts,
            config_dropped: p.config_dropped,
        };
        if self.make_room(child) {
            self.tracked.insert(child, t);
        }
    }

    fn config_open(&mut self, pid: u32, path: &str, after_ns: u64) {
        let Some(mut t) = self.tracked.remove(&pid) else {
            self.lost += 1;
            return;
        };
        self.add_config(&mut t, pid, path, "etc", None, after_ns);
        self.tracked.insert(pid, t);
    }

    /// Records `path` as a configuration file of `t` if it is a regular file not recorded yet.
    fn add_config(
        &mut self,
        t: &mut Tracked,
        pid: u32,
        path: &str,
        source: &str,
        argument: Option<u32>,
        after_ns: u64,
    ) {
        if t.env.config_files.iter().any(|c| c.file.path == path) {
            return;
        }
        let open = proc_files::in_root_of(pid, path);
        let file = FileRef {
            shown: path,
            open: &open,
        };
        let Some((identity, head)) = self.cache.identify(&file, false, self.limits.capture) else {
            return;
        };
        if t.env.config_files.len() + t.env.libraries.len() >= self.limits.files {
            // configuration before libraries: a library an earlier look found makes room
            if t.env.libraries.pop().is_none() {
                t.config_dropped += 1;
                t.env.dropped_files += 1;
                return;
            }
            t.env.dropped_files += 1;
        }
        let (contents, truncated) = contents_of(head, self.limits.capture);
        t.env.config_files.push(ConfigFile {
            file: identity,
            source: source.into(),
            argument,
            opened_after_ns: after_ns,
            contents,
            truncated,
        });
    }

    /// Reads a live process's libraries and limits (again); a process that is gone keeps
    /// what an earlier look found.
    fn look(&mut self, pid: u32) {
        let Some(mut t) = self.tracked.remove(&pid) else {
            return;
        };
        if !t.exited {
            self.look_at(pid, &mut t);
        }
        self.tracked.insert(pid, t);
    }

    fn look_at(&mut self, pid: u32, t: &mut Tracked) {
        let exe = t
            .env
            .executable
            .as_ref()
            .map(|e| e.path.clone())
            .or(t.exe.clone());
        if let Some(paths) = proc_files::libraries(pid, exe.as_deref()) {
            let room = self.limits.files.saturating_sub(t.env.config_files.len());
            let mut libraries: Vec<FileIdentity> = Vec::new();
            let mut dropped = 0u32;
            for path in &paths {
                if libraries.len() >= room {
                    dropped += 1;
                    continue;
                }
                let open = proc_files::in_root_of(pid, path);
                let file = FileRef {
                    shown: path,
                    open: &open,
                };
                match self.cache.identify(&file, true, 0) {
                    Some((id, _)) => libraries.push(id),
                    // gone from disk since it was mapped: recorded by name
                    None => libraries.push(FileIdentity {
                        path: path.clone(),
                        ..Default::default()
                    }),
                }
            }
            t.env.libraries = libraries;
            t.env.dropped_files = t.config_dropped + dropped;
        }
        if let Some(limits) = proc_files::rlimits(pid) {
            t.env.rlimits = limits;
        }
        if t.cgroup.is_none() {
            t.cgroup = crate::cgroup::of_process(pid);
        }
        if let (Some(mount), Some(cgroup)) = (&self.cgroup_mount, &t.cgroup) {
            t.env.cgroup_limits = proc_files::cgroup_limits(mount, cgroup);
        }
    }

    fn collect(&mut self, pids: &[u32], touched: &HashMap<u32, Vec<String>>) -> Collected {
        let wanted: std::collections::HashSet<u32> = pids.iter().copied().collect();
        self.tracked.retain(|pid, _| wanted.contains(pid));
        let mut environments = Vec::with_capacity(pids.len());
        for &pid in pids {
            self.look(pid);
            if let Some(t) = self.tracked.get_mut(&pid) {
                for dir in touched.get(&pid).into_iter().flatten() {
                    add_storage(t, pid, dir, "file", None);
                }
                environments.push((pid, t.env.clone()));
            }
        }
        Collected {
            environments,
            lost: self.lost,
        }
    }
}

/// Records the filesystem of `t`'s directory `dir` (once, within [`MAX_DIRS`]).
fn add_storage(t: &mut Tracked, pid: u32, dir: &str, role: &str, argument: Option<u32>) {
    if t.env.storage.len() >= MAX_DIRS || t.env.storage.iter().any(|d| d.path == dir) {
        return;
    }
    let shared = t.exited && t.shared_mounts;
    if let Some(s) = storage::lookup(pid, dir, role, argument, shared) {
        t.env.storage.push(s);
    }
}

/// Whether `pid` runs in tracerd's own mount namespace.
fn shares_mount_namespace(pid: u32) -> bool {
    let ns = |p: &str| std::fs::read_link(p).ok();
    let own = ns("/proc/self/ns/mnt");
    own.is_some() && ns(&format!("/proc/{pid}/ns/mnt")) == own
}

/// The contents to record from the first bytes read (at most `capture` + 1): text only (a
/// binary file such as /etc/ld.so.cache keeps its hash alone), cut at `capture`.
fn contents_of(mut head: Vec<u8>, capture: u64) -> (Option<String>, bool) {
    if capture == 0 || head.contains(&0) {
        return (None, false);
    }
    let truncated = head.len() as u64 > capture;
    head.truncate(capture as usize);
    let text = match String::from_utf8(head) {
        Ok(s) => s,
        // cut inside a character, or not UTF-8: keep what decodes
        Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
    };
    (Some(text), truncated)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(files: usize, capture: u64) -> Limits {
        Limits {
            files,
            capture,
            window: Duration::from_secs(5),
            processes: 2,
        }
    }

    #[test]
    fn contents_are_text_and_bounded() {
        assert_eq!(contents_of(b"a b\n".to_vec(), 0), (None, false));
        assert_eq!(contents_of(b"a\0b".to_vec(), 64), (None, false));
        assert_eq!(contents_of(b"abcde".to_vec(), 4), (Some("abcd".into()), true));
        assert_eq!(contents_of(b"abcd".to_vec(), 4), (Some("abcd".into()), false));
    }

    /// This test's own process: its argument files, the /etc file it "opened", a fork that
    /// inherits them, the bounds, and the table's room.
    #[test]
    fn a_process_is_learned_forked_and_collected() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("app.conf"), "port 7000\n").unwrap();
        let pid = std::process::id();
        let mut w = Worker::new(limits(3, 64));
        w.handle(Msg::Learn(Learned {
            pid,
            exe: std::env::current_exe().ok().map(|p| p.display().to_string()),
            argv: vec!["app".into(), "app.conf".into(), "missing.conf".into()],
            cwd: Some(dir.path().display().to_string()),
            cgroup: None,
            running: false,
        }));
        let etc = dir.path().join("hosts").display().to_string();
        std::fs::write(&etc, "127.0.0.1 localhost\n").unwrap();
        w.handle(Msg::ConfigOpen {
            pid,
            path: etc.clone(),
            after_ns: 42,
        });
        w.handle(Msg::ConfigOpen {
            pid,
            path: etc.clone(),
            after_ns: 43,
        });
        w.handle(Msg::Fork {
            child: pid + 1,
            parent: pid,
        });
        w.handle(Msg::Exit(pid + 1));
        let got = w.collect(&[pid, pid + 1], &HashMap::new());
        assert_eq!(got.environments.len(), 2);
        let env = &got.environments[0].1;
        assert!(env
            .executable
            .as_ref()
            .and_then(|e| e.build_id.as_ref())
            .is_some());
        assert_eq!(env.config_files.len(), 2, "{:?}", env.config_files);
        let arg = &env.config_files[0];
        assert_eq!((arg.source.as_str(), arg.argument), ("argument", Some(1)));
        assert_eq!(arg.contents.as_deref(), Some("port 7000\n"));
        let opened = &env.config_files[1];
        assert_eq!((opened.source.as_str(), opened.opened_after_ns), ("etc", 42));
        // three files at most: one library fits beside the two configuration files
        assert_eq!(env.libraries.len(), 1);
        assert!(
            env.dropped_files >= 1,
            "the test binary maps libc, ld.so and more"
        );
        assert!(env.rlimits.iter().any(|r| r.resource == "Max open files"));
        // where it keeps its files: its root and its working directory
        let cwd = dir.path().display().to_string();
        assert!(
            env.storage.iter().any(|d| d.role == "root" && d.path == "/"),
            "{:?}",
            env.storage
        );
        assert!(
            env.storage.iter().any(|d| d.role == "cwd" && d.path == cwd),
            "{:?}",
            env.storage
        );
        assert_eq!(got.environments[1].1.config_files, env.config_files);
        // the directory of a file its recorded events named, looked up when a dump is taken
        let sub = dir.path().join("data");
        std::fs::create_dir(&sub).unwrap();
        let sub = sub.display().to_string();
        let touched: HashMap<u32, Vec<String>> = [(pid, vec![sub.clone(), sub.clone()])].into();
        let again = w.collect(&[pid, pid + 1], &touched);
        let files: Vec<&str> = again.environments[0]
            .1
            .storage
            .iter()
            .filter(|d| d.role == "file")
            .map(|d| d.path.as_str())
            .collect();
        assert_eq!(files, [sub.as_str()]);
        // full: a third process finds room only in place of the exited child
        w.handle(Msg::Fork {
            child: pid + 2,
            parent: pid,
        });
        assert!(w.tracked.contains_key(&(pid + 2)) && !w.tracked.contains_key(&(pid + 1)));
        w.handle(Msg::Fork {
            child: pid + 3,
            parent: pid,
        });
        w.handle(Msg::ConfigOpen {
            pid: 1,
            path: etc,
            after_ns: 0,
        });
        assert_eq!(w.collect(&[pid], &HashMap::new()).lost, 2);
    }
}
