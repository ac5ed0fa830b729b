//! Compiles bpf/injector.bpf.c and generates its Rust skeleton (with the Rust mirror of
//! bpf/injector.h) into OUT_DIR — for the test bed only: the analysis alone builds no BPF.
#[cfg(feature = "testbed")]
#[path = "../bpf/build_skeleton.rs"]
mod build_skeleton;

fn main() {
    #[cfg(feature = "testbed")]
    build_skeleton::build(&["injector"]);
}
