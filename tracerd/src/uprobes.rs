//! Function uprobes: which links hold which functions, attaching them, and detaching the
//! functions a counting run finds called too often.
//!
//! Functions are attached with uprobe-multi links on kernels that have them (probed before
//! loading, see `kernel`), else one link per function. A binary's functions, in offset
//! order, are split over links of at most [`MULTI_LINK_FUNCTIONS`] each (one fd and one
//! kernel pass per link, and a detach that re-creates only the link holding the function).
//! A multi link the kernel refuses is split in halves until the parts are accepted; names
//! that do not resolve to one offset, and single functions no multi link took, get a link
//! of their own. The calls of every function are counted in the kernel either way.
//!
//! A function list names binaries by their path on the host (`/usr/bin/etcd:SYMBOL`, as
//! `reproducer profile` writes it), but a target in a container runs its image's copy, another
//! file at the same path in its own mount namespace. Each target's copy is found in its
//! mount namespace (at start and at each exec of a target; `mountns`: on an overlay, the
//! image layer's file) and probed too, with the function ids of the list, so its calls are
//! recorded under the list's names. A file (device, inode) is probed once: two containers of
//! one image run one layer file, and a second link on it would record every call twice. A
//! list binary found nowhere, neither on the host nor in a target's file system, is
//! unmatched: counted and named (`tracerd status`, the metrics), not silent.
//!
//! A reload changes the list (`relist`): the functions it adds are attached under new ids
//! appended to the table, those it drops are detached and keep their id and entry, so every
//! event in the window still names its function. The call counters are sized at start with
//! room for the additions (see [`counter_entries`]).
//!
//! With a call limit (`detach_functions_after_calls`, for profiles), a function counted that
//! often is no infrequent function whatever it does later, and a trap per call is what a
//! uprobe costs: its link is replaced by one without it, and its count so far stays in the
//! map. A server with thousands of functions so runs at near full speed after its hot
//! functions have shown themselves.
use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use libbpf_rs::{Link, ProgramMut as Program, UprobeMultiOpts, UprobeOpts};

use tracedump::elf;

use crate::config::{FunctionSpec, MAX_FUNCTIONS};

mod relist;
pub use relist::{Relist, Relisted};

/// How often the counts are read for functions past the call limit.
const DETACH_CHECK_EVERY: Duration = Duration::from_millis(250);

/// Most functions one uprobe-multi link holds. Creating or dropping a link costs the kernel
/// one uprobe (un)registration per offset, each walking the processes that map the binary,
/// and a detach re-creates the whole link without the hot function: with one link per
/// binary, Redis's 3,253 functions were re-registered at every look that found a new hot
/// function (31 looks in one run of RabbitMQ's beam.smp). 256 makes that re-creation about
/// a thirteenth of such a link's, while a binary of 3,000-odd functions still needs only a
/// dozen links (fds). Smaller would not pay: measured on Redis under load, re-creating costs
/// about 0.06 ms per function, while releasing a link waits for the kernel's uprobe grace
/// period (60-170 ms); a look's releases share one wait (see [`drop_together`]), but links
/// of a few functions would be many threads per look and many waits when a run ends.
pub const MULTI_LINK_FUNCTIONS: usize = 256;

/// Entries of the call counters beyond the list at start, at least: what reloads may add.
const ROOM_TO_GROW: usize = 1024;

/// Entries of the per-CPU call counter map (sized before the programs load, so fixed) for a
/// list of `functions` at start: the list twice over, at least [`ROOM_TO_GROW`] more, at most
/// [`MAX_FUNCTIONS`]. A reload that swaps a list for another of its size (a new profile of
/// the same server) needs both, since a dropped function keeps its id; each entry costs 8
/// bytes per CPU (1,024 on 64 CPUs: 512 KiB). A reload past it needs a restart.
pub fn counter_entries(functions: usize) -> usize {
    (functions + functions.max(ROOM_TO_GROW)).min(MAX_FUNCTIONS)
}

