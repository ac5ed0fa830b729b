//! A libbpf-rs skeleton together with the storage of the BPF object it borrows. A skeleton
//! refers to its `OpenObject` for as long as it lives; keeping both in one owner (instead
//! of leaking the object's storage) frees the object when the skeleton goes, so a program
//! that loads a skeleton per run (the reproducer: one per run, up to hundreds) does not grow.
use std::mem::{ManuallyDrop, MaybeUninit};
use std::ops::{Deref, DerefMut};

use libbpf_rs::OpenObject;

pub struct OwnedSkel<S> {
    // dropped by hand, before `storage`: the skeleton closes the object that lives there
    skel: ManuallyDrop<S>,
    storage: *mut MaybeUninit<OpenObject>,
}

impl<S> OwnedSkel<S> {
    /// Opens, configures and loads a skeleton with `build`, in storage this value owns.
    pub fn new<E>(
        build: impl FnOnce(&'static mut MaybeUninit<OpenObject>) -> Result<S, E>,
    ) -> Result<Self, E> {
        let storage = Box::into_raw(Box::new(MaybeUninit::uninit()));
        // SAFETY: `storage` is a fresh allocation; the only reference to it goes to `build`,
        // and it is freed only after the skeleton holding that reference is dropped (Drop,
        // or right here when `build` failed and dropped whatever it had opened).
        match build(unsafe { &mut *storage }) {
            Ok(skel) => Ok(OwnedSkel {
                skel: ManuallyDrop::new(skel),
                storage,
            }),
            Err(e) => {
                // SAFETY: from Box::into_raw above; nothing refers to it any more.
                drop(unsafe { Box::from_raw(storage) });
                Err(e)
            }
        }
    }
}

impl<S> Deref for OwnedSkel<S> {
    type Target = S;
    fn deref(&self) -> &S {
        &self.skel
    }
}

impl<S> DerefMut for OwnedSkel<S> {
    fn deref_mut(&mut self) -> &mut S {
        &mut self.skel
    }
}

impl<S> Drop for OwnedSkel<S> {
    fn drop(&mut self) {
        // SAFETY: the skeleton is dropped exactly once, here, and before the storage it
        // borrows; the storage came from Box::into_raw in `new`.
        unsafe {
            ManuallyDrop::drop(&mut self.skel);
            drop(Box::from_raw(self.storage));
        }
    }
}
