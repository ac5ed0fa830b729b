//! Static analysis of node binaries (ELF): which functions they define, and inside a function
//! (x86_64) the instruction boundaries where a uprobe can inject a fault, call sites of syscalls first.

use std::collections::HashMap;
use std::path::Path;

use anyhow::{anyhow, bail, Context};
use iced_x86::{Code, Decoder, DecoderOptions, Formatter, Instruction, IntelFormatter, Mnemonic};
use object::{
    elf as elf_consts, Architecture, Object, ObjectSection, ObjectSymbol, ObjectSymbolTable, RelocationFlags,
    RelocationTarget,
};
use tracedump::elf::{self, Binary};

pub use tracedump::elf::{function_symbols, FunctionSymbol};

/// Keeps the symbols whose name or source file matches any of `patterns` (glob, `glob` crate is already a
/// dependency: "raft*", "snapshot.c"); all of them when `patterns` is empty.
pub fn filter_symbols(
    symbols: Vec<FunctionSymbol>,
    patterns: &[String],
) -> anyhow::Result<Vec<FunctionSymbol>> {
    if patterns.is_empty() {
        return Ok(symbols);
    }
    let patterns = patterns
        .iter()
        .map(|p| glob::Pattern::new(p).map_err(|e| anyhow!("function pattern '{p}': {e}")))
        .collect::<anyhow::Result<Vec<_>>>()?;
    Ok(symbols
        .into_iter()
        .filter(|s| patterns.iter().any(|p| symbol_matches(s, p)))
        .collect())
}

/// Where in a function a Level-3 injection point sits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum SiteKind {
    /// A call (or tail jump) to a libc wrapper of a system call, or a `syscall` instruction.
    SyscallCall,
    /// Any other call, including indirect calls whose target is not known statically.
    OtherCall,
    Other,
}

/// One instruction boundary inside a function.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Site {
    /// Offset from the function's start (a uprobe at symbol+offset fires before this instruction).
    pub offset: u64,
    pub kind: SiteKind,
    /// The called function, without symbol version ("write"), when it resolves to a name.
    pub callee: Option<String>,
    /// The instruction in Intel syntax, calls with their callee's name ("call write").
    pub instruction: String,
}

/// Candidate points inside `symbol` for a Level-3 injection (a uprobe at symbol+offset fires before the
/// instruction at that offset executes): every instruction boundary except offset 0, ordered: call sites of
/// system calls first (address order), then other call sites (address order), then the remaining
/// instructions (address order).
pub fn injection_sites(binary: &Path, symbol: &str) -> anyhow::Result<Vec<Site>> {
    let bin = Binary::read(binary)?;
    let file = bin.elf()?;
    let arch = file.architecture();
    if arch != Architecture::X86_64 {
        let arch = format!("{arch:?}").to_lowercase();
        bail!(
            "binary {}: architecture {arch} is not supported for offsets (x86_64 only)",
            binary.display()
        );
    }
    let all = elf::functions(&file).with_context(|| format!("binary {}", binary.display()))?;
    let function = elf::find_function(binary, &all, symbol)?;
    let code = elf::function_bytes(&file, &function).ok_or_else(|| {
        anyhow!(
            "binary {}: no section holds the bytes of '{symbol}'",
            binary.display()
        )
    })?;
    let resolver = CallResolver::new(&file, &elf::one_per_address(all));
    let mut sites = decode_sites(binary, &function, code, &resolver);
    sites.sort_by_key(|s| (kind_rank(s.kind), s.offset));
    Ok(sites)
}

fn symbol_matches(symbol: &FunctionSymbol, pattern: &glob::Pattern) -> bool {
    let file_matches = |file: &str| {
        let base = Path::new(file)
            .file_name()
            .and_then(|b| b.to_str())
            .unwrap_or(file);
        pattern.matches(file) || pattern.matches(base)
    };
    pattern.matches(&symbol.name) || symbol.source_file.as_deref().is_some_and(file_matches)
}

/// Names the targets of calls: function symbols by address, PLT stubs and GOT slots by the
/// dynamic relocation of the slot.
struct CallResolver<'d> {
    functions: HashMap<u64, String>,
    got_slots: HashMap<u64, String>,
    /// Address and bytes of .plt, .plt.sec and .plt.got.
    plt: Vec<(u64, &'d [u8])>,
}