/// The two programs a function's call can run (`function_hit`, `function_hit_multi`).
pub struct HitPrograms<'a, 'obj> {
    pub single: &'a Program<'obj>,
    pub multi: &'a Program<'obj>,
}

/// One link and the functions it probes: (function id, file offset when resolved).
struct ProbeLink {
    _link: Link,
    binary: PathBuf,
    functions: Vec<(usize, Option<usize>)>,
}

/// One file as the kernel's uprobes see it: its device and inode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct FileKey(u64, u64);

impl FileKey {
    fn of(md: &std::fs::Metadata) -> FileKey {
        FileKey(md.dev(), md.ino())
    }
}

/// A binary of the function list: its path as the list names it, its functions on the list
/// now, whether a file at that path was found on the host or in a target's file system, and
/// the files its functions are probed on (each once: two containers of one image run one
/// layer file, and a second link on it would record every call twice).
#[derive(Clone)]
struct ListBinary {
    path: PathBuf,
    ids: Vec<usize>,
    found: bool,
    files: Vec<(FileKey, PathBuf)>,
}

impl ListBinary {
    fn new(path: PathBuf, ids: Vec<usize>) -> ListBinary {
        ListBinary {
            path,
            ids,
            found: false,
            files: Vec::new(),
        }
    }

    fn probes(&self, key: FileKey) -> bool {
        self.files.iter().any(|(k, _)| *k == key)
    }
}

pub struct Uprobes {
    /// every function listed since start, by id (a reload appends, never renumbers)
    functions: Vec<FunctionSpec>,
    binaries: Vec<ListBinary>,
    /// ids a reload took off the list (counted up to then, no longer probed)
    removed: Vec<usize>,
    /// entries of the call counter map: the most ids there can be
    capacity: usize,
    /// the kernel has uprobe-multi links
    multi: bool,
    links: Vec<ProbeLink>,
    attach_failed: u64,
    /// function ids whose uprobe could not be attached (tolerated)
    unattached: Vec<usize>,
    /// function ids detached after reaching the call limit, in the order they were
    detached: Vec<usize>,
    /// detach a function counted this often; 0 = never
    call_limit: u64,
    last_check: Instant,
}

impl Uprobes {
    /// The list `functions` (ids 0..), with call counters for `capacity` ids (see
    /// [`counter_entries`]).
    pub fn new(functions: Vec<FunctionSpec>, capacity: usize, multi: bool, call_limit: u64) -> Uprobes {
        let mut by_binary: BTreeMap<PathBuf, Vec<usize>> = BTreeMap::new();
        for (id, f) in functions.iter().enumerate() {
            by_binary.entry(f.binary.clone()).or_default().push(id);
        }
        let binaries = by_binary
            .into_iter()
            .map(|(path, ids)| ListBinary::new(path, ids))
            .collect();
        Uprobes {
            functions,
            binaries,
            removed: Vec::new(),
            capacity,
            multi,
            links: Vec::new(),
            attach_failed: 0,
            unattached: Vec::new(),
            detached: Vec::new(),
            call_limit,
            last_check: Instant::now(),
        }
    }

    /// Uprobe targets, indexed by function id: every function listed since start.
    pub fn functions(&self) -> &[FunctionSpec] {
        &self.functions
    }

    /// Functions on the list now.
    pub fn listed(&self) -> usize {
        self.binaries.iter().map(|b| b.ids.len()).sum()
    }

    /// Function ids a reload took off the list.
    pub fn removed(&self) -> &[usize] {
        &self.removed
    }

    pub fn attach_failed(&self) -> u64 {
        self.attach_failed
    }

    /// Function ids whose uprobe could not be attached (their calls are never counted).
    pub fn unattached(&self) -> &[usize] {
        &self.unattached
    }

    /// Function ids detached at the call limit (counted up to then).
    pub fn detached(&self) -> &[usize] {
        &self.detached
    }

