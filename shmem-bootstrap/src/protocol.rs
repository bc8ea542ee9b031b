//! Wire format of the config store: length-prefixed frames over TCP.
//!
//! A frame is `u32 length (LE) | body`; the body is one [`Request`] or
//! [`Reply`] as [`shmem_core::wire`] encodes every control-plane message
//! (protocol version, then postcard). Frames above [`MAX_FRAME`] are
//! rejected as garbage, and so is a first frame above [`MAX_HELLO_FRAME`].

use std::io::{self, Read, Write};

use serde::{Deserialize, Serialize};
use shmem_core::{wire, Result};

/// Largest frame accepted (allgather payloads included).
pub const MAX_FRAME: usize = 256 << 20;

/// Largest frame accepted from a connection that has not authenticated yet
/// (its HELLO). A HELLO is a few dozen bytes; anything longer is garbage or
/// an attempt to make the store buffer memory for a stranger.
pub const MAX_HELLO_FRAME: usize = 4 << 10;

/// Client to store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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

impl Request {
    /// Serialises to a frame body ([`shmem_core::wire`]: protocol version,
    /// then the message).
    pub fn encode(&self) -> Vec<u8> {
        wire::encode(self)
    }

    /// Parses a frame body.
    ///
    /// # Errors
    /// [`shmem_core::Error::ProtocolMismatch`] for a client of another protocol
    /// version (naming both versions), [`shmem_core::Error::Malformed`] for garbage.
    pub fn decode(body: &[u8]) -> Result<Request> {
        wire::decode("config store request", body)
    }
}

impl Reply {
    /// Serialises to a frame body.
    pub fn encode(&self) -> Vec<u8> {
        wire::encode(self)
    }

    /// Parses a frame body.
    ///
    /// # Errors
    /// [`shmem_core::Error::ProtocolMismatch`] for a store of another protocol version
    /// (naming both versions), [`shmem_core::Error::Malformed`] for garbage.
    pub fn decode(body: &[u8]) -> Result<Reply> {
        wire::decode("config store reply", body)
    }
}

fn bad(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_string())
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
    use shmem_core::Error;

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
        // A message of another protocol version names both versions.
        let mut other = Request::Bye.encode();
        other[2..4].copy_from_slice(&(wire::PROTOCOL_VERSION + 1).to_le_bytes());
        let e = Request::decode(&other).unwrap_err();
        assert!(matches!(e, Error::ProtocolMismatch { .. }), "{e}");
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
