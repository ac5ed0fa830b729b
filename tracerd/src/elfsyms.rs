//! File offsets of a binary's functions, for attaching many uprobes with one uprobe-multi
//! link. The engine resolves names itself (one pass over .symtab and .dynsym per binary,
//! and over Go's `.gopclntab`, the only table of a stripped Go binary)
//! rather than through libbpf, which rejects the whole link for a stripped binary (no
//! .symtab) or for one name defined twice; here such a name is merely left out, and the
//! engine attaches it on its own.
use std::collections::HashMap;
use std::path::Path;

use anyhow::{anyhow, Result};
use object::{Object, ObjectSection, ObjectSymbol, SymbolKind, SymbolSection};

/// Where a name is defined, and whether that definition is weak.
struct Definition {
    offset: u64,
    weak: bool,
    ambiguous: bool,
}

/// The file offset of every function name defined in the ELF file at `binary` (the
/// offset a uprobe takes). A name defined at two offsets is left out unless exactly one
/// definition is strong, which then wins (the rule libbpf applies).
pub fn function_offsets(binary: &Path) -> Result<HashMap<String, u64>> {
    let data = std::fs::read(binary).map_err(|e| anyhow!("{}: {e}", binary.display()))?;
    let file = object::File::parse(&*data).map_err(|e| anyhow!("{}: not an ELF file we can read ({e})", binary.display()))?;
    let mut defs: HashMap<String, Definition> = HashMap::new();
    for sym in file.symbols().chain(file.dynamic_symbols()) {
        let (Some(offset), Ok(name)) = (file_offset(&file, &sym), sym.name()) else { continue };
        if name.is_empty() {
            continue;
        }
        let weak = sym.is_weak();
        match defs.get_mut(name) {
            None => {
                defs.insert(name.to_string(), Definition { offset, weak, ambiguous: false });
            }
            Some(d) if d.offset == offset => {}
            Some(d) if d.weak && !weak => *d = Definition { offset, weak, ambiguous: false },
            Some(d) if !d.weak && !weak => d.ambiguous = true,
            Some(_) => {}
        }
    }
    let mut offsets: HashMap<String, u64> =
        defs.into_iter().filter(|(_, d)| !d.ambiguous).map(|(n, d)| (n, d.offset)).collect();
    // a stripped Go binary: its functions are only in Go's own table
    let go = crate::gopclntab::functions(&file).map_err(|e| anyhow!("{}: {e}", binary.display()))?;
    for f in go.unwrap_or_default() {
        if let Some(offset) = crate::gopclntab::file_offset(&file, f.address) {
            offsets.entry(f.name).or_insert(offset);
        }
    }
    Ok(offsets)
}

/// The file offset of a defined function symbol; None for anything else.
fn file_offset<'d>(file: &object::File<'d>, sym: &object::Symbol<'d, '_>) -> Option<u64> {
    if sym.kind() != SymbolKind::Text || !sym.is_definition() {
        return None;
    }
    let SymbolSection::Section(index) = sym.section() else { return None };
    let section = file.section_by_index(index).ok()?;
    let (start, _) = section.file_range()?;
    sym.address().checked_sub(section.address())?.checked_add(start)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_functions_of_this_test_binary() {
        let me = std::env::current_exe().unwrap();
        let offsets = function_offsets(&me).unwrap();
        assert!(offsets.contains_key("main"), "main is a defined function");
        assert!(offsets.values().all(|&o| o > 0));
        let e = function_offsets(Path::new("/nonexistent/bin")).unwrap_err().to_string();
        assert!(e.contains("/nonexistent/bin"), "{e}");
        let e = function_offsets(Path::new("/proc/self/status")).unwrap_err().to_string();
        assert!(e.contains("not an ELF"), "{e}");
    }
}
