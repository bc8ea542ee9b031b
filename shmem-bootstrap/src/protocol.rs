//! Wire format of the config store: length-prefixed frames over TCP.
//!
//! A frame is `u32 length (LE) | u8 kind | payload`. Integers are
//! little-endian. Frames above [`MAX_FRAME`] are rejected as garbage.

use std::io::{self, Read, Write};

/// Magic that opens every HELLO (protocol name and version).
pub const MAGIC: &[u8; 8] = b"SHMEMBS1";

/// Largest frame accepted (allgather payloads included).
pub const MAX_FRAME: usize = 256 << 20;

/// Largest frame accepted from a connection that has not authenticated yet
/// (its HELLO). A HELLO is a few dozen bytes; anything longer is garbage or
/// an attempt to make the store buffer memory for a stranger.
pub const MAX_HELLO_FRAME: usize = 4 << 10;

/// Client to store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// Join: rank, job size and the job secret.
    Hello {
        /// Rank of the joining PE.
        rank: u32,
        /// Job size it believes in.
        nranks: u32,
        /// Job secret.
        secret: Vec<u8>,
    },
    /// Store a value under a key.
    Set {
        /// Key.
        key: Vec<u8>,
        /// Value.
        value: Vec<u8>,
    },
    /// Ask for a key's value (answered once it is set).
    Get {
        /// Key.
        key: Vec<u8>,
    },
    /// Contribution to collective number `seq` (an allgather).
    Collective {
        /// Collective sequence number.
        seq: u64,
        /// Contribution.
        data: Vec<u8>,
    },
    /// End the whole job (global_exit).
    Abort {
        /// Exit status for every PE.
        status: i32,
        /// Reason.
        message: String,
    },
    /// Leaving cleanly.
    Bye,
    /// This PE has been in one call longer than its hang-report delay: ask
    /// every PE what it is doing (unless a report ran in the last
    /// `quiet_ms` milliseconds).
    HangProbe {
        /// Minimum distance between two reports.
        quiet_ms: u64,
    },
    /// Answer to [`Reply::HangQuery`]: what this PE is doing.
    HangState {
        /// Report round.
        round: u64,
        /// The call it is in, or that it is in none.
        state: String,
    },
}

/// Store to client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// HELLO accepted.
    Welcome,
    /// HELLO refused.
    Reject(String),
    /// Answer to a GET.
    Value {
        /// Key.
        key: Vec<u8>,
        /// Value.
        value: Vec<u8>,
    },
    /// A collective completed: every rank's contribution.
    CollectiveDone {
        /// Sequence number.
        seq: u64,
        /// Contributions by rank.
        data: Vec<Vec<u8>>,
    },
    /// A member left without saying goodbye.
    PeerExited {
        /// Rank that is gone.
        rank: u32,
        /// What is known of how.
        detail: String,
    },
    /// Some PE called global_exit.
    Abort {
        /// Rank that aborted.
        rank: u32,
        /// Status to exit with.
        status: i32,
        /// Reason.
        message: String,
    },
    /// BYE acknowledged.
    ByeOk,
    /// Every PE: say what you are doing ([`Request::HangState`]).
    HangQuery {
        /// Report round.
        round: u64,
    },
    /// To every PE: each PE's state, by rank; the PE whose probe started the
    /// round prints it.
    HangTable {
        /// Report round.
        round: u64,
        /// The PE that asked.
        prober: u32,
        /// State of each rank.
        rows: Vec<String>,
    },
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(&(b.len() as u32).to_le_bytes());
    out.extend_from_slice(b);
}

