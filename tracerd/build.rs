//! Compiles bpf/tracer.bpf.c (with fd_table_probe.bpf.c, the kernel feature it asks about at
//! start, and floor.bpf.c, the empty program the benchmark compares against:
//! examples/syscall_floor.rs) and generates their Rust skeletons, with the Rust
//! mirror of bpf/events.h, into OUT_DIR.
#[path = "../bpf/build_skeleton.rs"]
mod build_skeleton;

fn main() {
    build_skeleton::build(&["tracer", "floor", "fd_table_probe"]);
}
