//! Compiles bpf/tracer.bpf.c and generates its Rust skeleton (and with it the
//! Rust mirror of bpf/events.h) into OUT_DIR.
use std::env;
use std::path::PathBuf;

use libbpf_cargo::SkeletonBuilder;

fn main() {
    let manifest = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let bpf_dir = manifest.join("..").join("bpf");
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let arch = match env::var("CARGO_CFG_TARGET_ARCH").as_deref() {
        Ok("x86_64") => "x86",
        Ok(other) => panic!("tracerd's BPF programs support x86_64 only, not {other}"),
        Err(_) => "x86",
    };
    // floor.bpf.c: the empty program the benchmark compares against (examples/syscall_floor.rs)
    for name in ["tracer", "floor"] {
        let src = bpf_dir.join(format!("{name}.bpf.c"));
        SkeletonBuilder::new()
            .source(&src)
            .clang_args([
                "-I".into(),
                bpf_dir.clone().into_os_string(),
                format!("-D__TARGET_ARCH_{arch}").into(),
                "-O2".into(),
                "-g".into(),
                "-Wall".into(),
            ])
            .build_and_generate(out_dir.join(format!("{name}.skel.rs")))
            .unwrap_or_else(|e| panic!("building {}: {e:#}", src.display()));
    }
    for f in ["tracer.bpf.c", "floor.bpf.c", "events.h", "cwd.h", "vmlinux.h"] {
        println!("cargo:rerun-if-changed={}", bpf_dir.join(f).display());
    }
}
