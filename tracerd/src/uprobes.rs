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
//! With a call limit (`detach_functions_after_calls`, for profiles), a function counted that
//! often is no infrequent function whatever it does later, and a trap per call is what a
//! uprobe costs: its link is replaced by one without it, and its count so far stays in the
//! map. A server with thousands of functions so runs at near full speed after its hot
//! functions have shown themselves.
use std::collections::{BTreeMap, HashSet};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use libbpf_rs::{Link, ProgramMut as Program, UprobeMultiOpts, UprobeOpts};

use tracedump::elf;

use crate::config::FunctionSpec;

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

/// A binary of the function list: its path as the list names it, its functions, and whether
/// a file at that path was found on the host or in a target's file system.
struct ListBinary {
    path: PathBuf,
    ids: Vec<usize>,
    found: bool,
}

pub struct Uprobes {
    functions: Vec<FunctionSpec>,
    binaries: Vec<ListBinary>,
    /// the files probed, so that each is probed once
    files: HashSet<FileKey>,
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
    pub fn new(functions: Vec<FunctionSpec>, multi: bool, call_limit: u64) -> Uprobes {
        let mut by_binary: BTreeMap<PathBuf, Vec<usize>> = BTreeMap::new();
        for (id, f) in functions.iter().enumerate() {
            by_binary.entry(f.binary.clone()).or_default().push(id);
        }
        let binaries = by_binary
            .into_iter()
            .map(|(path, ids)| ListBinary {
                path,
                ids,
                found: false,
            })
            .collect();
        Uprobes {
            functions,
            binaries,
            files: HashSet::new(),
            multi,
            links: Vec::new(),
            attach_failed: 0,
            unattached: Vec::new(),
            detached: Vec::new(),
            call_limit,
            last_check: Instant::now(),
        }
    }

    /// Uprobe targets, indexed by function id.
    pub fn functions(&self) -> &[FunctionSpec] {
        &self.functions
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
            if !md.is_file() || !self.files.insert(FileKey::of(&md)) {
                continue;
            }
            let ids = self.binaries[i].ids.clone();
            let offsets = elf::function_offsets(&file).unwrap_or_default();
            let resolved: Vec<(usize, Option<usize>)> = ids
                .iter()
                .map(|&id| (id, offsets.get(&self.functions[id].symbol).map(|&o| o as usize)))
                .collect();
            // a copy without the function (another build) is counted, not fatal
            self.attach(progs, &file, &resolved, true)?;
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
            let (binary, ids) = (self.binaries[i].path.clone(), self.binaries[i].ids.clone());
            match std::fs::metadata(&binary) {
                Ok(md) => {
                    self.binaries[i].found = true;
                    self.files.insert(FileKey::of(&md));
                }
                Err(e) => {
                    log::warn!(
                        "functions of {}: {e} on the host; probed where a target's file system has it",
                        binary.display()
                    );
                    continue;
                }
            }
            // our own resolution also knows Go's table, which libbpf's name lookup does not
            let offsets = elf::function_offsets(&binary).unwrap_or_else(|e| {
                log::debug!(
                    "resolving functions of {}: {e:#}; libbpf looks them up",
                    binary.display()
                );
                Default::default()
            });
            let resolved = ids
                .iter()
                .map(|&id| (id, offsets.get(&self.functions[id].symbol).map(|&o| o as usize)))
                .collect::<Vec<_>>();
            self.attach(progs, &binary, &resolved, tolerate)?;
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
        let hot = |id: usize| calls.get(id).is_some_and(|&c| c >= limit);
        let (touched, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut self.links)
            .into_iter()
            .partition(|l| l.functions.iter().any(|&(id, _)| hot(id)));
        self.links = kept;
        let started = Instant::now();
        let links = touched.len();
        let mut now = 0;
        let mut relink = Vec::with_capacity(links);
        for link in &touched {
            let (gone, stay): (Vec<_>, Vec<_>) = link.functions.iter().copied().partition(|&(id, _)| hot(id));
            now += gone.len();
            self.detached.extend(gone.iter().map(|&(id, _)| id));
            relink.push((link.binary.clone(), stay));
        }
        // the old links go first: a call in between is not counted, never counted twice
        drop_together(touched);
        let dropped = started.elapsed();
        let relinked: usize = relink.iter().map(|(_, stay)| stay.len()).sum();
        for (binary, stay) in relink {
            self.attach(progs, &binary, &stay, true)?;
        }
        if now > 0 {
            log::info!(
                "detached {now} functions called {} times or more ({} in all): {links} links dropped in {} ms, re-created with {relinked} functions in {} ms",
                self.call_limit,
                self.detached.len(),
                dropped.as_millis(),
                (started.elapsed() - dropped).as_millis()
            );
        }
        Ok(now)
    }
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
}
