//! Function names and entry addresses from a Go binary's own symbol table, the pc-line table
//! (`runtime.pclntab`). Debian's Go programs are stripped: no `.symtab`, a `.dynsym` with a
//! few cgo names, yet the Go runtime keeps every function's name and entry for its stack
//! traces, in `.gopclntab` (internal linking), `.data.rel.ro.gopclntab` (PIE) or inside
//! `.data.rel.ro` (external linking as a PIE, found by its header). Layouts of Go 1.2, 1.16,
//! 1.18 and 1.20+ (the magic numbers below), little-endian only.
use anyhow::{anyhow, bail, Result};
use object::{Object, ObjectSection, SectionKind};

use super::{Definition, FunctionSymbol};

const MAGIC_12: u32 = 0xffff_fffb;
const MAGIC_116: u32 = 0xffff_fffa;
const MAGIC_118: u32 = 0xffff_fff0;
const MAGIC_120: u32 = 0xffff_fff1;

/// One Go function: its name as the runtime prints it (`main.main`,
/// `github.com/x/y.(*T).Run`), its entry's virtual address as linked, and its size (up to
/// the next function's entry).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GoFunction {
    pub name: String,
    pub address: u64,
    pub size: u64,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Layout {
    V12,
    V116,
    V118,
}

/// The Go functions of `file`, one per name, sorted by address; `Ok(None)` when it is not
/// a Go binary (no pc-line table), an error when the table is there but cannot be read.
/// The table names an assembly function and its ABI wrapper alike (`.symtab` calls the
/// body `NAME.abi0`); the larger of the two, the body, which every call reaches, is kept.
pub fn functions(file: &object::File<'_>) -> Result<Option<Vec<GoFunction>>> {
    Ok(table(file)?.map(one_per_name))
}

/// The Go functions of `file` as definitions, ranked below the ELF symbol tables: weak
/// (a strong .symtab definition of the same name wins the uprobe offset) and dynamic (a
/// .symtab name for the same address wins among aliases).
pub(super) fn definitions(file: &object::File<'_>) -> Result<Vec<Definition>> {
    let go = functions(file).map_err(|e| anyhow!("Go symbol table: {e}"))?;
    Ok(go
        .unwrap_or_default()
        .into_iter()
        .filter(|f| f.size > 0)
        .map(|f| Definition {
            file_offset: file_offset(file, f.address),
            symbol: FunctionSymbol {
                name: f.name,
                address: f.address,
                size: f.size,
                source_file: None,
            },
            weak: true,
            dynamic: true,
            sized_function: true,
        })
        .collect())
}

fn one_per_name(mut all: Vec<GoFunction>) -> Vec<GoFunction> {
    all.sort_by(|a, b| {
        a.name
            .cmp(&b.name)
            .then(b.size.cmp(&a.size))
            .then(a.address.cmp(&b.address))
    });
    all.dedup_by(|later, first| later.name == first.name);
    all.sort_by_key(|f| f.address);
    all
}

fn table(file: &object::File<'_>) -> Result<Option<Vec<GoFunction>>> {
    for section in file.sections() {
        let name = section.name().unwrap_or("");
        if name == ".gopclntab" || name == ".data.rel.ro.gopclntab" {
            let data = section.data().map_err(|e| anyhow!("{name}: {e}"))?;
            return parse(data, text_start(file))
                .map(Some)
                .map_err(|e| anyhow!("{name}: {e}"));
        }
    }
    // externally linked PIE: the table is somewhere in .data.rel.ro, headed by its magic
    for section in file
        .sections()
        .filter(|s| s.name().is_ok_and(|n| n.starts_with(".data.rel.ro")))
    {
        let Ok(data) = section.data() else { continue };
        for at in (0..data.len().saturating_sub(8)).step_by(8) {
            if looks_like_header(&data[at..]) {
                if let Ok(found) = parse(&data[at..], text_start(file)) {
                    return Ok(Some(found));
                }
            }
        }
    }
    Ok(None)
}

/// Where `address` (a virtual address as linked) is in the file: the offset a uprobe takes.
pub fn file_offset(file: &object::File<'_>, address: u64) -> Option<u64> {
    file.sections()
        .filter(|s| s.kind() == SectionKind::Text)
        .find_map(|s| {
            let (start, size) = s.file_range()?;
            let delta = address.checked_sub(s.address())?;
            (delta < size).then_some(start + delta)
        })
}

