//! The in-memory window: fixed-size event records in a ring that overwrites its oldest
//! entry, and a byte ring ("blob arena") for the variable-length parts (paths, addresses).
//! Both are allocated once, from the configuration; nothing here allocates per event.

/// Where a variable-length value lives in the blob arena: absolute offset (since the arena
/// was created) and length. `BlobRef::NONE` means "no value".
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BlobRef(u64);

impl BlobRef {
    pub const NONE: BlobRef = BlobRef(0);
    const LEN_BITS: u32 = 16;

    fn new(offset: u64, len: usize) -> Self {
        BlobRef(((offset + 1) << Self::LEN_BITS) | len as u64)
    }
    pub fn from_raw(raw: u64) -> Self {
        BlobRef(raw)
    }
    pub fn raw(self) -> u64 {
        self.0
    }
    pub fn is_none(self) -> bool {
        self.0 == 0
    }
    fn offset(self) -> u64 {
        (self.0 >> Self::LEN_BITS) - 1
    }
    fn len(self) -> usize {
        (self.0 & ((1 << Self::LEN_BITS) - 1)) as usize
    }
}

/// Kind-specific part of a record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Payload {
    SyscallFailure {
        nr: u16,
        ret: i32,
        fd: i32,
        /// the open the fd came from (resolved through the dump's open-file table)
        open_id: u64,
        /// path argument, or encoded peer address
        blob: BlobRef,
        /// a short read or write (`ret` >= 0 bytes done): the count asked for; 0 = a
        /// failed call
        requested: u32,
    },
    Function {
        function_id: u64,
    },
    NetworkGap {
        gap_ns: u64,
        packets: u64,
        /// encoded local and peer addresses
        endpoints: BlobRef,
        ongoing: bool,
        /// the busy stretch before the gap (since the connection's previous gap, or its
        /// start): how long it lasted, ms, and the packets it carried (saturating; 0 and 0
        /// in dumps written before it was recorded)
        busy_ms: u32,
        busy_packets: u16,
    },
    ProcessState {
        state: u8,
        cause: u8,
        signal: u8,
        core_dumped: bool,
        ongoing: bool,
        exit_code: i32,
        sender_pid: u32,
        duration_ns: u64,
        sender_comm: BlobRef,
    },
}

/// One event in the window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record {
    pub ts_ns: u64,
    pub pid: u32,
    pub tid: u32,
    pub comm: [u8; 16],
    pub payload: Payload,
}

const _: () = assert!(std::mem::size_of::<Record>() == 64);

impl Default for Record {
    fn default() -> Self {
        Record {
            ts_ns: 0,
            pid: 0,
            tid: 0,
            comm: [0; 16],
            payload: Payload::Function { function_id: 0 },
        }
    }
}

/// The last `capacity` records; older ones are overwritten and counted.
pub struct EventRing {
    slots: Vec<Record>,
    capacity: usize,
    next: usize,
    total: u64,
}

impl EventRing {
    pub fn new(capacity: usize) -> Self {
        let capacity = capacity.max(1);
        EventRing {
            slots: Vec::with_capacity(capacity),
            capacity,
            next: 0,
            total: 0,
        }
    }

    pub fn push(&mut self, r: Record) {
        if self.slots.len() < self.capacity {
            self.slots.push(r);
        } else {
            self.slots[self.next] = r;
        }
        self.next = (self.next + 1) % self.capacity;
        self.total += 1;
    }

    /// Records pushed since creation.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Records lost to overwriting.
    pub fn overwritten(&self) -> u64 {
        self.total - self.slots.len() as u64
    }

    pub fn len(&self) -> usize {
        self.slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Where the oldest record is.
    fn oldest_slot(&self) -> usize {
        if self.slots.len() < self.capacity {
            0
        } else {
            self.next
        }
    }

    /// Oldest to newest.
    pub fn iter(&self) -> impl Iterator<Item = &Record> {
        let split = self.oldest_slot();
        self.slots[split..].iter().chain(self.slots[..split].iter())
    }

    /// The `i`-th oldest record.
    pub fn get(&self, i: usize) -> Option<&Record> {
        let len = self.slots.len();
        if i >= len {
            return None;
        }
        let slot = self.oldest_slot() + i;
        Some(&self.slots[if slot >= len { slot - len } else { slot }])
    }
}

const DEDUP_SLOTS: usize = 4096;

/// A byte ring for variable-length values. A value stays readable until `capacity` newer
/// bytes have been appended; a small direct-mapped cache makes a repeated value (the same
/// failing path, the same peer) reuse its earlier copy instead of consuming space again.
pub struct BlobArena {
    buf: Vec<u8>,
    written: u64,
    dedup: Vec<(u64, BlobRef)>,
}

impl BlobArena {
    pub fn new(capacity: usize) -> Self {
        BlobArena {
            buf: vec![0; capacity.max(1)],
            written: 0,
            dedup: vec![(0, BlobRef::NONE); DEDUP_SLOTS],
        }
    }

