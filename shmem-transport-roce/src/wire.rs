//! Wire format of the software verbs provider: fixed-size little-endian
//! headers, followed by payload for writes and read responses.

use std::io::{self, Read, Write};

use shmem_core::transport::AmoOp;

/// An atomic's op code, operand and compare words, as both the `sw`
/// provider's work requests and libfabric's atomic messages carry them.
pub fn amo_code(op: AmoOp) -> (u64, u64, u64) {
    match op {
        AmoOp::Fetch => (0, 0, 0),
        AmoOp::Set(v) => (1, v, 0),
        AmoOp::Swap(v) => (2, v, 0),
        AmoOp::CompareSwap { cond, value } => (3, value, cond),
        AmoOp::Add(v) => (4, v, 0),
        AmoOp::And(v) => (5, v, 0),
        AmoOp::Or(v) => (6, v, 0),
        AmoOp::Xor(v) => (7, v, 0),
    }
}

/// The atomic that [`amo_code`]'s words name (None for an unknown code).
pub fn amo_decode(code: u64, b: u64, c: u64) -> Option<AmoOp> {
    Some(match code {
        0 => AmoOp::Fetch,
        1 => AmoOp::Set(b),
        2 => AmoOp::Swap(b),
        3 => AmoOp::CompareSwap { cond: c, value: b },
        4 => AmoOp::Add(b),
        5 => AmoOp::And(b),
        6 => AmoOp::Or(b),
        7 => AmoOp::Xor(b),
        _ => return None,
    })
}

/// Magic of a queue-pair connection request (protocol name and version).
pub const QP_MAGIC: &[u8; 8] = b"SHMQPSW1";

/// Work request opcodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Opcode {
    /// RDMA WRITE of `len` bytes at `off`.
    Write = 1,
    /// RDMA READ of `len` bytes at `off`.
    Read = 2,
    /// Atomic of width `len` at `off`: `a` = op code, `b` = operand, `c` = compare.
    Atomic = 3,
    /// Signal update at `off`: `a` = value, `c` = 0 set / 1 add.
    Signal = 4,
}

/// A work request header (56 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    /// What to do.
    pub op: Opcode,
    /// Remote key of the target's registered heap.
    pub rkey: u32,
    /// Sequence number, echoed in the response.
    pub seq: u64,
    /// Offset in the target's heap.
    pub off: u64,
    /// Length (bytes of payload, or atomic width).
    pub len: u64,
    /// Operand a.
    pub a: u64,
    /// Operand b.
    pub b: u64,
    /// Operand c.
    pub c: u64,
}

/// Size of an encoded [`Request`].
pub const REQUEST_LEN: usize = 56;

impl Request {
    /// Encodes the header.
    pub fn encode(&self) -> [u8; REQUEST_LEN] {
        let mut o = [0u8; REQUEST_LEN];
        o[0] = self.op as u8;
        o[4..8].copy_from_slice(&self.rkey.to_le_bytes());
        for (i, v) in [self.seq, self.off, self.len, self.a, self.b, self.c]
            .iter()
            .enumerate()
        {
            o[8 + i * 8..16 + i * 8].copy_from_slice(&v.to_le_bytes());
        }
        o
    }

    /// Decodes a header.
    ///
    /// # Errors
    /// [`io::ErrorKind::InvalidData`] for an unknown opcode.
    pub fn decode(b: &[u8; REQUEST_LEN]) -> io::Result<Request> {
        let op = match b[0] {
            1 => Opcode::Write,
            2 => Opcode::Read,
            3 => Opcode::Atomic,
            4 => Opcode::Signal,
            k => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("unknown verbs opcode {k}"),
                ))
            }
        };
        let u =
            |i: usize| u64::from_le_bytes(b[8 + i * 8..16 + i * 8].try_into().unwrap_or([0; 8]));
        Ok(Request {
            op,
            rkey: u32::from_le_bytes([b[4], b[5], b[6], b[7]]),
            seq: u(0),
            off: u(1),
            len: u(2),
            a: u(3),
            b: u(4),
            c: u(5),
        })
    }
}

/// Response kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Status {
    /// Write or signal applied.
    Ack = 1,
    /// Read data follows (`len` bytes).
    Data = 2,
    /// Atomic done; `value` is the old value.
    Old = 3,
    /// Refused; a `len`-byte reason follows.
    Nak = 4,
}

/// A response header (32 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Response {
    /// Outcome.
    pub status: Status,
    /// Sequence number of the request.
    pub seq: u64,
    /// Old value of an atomic.
    pub value: u64,
    /// Length of what follows.
    pub len: u64,
}

/// Size of an encoded [`Response`].
pub const RESPONSE_LEN: usize = 32;

impl Response {
    /// Encodes the header.
    pub fn encode(&self) -> [u8; RESPONSE_LEN] {
        let mut o = [0u8; RESPONSE_LEN];
        o[0] = self.status as u8;
        o[8..16].copy_from_slice(&self.seq.to_le_bytes());
        o[16..24].copy_from_slice(&self.value.to_le_bytes());
        o[24..32].copy_from_slice(&self.len.to_le_bytes());
        o
    }

    /// Decodes a header.
    ///
    /// # Errors
    /// [`io::ErrorKind::InvalidData`] for an unknown status.
    pub fn decode(b: &[u8; RESPONSE_LEN]) -> io::Result<Response> {
        let status = match b[0] {
            1 => Status::Ack,
            2 => Status::Data,
            3 => Status::Old,
            4 => Status::Nak,
            k => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("unknown verbs status {k}"),
                ))
            }
        };
        let u = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap_or([0; 8]));
        Ok(Response {
            status,
            seq: u(8),
            value: u(16),
            len: u(24),
        })
    }
}

/// Reads exactly `n` bytes and throws them away.
///
/// # Errors
/// The reader's error (end of stream before `n` bytes included).
pub fn drain(r: &mut impl Read, mut n: u64) -> io::Result<()> {
    let mut buf = [0u8; 8192];
    while n > 0 {
        let k = (n as usize).min(buf.len());
        r.read_exact(&mut buf[..k])?;
        n -= k as u64;
    }
    Ok(())
}

/// Writes a header and its payload as one message.
///
/// # Errors
/// The writer's error.
pub fn send(w: &mut impl Write, header: &[u8], payload: &[u8]) -> io::Result<()> {
    if payload.len() <= 4096 {
        let mut buf = Vec::with_capacity(header.len() + payload.len());
        buf.extend_from_slice(header);
        buf.extend_from_slice(payload);
        w.write_all(&buf)
    } else {
        w.write_all(header)?;
        w.write_all(payload)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_round_trip() {
        let r = Request {
            op: Opcode::Atomic,
            rkey: 7,
            seq: 9,
            off: 4096,
            len: 8,
            a: 1,
            b: 2,
            c: 3,
        };
        assert_eq!(Request::decode(&r.encode()).unwrap(), r);
        let s = Response {
            status: Status::Nak,
            seq: 5,
            value: 6,
            len: 7,
        };
        assert_eq!(Response::decode(&s.encode()).unwrap(), s);
        let mut bad = r.encode();
        bad[0] = 99;
        assert!(Request::decode(&bad).is_err());
    }
}