struct Cursor<'a>(&'a [u8]);

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> io::Result<&'a [u8]> {
        if self.0.len() < n {
            return Err(bad("truncated frame"));
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Ok(a)
    }
    fn u32(&mut self) -> io::Result<u32> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().map_err(|_| bad("u32"))?,
        ))
    }
    fn i32(&mut self) -> io::Result<i32> {
        Ok(self.u32()? as i32)
    }
    fn u64(&mut self) -> io::Result<u64> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().map_err(|_| bad("u64"))?,
        ))
    }
    fn bytes(&mut self) -> io::Result<Vec<u8>> {
        let n = self.u32()? as usize;
        Ok(self.take(n)?.to_vec())
    }
    fn rest(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.0).to_vec()
    }
    fn string(&mut self) -> io::Result<String> {
        Ok(String::from_utf8_lossy(&self.bytes()?).into_owned())
    }
}

fn bad(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_string())
}

impl Request {
    /// Serialises to a frame body (kind + payload).
    pub fn encode(&self) -> Vec<u8> {
        let mut o = Vec::new();
        match self {
            Request::Hello {
                rank,
                nranks,
                secret,
            } => {
                o.push(1);
                o.extend_from_slice(MAGIC);
                o.extend_from_slice(&rank.to_le_bytes());
                o.extend_from_slice(&nranks.to_le_bytes());
                put_bytes(&mut o, secret);
            }
            Request::Set { key, value } => {
                o.push(2);
                put_bytes(&mut o, key);
                o.extend_from_slice(value);
            }
            Request::Get { key } => {
                o.push(3);
                o.extend_from_slice(key);
            }
            Request::Collective { seq, data } => {
                o.push(4);
                o.extend_from_slice(&seq.to_le_bytes());
                o.extend_from_slice(data);
            }
            Request::Abort { status, message } => {
                o.push(5);
                o.extend_from_slice(&status.to_le_bytes());
                put_bytes(&mut o, message.as_bytes());
            }
            Request::Bye => o.push(6),
            Request::HangProbe { quiet_ms } => {
                o.push(7);
                o.extend_from_slice(&quiet_ms.to_le_bytes());
            }
            Request::HangState { round, state } => {
                o.push(8);
                o.extend_from_slice(&round.to_le_bytes());
                put_bytes(&mut o, state.as_bytes());
            }
        }
        o
    }

    /// Parses a frame body.
    pub fn decode(body: &[u8]) -> io::Result<Request> {
        let mut c = Cursor(body);
        let kind = c.take(1)?[0];
        Ok(match kind {
            1 => {
                if c.take(MAGIC.len())? != MAGIC {
                    return Err(bad(
                        "bad magic (not a shmem bootstrap client of this version)",
                    ));
                }
                Request::Hello {
                    rank: c.u32()?,
                    nranks: c.u32()?,
                    secret: c.bytes()?,
                }
            }
            2 => Request::Set {
                key: c.bytes()?,
                value: c.rest(),
            },
            3 => Request::Get { key: c.rest() },
            4 => Request::Collective {
                seq: c.u64()?,
                data: c.rest(),
            },
            5 => Request::Abort {
                status: c.i32()?,
                message: c.string()?,
            },
            6 => Request::Bye,
            7 => Request::HangProbe { quiet_ms: c.u64()? },
            8 => Request::HangState {
                round: c.u64()?,
                state: c.string()?,
            },
            k => return Err(bad(&format!("unknown request kind {k}"))),
        })
    }
}