    pub fn capacity(&self) -> usize {
        self.buf.len()
    }

    /// Stores `value` and returns where; `NONE` for an empty or oversized value.
    pub fn put(&mut self, value: &[u8]) -> BlobRef {
        if value.is_empty() || value.len() >= 1 << BlobRef::LEN_BITS || value.len() > self.buf.len() {
            return BlobRef::NONE;
        }
        let hash = fnv1a(value);
        let slot = (hash as usize) % DEDUP_SLOTS;
        let (cached_hash, cached) = self.dedup[slot];
        if cached_hash == hash && !cached.is_none() && self.equals(cached, value) {
            return cached;
        }
        let r = BlobRef::new(self.written, value.len());
        let cap = self.buf.len();
        let start = (self.written % cap as u64) as usize;
        let first = value.len().min(cap - start);
        self.buf[start..start + first].copy_from_slice(&value[..first]);
        self.buf[..value.len() - first].copy_from_slice(&value[first..]);
        self.written += value.len() as u64;
        self.dedup[slot] = (hash, r);
        r
    }

    fn is_live(&self, r: BlobRef) -> bool {
        !r.is_none() && r.offset() >= self.oldest() && r.offset() + r.len() as u64 <= self.written
    }

    fn equals(&self, r: BlobRef, value: &[u8]) -> bool {
        self.is_live(r) && r.len() == value.len() && self.bytes_of(r).eq(value.iter().copied())
    }

    fn bytes_of(&self, r: BlobRef) -> impl Iterator<Item = u8> + '_ {
        let cap = self.buf.len() as u64;
        (r.offset()..r.offset() + r.len() as u64).map(move |o| self.buf[(o % cap) as usize])
    }

    /// The value behind `r`, if it has not been overwritten.
    pub fn get(&self, r: BlobRef) -> Option<Vec<u8>> {
        self.is_live(r).then(|| self.bytes_of(r).collect())
    }

    /// Bytes that hold values now (at most the capacity).
    pub fn used_bytes(&self) -> usize {
        self.written.min(self.buf.len() as u64) as usize
    }

    /// Absolute offset of the oldest byte still held.
    pub fn oldest(&self) -> u64 {
        self.written.saturating_sub(self.buf.len() as u64)
    }

    /// The live bytes, oldest first, with the absolute offset of the first one.
    pub fn live_bytes(&self) -> (u64, Vec<u8>) {
        let oldest = self.oldest();
        let cap = self.buf.len() as u64;
        let out = (oldest..self.written)
            .map(|o| self.buf[(o % cap) as usize])
            .collect();
        (oldest, out)
    }
}

/// Resolves blob references against the live bytes saved in a dump.
pub struct BlobWindow {
    pub base: u64,
    pub bytes: Vec<u8>,
}

impl BlobWindow {
    pub fn get(&self, r: BlobRef) -> Option<&[u8]> {
        if r.is_none() || r.offset() < self.base {
            return None;
        }
        let start = usize::try_from(r.offset() - self.base).ok()?;
        self.bytes.get(start..start.checked_add(r.len())?)
    }
}

fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= *b as u64;
        h = h.wrapping_mul(0x100_0000_01b3);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_keeps_the_newest_in_order() {
        let mut ring = EventRing::new(3);
        for i in 0..5 {
            ring.push(Record {
                ts_ns: i,
                ..Record::default()
            });
        }
        let ts: Vec<u64> = ring.iter().map(|r| r.ts_ns).collect();
        assert_eq!(ts, vec![2, 3, 4]);
        let by_index: Vec<u64> = (0..4).filter_map(|i| ring.get(i)).map(|r| r.ts_ns).collect();
        assert_eq!(by_index, ts);
        assert_eq!(ring.overwritten(), 2);
        assert_eq!(ring.total(), 5);
    }

    #[test]
    fn arena_dedups_and_expires() {
        let mut arena = BlobArena::new(16);
        let a = arena.put(b"/etc/x");
        assert_eq!(arena.put(b"/etc/x"), a);
        let b = arena.put(b"0123456789");
        assert_eq!(arena.get(b).as_deref(), Some(&b"0123456789"[..]));
        let c = arena.put(b"wrapping!");
        assert_eq!(arena.get(a), None, "overwritten values are gone");
        assert_eq!(arena.get(c).as_deref(), Some(&b"wrapping!"[..]));
        let (base, bytes) = arena.live_bytes();
        let window = BlobWindow { base, bytes };
        assert_eq!(window.get(c), Some(&b"wrapping!"[..]));
        assert_eq!(window.get(a), None);
        assert_eq!(arena.put(b""), BlobRef::NONE);
    }
}
