//! One event record as the events section holds it: 64 bytes, little-endian, laid out in
//! docs/dump-format.md. Encoded and decoded side by side so that the two cannot drift apart.
use super::RECORD_SIZE;
use crate::abi::EventKind;
use crate::record::{BlobRef, Payload, Record};

const KIND_SYSCALL: u8 = EventKind::SyscallFailure as u8;
const KIND_FUNCTION: u8 = EventKind::Function as u8;
const KIND_GAP: u8 = EventKind::NetworkGap as u8;
const KIND_PROCESS: u8 = EventKind::ProcessState as u8;
const FLAG_ONGOING: u8 = 1;
const FLAG_CORE: u8 = 2;

pub(super) fn encode_record(r: &Record, out: &mut [u8; RECORD_SIZE]) {
    out.fill(0);
    out[0..8].copy_from_slice(&r.ts_ns.to_le_bytes());
    out[8..12].copy_from_slice(&r.pid.to_le_bytes());
    out[12..16].copy_from_slice(&r.tid.to_le_bytes());
    out[16..32].copy_from_slice(&r.comm);
    match r.payload {
        Payload::SyscallFailure {
            nr,
            ret,
            fd,
            open_id,
            blob,
            requested,
        } => {
            out[32] = KIND_SYSCALL;
            out[34..36].copy_from_slice(&nr.to_le_bytes());
            out[36..40].copy_from_slice(&ret.to_le_bytes());
            out[40..44].copy_from_slice(&fd.to_le_bytes());
            out[44..48].copy_from_slice(&requested.to_le_bytes());
            out[48..56].copy_from_slice(&open_id.to_le_bytes());
            out[56..64].copy_from_slice(&blob.raw().to_le_bytes());
        }
        Payload::Function { function_id } => {
            out[32] = KIND_FUNCTION;
            out[48..56].copy_from_slice(&function_id.to_le_bytes());
        }
        Payload::NetworkGap {
            gap_ns,
            packets,
            endpoints,
            ongoing,
            busy_ms,
            busy_packets,
        } => {
            out[32] = KIND_GAP;
            out[33] = if ongoing { FLAG_ONGOING } else { 0 };
            out[34..36].copy_from_slice(&busy_packets.to_le_bytes());
            out[36..40].copy_from_slice(&busy_ms.to_le_bytes());
            out[40..48].copy_from_slice(&gap_ns.to_le_bytes());
            out[48..56].copy_from_slice(&packets.to_le_bytes());
            out[56..64].copy_from_slice(&endpoints.raw().to_le_bytes());
        }
        Payload::ProcessState {
            state,
            cause,
            signal,
            core_dumped,
            ongoing,
            exit_code,
            sender_pid,
            duration_ns,
            sender_comm,
        } => {
            out[32] = KIND_PROCESS;
            out[33] = (if ongoing { FLAG_ONGOING } else { 0 }) | (if core_dumped { FLAG_CORE } else { 0 });
            out[34] = state;
            out[35] = cause;
            out[36..40].copy_from_slice(&exit_code.to_le_bytes());
            out[40..48].copy_from_slice(&duration_ns.to_le_bytes());
            out[48..52].copy_from_slice(&sender_pid.to_le_bytes());
            out[52] = signal;
            out[56..64].copy_from_slice(&sender_comm.raw().to_le_bytes());
        }
    }
}

pub(super) fn le_u64(b: &[u8]) -> u64 {
    u64::from_le_bytes(b.try_into().unwrap_or([0; 8]))
}
pub(super) fn le_u32(b: &[u8]) -> u32 {
    u32::from_le_bytes(b.try_into().unwrap_or([0; 4]))
}

pub(super) fn decode_record(b: &[u8]) -> Option<Record> {
    let mut comm = [0u8; 16];
    comm.copy_from_slice(&b[16..32]);
    let ongoing = b[33] & FLAG_ONGOING != 0;
    let payload = match b[32] {
        KIND_SYSCALL => Payload::SyscallFailure {
            nr: u16::from_le_bytes([b[34], b[35]]),
            ret: le_u32(&b[36..40]) as i32,
            fd: le_u32(&b[40..44]) as i32,
            open_id: le_u64(&b[48..56]),
            blob: BlobRef::from_raw(le_u64(&b[56..64])),
            // zero in dumps written before short I/O was recorded: failures only
            requested: le_u32(&b[44..48]),
        },
        KIND_FUNCTION => Payload::Function {
            function_id: le_u64(&b[48..56]),
        },
        KIND_GAP => Payload::NetworkGap {
            gap_ns: le_u64(&b[40..48]),
            packets: le_u64(&b[48..56]),
            endpoints: BlobRef::from_raw(le_u64(&b[56..64])),
            ongoing,
            // zero in dumps written before the busy stretch was recorded: unknown
            busy_ms: le_u32(&b[36..40]),
            busy_packets: u16::from_le_bytes([b[34], b[35]]),
        },
        KIND_PROCESS => Payload::ProcessState {
            state: b[34],
            cause: b[35],
            exit_code: le_u32(&b[36..40]) as i32,
            duration_ns: le_u64(&b[40..48]),
            sender_pid: le_u32(&b[48..52]),
            signal: b[52],
            core_dumped: b[33] & FLAG_CORE != 0,
            ongoing,
            sender_comm: BlobRef::from_raw(le_u64(&b[56..64])),
        },
        _ => return None,
    };
    Some(Record {
        ts_ns: le_u64(&b[0..8]),
        pid: le_u32(&b[8..12]),
        tid: le_u32(&b[12..16]),
        comm,
        payload,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dump::tests::sample;

    #[test]
    fn records_round_trip() {
        let mut buf = [0u8; RECORD_SIZE];
        for r in sample() {
            encode_record(&r, &mut buf);
            assert_eq!(decode_record(&buf), Some(r));
        }
    }
}
