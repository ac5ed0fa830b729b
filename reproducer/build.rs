//! Compiles bpf/injector.bpf.c and generates its Rust skeleton (with the Rust mirror of
//! bpf/injector.h) into OUT_DIR.
#[path = "../bpf/build_skeleton.rs"]
mod build_skeleton;

fn main() {
    build_skeleton::build(&["injector"]);
}
