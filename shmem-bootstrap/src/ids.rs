//! Job secrets, the UniqueId format, and `tcp://` URLs.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, ToSocketAddrs};

use serde::{Deserialize, Serialize};
use shmem_core::{wire, Error, Result};

/// Bytes of a job secret (128 bits).
pub const SECRET_LEN: usize = 16;

/// Fresh random bytes from the kernel.
///
/// # Errors
/// [`Error::Os`] when `getrandom` fails.
pub fn random_bytes<const N: usize>() -> Result<[u8; N]> {
    let mut buf = [0u8; N];
    let mut filled = 0;
    while filled < N {
        // SAFETY: writes at most N - filled bytes into our buffer.
        let r = unsafe { libc::getrandom(buf[filled..].as_mut_ptr().cast(), N - filled, 0) };
        if r < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(Error::os("getrandom", e));
        }
        filled += r as usize;
    }
    Ok(buf)
}

/// A fresh job secret.
///
/// # Errors
/// As [`random_bytes`].
pub fn new_secret() -> Result<Vec<u8>> {
    Ok(random_bytes::<SECRET_LEN>()?.to_vec())
}

/// Lower-case hex.
pub fn to_hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Parses hex (what [`to_hex`] writes).
///
/// # Errors
/// [`Error::Malformed`] unless `s` is an even number of hex digits.
pub fn from_hex(s: &str) -> Result<Vec<u8>> {
    let s = s.trim();
    if !s.len().is_multiple_of(2) || !s.bytes().all(|c| c.is_ascii_hexdigit()) {
        return Err(Error::Malformed {
            what: "job secret",
            reason: "expected an even number of hex digits".into(),
        });
    }
    (0..s.len())
        .step_by(2)
        .map(|i| {
            u8::from_str_radix(&s[i..i + 2], 16).map_err(|e| Error::Malformed {
                what: "job secret",
                reason: e.to_string(),
            })
        })
        .collect()
}

/// A deterministic 128-bit secret derived from text every PE knows (used
/// only when no secret is distributed: attribute and torchrun start-up).
pub fn derived_secret(text: &str) -> Vec<u8> {
    // FNV-1a, twice with different bases: not cryptographic, it only keeps
    // strangers that do not know the job's address and size out.
    let mut out = Vec::with_capacity(SECRET_LEN);
    for basis in [0xcbf2_9ce4_8422_2325u64, 0x6c62_272e_07bb_0142] {
        let mut h = basis;
        for b in text.bytes() {
            h ^= b as u64;
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        out.extend_from_slice(&h.to_le_bytes());
    }
    out
}

/// The opaque id rank 0 hands to every PE: protocol version, store address
/// and job secret.
#[derive(Clone, PartialEq, Eq)]
pub struct UniqueId {
    /// Where rank 0's config store listens.
    pub addr: SocketAddr,
    /// The job secret.
    pub secret: Vec<u8>,
}

impl std::fmt::Debug for UniqueId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UniqueId")
            .field("addr", &self.addr)
            .field("secret", &"<hidden>")
            .finish()
    }
}

/// What a [`UniqueId`] carries on the wire.
#[derive(Serialize, Deserialize)]
struct UidWire {
    addr: SocketAddr,
    secret: Vec<u8>,
}

/// Length of an encoded [`UniqueId`]: the control-plane message padded
/// with zeros to a fixed size, so that it fits fixed-size buffers (C's
/// `shmemx_uniqueid_t`, a tensor broadcast by the launcher's framework).
pub const UID_LEN: usize = 64;

impl UniqueId {
    /// Encodes to [`UID_LEN`] bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut o = wire::encode(&UidWire {
            addr: self.addr,
            secret: self.secret.clone(),
        });
        o.resize(o.len().max(UID_LEN), 0);
        o
    }

    /// Decodes bytes from [`UniqueId::to_bytes`], with any number of zero
    /// bytes after the id (a larger fixed-size buffer); anything else is an
    /// error.
    ///
    /// # Errors
    /// [`Error::ProtocolMismatch`] for an id made by another version of the
    /// library (naming both versions); [`Error::Malformed`] for bytes that
    /// are not an id, a non-zero tail, port 0 or a secret of the wrong size.
    pub fn from_bytes(b: &[u8]) -> Result<UniqueId> {
        let bad = |reason: String| Error::Malformed {
            what: "UniqueId",
            reason,
        };
        let (id, rest) = wire::decode_prefix::<UidWire>("UniqueId", b).map_err(|e| match e {
            Error::Malformed { reason, .. } => {
                bad(format!("{reason} (was it produced by get_unique_id?)"))
            }
            e => e,
        })?;
        if rest.iter().any(|&x| x != 0) {
            return Err(bad(format!(
                "{} bytes after the id are not zero padding (was it produced by get_unique_id?)",
                rest.len()
            )));
        }
        if id.addr.port() == 0 {
            return Err(bad("port 0".into()));
        }
        if id.secret.len() != SECRET_LEN {
            return Err(bad(format!(
                "a {}-byte secret, expected {SECRET_LEN}",
                id.secret.len()
            )));
        }
        Ok(UniqueId {
            addr: id.addr,
            secret: id.secret,
        })
    }
}