/// The `.text` address, which Go 1.18+ entries are relative to when the header's own field
/// is zero (an unrelocated PIE); the header's value wins otherwise (with external linking,
/// C start-up code comes first in `.text`).
fn text_start(file: &object::File<'_>) -> u64 {
    file.section_by_name(".text").map(|s| s.address()).unwrap_or(0)
}

fn looks_like_header(data: &[u8]) -> bool {
    let magic = u32::from_le_bytes([data[0], data[1], data[2], data[3]]);
    matches!(magic, MAGIC_12 | MAGIC_116 | MAGIC_118 | MAGIC_120)
        && data[4] == 0
        && data[5] == 0
        && matches!(data[6], 1 | 2 | 4)
        && matches!(data[7], 4 | 8)
}

/// Bounds-checked little-endian reads over the table.
struct Table<'d> {
    data: &'d [u8],
    ptr: usize,
}

impl Table<'_> {
    fn bytes(&self, at: usize, n: usize) -> Result<&[u8]> {
        at.checked_add(n)
            .and_then(|end| self.data.get(at..end))
            .ok_or_else(|| anyhow!("truncated at offset {at}"))
    }
    fn u32(&self, at: usize) -> Result<u32> {
        let b = self.bytes(at, 4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn uptr(&self, at: usize) -> Result<u64> {
        let b = self.bytes(at, self.ptr)?;
        Ok(if self.ptr == 8 {
            u64::from_le_bytes(b.try_into()?)
        } else {
            u32::from_le_bytes(b.try_into()?) as u64
        })
    }
    /// Header word `n` (after the 8-byte magic block), as an offset into the table.
    fn word(&self, n: usize) -> Result<usize> {
        usize::try_from(self.uptr(8 + n * self.ptr)?).map_err(|_| anyhow!("header word {n} out of range"))
    }
    fn cstr(&self, at: usize) -> Result<String> {
        let rest = self
            .data
            .get(at..)
            .ok_or_else(|| anyhow!("name offset {at} out of bounds"))?;
        let end = rest
            .iter()
            .position(|&b| b == 0)
            .ok_or_else(|| anyhow!("unterminated name at {at}"))?;
        Ok(String::from_utf8_lossy(&rest[..end]).into_owned())
    }
}

/// Parses a pc-line table that starts at `data[0]`; `text` is the `.text` address (used
/// only when a Go 1.18+ header holds no text start).
pub fn parse(data: &[u8], text: u64) -> Result<Vec<GoFunction>> {
    if data.len() < 16 {
        bail!("too short for a Go pc-line table");
    }
    let magic = u32::from_le_bytes([data[0], data[1], data[2], data[3]]);
    let layout = match magic {
        MAGIC_12 => Layout::V12,
        MAGIC_116 => Layout::V116,
        MAGIC_118 | MAGIC_120 => Layout::V118,
        m if m.swap_bytes() >= MAGIC_118 => bail!("big-endian Go pc-line table (not supported)"),
        m => bail!("unknown Go pc-line table magic {m:#x}"),
    };
    let ptr = data[7] as usize;
    if ptr != 4 && ptr != 8 {
        bail!("pointer size {ptr} in the Go pc-line table header");
    }
    let t = Table { data, ptr };
    let nfunc = t.word(0)?;
    // (start of the function table, start of the names, entry base, field width in the function table)
    let (functab, names, base, field) = match layout {
        Layout::V12 => (8 + ptr, 0, 0, ptr),
        Layout::V116 => (t.word(6)?, t.word(2)?, 0, ptr),
        Layout::V118 => {
            let start = t.uptr(8 + 2 * ptr)?;
            (t.word(7)?, t.word(3)?, if start != 0 { start } else { text }, 4)
        }
    };
    if nfunc == 0 || nfunc > data.len() / (2 * field) {
        bail!("implausible function count {nfunc}");
    }
    let read_field = |at: usize| {
        if field == 4 {
            t.u32(at).map(u64::from)
        } else {
            t.uptr(at)
        }
    };
    let entry = |i: usize| read_field(functab + i * 2 * field).map(|e| base.wrapping_add(e));
    let mut out = Vec::with_capacity(nfunc);
    let mut next = entry(0)?;
    for i in 0..nfunc {
        let address = next;
        // the table ends with one more entry: the end of the last function
        next = entry(i + 1)?;
        if next < address {
            bail!("function table not sorted at entry {i}");
        }
        let funcoff = usize::try_from(read_field(functab + i * 2 * field + field)?)?;
        // _func starts with the entry (uintptr, or uint32 offset since 1.18), then the name offset
        let func = functab
            .checked_add(funcoff)
            .ok_or_else(|| anyhow!("function {i}: offset overflow"))?;
        let name_off = t.u32(func + field)? as i32;
        let name_at = usize::try_from(name_off).map_err(|_| anyhow!("function {i}: negative name offset"))?;
        let name = t.cstr(
            names
                .checked_add(name_at)
                .ok_or_else(|| anyhow!("function {i}: name offset overflow"))?,
        )?;
        out.push(GoFunction {
            name,
            address,
            size: next - address,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A table in the given layout with functions (name, entry offset) ending at `end`,
    /// laid out as header, function table, `_func` records, names.
    fn synthetic(magic: u32, ptr: usize, funcs: &[(&str, u64)], end: u64) -> Vec<u8> {
        let put = |buf: &mut Vec<u8>, v: u64, width: usize| buf.extend_from_slice(&v.to_le_bytes()[..width]);
        let (words, field) = match magic {
            MAGIC_12 => (1, ptr),
            MAGIC_116 => (7, ptr),
            _ => (8, 4),
        };
        let functab_at = (8 + words * ptr) as u64;
        let table_len = (funcs.len() as u64 * 2 + 1) * field as u64;
        let record_len = field as u64 + 8;
        let names_at = functab_at + table_len + funcs.len() as u64 * record_len;
        let mut buf = Vec::new();
        buf.extend_from_slice(&magic.to_le_bytes());
        buf.extend_from_slice(&[0, 0, 1, ptr as u8]);
        let n = funcs.len() as u64;
        let header: Vec<u64> = match magic {
            MAGIC_12 => vec![n],
            MAGIC_116 => vec![n, 0, names_at, 0, 0, 0, functab_at],
            _ => vec![n, 0, 0x40_1000, names_at, 0, 0, 0, functab_at],
        };
        header.iter().for_each(|&w| put(&mut buf, w, ptr));
        for (i, (_, entry)) in funcs.iter().enumerate() {
            put(&mut buf, *entry, field);
            put(&mut buf, table_len + i as u64 * record_len, field);
        }
        put(&mut buf, end, field);
        let mut name_off = 0u64;
        for (name, entry) in funcs {
            put(&mut buf, *entry, field);
            // Go 1.2 name offsets are from the table's start, later ones from the name table
            put(
                &mut buf,
                if magic == MAGIC_12 {
                    names_at + name_off
                } else {
                    name_off
                },
                4,
            );
            put(&mut buf, 0, 4);
            name_off += name.len() as u64 + 1;
        }
        for (name, _) in funcs {
            buf.extend_from_slice(name.as_bytes());
            buf.push(0);
        }
        buf
    }

    #[test]
    fn reads_every_layout() {
        let funcs = [
            ("runtime.text", 0x0),
            ("main.(*Server).Run", 0x40),
            ("main.main", 0x100),
        ];
        for (magic, ptr, base) in [
            (MAGIC_12, 8, 0),
            (MAGIC_12, 4, 0),
            (MAGIC_116, 8, 0),
            (MAGIC_118, 8, 0x40_1000),
            (MAGIC_120, 8, 0x40_1000),
        ] {
            let data = synthetic(magic, ptr, &funcs, 0x180);
            let got = parse(&data, 0x9999_0000).unwrap_or_else(|e| panic!("magic {magic:#x}: {e}"));
            let want: Vec<GoFunction> = vec![
                GoFunction {
                    name: "runtime.text".into(),
                    address: base,
                    size: 0x40,
                },
                GoFunction {
                    name: "main.(*Server).Run".into(),
                    address: base + 0x40,
                    size: 0xc0,
                },
                GoFunction {
                    name: "main.main".into(),
                    address: base + 0x100,
                    size: 0x80,
                },
            ];
            assert_eq!(got, want, "magic {magic:#x} ptr {ptr}");
        }
    }

    #[test]
    fn a_1_18_header_without_text_start_uses_the_text_section() {
        let mut data = synthetic(MAGIC_120, 8, &[("main.main", 0x10)], 0x20);
        data[24..32].fill(0);
        assert_eq!(parse(&data, 0x1000).unwrap()[0].address, 0x1010);
    }

    #[test]
    fn damaged_tables_are_errors_not_panics() {
        let data = synthetic(MAGIC_120, 8, &[("a", 0), ("b", 0x10)], 0x20);
        for cut in [0, 7, 15, 40, 80, data.len() - 3] {
            assert!(parse(&data[..cut], 0).is_err(), "cut at {cut}");
        }
        let mut bad = data.clone();
        bad[0] = 0x12;
        assert!(parse(&bad, 0).unwrap_err().to_string().contains("magic"));
        let mut be = data.clone();
        be[..4].copy_from_slice(&MAGIC_120.to_be_bytes());
        assert!(parse(&be, 0).unwrap_err().to_string().contains("big-endian"));
    }

    /// Builds tests/programs/gonode.go with Debian's Go (`golang-go`, installed by
    /// scripts/test) the ways Go servers are shipped, and checks the table against the
    /// unstripped build's .symtab, then reads the same functions from a stripped copy.
    #[test]
    fn reads_go_binaries_as_built_and_stripped() {
        use std::process::Command;
        let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/programs/gonode.go");
        let dir = tempfile::tempdir().unwrap();
        for (mode, cgo, flags) in [
            ("internal", "0", vec![]),
            ("pie", "0", vec!["-buildmode=pie"]),
            (
                "external-pie",
                "1",
                vec!["-buildmode=pie", "-ldflags=-linkmode=external"],
            ),
        ] {
            let bin = dir.path().join(mode);
            let out = Command::new("go")
                .arg("build")
                .args(&flags)
                .arg("-o")
                .arg(&bin)
                .arg(&src)
                .env("CGO_ENABLED", cgo)
                .env("GO111MODULE", "off")
                .env("GOCACHE", dir.path().join("cache"))
                .env("GOPATH", dir.path().join("gopath"))
                .output()
                .expect("running go (Debian package golang-go; scripts/test installs it)");
            assert!(
                out.status.success(),
                "go build {mode}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let stripped = dir.path().join(format!("{mode}.stripped"));
            assert!(Command::new("strip")
                .arg("-o")
                .arg(&stripped)
                .arg(&bin)
                .status()
                .unwrap()
                .success());

            let data = std::fs::read(&bin).unwrap();
            let file = object::File::parse(&*data).unwrap();
            let go = functions(&file)
                .unwrap()
                .unwrap_or_else(|| panic!("{mode}: no Go table found"));
            let symtab: std::collections::HashMap<String, u64> = object::Object::symbols(&file)
                .filter(|s| object::ObjectSymbol::kind(s) == object::SymbolKind::Text)
                .filter_map(|s| {
                    Some((
                        object::ObjectSymbol::name(&s).ok()?.to_string(),
                        object::ObjectSymbol::address(&s),
                    ))
                })
                .collect();
            let mut compared = 0;
            for f in &go {
                // a function with an ABI wrapper: .symtab names one of the two NAME.abi0
                let twin = symtab.get(&format!("{}.abi0", f.name));
                if let Some(&addr) = symtab.get(&f.name) {
                    assert!(
                        f.address == addr || twin == Some(&f.address),
                        "{mode}: {} at {:#x}, .symtab says {addr:#x}",
                        f.name,
                        f.address
                    );
                    compared += 1;
                }
            }
            assert!(
                compared > 1000 && compared * 10 > go.len() * 9,
                "{mode}: {compared} of {} compared",
                go.len()
            );
            let snap = go
                .iter()
                .find(|f| f.name == "main.(*store).storeSnapshot")
                .expect("the method is listed");
            assert!(snap.size > 0);
            let offset = file_offset(&file, snap.address).unwrap();
            assert_eq!(
                &data[offset as usize..][..16],
                &file_bytes_at(&file, snap.address)[..16]
            );

            let stripped_data = std::fs::read(&stripped).unwrap();
            let stripped_file = object::File::parse(&*stripped_data).unwrap();
            assert_eq!(
                object::Object::symbols(&stripped_file).count(),
                0,
                "{mode}: strip left a .symtab"
            );
            assert_eq!(
                functions(&stripped_file).unwrap().as_ref(),
                Some(&go),
                "{mode}: stripped copy"
            );
        }
        let not_go = functions(
            &object::File::parse(&*std::fs::read(std::env::current_exe().unwrap()).unwrap()).unwrap(),
        );
        assert!(not_go.unwrap().is_none(), "a Rust binary has no Go table");
    }

    fn file_bytes_at<'d>(file: &object::File<'d>, address: u64) -> &'d [u8] {
        file.sections()
            .find_map(|s| s.data_range(address, 16).ok().flatten())
            .unwrap()
    }
}