impl<'d> CallResolver<'d> {
    fn new(file: &object::File<'d>, functions: &[FunctionSymbol]) -> Self {
        let plt = file
            .sections()
            .filter(|s| matches!(s.name(), Ok(".plt" | ".plt.sec" | ".plt.got")))
            .filter_map(|s| Some((s.address(), s.data().ok()?)))
            .collect();
        CallResolver {
            functions: functions.iter().map(|f| (f.address, f.name.clone())).collect(),
            got_slots: got_slots(file),
            plt,
        }
    }

    /// The function a call, or a jump out of `caller` (a tail call), goes to, if it has a name.
    fn callee(&self, instr: &Instruction, caller: &FunctionSymbol) -> Option<String> {
        if instr.code() == Code::Call_rel32_64 {
            return self.name_at(instr.near_branch_target());
        }
        if matches!(instr.code(), Code::Jmp_rel32_64 | Code::Jmp_rel8_64) {
            let target = instr.near_branch_target();
            let inside = target >= caller.address && target - caller.address < caller.size;
            return if inside { None } else { self.name_at(target) };
        }
        if matches!(instr.code(), Code::Call_rm64 | Code::Jmp_rm64) {
            return self.got_slot_name(instr);
        }
        None
    }

    fn name_at(&self, address: u64) -> Option<String> {
        match self.functions.get(&address) {
            Some(name) => Some(plain_name(name).to_string()),
            None => self.plt_stub_name(address),
        }
    }

    /// A PLT stub starts (after an optional endbr64) with `jmp [rip+disp]` through its GOT slot.
    fn plt_stub_name(&self, address: u64) -> Option<String> {
        let (start, bytes) = self
            .plt
            .iter()
            .find(|(start, bytes)| address >= *start && address - *start < bytes.len() as u64)?;
        let stub = bytes.get(usize::try_from(address - start).ok()?..)?;
        let mut decoder = Decoder::with_ip(64, stub, address, DecoderOptions::NONE);
        let mut instr = decoder.decode();
        if instr.mnemonic() == Mnemonic::Endbr64 {
            instr = decoder.decode();
        }
        if instr.code() != Code::Jmp_rm64 {
            return None;
        }
        self.got_slot_name(&instr)
    }

    /// The symbol bound to the GOT slot that a `[rip+disp]` operand reads.
    fn got_slot_name(&self, instr: &Instruction) -> Option<String> {
        if !instr.is_ip_rel_memory_operand() {
            return None;
        }
        self.got_slots.get(&instr.ip_rel_memory_address()).cloned()
    }
}

/// GOT slot address → name of the symbol the dynamic loader binds it to (JUMP_SLOT, GLOB_DAT).
fn got_slots(file: &object::File<'_>) -> HashMap<u64, String> {
    let (Some(relocations), Some(dynsym)) = (file.dynamic_relocations(), file.dynamic_symbol_table()) else {
        return HashMap::new();
    };
    let mut slots = HashMap::new();
    for (slot, relocation) in relocations {
        let flags = relocation.flags();
        let binds = matches!(
            flags,
            RelocationFlags::Elf {
                r_type: elf_consts::R_X86_64_JUMP_SLOT | elf_consts::R_X86_64_GLOB_DAT
            }
        );
        let RelocationTarget::Symbol(index) = relocation.target() else {
            continue;
        };
        let name = dynsym
            .symbol_by_index(index)
            .ok()
            .and_then(|s| s.name().ok())
            .filter(|n| !n.is_empty());
        if let (true, Some(name)) = (binds, name) {
            slots.insert(slot, plain_name(name).to_string());
        }
    }
    slots
}

/// The name without its symbol version ("write@GLIBC_2.2.5" → "write").
fn plain_name(name: &str) -> &str {
    name.split_once('@').map_or(name, |(plain, _)| plain)
}

/// Libc wrappers whose system call has another name.
const WRAPPER_SYSCALLS: [(&str, &str); 5] = [
    ("send", "sendto"),
    ("recv", "recvfrom"),
    ("pread", "pread64"),
    ("pwrite", "pwrite64"),
    ("fstatat", "newfstatat"),
];

