//! With `--hosts`: a raw TCP reference between PE 0 and PE 1 over the same
//! bridge the RoCE engine's software provider uses, measured in the same
//! job. `ping-pong`: an S-byte message there and back (half round trip);
//! `stream`: [`STREAM_WINDOW`] S-byte messages then a one-byte ack, time
//! per message (like OSU's `osu_bw` window).

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};

use crate::error::{BenchError, Result};

/// Each PE's host address, comma separated, by rank (set by the driver).
pub const ADDRS_VAR: &str = "SHMEM_BENCH_PE_ADDRS";
/// Port PE 1 listens on for the reference connection (set by the driver).
pub const PORT_VAR: &str = "SHMEM_BENCH_TCP_PORT";
/// Messages per acknowledged window of the stream reference.
pub const STREAM_WINDOW: usize = 8;

/// Which TCP reference.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum TcpKind {
    /// Half round trip of an S-byte message.
    PingPong,
    /// Time per S-byte message of a stream.
    Stream,
}

/// Where PE 1 listens, when PE 0 and PE 1 are on different hosts.
pub fn peer_address() -> Option<SocketAddr> {
    let addrs = std::env::var(ADDRS_VAR).ok()?;
    let port: u16 = std::env::var(PORT_VAR).ok()?.parse().ok()?;
    let ips: Vec<IpAddr> = addrs.split(',').filter_map(|a| a.parse().ok()).collect();
    match ips.as_slice() {
        [a, b, ..] if a != b => Some(SocketAddr::new(*b, port)),
        _ => None,
    }
}

fn io(what: &str, e: std::io::Error) -> BenchError {
    BenchError::Job(format!("TCP reference: {what}: {e}"))
}

/// PE 1's side of the connection: listening (before the barrier).
pub fn listen(addr: SocketAddr) -> Result<TcpListener> {
    TcpListener::bind(addr).map_err(|e| io(&format!("binding {addr}"), e))
}

/// PE 1 accepts PE 0's connection.
pub fn accept(l: &TcpListener) -> Result<TcpStream> {
    let (s, _) = l.accept().map_err(|e| io("accepting", e))?;
    s.set_nodelay(true).map_err(|e| io("TCP_NODELAY", e))?;
    Ok(s)
}

/// PE 0 connects to PE 1 (after the barrier that follows PE 1's bind).
pub fn connect(addr: SocketAddr) -> Result<TcpStream> {
    let s = TcpStream::connect(addr).map_err(|e| io(&format!("connecting to {addr}"), e))?;
    s.set_nodelay(true).map_err(|e| io("TCP_NODELAY", e))?;
    Ok(s)
}

/// One operation of `kind` with `buf.len()`-byte messages; `first` is
/// PE 0's side.
pub fn exchange(
    s: &mut TcpStream,
    kind: TcpKind,
    first: bool,
    buf: &mut [u8],
) -> std::io::Result<()> {
    match (kind, first) {
        (TcpKind::PingPong, true) => {
            s.write_all(buf)?;
            s.read_exact(buf)
        }
        (TcpKind::PingPong, false) => {
            s.read_exact(buf)?;
            s.write_all(buf)
        }
        (TcpKind::Stream, true) => {
            for _ in 0..STREAM_WINDOW {
                s.write_all(buf)?;
            }
            s.read_exact(&mut [0u8])
        }
        (TcpKind::Stream, false) => {
            for _ in 0..STREAM_WINDOW {
                s.read_exact(buf)?;
            }
            s.write_all(&[1u8])
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_sides_of_both_kinds_agree() {
        let l = listen("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = l.local_addr().unwrap();
        let server = std::thread::spawn(move || {
            let mut s = accept(&l).unwrap();
            let mut buf = vec![0u8; 1000];
            for kind in [TcpKind::PingPong, TcpKind::Stream] {
                exchange(&mut s, kind, false, &mut buf).unwrap();
            }
        });
        let mut c = connect(addr).unwrap();
        let mut buf = vec![7u8; 1000];
        for kind in [TcpKind::PingPong, TcpKind::Stream] {
            exchange(&mut c, kind, true, &mut buf).unwrap();
        }
        server.join().unwrap();
    }
}
