//! The one dump reader: checks the header, then reads the zstd frame section by section,
//! every length bounded and checked against the bytes that really arrive. Unknown sections
//! are skipped; a file without the end section is truncated.
use std::fs::File;
use std::io::{BufReader, Read};
use std::path::Path;

use anyhow::{bail, Context, Result};

use super::codec::{decode_record, le_u32, le_u64};
use super::{
    DumpMeta, FORMAT_VERSION, MAGIC, RECORD_SIZE, SECTION_BLOBS, SECTION_END, SECTION_EVENTS, SECTION_META,
};
use crate::record::{BlobWindow, Record};

/// Largest section the reader accepts; guards allocations against a corrupt length.
const MAX_SECTION: u64 = 8 << 30;
/// Largest zstd window the reader accepts (8 MiB: compression levels up to 19 stay below).
const MAX_WINDOW_LOG: u32 = 23;

/// A dump as read back.
pub struct Dump {
    pub meta: DumpMeta,
    pub records: Vec<Record>,
    pub blobs: BlobWindow,
}

fn read_exact_or(r: &mut impl Read, buf: &mut [u8], what: &str) -> Result<()> {
    r.read_exact(buf)
        .with_context(|| format!("truncated or corrupt ({what})"))
}

impl Dump {
    /// Reads and validates a dump file.
    pub fn read(path: &Path) -> Result<Dump> {
        Self::read_inner(path).with_context(|| format!("dump {}", path.display()))
    }

    fn read_inner(path: &Path) -> Result<Dump> {
        let file = File::open(path)?;
        let mut r = BufReader::new(file);
        let mut head = [0u8; 16];
        r.read_exact(&mut head)
            .map_err(|_| anyhow::anyhow!("not a tracerd dump (file too short)"))?;
        if &head[..8] != MAGIC {
            bail!("not a tracerd dump (bad magic)");
        }
        let version = le_u32(&head[8..12]);
        if version != FORMAT_VERSION {
            bail!(
                "dump format version {version} is not supported (this reader knows version {FORMAT_VERSION})"
            );
        }
        let mut z = zstd::Decoder::new(r)?;
        // a corrupt frame header must not make the decoder allocate a huge window
        z.window_log_max(MAX_WINDOW_LOG)?;
        let mut meta: Option<DumpMeta> = None;
        let mut blobs = BlobWindow {
            base: 0,
            bytes: Vec::new(),
        };
        let mut records = Vec::new();
        loop {
            let mut sh = [0u8; 12];
            read_exact_or(&mut z, &mut sh, "section header; the end marker is missing")?;
            let (tag, len) = (le_u32(&sh[..4]), le_u64(&sh[4..]));
            if tag == SECTION_END {
                // read the frame to its end so that its checksum is verified
                let mut rest = Vec::new();
                z.read_to_end(&mut rest)
                    .context("truncated or corrupt (frame end)")?;
                if !rest.is_empty() {
                    bail!("corrupt: data after the end marker");
                }
                break;
            }
            if len > MAX_SECTION {
                bail!("corrupt: section {tag} claims {len} bytes");
            }
            // grows with the bytes that really arrive, never to a corrupt claimed length
            let mut payload = Vec::new();
            (&mut z)
                .take(len)
                .read_to_end(&mut payload)
                .context("truncated or corrupt (section payload)")?;
            if payload.len() as u64 != len {
                bail!("truncated or corrupt (section {tag} is shorter than its header says)");
            }
            match tag {
                SECTION_META => {
                    meta = Some(serde_json::from_slice(&payload).context("corrupt meta section")?)
                }
                SECTION_BLOBS => {
                    if payload.len() < 8 {
                        bail!("corrupt blob section");
                    }
                    blobs = BlobWindow {
                        base: le_u64(&payload[..8]),
                        bytes: payload[8..].to_vec(),
                    };
                }
                SECTION_EVENTS => records = decode_events(&payload)?,
                _ => {}
            }
        }
        let meta = meta.context("corrupt: no meta section")?;
        Ok(Dump { meta, records, blobs })
    }
}

