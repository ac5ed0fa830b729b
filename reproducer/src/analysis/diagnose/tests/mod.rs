//! The diagnosis's unit tests, one file per rule family, on the timelines of `fixtures`.
mod fixtures;

mod explain;
mod flows;
mod network;
mod preceding;
mod process;
mod render;
mod score;
mod silences;
mod syscalls;
