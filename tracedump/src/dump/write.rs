//! The one dump writer: the header, then one zstd frame (with checksum) of sections, written
//! through the atomic writer (mode 0600), so that a dump that fails leaves no file.
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{bail, Result};

use super::codec::encode_record;
use super::{
    DumpMeta, FORMAT_VERSION, MAGIC, RECORD_SIZE, SECTION_BLOBS, SECTION_END, SECTION_EVENTS, SECTION_META,
};
use crate::record::Record;

/// What the writer needs; `records` are written in the order given. An iterator rather than
/// a list: a daemon's window is a million records, and a list of references to them would
/// cost it 8 MiB more at every dump.
pub struct DumpContents<R> {
    pub meta: DumpMeta,
    pub records: R,
    pub blobs: (u64, Vec<u8>),
}

fn write_section_header(w: &mut impl Write, tag: u32, len: u64) -> std::io::Result<()> {
    w.write_all(&tag.to_le_bytes())?;
    w.write_all(&len.to_le_bytes())
}

fn write_section(w: &mut impl Write, tag: u32, payload: &[u8]) -> std::io::Result<()> {
    write_section_header(w, tag, payload.len() as u64)?;
    w.write_all(payload)
}

fn write_body<R>(w: impl Write, contents: DumpContents<R>) -> Result<()>
where
    R: IntoIterator<Item = Record>,
    R::IntoIter: ExactSizeIterator,
{
    let mut z = zstd::Encoder::new(w, 3)?;
    z.include_checksum(true)?;
    write_section(&mut z, SECTION_META, &serde_json::to_vec(&contents.meta)?)?;
    let (base, bytes) = &contents.blobs;
    write_section_header(&mut z, SECTION_BLOBS, 8 + bytes.len() as u64)?;
    z.write_all(&base.to_le_bytes())?;
    z.write_all(bytes)?;
    let records = contents.records.into_iter();
    let count = records.len() as u64;
    write_section_header(&mut z, SECTION_EVENTS, 12 + count * RECORD_SIZE as u64)?;
    z.write_all(&(RECORD_SIZE as u32).to_le_bytes())?;
    z.write_all(&count.to_le_bytes())?;
    let mut buf = [0u8; RECORD_SIZE];
    let mut written = 0u64;
    for r in records {
        encode_record(&r, &mut buf);
        z.write_all(&buf)?;
        written += 1;
    }
    // the section's length is already written: a short count would misframe the file
    if written != count {
        bail!("the dump's records iterator gave {written} records, not the {count} it announced");
    }
    write_section(&mut z, SECTION_END, &[])?;
    z.finish()?.flush()?;
    Ok(())
}

/// Writes `contents` as `dir/name` atomically (mode 0600) and returns the final path.
pub fn write_dump<R>(dir: &Path, name: &str, contents: DumpContents<R>) -> Result<PathBuf>
where
    R: IntoIterator<Item = Record>,
    R::IntoIter: ExactSizeIterator,
{
    let final_path = dir.join(name);
    crate::atomic::write_with(&final_path, crate::atomic::PRIVATE, |w| {
        w.write_all(MAGIC)?;
        w.write_all(&FORMAT_VERSION.to_le_bytes())?;
        w.write_all(&0u32.to_le_bytes())?;
        write_body(w, contents)
    })?;
    Ok(final_path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dump::tests::sample;

    /// An iterator that announces more records than it gives.
    struct ShortOfItsWord(std::vec::IntoIter<Record>, usize);

    impl Iterator for ShortOfItsWord {
        type Item = Record;
        fn next(&mut self) -> Option<Record> {
            self.0.next()
        }
        fn size_hint(&self) -> (usize, Option<usize>) {
            (self.1, Some(self.1))
        }
    }

    impl ExactSizeIterator for ShortOfItsWord {}

    #[test]
    fn a_record_count_that_does_not_hold_leaves_no_file() {
        let dir = tempfile::tempdir().unwrap();
        let recs = sample();
        let n = recs.len();
        let contents = DumpContents {
            meta: DumpMeta::default(),
            records: ShortOfItsWord(recs.into_iter(), n + 1),
            blobs: (0, Vec::new()),
        };
        let e = write_dump(dir.path(), "d.tdump", contents).unwrap_err();
        assert!(format!("{e:#}").contains("not the"), "{e:#}");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
