//! The control plane's one encoding: every control-plane message and id is
//! a serde type, written as [postcard] bytes behind a four-byte header that
//! carries the protocol version.
//!
//! ```text
//! b'S' b'W' | version: u16 LE | postcard body
//! ```
//!
//! [`encode`] is the one place that writes a message and [`decode`] the one
//! place that reads one, so the version check, the garbage checks and the
//! error messages are the same for the config store's frames, the UniqueId,
//! the init hello, the allocation agreement and the topology exchange.
//! Data-path headers (signals, descriptors, the heaps' control blocks) are
//! not messages of this kind and stay fixed-layout.
//!
//! ```
//! use shmem_core::wire::{self, AllocCall};
//! let bytes = wire::encode(&AllocCall::Free { offset: 64 });
//! assert_eq!(wire::decode::<AllocCall>("allocation agreement", &bytes).unwrap(),
//!            AllocCall::Free { offset: 64 });
//! ```

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// Version of the control-plane protocol this library speaks. Bump it when
/// any message type of the control plane changes shape.
pub const PROTOCOL_VERSION: u16 = 2;

/// First two bytes of every encoded message.
pub const MAGIC: [u8; 2] = *b"SW";

/// Bytes of the header in front of every message's body.
pub const HEADER_LEN: usize = 4;

/// Encodes `msg` behind the header. Appends to `out` (which may already
/// hold, for example, a frame's length prefix).
///
/// The control plane's types (plain structs and enums of integers, strings
/// and byte vectors) always encode; a type postcard cannot encode leaves
/// only the header in `out`, which every decoder refuses as truncated.
pub fn encode_into<T: Serialize + ?Sized>(msg: &T, out: &mut Vec<u8>) {
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&PROTOCOL_VERSION.to_le_bytes());
    if let Ok(body) = postcard::to_stdvec(msg) {
        out.extend_from_slice(&body);
    }
}

/// Encodes `msg` (header and body) into a new buffer.
pub fn encode<T: Serialize + ?Sized>(msg: &T) -> Vec<u8> {
    let mut out = Vec::new();
    encode_into(msg, &mut out);
    out
}

/// The protocol version in the header of `bytes`, if it has a header.
pub fn version_of(bytes: &[u8]) -> Option<u16> {
    match bytes {
        [m0, m1, v0, v1, ..] if [*m0, *m1] == MAGIC => Some(u16::from_le_bytes([*v0, *v1])),
        _ => None,
    }
}

/// Decodes one message of type `T` that must fill `bytes` exactly.
///
/// # Errors
/// [`Error::ProtocolMismatch`] when the header carries another protocol
/// version (naming both); [`Error::Malformed`] (naming `what`) for bytes
/// without the header, a body that is not a `T`, or trailing bytes.
pub fn decode<T: DeserializeOwned>(what: &'static str, bytes: &[u8]) -> Result<T> {
    let (msg, rest) = decode_prefix(what, bytes)?;
    if !rest.is_empty() {
        return Err(Error::Malformed {
            what,
            reason: format!("{} bytes left over after the message", rest.len()),
        });
    }
    Ok(msg)
}

/// Decodes one message of type `T` from the start of `bytes`; returns it
/// and the bytes after it (a fixed-size id padded with zeros, say).
///
/// # Errors
/// As [`decode`], less the check for trailing bytes.
pub fn decode_prefix<'a, T: DeserializeOwned>(
    what: &'static str,
    bytes: &'a [u8],
) -> Result<(T, &'a [u8])> {
    if bytes.len() < HEADER_LEN {
        return Err(Error::Malformed {
            what,
            reason: format!(
                "{} bytes, shorter than the {HEADER_LEN}-byte header of a shmem control-plane message",
                bytes.len()
            ),
        });
    }
    let Some(theirs) = version_of(bytes) else {
        return Err(Error::Malformed {
            what,
            reason: "not a shmem control-plane message (bad magic)".into(),
        });
    };
    if theirs != PROTOCOL_VERSION {
        return Err(Error::ProtocolMismatch {
            what,
            theirs,
            ours: PROTOCOL_VERSION,
        });
    }
    postcard::take_from_bytes(&bytes[HEADER_LEN..]).map_err(|e| Error::Malformed {
        what,
        reason: format!("{e} ({} bytes)", bytes.len()),
    })
}