/// Whether `name` is (a libc wrapper of) a Linux system call, libc's generic `syscall()` included:
/// leading underscores and trailing "_chk", "64", "_2" are dropped until a syscall name remains
/// ("__write_chk", "open64", "__open_2").
fn is_syscall_name(name: &str) -> bool {
    if name == "syscall" {
        return true;
    }
    let mut name = name.trim_start_matches('_');
    loop {
        let syscall = WRAPPER_SYSCALLS
            .iter()
            .find(|(w, _)| *w == name)
            .map_or(name, |(_, s)| *s);
        if tracedump::syscalls::syscall_number(syscall).is_some() {
            return true;
        }
        match ["_chk", "64", "_2"]
            .iter()
            .find_map(|suffix| name.strip_suffix(suffix))
        {
            Some(shorter) => name = shorter,
            None => return false,
        }
    }
}

/// Every instruction of `function` but the first, classified, in address order. Decoding stops at
/// bytes that are no instruction: offsets after them could not be trusted to be boundaries.
fn decode_sites(
    binary: &Path,
    function: &FunctionSymbol,
    code: &[u8],
    resolver: &CallResolver<'_>,
) -> Vec<Site> {
    let mut formatter = IntelFormatter::new();
    formatter.options_mut().set_space_after_operand_separator(true);
    formatter.options_mut().set_hex_prefix("0x");
    formatter.options_mut().set_hex_suffix("");
    formatter.options_mut().set_uppercase_hex(false);
    formatter.options_mut().set_branch_leading_zeros(false);
    let mut sites = Vec::new();
    for instr in Decoder::with_ip(64, code, function.address, DecoderOptions::NONE) {
        let offset = instr.ip() - function.address;
        if instr.is_invalid() {
            log::warn!(
                "binary {}: {}+{offset:#x} does not decode; ignoring the rest of it",
                binary.display(),
                function.name
            );
            break;
        }
        if offset > 0 {
            sites.push(site(&instr, offset, function, resolver, &mut formatter));
        }
    }
    sites
}

fn site(
    instr: &Instruction,
    offset: u64,
    function: &FunctionSymbol,
    resolver: &CallResolver<'_>,
    formatter: &mut IntelFormatter,
) -> Site {
    let mut text = String::new();
    formatter.format(instr, &mut text);
    if instr.mnemonic() == Mnemonic::Syscall {
        return Site {
            offset,
            kind: SiteKind::SyscallCall,
            callee: Some("syscall".to_string()),
            instruction: text,
        };
    }
    let is_call = matches!(instr.code(), Code::Call_rel32_64 | Code::Call_rm64);
    let Some(callee) = resolver.callee(instr, function) else {
        let kind = if is_call {
            SiteKind::OtherCall
        } else {
            SiteKind::Other
        };
        return Site {
            offset,
            kind,
            callee: None,
            instruction: text,
        };
    };
    let kind = if is_syscall_name(&callee) {
        SiteKind::SyscallCall
    } else {
        SiteKind::OtherCall
    };
    let instruction = format!("{} {callee}", if is_call { "call" } else { "jmp" });
    Site {
        offset,
        kind,
        callee: Some(callee),
        instruction,
    }
}

