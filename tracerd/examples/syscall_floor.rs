//! Benchmark helper: attaches an empty program to the syscall-exit hook tracerd uses and
//! waits for SIGTERM/SIGINT. scripts/bench-tracerd measures syscall cost with it attached
//! to know the floor that any sys_exit tracer pays.
use std::mem::MaybeUninit;

use libbpf_rs::skel::{OpenSkel, Skel, SkelBuilder};

mod floor {
    #![allow(clippy::all, non_camel_case_types, dead_code)]
    include!(concat!(env!("OUT_DIR"), "/floor.skel.rs"));
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut storage = MaybeUninit::uninit();
    let open = floor::FloorSkelBuilder::default().open(&mut storage)?;
    let mut skel = open.load()?;
    skel.attach()?;
    let mut signals = signal_hook::iterator::Signals::new([libc::SIGTERM, libc::SIGINT])?;
    eprintln!("ready: empty sys_exit program attached");
    signals.forever().next();
    Ok(())
}
