//! Reading every entry of a BPF map at dump time (open files, connections, pauses).
//!
//! The kernel's batch lookup walks a hash map bucket by bucket and returns fewer entries
//! than asked whenever the next bucket does not fit; only ENOENT means the walk is over.
//! libbpf-rs's batch iterator takes a short batch for the end, so it saw about one batch.
//! This loop follows the kernel's contract: short batches continue, ENOSPC (a single bucket
//! larger than the buffer) doubles the buffer, ENOENT ends the walk.
use std::os::fd::AsRawFd;

use anyhow::{bail, Result};
use libbpf_rs::MapCore;

/// Entries asked for per system call; enough that a full 65536-entry map takes a few dozen.
const BATCH: u32 = 4096;

/// Calls `visit(key, value)` for every entry of the hash or array map `map`. The map may change
/// meanwhile (the kernel keeps writing); a hash map's buckets are each read atomically, so an
/// entry present for the whole walk is seen exactly once.
pub fn for_each_entry(map: &impl MapCore, mut visit: impl FnMut(&[u8], &[u8])) -> Result<()> {
    // the kernel requires hash-map keys of at least 4 bytes in batch calls
    let key_size = (map.key_size() as usize).max(4);
    let value_size = map.value_size() as usize;
    let fd = map.as_fd().as_raw_fd();
    let opts = libbpf_rs::libbpf_sys::bpf_map_batch_opts {
        sz: std::mem::size_of::<libbpf_rs::libbpf_sys::bpf_map_batch_opts>() as _,
        ..Default::default()
    };
    let mut batch = BATCH.min(map.max_entries().max(1));
    let mut keys = vec![0u8; batch as usize * key_size];
    let mut values = vec![0u8; batch as usize * value_size];
    // the batch token: a bucket index for hash maps; sized like a key, as libbpf advises
    let mut token_in = vec![0u8; key_size.max(8)];
    let mut token_out = vec![0u8; key_size.max(8)];
    let mut first = true;
    loop {
        let mut count = batch;
        let in_ptr = if first {
            std::ptr::null_mut()
        } else {
            token_in.as_mut_ptr().cast()
        };
        // SAFETY: keys/values hold `batch` entries of the map's key and value size, the
        // tokens are at least as large as the kernel's u32 bucket token, opts is initialised.
        let ret = unsafe {
            libbpf_rs::libbpf_sys::bpf_map_lookup_batch(
                fd,
                in_ptr,
                token_out.as_mut_ptr().cast(),
                keys.as_mut_ptr().cast(),
                values.as_mut_ptr().cast(),
                &mut count,
                &opts,
            )
        };
        let err = if ret < 0 { -ret } else { 0 };
        if err == libc::ENOSPC && count == 0 {
            batch = batch
                .checked_mul(2)
                .filter(|&b| b <= 1 << 20)
                .ok_or_else(|| anyhow::anyhow!("a map bucket too large to read"))?;
            keys.resize(batch as usize * key_size, 0);
            values.resize(batch as usize * value_size, 0);
            continue;
        }
        if err != 0 && err != libc::ENOENT {
            bail!(
                "reading BPF map {}: {}",
                map.name().to_string_lossy(),
                std::io::Error::from_raw_os_error(err)
            );
        }
        let n = (count as usize).min(batch as usize);
        for (k, v) in keys
            .chunks_exact(key_size)
            .zip(values.chunks_exact(value_size))
            .take(n)
        {
            visit(&k[..map.key_size() as usize], v);
        }
        if err == libc::ENOENT {
            return Ok(());
        }
        std::mem::swap(&mut token_in, &mut token_out);
        first = false;
    }
}