    /// List entries ("BINARY:SYMBOL") whose binary was found nowhere so far.
    pub fn unmatched(&self) -> Vec<String> {
        self.binaries
            .iter()
            .filter(|b| !b.found)
            .flat_map(|b| b.ids.iter())
            .map(|&id| {
                format!(
                    "{}:{}",
                    self.functions[id].binary.display(),
                    self.functions[id].symbol
                )
            })
            .collect()
    }

    /// Probes the list's binaries as the process `pid` sees them (in its mount namespace)
    /// where that is a file not probed yet; returns how many files it probed. A process gone
    /// already is skipped.
    pub fn attach_in_root_of(&mut self, progs: &HitPrograms, pid: u32) -> Result<usize> {
        let root = PathBuf::from(format!("/proc/{pid}/root"));
        let mut probed = 0;
        for i in 0..self.binaries.len() {
            let Some(path) = in_root(&root, &self.binaries[i].path) else {
                continue;
            };
            let Some(file) = crate::mountns::host_file(pid, &path) else {
                continue;
            };
            let Ok(md) = std::fs::metadata(&file) else {
                continue;
            };
            self.binaries[i].found = true;
            let key = FileKey::of(&md);
            if !md.is_file() || self.binaries[i].probes(key) {
                continue;
            }
            self.binaries[i].files.push((key, file.clone()));
            let ids = self.binaries[i].ids.clone();
            // a copy without the function (another build) is counted, not fatal
            self.attach_on(progs, &file, &ids, true)?;
            log::info!(
                "functions of {} probed in the mount namespace of process {pid} too: {}",
                self.binaries[i].path.display(),
                file.display()
            );
            probed += 1;
        }
        Ok(probed)
    }

    /// Attaches every function on the host's files: one multi link per binary, else (or when
    /// that fails) one link per function. A function that cannot be attached is an error, or
    /// with `tolerate` is counted and skipped. A binary the host does not have waits for a
    /// target's file system (`attach_in_root_of`).
    pub fn attach_all(&mut self, progs: &HitPrograms, tolerate: bool) -> Result<()> {
        // one fd per function without multi links; beside them the fexit path alone holds
        // ~300 (a program and a link per syscall), the maps and ring buffers more. Only
        // then: the testbed's nodes inherit the limit of the process that spawns them.
        if !self.multi {
            raise_fd_limit(self.functions.len() as u64 + 4096);
        }
        for i in 0..self.binaries.len() {
            self.attach_on_host(progs, i, tolerate)?;
        }
        if self.attach_failed > 0 {
            log::warn!(
                "{} of {} functions could not be probed; their calls are not counted (unattached_functions in the dump)",
                self.attach_failed,
                self.functions.len()
            );
        }
        Ok(())
    }

    /// Attaches the functions of list binary `i` on the host's file at its path, which it
    /// remembers as probed. A binary the host does not have waits for a target's file system.
    fn attach_on_host(&mut self, progs: &HitPrograms, i: usize, tolerate: bool) -> Result<()> {
        let binary = self.binaries[i].path.clone();
        let md = match std::fs::metadata(&binary) {
            Ok(md) => md,
            Err(e) => {
                log::warn!(
                    "functions of {}: {e} on the host; probed where a target's file system has it",
                    binary.display()
                );
                return Ok(());
            }
        };
        self.binaries[i].found = true;
        self.binaries[i].files.push((FileKey::of(&md), binary.clone()));
        let ids = self.binaries[i].ids.clone();
        self.attach_on(progs, &binary, &ids, tolerate)
    }