fn kind_rank(kind: SiteKind) -> u8 {
    match kind {
        SiteKind::SyscallCall => 0,
        SiteKind::OtherCall => 1,
        SiteKind::Other => 2,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;
    use std::process::Command;

    /// A node-like program: `store_snapshot` makes five syscalls around one call of `checksum`.
    const PROG: &str = r#"
#include <fcntl.h>
#include <stddef.h>
#include <sys/types.h>
#include <unistd.h>

static __attribute__((noipa)) unsigned checksum(const char *buf, size_t len) {
    unsigned sum = 0;
    for (size_t i = 0; i < len; i++)
        sum = sum * 31 + (unsigned char)buf[i];
    return sum;
}

static __attribute__((noipa)) int store_snapshot(const char *path, const char *data, size_t len) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    unsigned sum = checksum(data, len);
    ssize_t a = write(fd, &sum, sizeof sum);
    ssize_t b = write(fd, data, len);
    int s = fsync(fd);
    int c = close(fd);
    return a + b + s + c == (ssize_t)(len + sizeof sum) ? 0 : -1;
}

int main(int argc, char **argv) {
    return argc > 1 ? store_snapshot(argv[1], "hello", 5) : 2;
}
"#;

    /// Compiles PROG with `flags` into `dir`; the test fails when gcc does.
    fn compile(dir: &Path, name: &str, flags: &[&str]) -> PathBuf {
        let source = dir.join("prog.c");
        std::fs::write(&source, PROG).unwrap();
        let out = dir.join(name);
        let status = Command::new("gcc")
            .current_dir(dir)
            .args(["-O1", "-g", "-o"])
            .arg(&out)
            .arg("prog.c")
            .args(flags)
            .status()
            .expect("gcc runs");
        assert!(status.success(), "gcc {flags:?} failed");
        out
    }

    fn check_program(binary: &Path) {
        let symbols = function_symbols(binary).unwrap();
        let names: Vec<&str> = symbols.iter().map(|s| s.name.as_str()).collect();
        assert!(
            names.windows(2).all(|w| w[0] <= w[1]),
            "sorted by name: {names:?}"
        );
        let find = |n: &str| {
            symbols
                .iter()
                .find(|s| s.name == n)
                .unwrap_or_else(|| panic!("{n} in {names:?}"))
                .clone()
        };
        let store = find("store_snapshot");
        let checksum = find("checksum");
        assert_eq!(store.source_file.as_deref(), Some("prog.c"));
        assert_eq!(checksum.source_file.as_deref(), Some("prog.c"));
        assert_eq!(find("main").source_file, None, "main is global");
        assert!(store.size > 0 && checksum.size > 0);

        let by_name = filter_symbols(symbols.clone(), &["store_*".to_string()]).unwrap();
        assert_eq!(by_name, vec![store.clone()]);
        let by_file = filter_symbols(symbols.clone(), &["prog.c".to_string()]).unwrap();
        assert_eq!(
            by_file.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(),
            ["checksum", "store_snapshot"]
        );
        assert_eq!(filter_symbols(symbols.clone(), &[]).unwrap(), symbols);

        let sites = injection_sites(binary, "store_snapshot").unwrap();
        for site in &sites {
            println!(
                "  {:>4} {:?} {:?} {}",
                site.offset, site.kind, site.callee, site.instruction
            );
        }
        let group = |kind: SiteKind| sites.iter().filter(|s| s.kind == kind).collect::<Vec<_>>();
        let (syscalls, calls, others) = (
            group(SiteKind::SyscallCall),
            group(SiteKind::OtherCall),
            group(SiteKind::Other),
        );
        let callees = |g: &[&Site]| {
            g.iter()
                .map(|s| s.callee.clone().unwrap_or_default())
                .collect::<Vec<_>>()
        };
        assert_eq!(callees(&syscalls), ["open", "write", "write", "fsync", "close"]);
        assert_eq!(callees(&calls), ["checksum"]);
        assert_eq!(calls[0].instruction, "call checksum");
        assert_eq!(syscalls[1].instruction, "call write");
        assert!(others.len() > 5 && others.iter().all(|s| s.callee.is_none()));
        let expected_order: Vec<&Site> = syscalls.iter().chain(&calls).chain(&others).copied().collect();
        assert_eq!(
            sites.iter().collect::<Vec<_>>(),
            expected_order,
            "syscall calls, other calls, then the rest"
        );
        for g in [&syscalls, &calls, &others] {
            assert!(
                g.windows(2).all(|w| w[0].offset < w[1].offset),
                "address order within a group"
            );
        }
        assert!(sites.iter().all(|s| s.offset > 0 && s.offset < store.size));
        // The checksum call lies between open and the first write in the source, and so in the code.
        assert!(syscalls[0].offset < calls[0].offset && calls[0].offset < syscalls[1].offset);
    }

    /// The first byte of the instruction at `function`+`offset` in `binary`.
    fn opcode_at(binary: &Path, function: &str, offset: u64) -> u8 {
        let bin = Binary::read(binary).unwrap();
        let file = bin.elf().unwrap();
        let function = elf::find_function(binary, &elf::functions(&file).unwrap(), function).unwrap();
        elf::function_bytes(&file, &function).unwrap()[offset as usize]
    }

    fn has_section(binary: &Path, name: &str) -> bool {
        let bin = Binary::read(binary).unwrap();
        let found = bin.elf().unwrap().section_by_name(name).is_some();
        found
    }

    fn first_write_site(binary: &Path) -> u64 {
        let sites = injection_sites(binary, "store_snapshot").unwrap();
        sites
            .iter()
            .find(|s| s.callee.as_deref() == Some("write"))
            .unwrap()
            .offset
    }

    #[test]
    fn finds_functions_and_sites_in_pie_non_pie_ibt_and_no_plt_builds() {
        let dir = tempfile::tempdir().unwrap();
        let pie = compile(dir.path(), "pie", &["-pie", "-fPIE"]);
        let nopie = compile(dir.path(), "nopie", &["-no-pie", "-fno-PIE"]);
        let ibt = compile(dir.path(), "ibt", &["-fcf-protection=full", "-Wl,-z,ibtplt"]);
        let noplt = compile(dir.path(), "noplt", &["-fno-plt"]);
        for binary in [&pie, &nopie, &ibt, &noplt] {
            println!("{}:", binary.display());
            check_program(binary);
        }
        let address = |b: &Path| {
            function_symbols(b)
                .unwrap()
                .into_iter()
                .find(|s| s.name == "main")
                .unwrap()
                .address
        };
        assert!(
            address(&pie) < 0x10_0000 && address(&nopie) >= 0x40_0000,
            "PIE and non-PIE layouts"
        );
        // Calls go through .plt (e8 rel32), through .plt.sec with its endbr64, or through the GOT (ff /2).
        assert_eq!(opcode_at(&pie, "store_snapshot", first_write_site(&pie)), 0xe8);
        assert!(has_section(&ibt, ".plt.sec"));
        assert_eq!(opcode_at(&ibt, "store_snapshot", first_write_site(&ibt)), 0xe8);
        assert_eq!(
            opcode_at(&noplt, "store_snapshot", first_write_site(&noplt)),
            0xff
        );
    }

    #[test]
    fn static_build_names_aliases_once_and_finds_syscall_instructions() {
        if !Path::new("/usr/lib/x86_64-linux-gnu/libc.a").exists() {
            println!("NOTE: no static libc installed; the -static variant is skipped");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let binary = compile(dir.path(), "static", &["-static"]);
        check_program(&binary);
        let symbols = function_symbols(&binary).unwrap();
        assert!(symbols.iter().any(|s| s.name == "write"));
        assert!(
            !symbols.iter().any(|s| s.name == "__libc_write"),
            "one name per address, the plainest"
        );
        let sites = injection_sites(&binary, "write").unwrap();
        let raw = sites
            .iter()
            .find(|s| s.instruction == "syscall")
            .expect("glibc's write makes the syscall itself");
        assert_eq!(
            (raw.kind, raw.callee.as_deref()),
            (SiteKind::SyscallCall, Some("syscall"))
        );
        assert_eq!(sites[0].kind, SiteKind::SyscallCall);
        assert_eq!(
            injection_sites(&binary, "__libc_write").unwrap(),
            sites,
            "an alias names the same function"
        );
    }

    #[test]
    fn errors_name_the_file_and_the_problem() {
        let dir = tempfile::tempdir().unwrap();
        let text = dir.path().join("notes.txt");
        std::fs::write(&text, "not a program\n").unwrap();
        let not_elf = format!("binary {}: not an ELF file", text.display());
        assert_eq!(function_symbols(&text).unwrap_err().to_string(), not_elf);
        assert_eq!(injection_sites(&text, "main").unwrap_err().to_string(), not_elf);

        let missing = dir.path().join("absent");
        assert_eq!(
            function_symbols(&missing).unwrap_err().to_string(),
            format!("binary {}: cannot read it", missing.display())
        );

        let pie = compile(dir.path(), "pie", &[]);
        let count = function_symbols(&pie).unwrap().len();
        assert_eq!(
            injection_sites(&pie, "load_snapshot").unwrap_err().to_string(),
            format!(
                "binary {}: no function 'load_snapshot' (it has {count} functions; is it stripped?)",
                pie.display()
            )
        );
        let stripped = compile(dir.path(), "stripped", &["-s"]);
        assert!(!function_symbols(&stripped)
            .unwrap()
            .iter()
            .any(|s| s.name == "store_snapshot"));
        assert!(injection_sites(&stripped, "store_snapshot")
            .unwrap_err()
            .to_string()
            .ends_with("is it stripped?)"));

        // The same program claiming to be for aarch64 (e_machine = EM_AARCH64): symbols yes, offsets no.
        let mut data = std::fs::read(&pie).unwrap();
        data[18..20].copy_from_slice(&183u16.to_le_bytes());
        let arm = dir.path().join("arm");
        std::fs::write(&arm, data).unwrap();
        assert!(function_symbols(&arm)
            .unwrap()
            .iter()
            .any(|s| s.name == "store_snapshot"));
        assert_eq!(
            injection_sites(&arm, "store_snapshot").unwrap_err().to_string(),
            format!(
                "binary {}: architecture aarch64 is not supported for offsets (x86_64 only)",
                arm.display()
            )
        );

        let err = filter_symbols(Vec::new(), &["raft[".to_string()])
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("function pattern 'raft[': "), "{err}");
    }

    #[test]
    fn syscall_names_include_libc_wrapper_variants() {
        for name in [
            "write",
            "__write_chk",
            "open64",
            "__open_2",
            "__open64_2",
            "pwrite64",
            "__pread64_chk",
            "fsync",
            "fdatasync",
            "rename",
            "unlink",
            "openat",
            "connect",
            "accept",
            "send",
            "sendmsg",
            "recv",
            "recvfrom",
            "syscall",
        ] {
            assert!(is_syscall_name(name), "{name}");
        }
        for name in [
            "fopen64",
            "fflush",
            "__snprintf_chk",
            "__errno_location",
            "checksum",
            "_2",
            "",
        ] {
            assert!(!is_syscall_name(name), "{name}");
        }
        assert_eq!(plain_name("write@GLIBC_2.2.5"), "write");
        assert_eq!(plain_name("memcpy@@GLIBC_2.14"), "memcpy");
        assert_eq!(plain_name("checksum"), "checksum");
    }

    #[test]
    fn reads_a_real_distribution_binary_when_installed() {
        let redis = Path::new("/usr/bin/redis-server");
        if !redis.exists() {
            println!(
                "NOTE: {} is not installed; the real-binary check is skipped",
                redis.display()
            );
            return;
        }
        let symbols = function_symbols(redis).unwrap();
        println!("{}: {} functions", redis.display(), symbols.len());
        assert!(symbols.len() > 1000);
        for name in ["rdbSave", "rdbSaveRio"] {
            let Some(function) = symbols.iter().find(|s| s.name == name) else {
                println!("NOTE: no {name} in this redis version");
                continue;
            };
            let sites = injection_sites(redis, name).unwrap();
            let count = |k: SiteKind| sites.iter().filter(|s| s.kind == k).count();
            let syscalls: Vec<&str> = sites
                .iter()
                .filter(|s| s.kind == SiteKind::SyscallCall)
                .filter_map(|s| s.callee.as_deref())
                .collect();
            println!(
                "{name}: {} sites, {} syscall calls {syscalls:?}, {} other calls, {} other",
                sites.len(),
                count(SiteKind::SyscallCall),
                count(SiteKind::OtherCall),
                count(SiteKind::Other)
            );
            assert!(sites.iter().all(|s| s.offset > 0 && s.offset < function.size));
            assert!(sites
                .windows(2)
                .all(|w| (kind_rank(w[0].kind), w[0].offset) < (kind_rank(w[1].kind), w[1].offset)));
            assert!(
                sites
                    .iter()
                    .any(|s| s.kind == SiteKind::OtherCall && s.callee.is_some()),
                "PLT calls resolve"
            );
            if name == "rdbSave" {
                assert!(
                    syscalls.contains(&"rename") && syscalls.contains(&"fsync"),
                    "rdbSave renames its temp file"
                );
            }
        }
    }
}
