//! The functions an ELF binary defines, read one way for everyone: tracerd resolves the
//! file offsets of uprobe-multi links from them, the reproducer lists a node's candidate
//! functions and finds the bytes of one function to disassemble.
//!
//! Where function names come from: `symtab` reads .symtab and .dynsym. A Go binary also
//! names every function in .gopclntab, which survives stripping (a stripped Go binary's
//! only list of its functions); `gopclntab` reads it, and its functions join the list in
//! [`functions`], ranked below the ELF tables.
use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context, Result};

pub mod gopclntab;
mod symtab;

/// A defined function of a binary.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FunctionSymbol {
    pub name: String,
    /// Symbol value (virtual address as linked; for a PIE, relative to its load base).
    pub address: u64,
    pub size: u64,
    /// The source file a local (static) function belongs to, from the STT_FILE symbol before it.
    pub source_file: Option<String>,
}

/// One definition of a function name, as a symbol table has it (aliases included).
#[derive(Clone, Debug)]
pub struct Definition {
    pub symbol: FunctionSymbol,
    /// where the code sits in the file (the offset a uprobe takes), when a section holds it
    pub file_offset: Option<u64>,
    pub weak: bool,
    /// from .dynsym rather than .symtab
    pub dynamic: bool,
    /// STT_FUNC with a size: a function the binary really defines here (not an ifunc
    /// resolver's target, a label or a size-less stub)
    pub sized_function: bool,
}

/// A binary read into memory.
pub struct Binary {
    path: PathBuf,
    data: Vec<u8>,
}

impl Binary {
    pub fn read(path: &Path) -> Result<Binary> {
        let data =
            std::fs::read(path).with_context(|| format!("binary {}: cannot read it", path.display()))?;
        Ok(Binary {
            path: path.to_path_buf(),
            data,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The parsed ELF file; errors name the file.
    pub fn elf(&self) -> Result<object::File<'_>> {
        let is_elf = matches!(
            object::FileKind::parse(&*self.data),
            Ok(object::FileKind::Elf32 | object::FileKind::Elf64)
        );
        if !is_elf {
            bail!("binary {}: not an ELF file", self.path.display());
        }
        object::File::parse(&*self.data)
            .map_err(|e| anyhow!("binary {}: malformed ELF file ({e})", self.path.display()))
    }
}

/// Every definition of a function in `file`, from every source of names (.symtab,
/// .dynsym, Go's table); an error when a Go table is there but cannot be read.
pub fn functions(file: &object::File<'_>) -> Result<Vec<Definition>> {
    let mut all = symtab::definitions(file);
    all.extend(gopclntab::definitions(file)?);
    Ok(all)
}

impl Binary {
    /// [`functions`] of this binary; errors name the file.
    pub fn functions(&self) -> Result<Vec<Definition>> {
        functions(&self.elf()?).with_context(|| format!("binary {}", self.path.display()))
    }
}

/// Defined functions (STT_FUNC, size > 0) of the ELF file at `binary`, from .symtab,
/// .dynsym and Go's table, one per address, sorted by name. Among aliases the .symtab one wins, then the
/// one with the fewest leading underscores, then the shortest ("write" over "__libc_write").
pub fn function_symbols(binary: &Path) -> Result<Vec<FunctionSymbol>> {
    Ok(one_per_address(Binary::read(binary)?.functions()?))
}

/// `all` with one symbol per address, sorted by name (see [`function_symbols`]).
pub fn one_per_address(all: Vec<Definition>) -> Vec<FunctionSymbol> {
    let mut all: Vec<Definition> = all.into_iter().filter(|d| d.sized_function).collect();
    let leading_underscores = |n: &str| n.len() - n.trim_start_matches('_').len();
    all.sort_by(|a, b| {
        let key = |d: &Definition| {
            (
                d.symbol.address,
                d.dynamic,
                leading_underscores(&d.symbol.name),
                d.symbol.name.len(),
            )
        };
        key(a)
            .cmp(&key(b))
            .then_with(|| a.symbol.name.cmp(&b.symbol.name))
    });
    all.dedup_by_key(|d| d.symbol.address);
    let mut functions: Vec<FunctionSymbol> = all.into_iter().map(|d| d.symbol).collect();
    functions.sort_by(|a, b| a.name.cmp(&b.name).then(a.address.cmp(&b.address)));
    functions
}

/// The function called `name` (any alias) in `all`, or an error that says why there is none.
pub fn find_function(binary: &Path, all: &[Definition], name: &str) -> Result<FunctionSymbol> {
    let sized = || all.iter().filter(|d| d.sized_function).map(|d| &d.symbol);
    let mut matches: Vec<&FunctionSymbol> = sized().filter(|s| s.name == name).collect();
    matches.sort_by_key(|s| s.address);
    matches.dedup_by_key(|s| s.address);
    match matches.as_slice() {
        [one] => Ok((*one).clone()),
        [] => {
            let count = sized()
                .map(|s| s.address)
                .collect::<std::collections::HashSet<_>>()
                .len();
            bail!(
                "binary {}: no function '{name}' (it has {count} functions; is it stripped?)",
                binary.display()
            )
        }
        several => {
            let at: Vec<String> = several.iter().map(|s| format!("{:#x}", s.address)).collect();
            bail!(
                "binary {}: function '{name}' is defined {} times (at {})",
                binary.display(),
                several.len(),
                at.join(", ")
            )
        }
    }
}

/// The bytes of `function`, from the section that holds its address range (PIE or not:
/// symbol values and section addresses are in the same address space).
pub fn function_bytes<'d>(file: &object::File<'d>, function: &FunctionSymbol) -> Option<&'d [u8]> {
    use object::{Object, ObjectSection};
    file.sections()
        .find_map(|section| section.data_range(function.address, function.size).ok().flatten())
}

