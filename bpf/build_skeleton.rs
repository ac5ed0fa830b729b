//! The one way the workspace builds its BPF programs (used by tracerd/build.rs and
//! reproducer/build.rs through `#[path]`): compile bpf/NAME.bpf.c for x86_64 with warnings as
//! errors, generate its Rust skeleton (and with it the Rust view of the headers it uses) into
//! OUT_DIR/NAME.skel.rs, and rebuild when a file of bpf/ changes.
use std::env;
use std::path::PathBuf;

use libbpf_cargo::SkeletonBuilder;

pub fn build(names: &[&str]) {
    let manifest = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let bpf_dir = manifest.join("..").join("bpf");
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    match env::var("CARGO_CFG_TARGET_ARCH").as_deref() {
        Ok("x86_64") | Err(_) => {}
        Ok(other) => panic!("the BPF programs support x86_64 only, not {other}"),
    }
    for name in names {
        let src = bpf_dir.join(format!("{name}.bpf.c"));
        SkeletonBuilder::new()
            .source(&src)
            .clang_args([
                "-I".into(),
                bpf_dir.clone().into_os_string(),
                "-D__TARGET_ARCH_x86".into(),
                "-O2".into(),
                "-g".into(),
                "-Wall".into(),
                "-Werror".into(),
            ])
            .build_and_generate(out_dir.join(format!("{name}.skel.rs")))
            .unwrap_or_else(|e| panic!("building {}: {e:#}", src.display()));
    }
    // a directory: cargo rebuilds when any file under it changes
    println!("cargo:rerun-if-changed={}", bpf_dir.display());
}
