//! Shared fixtures of the system tests: root check, building the C target programs, a
//! tracerd daemon owned by the test, children and network namespaces that are removed on drop.
//! Beside it: replay.rs (running the reproducer; the reproducer's system tests include it) and
//! read_back.rs (a reader fed damaged bytes with its allocations watched; the property tests
//! include it, as it installs a global allocator).
#![allow(dead_code)]
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

pub fn require_root() {
    assert!(
        nix_is_root(),
        "these tests load BPF programs and must run as root (CI runs them as root; use sudo scripts/test)"
    );
}

fn nix_is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

pub fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Compiles tests/programs/NAME.c once per test process; returns the binary.
pub fn program(name: &str) -> PathBuf {
    static BUILT: OnceLock<Mutex<Vec<(String, PathBuf)>>> = OnceLock::new();
    let built = BUILT.get_or_init(|| Mutex::new(Vec::new()));
    let mut built = built.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, p)) = built.iter().find(|(n, _)| n == name) {
        return p.clone();
    }
    let out_dir = workspace_root().join("target").join("test-programs");
    std::fs::create_dir_all(&out_dir).expect("creating target/test-programs");
    let src = workspace_root()
        .join("tests")
        .join("programs")
        .join(format!("{name}.c"));
    let out = out_dir.join(name);
    let status = Command::new("cc")
        .args(["-O1", "-g", "-o"])
        .arg(&out)
        .arg(&src)
        .status()
        .expect("running cc");
    assert!(status.success(), "compiling {}", src.display());
    built.push((name.to_string(), out.clone()));
    out
}

/// Compiles tests/programs/NAME.c statically (for an image with no libc); returns the binary.
pub fn static_program(name: &str) -> PathBuf {
    let out = workspace_root()
        .join("target/test-programs")
        .join(format!("{name}.static"));
    std::fs::create_dir_all(out.parent().unwrap()).expect("creating target/test-programs");
    let src = workspace_root().join("tests/programs").join(format!("{name}.c"));
    let status = Command::new("cc")
        .args(["-static", "-O1", "-g", "-pthread", "-o"])
        .arg(&out)
        .arg(&src)
        .status()
        .expect("running cc");
    assert!(status.success(), "compiling {} statically", src.display());
    out
}

/// Builds tests/programs/NAME.go once per test process as Debian ships Go servers: a PIE,
/// then stripped (no .symtab; its functions only in .gopclntab). Needs Debian's
/// `golang-go` (scripts/test installs it). Returns the binary.
pub fn go_program(name: &str) -> PathBuf {
    static BUILT: Mutex<Vec<(String, PathBuf)>> = Mutex::new(Vec::new());
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, p)) = built.iter().find(|(n, _)| n == name) {
        return p.clone();
    }
    let out_dir = workspace_root().join("target").join("test-programs");
    std::fs::create_dir_all(&out_dir).expect("creating target/test-programs");
    let src = workspace_root()
        .join("tests")
        .join("programs")
        .join(format!("{name}.go"));
    let unstripped = out_dir.join(format!("{name}.unstripped"));
    let cache = tempfile::tempdir().expect("a Go build cache");
    let out = Command::new("go")
        .args(["build", "-buildmode=pie", "-ldflags=-linkmode=external", "-o"])
        .arg(&unstripped)
        .arg(&src)
        .env("CGO_ENABLED", "1")
        .env("GO111MODULE", "off")
        .env("GOCACHE", cache.path().join("cache"))
        .env("GOPATH", cache.path().join("gopath"))
        .output()
        .expect("running go (Debian package golang-go; scripts/test installs it)");
    assert!(
        out.status.success(),
        "go build {}: {}",
        src.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let bin = out_dir.join(name);
    let status = Command::new("strip")
        .arg("-o")
        .arg(&bin)
        .arg(&unstripped)
        .status()
        .expect("running strip");
    assert!(status.success(), "stripping {}", unstripped.display());
    built.push((name.to_string(), bin.clone()));
    bin
}

pub fn tracerd_bin() -> PathBuf {
    match option_env!("CARGO_BIN_EXE_tracerd") {
        Some(p) => PathBuf::from(p),
        None => workspace_root().join("target/release/tracerd"),
    }
}

/// A tracerd daemon started by a test; stopped (and reaped) on drop.
pub struct Daemon {
    pub child: Child,
    pub dir: tempfile::TempDir,
    pub log: Arc<Mutex<Vec<String>>>,
}

