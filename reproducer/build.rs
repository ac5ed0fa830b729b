//! Compiles bpf/injector.bpf.c and generates its Rust skeleton (with the Rust mirror of
//! bpf/injector.h) into OUT_DIR.
use std::env;
use std::path::PathBuf;

use libbpf_cargo::SkeletonBuilder;

fn main() {
    let manifest = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let bpf_dir = manifest.join("..").join("bpf");
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR")).join("injector.skel.rs");
    if env::var("CARGO_CFG_TARGET_ARCH").as_deref() != Ok("x86_64") {
        panic!("the injector's BPF programs support x86_64 only");
    }
    let src = bpf_dir.join("injector.bpf.c");
    SkeletonBuilder::new()
        .source(&src)
        .clang_args([
            "-I".into(),
            bpf_dir.clone().into_os_string(),
            std::ffi::OsString::from("-D__TARGET_ARCH_x86"),
            "-O2".into(),
            "-g".into(),
            "-Wall".into(),
        ])
        .build_and_generate(&out)
        .unwrap_or_else(|e| panic!("building {}: {e:#}", src.display()));
    for f in ["injector.bpf.c", "injector.h", "vmlinux.h"] {
        println!("cargo:rerun-if-changed={}", bpf_dir.join(f).display());
    }
}