/// The file offset of every function name defined in the ELF file at `binary` (the offset
/// a uprobe takes), for attaching many uprobes with one uprobe-multi link. A name defined
/// at two offsets is left out unless exactly one definition is strong, which then wins
/// (the rule libbpf applies); the caller attaches names left out one by one.
pub fn function_offsets(binary: &Path) -> Result<HashMap<String, u64>> {
    Ok(unique_offsets(Binary::read(binary)?.functions()?))
}

fn unique_offsets(all: Vec<Definition>) -> HashMap<String, u64> {
    struct Seen {
        offset: u64,
        weak: bool,
        ambiguous: bool,
    }
    let mut defs: HashMap<String, Seen> = HashMap::new();
    for d in all {
        let Some(offset) = d.file_offset else { continue };
        let weak = d.weak;
        match defs.get_mut(&d.symbol.name) {
            None => {
                defs.insert(
                    d.symbol.name,
                    Seen {
                        offset,
                        weak,
                        ambiguous: false,
                    },
                );
            }
            Some(s) if s.offset == offset => {}
            Some(s) if s.weak && !weak => {
                *s = Seen {
                    offset,
                    weak,
                    ambiguous: false,
                }
            }
            Some(s) if !s.weak && !weak => s.ambiguous = true,
            Some(_) => {}
        }
    }
    defs.into_iter()
        .filter(|(_, s)| !s.ambiguous)
        .map(|(n, s)| (n, s.offset))
        .collect()
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
        let symbols = function_symbols(&me).unwrap();
        assert!(symbols.iter().any(|s| s.name == "main" && s.size > 0));
        let e = function_offsets(Path::new("/nonexistent/bin"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("/nonexistent/bin"), "{e}");
        let e = function_offsets(Path::new("/proc/self/status"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("not an ELF"), "{e}");
    }

    fn def(name: &str, offset: u64, weak: bool) -> Definition {
        Definition {
            symbol: FunctionSymbol {
                name: name.into(),
                address: offset,
                size: 1,
                source_file: None,
            },
            file_offset: Some(offset),
            weak,
            dynamic: false,
            sized_function: true,
        }
    }

    #[test]
    fn a_strong_definition_wins_and_two_strong_ones_are_left_out() {
        let all = vec![
            def("a", 1, true),
            def("a", 2, false),
            def("b", 3, false),
            def("b", 4, false),
            def("c", 5, false),
            def("c", 5, false),
        ];
        let offsets = unique_offsets(all);
        assert_eq!(offsets.get("a"), Some(&2));
        assert_eq!(offsets.get("b"), None);
        assert_eq!(offsets.get("c"), Some(&5));
    }
}