impl Reply {
    /// Serialises to a frame body.
    pub fn encode(&self) -> Vec<u8> {
        let mut o = Vec::new();
        match self {
            Reply::Welcome => o.push(101),
            Reply::Reject(m) => {
                o.push(102);
                put_bytes(&mut o, m.as_bytes());
            }
            Reply::Value { key, value } => {
                o.push(103);
                put_bytes(&mut o, key);
                o.extend_from_slice(value);
            }
            Reply::CollectiveDone { seq, data } => {
                o.push(104);
                o.extend_from_slice(&seq.to_le_bytes());
                o.extend_from_slice(&(data.len() as u32).to_le_bytes());
                for d in data {
                    put_bytes(&mut o, d);
                }
            }
            Reply::PeerExited { rank, detail } => {
                o.push(105);
                o.extend_from_slice(&rank.to_le_bytes());
                put_bytes(&mut o, detail.as_bytes());
            }
            Reply::Abort {
                rank,
                status,
                message,
            } => {
                o.push(106);
                o.extend_from_slice(&rank.to_le_bytes());
                o.extend_from_slice(&status.to_le_bytes());
                put_bytes(&mut o, message.as_bytes());
            }
            Reply::ByeOk => o.push(107),
            Reply::HangQuery { round } => {
                o.push(108);
                o.extend_from_slice(&round.to_le_bytes());
            }
            Reply::HangTable {
                round,
                prober,
                rows,
            } => {
                o.push(109);
                o.extend_from_slice(&round.to_le_bytes());
                o.extend_from_slice(&prober.to_le_bytes());
                o.extend_from_slice(&(rows.len() as u32).to_le_bytes());
                for r in rows {
                    put_bytes(&mut o, r.as_bytes());
                }
            }
        }
        o
    }

    /// Parses a frame body.
    pub fn decode(body: &[u8]) -> io::Result<Reply> {
        let mut c = Cursor(body);
        let kind = c.take(1)?[0];
        Ok(match kind {
            101 => Reply::Welcome,
            102 => Reply::Reject(c.string()?),
            103 => Reply::Value {
                key: c.bytes()?,
                value: c.rest(),
            },
            104 => {
                let seq = c.u64()?;
                let n = c.u32()? as usize;
                let mut data = Vec::with_capacity(n.min(1 << 16));
                for _ in 0..n {
                    data.push(c.bytes()?);
                }
                Reply::CollectiveDone { seq, data }
            }
            105 => Reply::PeerExited {
                rank: c.u32()?,
                detail: c.string()?,
            },
            106 => Reply::Abort {
                rank: c.u32()?,
                status: c.i32()?,
                message: c.string()?,
            },
            107 => Reply::ByeOk,
            108 => Reply::HangQuery { round: c.u64()? },
            109 => {
                let round = c.u64()?;
                let prober = c.u32()?;
                let n = c.u32()? as usize;
                let mut rows = Vec::with_capacity(n.min(1 << 16));
                for _ in 0..n {
                    rows.push(c.string()?);
                }
                Reply::HangTable {
                    round,
                    prober,
                    rows,
                }
            }
            k => return Err(bad(&format!("unknown reply kind {k}"))),
        })
    }
}

/// The length prefix of a frame of `len` bytes.
///
/// # Errors
/// `InvalidInput` when `len` is zero or above [`MAX_FRAME`] (the reader would
/// refuse it; above `u32::MAX` the prefix could not even hold it).
pub fn frame_header(len: usize) -> io::Result<[u8; 4]> {
    if len == 0 || len > MAX_FRAME {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("a frame of {len} bytes cannot be sent (the limit is {MAX_FRAME} bytes)"),
        ));
    }
    u32::try_from(len)
        .map(u32::to_le_bytes)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "frame length above u32"))
}

/// Writes one frame.
///
/// # Errors
/// The writer's errors, and `InvalidInput` for a body that does not fit a
/// frame (see [`frame_header`]); nothing is written then.
pub fn write_frame(w: &mut impl Write, body: &[u8]) -> io::Result<()> {
    let header = frame_header(body.len())?;
    let mut buf = Vec::with_capacity(4 + body.len());
    buf.extend_from_slice(&header);
    buf.extend_from_slice(body);
    w.write_all(&buf)?;
    w.flush()
}

/// Reads one frame body; `Ok(None)` on a clean end of stream.
///
/// # Errors
/// The reader's errors, and `InvalidData` for a length above [`MAX_FRAME`].
pub fn read_frame(r: &mut impl Read) -> io::Result<Option<Vec<u8>>> {
    read_frame_limited(r, MAX_FRAME)
}