fn decode_events(payload: &[u8]) -> Result<Vec<Record>> {
    if payload.len() < 12 {
        bail!("corrupt events section");
    }
    let size = le_u32(&payload[..4]) as usize;
    let count = le_u64(&payload[4..12]) as usize;
    if size != RECORD_SIZE || payload.len() != 12 + count.saturating_mul(size) {
        bail!("corrupt events section (record size {size}, count {count})");
    }
    // `count` is known to fit in the payload at hand, so it is safe to allocate for
    let mut records = Vec::with_capacity(count);
    for (i, b) in payload[12..].chunks_exact(size).enumerate() {
        records.push(decode_record(b).with_context(|| format!("corrupt event record {i}"))?);
    }
    Ok(records)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dump::tests::sample;
    use crate::dump::{write_dump, DumpContents, OpenFile, SyscallCount};
    use crate::event::{State, What};
    use crate::record::{Payload, Record};

    /// An fd call's blob is the fd's name, taken as it is; a path call's relative path
    /// joins the process's cwd.
    #[test]
    fn fd_names_are_not_joined_to_the_cwd() {
        let dir = tempfile::tempdir().unwrap();
        let mut arena = crate::record::BlobArena::new(1024);
        let failure = |nr, blob| Record {
            ts_ns: 1,
            pid: 1,
            tid: 1,
            comm: [0; 16],
            payload: Payload::SyscallFailure {
                nr,
                ret: -9,
                fd: 4,
                open_id: 0,
                blob,
                requested: 0,
            },
        };
        // write (fd), lseek (fd), unlink (path)
        let recs = [
            failure(1, arena.put(b"pipe:[5]")),
            failure(8, arena.put(b"/memfd:x")),
            failure(87, arena.put(b"rel/x")),
        ];
        let meta = DumpMeta {
            format: "tracerd-dump".into(),
            version: FORMAT_VERSION,
            processes: vec![crate::process::ProcInfo {
                pid: 1,
                cwd: Some("/srv".into()),
                ..Default::default()
            }],
            ..DumpMeta::default()
        };
        let contents = DumpContents {
            meta,
            records: recs.iter().copied(),
            blobs: arena.live_bytes(),
        };
        let dump = Dump::read(&write_dump(dir.path(), "d.tdump", contents).unwrap()).unwrap();
        let paths: Vec<Option<String>> = dump
            .events()
            .iter()
            .map(|e| match &e.what {
                What::SyscallFailure(f) => f.path.clone(),
                _ => None,
            })
            .collect();
        assert_eq!(
            paths,
            [
                Some("pipe:[5]".into()),
                Some("/memfd:x".into()),
                Some("/srv/rel/x".into())
            ]
        );
    }

    #[test]
    fn file_round_trip_and_damage() {
        let dir = tempfile::tempdir().unwrap();
        let recs = sample();
        let meta = DumpMeta {
            format: "tracerd-dump".into(),
            version: FORMAT_VERSION,
            open_files: vec![OpenFile {
                open_id: 7,
                dir_open_id: 0,
                tgid: 1,
                path: "/data/aof".into(),
            }],
            function_calls: vec![3, 0],
            syscall_counts: vec![SyscallCount {
                pid: 1,
                syscall: "getppid".into(),
                count: 9,
            }],
            ..DumpMeta::default()
        };
        let contents = DumpContents {
            meta,
            records: recs.iter().copied(),
            blobs: (0, Vec::new()),
        };
        let path = write_dump(dir.path(), "d.tdump", contents).unwrap();
        let dump = Dump::read(&path).unwrap();
        assert_eq!(dump.records, recs);
        assert_eq!(dump.meta.function_calls, vec![3, 0]);
        assert_eq!(dump.meta.syscall_counts[0].count, 9);
        let events = dump.events();
        let json: Vec<crate::event::EventJson> = events.iter().map(Into::into).collect();
        assert_eq!(json[0].errno.as_deref(), Some("ENOSPC"));
        assert_eq!(json[0].path.as_deref(), Some("/data/aof"));
        assert_eq!(json[1].signal.as_deref(), Some("SIGKILL"));
        assert_eq!(json[2].duration_ms, Some(6000));
        assert_eq!(
            (
                json[3].kind,
                json[3].ret,
                json[3].requested,
                json[3].errno.as_deref()
            ),
            ("short_io", Some(480), Some(1064), None)
        );
        assert_eq!(
            events[3].describe(),
            "pwrite64(fd 3 /data/aof) = 480 of 1064 (short)"
        );
        assert_eq!(json[0].requested, None);
        assert!(
            matches!(&events[1].what, What::ProcessState(p) if p.state == State::Killed { core_dumped: false })
        );
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );

        let bytes = std::fs::read(&path).unwrap();
        let cut = dir.path().join("cut.tdump");
        for len in [0, 10, 17, bytes.len() / 2, bytes.len() - 1] {
            std::fs::write(&cut, &bytes[..len]).unwrap();
            let err = Dump::read(&cut)
                .err()
                .expect("a truncated dump must not read")
                .to_string();
            assert!(err.contains("cut.tdump"), "{err}");
        }
        let mut bad = bytes.clone();
        bad[0] = b'X';
        std::fs::write(&cut, &bad).unwrap();
        assert!(format!("{:#}", Dump::read(&cut).err().unwrap()).contains("bad magic"));
        let mut flipped = bytes.clone();
        let mid = 16 + (bytes.len() - 16) / 2;
        flipped[mid] ^= 0xff;
        std::fs::write(&cut, &flipped).unwrap();
        assert!(Dump::read(&cut).is_err(), "a corrupted frame fails its checksum");
    }
}