/// What each PE sends at init, so that all agree before anything is built.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InitHello {
    /// Symmetric heap size asked for, in bytes.
    pub heap_size: u64,
    /// Names of the linked engines, in registry order.
    pub engines: Vec<String>,
}

/// One PE's side of an allocation agreement (every PE must send the same).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum AllocCall {
    /// `malloc(size, align)`.
    Malloc {
        /// Bytes.
        size: u64,
        /// Alignment.
        align: u64,
    },
    /// `free(offset)`.
    Free {
        /// Heap offset.
        offset: u64,
    },
    /// `realloc(offset, size)`.
    Realloc {
        /// Heap offset of the old object.
        offset: u64,
        /// New size in bytes.
        size: u64,
    },
}

impl AllocCall {
    /// The call's name (`malloc`, `free`, `realloc`).
    pub fn name(&self) -> &'static str {
        match self {
            AllocCall::Malloc { .. } => "malloc",
            AllocCall::Free { .. } => "free",
            AllocCall::Realloc { .. } => "realloc",
        }
    }
}

impl std::fmt::Display for AllocCall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AllocCall::Malloc { size, align } => write!(f, "malloc(size {size}, align {align})"),
            AllocCall::Free { offset } => write!(f, "free(offset {offset:#x})"),
            AllocCall::Realloc { offset, size } => {
                write!(f, "realloc(offset {offset:#x}, size {size})")
            }
        }
    }
}

/// One PE's record in the topology exchange.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeRecord {
    /// Process id.
    pub pid: u32,
    /// User id.
    pub uid: u32,
    /// Identity of its node (see [`crate::topology::node_key`]).
    pub node_key: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip() {
        let h = InitHello {
            heap_size: 1 << 30,
            engines: vec!["HCCS".into(), "SDMA".into()],
        };
        assert_eq!(decode::<InitHello>("init hello", &encode(&h)).unwrap(), h);
        for c in [
            AllocCall::Malloc { size: 8, align: 64 },
            AllocCall::Free { offset: 0x40 },
            AllocCall::Realloc {
                offset: 0x40,
                size: u64::MAX,
            },
        ] {
            assert_eq!(decode::<AllocCall>("agreement", &encode(&c)).unwrap(), c);
        }
        let r = NodeRecord {
            pid: 7,
            uid: 1000,
            node_key: "host|boot|net".into(),
        };
        assert_eq!(decode::<NodeRecord>("node record", &encode(&r)).unwrap(), r);
    }

    #[test]
    fn a_version_mismatch_names_both_versions() {
        let mut b = encode(&AllocCall::Free { offset: 1 });
        b[2..4].copy_from_slice(&(PROTOCOL_VERSION + 7).to_le_bytes());
        let e = decode::<AllocCall>("allocation agreement", &b).unwrap_err();
        assert!(matches!(e, Error::ProtocolMismatch { theirs, ours, .. }
            if theirs == PROTOCOL_VERSION + 7 && ours == PROTOCOL_VERSION));
        let text = e.to_string();
        assert!(
            text.contains(&format!("version {}", PROTOCOL_VERSION + 7)),
            "{text}"
        );
        assert!(
            text.contains(&format!("version {PROTOCOL_VERSION}")),
            "{text}"
        );
        assert!(text.contains("allocation agreement"), "{text}");
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert!(decode::<InitHello>("x", &[]).is_err());
        assert!(decode::<InitHello>("x", b"SW").is_err());
        assert!(decode::<InitHello>("x", b"XX\x02\x00").is_err());
        let mut trailing = encode(&AllocCall::Free { offset: 1 });
        trailing.push(0);
        assert!(decode::<AllocCall>("x", &trailing).is_err());
        // A length prefix promising more than is there.
        let mut big = encode(&0u8);
        big.truncate(HEADER_LEN);
        big.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0x0f]);
        assert!(decode::<InitHello>("x", &big).is_err());
        // Every prefix and a pseudo-random stream of bytes after the header.
        let good = encode(&InitHello {
            heap_size: 5,
            engines: vec!["A".into()],
        });
        for n in 0..good.len() {
            assert!(decode::<InitHello>("x", &good[..n]).is_err(), "{n}");
        }
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..2000 {
            let mut b = good[..HEADER_LEN].to_vec();
            for _ in 0..(x % 40) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                b.push(x as u8);
            }
            let _ = decode::<InitHello>("x", &b);
            let _ = decode::<AllocCall>("x", &b);
            let _ = decode::<NodeRecord>("x", &b);
        }
    }
}
