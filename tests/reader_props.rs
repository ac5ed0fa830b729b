//! Property tests of every reader of a file a user hands over: tracerd dumps, scenarios,
//! schedules and profiles. Random bytes, truncations and single flipped bytes (for dumps,
//! inside the zstd frame and after it) must give an error naming the file, never a panic,
//! and never an allocation beyond a bound set by the file (for dumps: the decoder's largest
//! window, 8 MiB, plus a multiple of the file's length).
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::path::{Path, PathBuf};

use proptest::prelude::*;

/// Tracks the largest single allocation made on this thread while armed.
struct Watching;

thread_local! {
    static ARMED: Cell<bool> = const { Cell::new(false) };
    static LARGEST: Cell<usize> = const { Cell::new(0) };
}

fn note(size: usize) {
    // try_with: the thread-locals may be gone while a thread is torn down
    let _ = ARMED.try_with(|armed| {
        if armed.get() {
            let _ = LARGEST.try_with(|l| l.set(l.get().max(size)));
        }
    });
}

// SAFETY: forwards to the system allocator; only records sizes.
unsafe impl GlobalAlloc for Watching {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Watching = Watching;

/// Runs `read` on `bytes` written to a file; returns its error text (or None when it read
/// fine) and the largest allocation it made. A panic fails the property.
fn read_back<T>(
    bytes: &[u8],
    name: &str,
    read: impl Fn(&Path) -> anyhow::Result<T>,
) -> (Option<String>, usize) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(name);
    std::fs::write(&path, bytes).unwrap();
    LARGEST.with(|l| l.set(0));
    ARMED.with(|a| a.set(true));
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| read(&path)));
    ARMED.with(|a| a.set(false));
    let largest = LARGEST.with(|l| l.get());
    match result {
        Ok(Ok(_)) => (None, largest),
        Ok(Err(e)) => (Some(format!("{e:#}")), largest),
        Err(_) => panic!("reading {} panicked", path.display()),
    }
}

const WINDOW: usize = 8 << 20;

fn sample_dump() -> Vec<u8> {
    use tracerd::dump::{write_dump, DumpContents, DumpMeta, FORMAT_VERSION};
    use tracerd::record::{BlobArena, Payload, Record};
    let mut blobs = BlobArena::new(1 << 16);
    let mut records = Vec::new();
    for i in 0..300u64 {
        let blob = blobs.put(format!("/var/lib/app/file-{}", i % 17).as_bytes());
        let payload = if i % 3 == 0 {
            Payload::Function { function_id: i % 5 }
        } else {
            Payload::SyscallFailure {
                nr: 257,
                ret: -2,
                fd: -100,
                open_id: i,
                blob,
                requested: 0,
            }
        };
        records.push(Record {
            ts_ns: 1000 + i,
            pid: 40 + (i % 4) as u32,
            tid: 40,
            comm: *b"app\0\0\0\0\0\0\0\0\0\0\0\0\0",
            payload,
        });
    }
    let meta = DumpMeta {
        format: "tracerd-dump".into(),
        version: FORMAT_VERSION,
        event_count: records.len() as u64,
        ..DumpMeta::default()
    };
    let dir = tempfile::tempdir().unwrap();
    let path = write_dump(
        dir.path(),
        "s.tdump",
        DumpContents {
            meta,
            records: records.iter().copied(),
            blobs: blobs.live_bytes(),
        },
    )
    .unwrap();
    std::fs::read(path).unwrap()
}

fn read_dump(bytes: &[u8]) -> (Option<String>, usize) {
    read_back(bytes, "d.tdump", |p| {
        tracerd::dump::Dump::read(p).map(|d| d.events().len())
    })
}

fn dump_bytes() -> &'static [u8] {
    static DUMP: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    DUMP.get_or_init(sample_dump)
}