/// Parses `tcp://host:port` or `tcp6://[addr]:port`.
///
/// # Errors
/// [`Error::Malformed`] for another scheme, a missing host or port, port 0, an
/// unbracketed IPv6 address, or a host that does not resolve to an address of the
/// scheme's family.
pub fn parse_url(url: &str) -> Result<SocketAddr> {
    let bad = |reason: String| Error::Malformed {
        what: "bootstrap URL",
        reason: format!("{url:?}: {reason}"),
    };
    let (scheme, rest) = url
        .split_once("://")
        .ok_or_else(|| bad("expected tcp://host:port or tcp6://[addr]:port".into()))?;
    let want_v6 = match scheme.to_ascii_lowercase().as_str() {
        "tcp" => false,
        "tcp6" => true,
        s => return Err(bad(format!("unknown scheme {s:?} (use tcp or tcp6)"))),
    };
    let rest = rest.trim_end_matches('/');
    let (host, port) = if let Some(r) = rest.strip_prefix('[') {
        let (h, p) = r
            .split_once(']')
            .ok_or_else(|| bad("unclosed '['".into()))?;
        (
            h,
            p.strip_prefix(':')
                .ok_or_else(|| bad("missing :port".into()))?,
        )
    } else {
        if want_v6 && rest.matches(':').count() > 1 {
            return Err(bad(
                "IPv6 addresses must be written in brackets: tcp6://[addr]:port".into(),
            ));
        }
        rest.rsplit_once(':')
            .ok_or_else(|| bad("missing :port".into()))?
    };
    if host.is_empty() {
        return Err(bad("missing host".into()));
    }
    let port: u16 = port
        .parse()
        .map_err(|_| bad(format!("port {port:?} is not a number in 1..65535")))?;
    if port == 0 {
        return Err(bad(
            "port 0 cannot be shared by the PEs; pick a fixed port".into()
        ));
    }
    if let Ok(ip) = host.parse::<IpAddr>() {
        if want_v6 != ip.is_ipv6() {
            return Err(bad(format!("{ip} does not match scheme {scheme}")));
        }
        return Ok(SocketAddr::new(ip, port));
    }
    let addrs = (host, port)
        .to_socket_addrs()
        .map_err(|e| bad(format!("cannot resolve host {host:?}: {e}")))?;
    addrs
        .into_iter()
        .find(|a| a.is_ipv6() == want_v6)
        .ok_or_else(|| {
            bad(format!(
                "host {host:?} has no {} address",
                if want_v6 { "IPv6" } else { "IPv4" }
            ))
        })
}

/// Address rank 0's store binds to for UniqueId init: `SHMEM_BOOTSTRAP_ADDR`
/// if set, else the first up, non-loopback IPv4 interface, else 127.0.0.1.
///
/// # Errors
/// [`Error::Config`] when `configured` is not an IP address, or `ifname` names no
/// interface that is up with an IPv4 address.
pub fn default_bind_ip(configured: &str, ifname: &str) -> Result<IpAddr> {
    let c = configured.trim();
    if !c.is_empty() {
        return c.parse().map_err(|_| Error::Config {
            name: "SHMEM_BOOTSTRAP_ADDR",
            value: c.to_string(),
            reason: "not an IP address".into(),
        });
    }
    let ifname = ifname.trim();
    if !ifname.is_empty() {
        return interface_ipv4(Some(ifname))
            .map(IpAddr::V4)
            .ok_or_else(|| Error::Config {
                name: "SHMEM_BOOTSTRAP_IFNAME",
                value: ifname.to_string(),
                reason: "no such interface with an IPv4 address that is up".into(),
            });
    }
    Ok(interface_ipv4(None).map_or(IpAddr::V4(Ipv4Addr::LOCALHOST), IpAddr::V4))
}