impl Daemon {
    /// Starts `tracerd run` with `args` plus a private dump dir and control socket;
    /// returns once it logged "ready".
    pub fn start(args: &[&str]) -> Daemon {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut cmd = Command::new(tracerd_bin());
        cmd.arg("run")
            .arg("--dump-dir")
            .arg(dir.path().join("dumps"))
            .arg("--control-socket")
            .arg(dir.path().join("control.sock"))
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        Self::spawn(cmd, dir)
    }

    pub fn spawn(mut cmd: Command, dir: tempfile::TempDir) -> Daemon {
        let mut child = cmd.spawn().expect("spawning tracerd");
        let log = Arc::new(Mutex::new(Vec::new()));
        let stderr = child.stderr.take().expect("piped stderr");
        let sink = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                sink.lock().unwrap_or_else(|e| e.into_inner()).push(line);
            }
        });
        let d = Daemon { child, dir, log };
        // loading 129 fexit programs takes ~20 s in an emulated guest of the kernel matrix
        d.wait_for_log("ready", Duration::from_secs(120));
        d
    }

    pub fn log_text(&self) -> String {
        self.log.lock().unwrap_or_else(|e| e.into_inner()).join("\n")
    }

    pub fn wait_for_log(&self, needle: &str, timeout: Duration) {
        let start = Instant::now();
        while start.elapsed() < timeout {
            if self.log_text().contains(needle) {
                return;
            }
            if let Ok(Some(status)) = self.child_status() {
                panic!(
                    "tracerd exited ({status}) before logging '{needle}':\n{}",
                    self.log_text()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!(
            "tracerd did not log '{needle}' within {timeout:?}:\n{}",
            self.log_text()
        );
    }

    fn child_status(&self) -> std::io::Result<Option<std::process::ExitStatus>> {
        // try_wait needs &mut; peek through /proc instead to keep &self
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.child.id())).unwrap_or_default();
        if stat.is_empty() || stat.contains(") Z ") {
            return Ok(Some(std::os::unix::process::ExitStatusExt::from_raw(0)));
        }
        Ok(None)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn socket(&self) -> PathBuf {
        self.dir.path().join("control.sock")
    }

    pub fn dump_dir(&self) -> PathBuf {
        self.dir.path().join("dumps")
    }

    /// `tracerd dump`; returns the path it printed.
    /// Asks the daemon for a dump; a daemon that does not answer within 5 minutes (an
    /// emulated guest is slow, not that slow) fails the test with its log.
    pub fn dump(&self) -> PathBuf {
        let mut child = Command::new(tracerd_bin())
            .arg("dump")
            .arg("--control-socket")
            .arg(self.socket())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("running tracerd dump");
        let start = Instant::now();
        while child.try_wait().expect("waiting for tracerd dump").is_none() {
            if start.elapsed() > Duration::from_secs(300) {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "tracerd dump got no answer in 300 s; the daemon's log:\n{}",
                    self.log_text()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let out = child.wait_with_output().expect("tracerd dump's output");
        assert!(
            out.status.success(),
            "tracerd dump failed: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            self.log_text()
        );
        PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
    }

    pub fn signal(&self, sig: i32) {
        // SAFETY: plain kill(2) on our own child.
        unsafe { libc::kill(self.child.id() as i32, sig) };
    }

    /// Resident set size of the daemon, in KiB.
    pub fn rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap_or_default();
        status
            .lines()
            .find(|l| l.starts_with("VmRSS:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    }

    pub fn is_alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// SIGTERM and wait; returns the exit status.
    pub fn stop(&mut self) -> std::process::ExitStatus {
        self.signal(libc::SIGTERM);
        let start = Instant::now();
        loop {
            if let Ok(Some(s)) = self.child.try_wait() {
                return s;
            }
            if start.elapsed() > Duration::from_secs(20) {
                let _ = self.child.kill();
                return self.child.wait().expect("reaping tracerd");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.stop();
        }
    }
}

/// Dumps in the daemon's dump directory, in the order they were written.
pub fn dumps_in(d: &Daemon) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(d.dump_dir())
        .map(|r| {
            r.filter_map(|e| Some(e.ok()?.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "tdump"))
                .collect()
        })
        .unwrap_or_default();
    let seq = |p: &PathBuf| -> u64 {
        p.file_stem()
            .unwrap()
            .to_string_lossy()
            .rsplit('-')
            .next()
            .unwrap()
            .parse()
            .unwrap()
    };
    files.sort_by_key(seq);
    files
}

/// Waits until the daemon has written `n` dumps; returns them.
pub fn wait_for_dumps(d: &Daemon, n: usize, timeout: Duration) -> Vec<PathBuf> {
    let start = std::time::Instant::now();
    loop {
        let files = dumps_in(d);
        if files.len() >= n {
            return files;
        }
        assert!(
            start.elapsed() < timeout,
            "{} of {n} dumps after {timeout:?}:\n{}",
            files.len(),
            d.log_text()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A child killed (SIGKILL) and reaped on drop, whatever the test's outcome.
pub struct Reaped(pub Child);

impl Reaped {
    pub fn pid(&self) -> i32 {
        self.0.id() as i32
    }

    pub fn signal(&self, sig: i32) {
        // SAFETY: kill(2) on our own child.
        unsafe { libc::kill(self.pid(), sig) };
    }
}

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs a command to completion, asserting success; returns stdout.
pub fn run_ok(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("running {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `tracerd inspect --json FILE`, parsed.
pub fn inspect_json(path: &Path) -> Vec<serde_json::Value> {
    let out = run_ok(Command::new(tracerd_bin()).arg("inspect").arg("--json").arg(path));
    out.lines()
        .map(|l| serde_json::from_str(l).expect("inspect --json prints JSON lines"))
        .collect()
}

pub fn inspect_meta(path: &Path) -> serde_json::Value {
    let out = run_ok(Command::new(tracerd_bin()).arg("inspect").arg("--meta").arg(path));
    serde_json::from_str(&out).expect("inspect --meta prints JSON")
}

/// Runs tracerd with `args`, which must fail with one line and no panic; returns that line.
pub fn tracerd_fails(args: &[&str]) -> String {
    let out = Command::new(tracerd_bin()).args(args).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(!out.status.success(), "tracerd {args:?} should fail");
    assert!(!err.contains("panicked"), "no panic: {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
    err
}

/// Two network namespaces joined by a veth pair, 10.231.N.1 and 10.231.N.2 (and fd00:231:N::1 and
/// ::2); removed on drop.
pub struct NetnsPair {
    pub a: String,
    pub b: String,
    pub addr_a: String,
    pub addr_b: String,
    /// IPv6 addresses beside the IPv4 ones (one /64)
    pub addr6_a: String,
    pub addr6_b: String,
    /// the veth ends in a and b
    pub dev_a: String,
    pub dev_b: String,
}

impl NetnsPair {
    pub fn new(tag: &str) -> NetnsPair {
        let id = std::process::id() % 200 + 20;
        let a = format!("trd{tag}a{}", std::process::id());
        let b = format!("trd{tag}b{}", std::process::id());
        let pair = NetnsPair {
            a: a.clone(),
            b: b.clone(),
            addr_a: format!("10.231.{id}.1"),
            addr_b: format!("10.231.{id}.2"),
            addr6_a: format!("fd00:231:{id}::1"),
            addr6_b: format!("fd00:231:{id}::2"),
            dev_a: format!("v{}a", std::process::id()),
            dev_b: format!("v{}b", std::process::id()),
        };
        let ip = |args: &[&str]| run_ok(Command::new("ip").args(args));
        ip(&["netns", "add", &a]);
        ip(&["netns", "add", &b]);
        let (va, vb) = (pair.dev_a.clone(), pair.dev_b.clone());
        ip(&[
            "link", "add", &va, "netns", &a, "type", "veth", "peer", "name", &vb, "netns", &b,
        ]);
        ip(&[
            "-n",
            &a,
            "addr",
            "add",
            &format!("{}/24", pair.addr_a),
            "dev",
            &va,
        ]);
        ip(&[
            "-n",
            &b,
            "addr",
            "add",
            &format!("{}/24", pair.addr_b),
            "dev",
            &vb,
        ]);
        // nodad: usable at once, not after duplicate address detection
        for (ns, dev, addr) in [(&a, &va, &pair.addr6_a), (&b, &vb, &pair.addr6_b)] {
            ip(&[
                "-n",
                ns,
                "addr",
                "add",
                &format!("{addr}/64"),
                "dev",
                dev,
                "nodad",
            ]);
        }
        for (ns, dev) in [(&a, &va), (&b, &vb)] {
            ip(&["-n", ns, "link", "set", dev, "up"]);
            ip(&["-n", ns, "link", "set", "lo", "up"]);
        }
        pair
    }

    pub fn exec(&self, ns: &str, program: &Path) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", ns]).arg(program);
        c
    }
}

impl Drop for NetnsPair {
    fn drop(&mut self) {
        for ns in [&self.a, &self.b] {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
    }
}

/// Events of `kind` from `pid`.
pub fn events_of<'a>(events: &'a [serde_json::Value], kind: &str, pid: u32) -> Vec<&'a serde_json::Value> {
    events
        .iter()
        .filter(|e| e["kind"] == kind && e["pid"] == pid)
        .collect()
}

/// Failed calls of `pid` on `path` (a process's loader fails opens of its own too).
pub fn failures_on<'a>(events: &'a [serde_json::Value], pid: u32, path: &str) -> Vec<&'a serde_json::Value> {
    events
        .iter()
        .filter(|e| e["kind"] == "syscall_failure" && e["pid"] == pid && e["path"] == path)
        .collect()
}

/// The one value of `v`, a `what`; asserts there is exactly one.
pub fn only<'a>(v: Vec<&'a serde_json::Value>, what: &str) -> &'a serde_json::Value {
    assert_eq!(v.len(), 1, "expected exactly one {what}, got {v:#?}");
    v[0]
}

/// A copy of tests/programs/NAME.c's binary named `alias` (its comm).
pub fn program_as(name: &str, alias: &str) -> PathBuf {
    let src = program(name);
    let dst = src.with_file_name(alias);
    std::fs::copy(&src, &dst).expect("copying a test program");
    dst
}

/// A copy of eventgen whose file name (and so comm) is `alias`.
pub fn eventgen_as(alias: &str) -> PathBuf {
    let src = program("eventgen");
    let dst = src.with_file_name(alias);
    std::fs::copy(&src, &dst).expect("copying eventgen");
    dst
}

/// Runs `prog` to completion (stderr discarded), asserts it succeeded, returns its pid.
pub fn run_prog(prog: &Path, args: &[&str]) -> u32 {
    let mut child = Command::new(prog)
        .args(args)
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    let pid = child.id();
    let status = child.wait().expect("wait");
    assert!(status.success(), "{} {args:?} failed: {status}", prog.display());
    pid
}

/// Runs `prog args` to its end; returns its pid.
pub fn run_to_end(prog: &Path, args: &[&str]) -> u32 {
    let mut child = Command::new(prog)
        .args(args)
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    let pid = child.id();
    let _ = child.wait();
    pid
}

/// The Python that has Perfetto's package (scripts/test installs it), or $PERFETTO_PYTHON.
pub fn perfetto_python() -> PathBuf {
    let python = std::env::var_os("PERFETTO_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target/perfetto-venv/bin/python3"));
    assert!(
        python.exists(),
        "{} is missing: scripts/test installs Perfetto's Python package (the independent decoder) there; or set PERFETTO_PYTHON",
        python.display()
    );
    python
}

/// `trace` as Perfetto's schema reads it; every field must be one the schema knows.
pub fn perfetto_decode(trace: &Path) -> serde_json::Value {
    let script = workspace_root().join("tests/programs/perfetto_decode.py");
    let out = run_ok(Command::new(perfetto_python()).arg(script).arg(trace));
    let v: serde_json::Value = serde_json::from_str(&out).expect("the decoder prints JSON");
    assert_eq!(
        v["unknown_fields"],
        serde_json::json!([]),
        "every field written is in Perfetto's schema"
    );
    v
}

/// A tmpfs mounted for a test with `options` (a size, `sync`, a mode), on a directory of its
/// own or on one the test gives; unmounted when dropped.
pub struct Tmpfs {
    dir: PathBuf,
    _owned: Option<tempfile::TempDir>,
}

impl Tmpfs {
    pub fn mount(options: &str) -> Tmpfs {
        let owned = tempfile::tempdir().unwrap();
        let mut fs = Tmpfs::mount_on(owned.path(), options);
        fs._owned = Some(owned);
        fs
    }

    pub fn mount_on(dir: &Path, options: &str) -> Tmpfs {
        run_ok(
            Command::new("mount")
                .args(["-t", "tmpfs", "-o", options, "tmpfs"])
                .arg(dir),
        );
        Tmpfs {
            dir: dir.to_path_buf(),
            _owned: None,
        }
    }

    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// Fills it to the last byte with a file named `filler`.
    pub fn fill(&self) {
        use std::io::Write;
        let mut f = std::fs::File::create(self.dir.join("filler")).unwrap();
        let block = vec![0u8; 4096];
        while f.write_all(&block).is_ok() {}
        let _ = f.sync_all();
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
    }
}