fn assert_named_error(outcome: (Option<String>, usize), name: &str, len: usize) {
    let (err, largest) = outcome;
    let err = err.expect("a damaged file must not read");
    assert!(err.contains(name), "the error names the file: {err}");
    assert!(
        largest <= WINDOW + 64 * len + 4096,
        "allocated {largest} bytes reading a {len}-byte file"
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn dump_random_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..4096), magic in any::<bool>()) {
        let mut bytes = bytes;
        if magic && bytes.len() >= 16 {
            // past the magic and version, into the zstd decoder
            bytes[..8].copy_from_slice(tracerd::dump::MAGIC);
            bytes[8..12].copy_from_slice(&tracerd::dump::FORMAT_VERSION.to_le_bytes());
        }
        let len = bytes.len();
        assert_named_error(read_dump(&bytes), "d.tdump", len);
    }

    #[test]
    fn dump_truncated(cut in 0usize..1_000_000) {
        let good = dump_bytes();
        let cut = cut % good.len();
        assert_named_error(read_dump(&good[..cut]), "d.tdump", cut);
    }

    #[test]
    fn dump_flipped_byte_inside_or_after_the_frame(at in 0usize..1_000_000, xor in 1u8..=255, append in any::<bool>()) {
        let mut bytes = dump_bytes().to_vec();
        if append {
            // a byte after the frame: trailing garbage
            bytes.push(xor);
        } else {
            let at = 16 + at % (bytes.len() - 16);
            bytes[at] ^= xor;
        }
        let len = bytes.len();
        let (err, largest) = read_dump(&bytes);
        // a flip the checksum cannot see (e.g. in an unused header bit) may still read fine;
        // then it must not have allocated beyond the bound either
        if let Some(err) = &err {
            prop_assert!(err.contains("d.tdump"), "{}", err);
        }
        prop_assert!(largest <= WINDOW + 64 * len + 4096, "allocated {} bytes", largest);
    }

    #[test]
    fn scenario_schedule_profile_damaged(seed in any::<u64>(), mode in 0u8..3, which in 0u8..3) {
        let (name, good): (&str, Vec<u8>) = match which {
            0 => ("s.toml", scenario_text().into_bytes()),
            1 => ("f.toml", schedule_text().into_bytes()),
            _ => ("p.json", profile_bytes()),
        };
        let bytes = damage(&good, seed, mode);
        let len = bytes.len();
        let outcome = match which {
            0 => read_back(&bytes, name, reproducer::model::scenario::Scenario::load),
            1 => read_back(&bytes, name, reproducer::model::schedule::Schedule::load),
            _ => read_back(&bytes, name, reproducer::analysis::profile::load),
        };
        if let Some(err) = &outcome.0 {
            prop_assert!(err.contains(name), "{}", err);
        }
        prop_assert!(outcome.1 <= 64 * len + (1 << 16), "allocated {} bytes reading {} bytes", outcome.1, len);
    }
}

/// `good` cut short (mode 0), with one byte flipped (1), or replaced by random bytes (2).
fn damage(good: &[u8], seed: u64, mode: u8) -> Vec<u8> {
    let mut x = seed | 1;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    match mode {
        0 => good[..(next() as usize) % good.len()].to_vec(),
        1 => {
            let mut b = good.to_vec();
            let at = (next() as usize) % b.len();
            b[at] ^= (next() % 255 + 1) as u8;
            b
        }
        _ => (0..(next() % 2048)).map(|_| next() as u8).collect(),
    }
}

fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn scenario_text() -> String {
    std::fs::read_to_string(workspace().join("tests/bugbench/nth-connect/scenario.toml")).unwrap()
}

fn schedule_text() -> String {
    std::fs::read_to_string(workspace().join("tests/bugbench/nth-connect/truth.toml")).unwrap()
}

fn profile_bytes() -> Vec<u8> {
    let scenario = reproducer::model::scenario::Scenario::load(
        &workspace().join("tests/bugbench/nth-connect/scenario.toml"),
    )
    .unwrap();
    let profile = reproducer::analysis::profile::aggregate(&scenario, &[], &[], 0.5);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.json");
    reproducer::analysis::profile::write(&profile, &path).unwrap();
    std::fs::read(path).unwrap()
}

#[test]
fn samples_read_when_undamaged() {
    assert_eq!(read_dump(dump_bytes()).0, None, "the sample dump reads");
    assert_eq!(
        read_back(
            scenario_text().as_bytes(),
            "s.toml",
            reproducer::model::scenario::Scenario::load
        )
        .0,
        None
    );
    assert_eq!(
        read_back(
            schedule_text().as_bytes(),
            "f.toml",
            reproducer::model::schedule::Schedule::load
        )
        .0,
        None
    );
    assert_eq!(
        read_back(&profile_bytes(), "p.json", reproducer::analysis::profile::load).0,
        None
    );
}

#[test]
fn a_claimed_section_length_is_not_allocated() {
    // a well-formed frame whose meta section claims 4 GiB and holds 2 bytes
    let mut body = Vec::new();
    body.extend_from_slice(&1u32.to_le_bytes());
    body.extend_from_slice(&(4u64 << 30).to_le_bytes());
    body.extend_from_slice(b"{}");
    let mut bytes = tracerd::dump::MAGIC.to_vec();
    bytes.extend_from_slice(&tracerd::dump::FORMAT_VERSION.to_le_bytes());
    bytes.extend_from_slice(&0u32.to_le_bytes());
    bytes.extend_from_slice(&zstd::encode_all(&body[..], 3).unwrap());
    let len = bytes.len();
    assert_named_error(read_dump(&bytes), "d.tdump", len);
}