/// [`read_frame`] that refuses frames above `max` bytes before reading (or
/// allocating) their body.
///
/// # Errors
/// The reader's errors, and `InvalidData` for a length of zero or above `max`.
pub fn read_frame_limited(r: &mut impl Read, max: usize) -> io::Result<Option<Vec<u8>>> {
    let mut len = [0u8; 4];
    match r.read_exact(&mut len) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let n = u32::from_le_bytes(len) as usize;
    if n == 0 || n > max.min(MAX_FRAME) {
        return Err(bad(&format!(
            "frame of {n} bytes (the limit here is {max})"
        )));
    }
    let mut body = vec![0u8; n];
    r.read_exact(&mut body)?;
    Ok(Some(body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_round_trip() {
        for r in [
            Request::Hello {
                rank: 3,
                nranks: 8,
                secret: vec![1, 2, 3],
            },
            Request::Set {
                key: b"k".to_vec(),
                value: b"v".to_vec(),
            },
            Request::Get {
                key: b"key".to_vec(),
            },
            Request::Collective {
                seq: 9,
                data: vec![7; 100],
            },
            Request::Abort {
                status: 3,
                message: "boom".into(),
            },
            Request::Bye,
            Request::HangProbe { quiet_ms: 10_000 },
            Request::HangState {
                round: 2,
                state: "barrier #7 (team WORLD)".into(),
            },
        ] {
            assert_eq!(Request::decode(&r.encode()).unwrap(), r);
        }
    }

    #[test]
    fn replies_round_trip() {
        for r in [
            Reply::Welcome,
            Reply::Reject("no".into()),
            Reply::Value {
                key: b"a".to_vec(),
                value: vec![],
            },
            Reply::CollectiveDone {
                seq: 1,
                data: vec![vec![], vec![1, 2]],
            },
            Reply::PeerExited {
                rank: 2,
                detail: "gone".into(),
            },
            Reply::Abort {
                rank: 1,
                status: 2,
                message: "m".into(),
            },
            Reply::ByeOk,
            Reply::HangQuery { round: 3 },
            Reply::HangTable {
                round: 3,
                prober: 1,
                rows: vec!["malloc #3".into(), "has exited".into()],
            },
        ] {
            assert_eq!(Reply::decode(&r.encode()).unwrap(), r);
        }
    }

    #[test]
    fn garbage_is_rejected() {
        assert!(Request::decode(&[]).is_err());
        assert!(Request::decode(&[99, 1, 2]).is_err());
        assert!(Request::decode(b"\x01NOTMAGIC").is_err());
        let mut huge = &[0xff, 0xff, 0xff, 0xff, 1][..];
        assert!(read_frame(&mut huge).is_err());
        // A 5-KiB frame is fine after HELLO but not before it.
        let mut framed = Vec::new();
        write_frame(&mut framed, &[7u8; 5 << 10]).unwrap();
        assert_eq!(
            read_frame(&mut &framed[..]).unwrap().unwrap().len(),
            5 << 10
        );
        let err = read_frame_limited(&mut &framed[..], MAX_HELLO_FRAME).unwrap_err();
        assert!(err.to_string().contains("5120 bytes"), "{err}");
    }

    #[test]
    fn oversized_frames_are_refused_not_truncated() {
        assert_eq!(frame_header(5).unwrap(), 5u32.to_le_bytes());
        assert_eq!(
            frame_header(MAX_FRAME).unwrap(),
            (MAX_FRAME as u32).to_le_bytes()
        );
        for len in [0, MAX_FRAME + 1, u32::MAX as usize + 1, usize::MAX] {
            let e = frame_header(len).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{len}");
        }
        // Nothing reaches the wire for a refused frame.
        let mut sink = Vec::new();
        assert!(write_frame(&mut sink, &[]).is_err());
        assert!(sink.is_empty());
    }
}
