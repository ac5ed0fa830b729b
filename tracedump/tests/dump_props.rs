//! Property tests of the dump reader: random bytes, truncations and single flipped bytes
//! (inside the zstd frame and after it) must give an error naming the file, never a panic,
//! and never an allocation beyond a bound set by the file (the decoder's largest window,
//! 8 MiB, plus a multiple of the file's length).
#[path = "../../tests/common/read_back.rs"]
mod read_back;

use proptest::prelude::*;

use read_back::read_back;

const WINDOW: usize = 8 << 20;

fn sample_dump() -> Vec<u8> {
    use tracedump::dump::{write_dump, DumpContents, DumpMeta, FORMAT_VERSION};
    use tracedump::record::{BlobArena, Payload, Record};
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
        tracedump::dump::Dump::read(p).map(|d| d.events().len())
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
            bytes[..8].copy_from_slice(tracedump::dump::MAGIC);
            bytes[8..12].copy_from_slice(&tracedump::dump::FORMAT_VERSION.to_le_bytes());
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
}

#[test]
fn samples_read_when_undamaged() {
    assert_eq!(read_dump(dump_bytes()).0, None, "the sample dump reads");
}

#[test]
fn a_claimed_section_length_is_not_allocated() {
    // a well-formed frame whose meta section claims 4 GiB and holds 2 bytes
    let mut body = Vec::new();
    body.extend_from_slice(&1u32.to_le_bytes());
    body.extend_from_slice(&(4u64 << 30).to_le_bytes());
    body.extend_from_slice(b"{}");
    let mut bytes = tracedump::dump::MAGIC.to_vec();
    bytes.extend_from_slice(&tracedump::dump::FORMAT_VERSION.to_le_bytes());
    bytes.extend_from_slice(&0u32.to_le_bytes());
    bytes.extend_from_slice(&zstd::encode_all(&body[..], 3).unwrap());
    let len = bytes.len();
    assert_named_error(read_dump(&bytes), "d.tdump", len);
}