    /// Attaches functions `ids` on `file` (a list binary's file on the host or a target's copy
    /// of it), at the offsets found in that file.
    fn attach_on(&mut self, progs: &HitPrograms, file: &Path, ids: &[usize], tolerate: bool) -> Result<()> {
        // our own resolution also knows Go's table, which libbpf's name lookup does not
        let offsets = elf::function_offsets(file).unwrap_or_else(|e| {
            log::debug!(
                "resolving functions of {}: {e:#}; libbpf looks them up",
                file.display()
            );
            Default::default()
        });
        let resolved = ids
            .iter()
            .map(|&id| (id, offsets.get(&self.functions[id].symbol).map(|&o| o as usize)))
            .collect::<Vec<_>>();
        self.attach(progs, file, &resolved, tolerate)
    }

    /// Links `functions` of `binary`: those with an offset on multi links of at most
    /// [`MULTI_LINK_FUNCTIONS`] neighbours (split when refused), the rest one by one.
    fn attach(
        &mut self,
        progs: &HitPrograms,
        binary: &Path,
        functions: &[(usize, Option<usize>)],
        tolerate: bool,
    ) -> Result<()> {
        let (found, mut rest): (Vec<_>, Vec<_>) = functions.iter().partition(|(_, o)| o.is_some());
        if found.len() > 1 && self.multi {
            let mut found: Vec<(usize, usize)> = found.iter().filter_map(|&(id, o)| Some((id, o?))).collect();
            // neighbours in the binary (one source file, one subsystem) tend to turn hot
            // together, so one look's detaches touch fewer links
            found.sort_unstable_by_key(|&(_, offset)| offset);
            for part in balanced_parts(&found, MULTI_LINK_FUNCTIONS) {
                let left = self.attach_multi_split(progs.multi, binary, part);
                rest.extend(left.into_iter().map(|(id, o)| (id, Some(o))));
            }
        } else {
            rest.extend(found);
        }
        for (id, offset) in rest {
            self.attach_one(progs.single, binary, id, tolerate, offset)?;
        }
        Ok(())
    }

    /// Links `found` (id, offset) with one uprobe-multi link, or, when the kernel refuses
    /// it (one offset it cannot probe fails the whole link), each half on its own, down to
    /// single functions; returns those that no multi link took.
    fn attach_multi_split(
        &mut self,
        prog: &Program,
        binary: &Path,
        found: &[(usize, usize)],
    ) -> Vec<(usize, usize)> {
        if found.len() < 2 {
            return found.to_vec();
        }
        let opts = UprobeMultiOpts {
            offsets: found.iter().map(|&(_, offset)| offset).collect(),
            cookies: found.iter().map(|&(id, _)| id as u64).collect(),
            ..Default::default()
        };
        match prog.attach_uprobe_multi_with_opts(-1, binary, "", opts) {
            Ok(link) => {
                self.links.push(ProbeLink {
                    _link: link,
                    binary: binary.to_path_buf(),
                    functions: found.iter().map(|&(id, o)| (id, Some(o))).collect(),
                });
                Vec::new()
            }
            Err(e) => {
                log::debug!(
                    "uprobe-multi on {} ({} functions) failed ({e:#}); splitting",
                    binary.display(),
                    found.len()
                );
                let (a, b) = found.split_at(found.len() / 2);
                let mut rest = self.attach_multi_split(prog, binary, a);
                rest.extend(self.attach_multi_split(prog, binary, b));
                rest
            }
        }
    }

    /// Attaches function `id` in `binary` (the list's file, or a target's copy of it) at its
    /// resolved file `offset`, or by name through libbpf.
    fn attach_one(
        &mut self,
        prog: &Program,
        binary: &Path,
        id: usize,
        tolerate: bool,
        offset: Option<usize>,
    ) -> Result<()> {
        let f = &self.functions[id];
        let opts = UprobeOpts {
            cookie: id as u64,
            func_name: offset.is_none().then(|| f.symbol.clone()),
            ..Default::default()
        };
        match prog.attach_uprobe_with_opts(-1, binary, offset.unwrap_or(0), opts) {
            Ok(link) => self.links.push(ProbeLink {
                _link: link,
                binary: binary.to_path_buf(),
                functions: vec![(id, offset)],
            }),
            Err(e) if tolerate => {
                log::debug!("uprobe {}:{}: cannot attach ({e}); counted", f.binary.display(), f.symbol);
                self.attach_failed += 1;
                self.unattached.push(id);
            }
            Err(e) if offset.is_some() => bail!("uprobe {}:{}: cannot attach ({e})", f.binary.display(), f.symbol),
            Err(e) => bail!(
                "uprobe {}:{}: cannot attach ({e}); no function of that name in the binary's .symtab, .dynsym or Go table (.gopclntab), or it is defined twice",
                f.binary.display(),
                f.symbol
            ),
        }
        Ok(())
    }

