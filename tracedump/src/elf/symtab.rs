//! Function definitions from the ELF symbol tables, .symtab (with the source file of each
//! local function, from the STT_FILE symbol before it) and .dynsym, in one pass each.
use object::{elf, Object, ObjectSection, ObjectSymbol, SymbolFlags, SymbolKind, SymbolSection};

use super::{Definition, FunctionSymbol};

/// Every defined code symbol of .symtab and .dynsym, aliases included.
pub(super) fn definitions(file: &object::File<'_>) -> Vec<Definition> {
    let mut found = Vec::new();
    let mut source_file: Option<String> = None;
    for symbol in file.symbols() {
        if symbol.kind() == SymbolKind::File {
            source_file = symbol.name().ok().filter(|n| !n.is_empty()).map(str::to_string);
        } else if let Some(mut d) = definition(file, &symbol, false) {
            d.symbol.source_file = if symbol.is_local() {
                source_file.clone()
            } else {
                None
            };
            found.push(d);
        }
    }
    found.extend(file.dynamic_symbols().filter_map(|s| definition(file, &s, true)));
    found
}

fn definition<'d>(
    file: &object::File<'d>,
    symbol: &object::Symbol<'d, '_>,
    dynamic: bool,
) -> Option<Definition> {
    let SymbolSection::Section(index) = symbol.section() else {
        return None;
    };
    let stt_func =
        matches!(symbol.flags(), SymbolFlags::Elf { st_info, .. } if st_info & 0xf == elf::STT_FUNC);
    let text = symbol.kind() == SymbolKind::Text && symbol.is_definition();
    if !stt_func && !text {
        return None;
    }
    let name = symbol.name().ok().filter(|n| !n.is_empty())?;
    let file_offset = if text {
        file_offset(file, index, symbol.address())
    } else {
        None
    };
    Some(Definition {
        symbol: FunctionSymbol {
            name: name.to_string(),
            address: symbol.address(),
            size: symbol.size(),
            source_file: None,
        },
        file_offset,
        weak: symbol.is_weak(),
        dynamic,
        sized_function: stt_func && symbol.size() > 0,
    })
}

/// Where the byte at `address` of section `index` sits in the file.
fn file_offset(file: &object::File<'_>, index: object::SectionIndex, address: u64) -> Option<u64> {
    let section = file.section_by_index(index).ok()?;
    let (start, _) = section.file_range()?;
    address.checked_sub(section.address())?.checked_add(start)
}