/// The IPv4 address of interface `name`, or of the first up, non-loopback
/// interface when `name` is `None`.
pub fn interface_ipv4(name: Option<&str>) -> Option<Ipv4Addr> {
    let mut ifap: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills a list we free below.
    if unsafe { libc::getifaddrs(&mut ifap) } != 0 {
        return None;
    }
    let mut found = None;
    let mut cur = ifap;
    while !cur.is_null() {
        // SAFETY: cur is a node of the list returned by getifaddrs.
        let ifa = unsafe { &*cur };
        cur = ifa.ifa_next;
        let up = ifa.ifa_flags & (libc::IFF_UP as u32) != 0;
        let lo = ifa.ifa_flags & (libc::IFF_LOOPBACK as u32) != 0;
        if !up || ifa.ifa_addr.is_null() {
            continue;
        }
        if let Some(want) = name {
            // SAFETY: ifa_name is a NUL-terminated string owned by the list.
            let have = unsafe { std::ffi::CStr::from_ptr(ifa.ifa_name) };
            if have.to_bytes() != want.as_bytes() {
                continue;
            }
        } else if lo {
            continue;
        }
        // SAFETY: ifa_addr is non-null and points to a sockaddr.
        if unsafe { (*ifa.ifa_addr).sa_family } as i32 != libc::AF_INET {
            continue;
        }
        // SAFETY: the family says it is a sockaddr_in.
        let sin = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in) };
        found = Some(Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)));
        break;
    }
    // SAFETY: list from getifaddrs, freed once.
    unsafe { libc::freeifaddrs(ifap) };
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uid_round_trips_v4_and_v6() {
        for addr in ["127.0.0.1:4000", "[::1]:5000"] {
            let u = UniqueId {
                addr: addr.parse().unwrap(),
                secret: vec![7; SECRET_LEN],
            };
            let b = u.to_bytes();
            assert_eq!(b.len(), UID_LEN);
            assert_eq!(UniqueId::from_bytes(&b).unwrap(), u);
        }
    }

    #[test]
    fn foreign_uid_bytes_are_rejected() {
        let u = UniqueId {
            addr: "127.0.0.1:4000".parse().unwrap(),
            secret: vec![1; SECRET_LEN],
        }
        .to_bytes();
        assert!(UniqueId::from_bytes(&u[..10]).is_err());
        let mut m = u.clone();
        m[0] = b'X';
        assert!(UniqueId::from_bytes(&m)
            .unwrap_err()
            .to_string()
            .contains("magic"));
        let mut v = u.clone();
        v[2] = 99;
        let e = UniqueId::from_bytes(&v).unwrap_err();
        assert!(
            matches!(e, Error::ProtocolMismatch { theirs: 99, .. }),
            "{e}"
        );
        assert!(e.to_string().contains("version 99"), "{e}");
        assert!(UniqueId::from_bytes(&[0u8; UID_LEN]).is_err());
        // Zero padding to a larger buffer is fine; anything else after the
        // id is not.
        let mut padded = u.clone();
        padded.resize(128, 0);
        assert!(UniqueId::from_bytes(&padded).is_ok());
        padded[100] = 1;
        assert!(UniqueId::from_bytes(&padded)
            .unwrap_err()
            .to_string()
            .contains("padding"));
        // Every truncation is refused.
        let used = u.iter().rposition(|&x| x != 0).unwrap() + 1;
        for n in 0..used {
            assert!(UniqueId::from_bytes(&u[..n]).is_err(), "{n}");
        }
    }

    #[test]
    fn urls_parse() {
        assert_eq!(
            parse_url("tcp://127.0.0.1:1234").unwrap(),
            "127.0.0.1:1234".parse().unwrap()
        );
        assert_eq!(
            parse_url("tcp6://[::1]:99").unwrap(),
            "[::1]:99".parse().unwrap()
        );
        assert_eq!(parse_url("TCP://localhost:80").unwrap().port(), 80);
        for bad in [
            "127.0.0.1:1",
            "udp://1.2.3.4:5",
            "tcp://1.2.3.4",
            "tcp://1.2.3.4:0",
            "tcp://1.2.3.4:99999",
            "tcp6://::1:5",
            "tcp6://127.0.0.1:5",
            "tcp://:5",
            "tcp6://[::1:5",
        ] {
            assert!(parse_url(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn hex_and_secrets() {
        let s = new_secret().unwrap();
        assert_eq!(s.len(), SECRET_LEN);
        assert_ne!(s, new_secret().unwrap());
        assert_eq!(from_hex(&to_hex(&s)).unwrap(), s);
        assert!(from_hex("abc").is_err());
        assert!(from_hex("zz").is_err());
        assert_eq!(derived_secret("a"), derived_secret("a"));
        assert_ne!(derived_secret("a"), derived_secret("b"));
    }
}