    /// Whether the call limit is due for a look (set, and not looked at for a while).
    pub fn detach_due(&self) -> bool {
        self.call_limit > 0 && self.last_check.elapsed() >= DETACH_CHECK_EVERY
    }

    /// Detaches every function whose count (`calls`, by id) reached the call limit: each
    /// link holding any is replaced, once per look however many it holds, by a link of its
    /// other functions; the other links stay. Returns how many were detached now.
    pub fn detach_past_limit(&mut self, progs: &HitPrograms, calls: &[u64]) -> Result<usize> {
        self.last_check = Instant::now();
        let limit = self.call_limit;
        let started = Instant::now();
        let unlinked = self.unlink(progs, |id| calls.get(id).is_some_and(|&c| c >= limit))?;
        let now = unlinked.ids.len();
        self.detached.extend(unlinked.ids);
        if now > 0 {
            log::info!(
                "detached {now} functions called {} times or more ({} in all): {} links dropped in {} ms, re-created with {} functions in {} ms",
                self.call_limit,
                self.detached.len(),
                unlinked.links,
                unlinked.dropped.as_millis(),
                unlinked.relinked,
                (started.elapsed() - unlinked.dropped).as_millis()
            );
        }
        Ok(now)
    }

    /// Takes the functions `gone` says off their links: each link holding any is replaced, once
    /// however many it holds, by a link of its other functions; the other links stay.
    fn unlink(&mut self, progs: &HitPrograms, gone: impl Fn(usize) -> bool) -> Result<Unlinked> {
        let (touched, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut self.links)
            .into_iter()
            .partition(|l| l.functions.iter().any(|&(id, _)| gone(id)));
        self.links = kept;
        let started = Instant::now();
        let mut ids = Vec::new();
        let mut relink = Vec::with_capacity(touched.len());
        for link in &touched {
            let (off, stay): (Vec<_>, Vec<_>) = link.functions.iter().copied().partition(|&(id, _)| gone(id));
            ids.extend(off.iter().map(|&(id, _)| id));
            relink.push((link.binary.clone(), stay));
        }
        let links = touched.len();
        // the old links go first: a call in between is not counted, never counted twice
        drop_together(touched);
        let dropped = started.elapsed();
        let relinked = relink.iter().map(|(_, stay)| stay.len()).sum();
        for (binary, stay) in relink {
            self.attach(progs, &binary, &stay, true)?;
        }
        // a function on several files (a container's copy) was on several links
        ids.sort_unstable();
        ids.dedup();
        Ok(Unlinked {
            ids,
            links,
            relinked,
            dropped,
        })
    }
}

/// What [`Uprobes::unlink`] did: the functions it took off, the links it re-created and with
/// how many functions, and how long dropping the old links took.
struct Unlinked {
    ids: Vec<usize>,
    links: usize,
    relinked: usize,
    dropped: Duration,
}

