//! Compiles bpf/tracer.bpf.c (and floor.bpf.c, the empty program the benchmark compares
//! against: examples/syscall_floor.rs) and generates their Rust skeletons, with the Rust
//! mirror of bpf/events.h, into OUT_DIR.
#[path = "../bpf/build_skeleton.rs"]
mod build_skeleton;

fn main() {
    build_skeleton::build(&["tracer", "floor"]);
}
