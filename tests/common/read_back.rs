//! A reader fed bytes written to a file, with the largest single allocation it makes
//! watched: the property tests of the file readers (tracedump/tests/dump_props.rs,
//! tests/reader_props.rs) include this file. It installs the global allocator of the test
//! binary that includes it, which forwards to the system allocator and only records sizes.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::path::Path;

/// Tracks the largest single allocation made on this thread while armed.
struct Watching;

thread_local! {
    static ARMED: Cell<bool> = const { Cell::new(false) };
    static LARGEST: Cell<usize> = const { Cell::new(0) };
}

fn note(size: usize) {
    // try_with: the thread-locals may be gone while a thread is torn down
    let _ = ARMED.try_with(|armed| {
        if armed.get() {
            let _ = LARGEST.try_with(|l| l.set(l.get().max(size)));
        }
    });
}

// SAFETY: forwards to the system allocator; only records sizes.
unsafe impl GlobalAlloc for Watching {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Watching = Watching;

/// Runs `read` on `bytes` written to a file; returns its error text (or None when it read
/// fine) and the largest allocation it made. A panic fails the property.
pub fn read_back<T>(
    bytes: &[u8],
    name: &str,
    read: impl Fn(&Path) -> anyhow::Result<T>,
) -> (Option<String>, usize) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(name);
    std::fs::write(&path, bytes).unwrap();
    LARGEST.with(|l| l.set(0));
    ARMED.with(|a| a.set(true));
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| read(&path)));
    ARMED.with(|a| a.set(false));
    let largest = LARGEST.with(|l| l.get());
    match result {
        Ok(Ok(_)) => (None, largest),
        Ok(Err(e)) => (Some(format!("{e:#}")), largest),
        Err(_) => panic!("reading {} panicked", path.display()),
    }
}