/// `path` (absolute) as the file system whose root is `root` (`/proc/PID/root`) has it,
/// after a symbolic link at the path itself (resolved within that root: through /proc an
/// absolute target would be the host's); None when there is nothing there.
fn in_root(root: &Path, path: &Path) -> Option<PathBuf> {
    let inside = |p: &Path| root.join(p.strip_prefix("/").unwrap_or(p));
    let md = std::fs::symlink_metadata(inside(path)).ok()?;
    if !md.file_type().is_symlink() {
        return Some(path.to_path_buf());
    }
    let target = std::fs::read_link(inside(path)).ok()?;
    let resolved = match target.is_absolute() {
        true => target,
        false => path.parent()?.join(target),
    };
    std::fs::symlink_metadata(inside(&resolved)).ok()?;
    Some(resolved)
}

/// Most threads [`drop_together`] releases links on.
const DROP_THREADS: usize = 16;

/// Drops `links` at once. Releasing a uprobe link waits for the kernel's uprobe grace period
/// (tens of ms on a loaded machine); one after another, a look that touches k links waits k
/// times, while releases on threads of their own wait for the same grace period.
fn drop_together(links: Vec<ProbeLink>) {
    if links.len() < 2 {
        drop(links);
        return;
    }
    let per_thread = links.len().div_ceil(DROP_THREADS);
    let mut links = links;
    std::thread::scope(|scope| {
        while !links.is_empty() {
            let part: Vec<ProbeLink> = links.drain(..per_thread.min(links.len())).collect();
            // a thread that cannot be started leaves its part to be dropped here (waiting)
            let _ = std::thread::Builder::new()
                .name("uprobe-drop".into())
                .spawn_scoped(scope, move || drop(part));
        }
    });
}

/// `items` in consecutive parts of at most `most` each, as equal in size as can be (so no
/// part is a lone leftover).
fn balanced_parts<T>(items: &[T], most: usize) -> impl Iterator<Item = &[T]> {
    let parts = items.len().div_ceil(most.max(1)).max(1);
    let (size, longer) = (items.len() / parts, items.len() % parts);
    let mut rest = items;
    (0..parts).map(move |i| {
        let (part, after) = rest.split_at(size + usize::from(i < longer));
        rest = after;
        part
    })
}

/// Raises the open-file limit to `wanted` (one fd per uprobe link when the multi link is
/// unavailable): the soft limit, and the hard one too where the process may (root has
/// CAP_SYS_RESOURCE; the guests' and many containers' hard limit is 1024 or 4096).
fn raise_fd_limit(wanted: u64) {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid pointer to a local rlimit.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 || lim.rlim_cur >= wanted {
            return;
        }
        let raised = libc::rlimit {
            rlim_cur: wanted,
            rlim_max: lim.rlim_max.max(wanted),
        };
        if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
            return;
        }
        lim.rlim_cur = lim.rlim_max;
        if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
            log::debug!("could not raise the open-file limit to {}", lim.rlim_cur);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_are_bounded_balanced_and_keep_every_item_in_order() {
        let sizes = |n: usize, most: usize| {
            let items: Vec<usize> = (0..n).collect();
            let parts: Vec<&[usize]> = balanced_parts(&items, most).collect();
            assert_eq!(parts.concat(), items, "n {n}, most {most}");
            parts.iter().map(|p| p.len()).collect::<Vec<_>>()
        };
        assert_eq!(sizes(1000, 256), [250, 250, 250, 250]);
        assert_eq!(sizes(257, 256), [129, 128]);
        assert_eq!(sizes(256, 256), [256]);
        assert_eq!(
            sizes(3253, 256),
            [251, 251, 251, 250, 250, 250, 250, 250, 250, 250, 250, 250, 250]
        );
        assert_eq!(sizes(2, 256), [2]);
        assert_eq!(sizes(0, 256), [0]);
    }

    #[test]
    fn call_counters_have_room_for_reloads_within_the_bound() {
        assert_eq!(counter_entries(0), ROOM_TO_GROW);
        assert_eq!(counter_entries(1), 1 + ROOM_TO_GROW);
        assert_eq!(counter_entries(3253), 2 * 3253);
        assert_eq!(counter_entries(MAX_FUNCTIONS - 10), MAX_FUNCTIONS);
    }
}
