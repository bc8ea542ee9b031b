//! Job secrets, the UniqueId format, and `tcp://` URLs.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, ToSocketAddrs};

use shmem_core::{Error, Result};

/// Bytes of a job secret (128 bits).
pub const SECRET_LEN: usize = 16;

/// Fresh random bytes from the kernel.
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
pub fn new_secret() -> Result<Vec<u8>> {
    Ok(random_bytes::<SECRET_LEN>()?.to_vec())
}

/// Lower-case hex.
pub fn to_hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Parses hex (what [`to_hex`] writes).
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

/// The opaque id rank 0 hands to every PE: format version, store address and
/// job secret.
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

const UID_MAGIC: &[u8; 6] = b"SHMUID";
const UID_VERSION: u8 = 1;
/// Length of an encoded [`UniqueId`].
pub const UID_LEN: usize = 6 + 1 + 1 + 2 + 16 + SECRET_LEN;

impl UniqueId {
    /// Encodes to [`UID_LEN`] bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut o = Vec::with_capacity(UID_LEN);
        o.extend_from_slice(UID_MAGIC);
        o.push(UID_VERSION);
        let (family, ip) = match self.addr.ip() {
            IpAddr::V4(a) => (4u8, a.to_ipv6_mapped().octets()),
            IpAddr::V6(a) => (6u8, a.octets()),
        };
        o.push(family);
        o.extend_from_slice(&self.addr.port().to_be_bytes());
        o.extend_from_slice(&ip);
        o.extend_from_slice(&self.secret);
        o
    }

    /// Decodes bytes from [`UniqueId::to_bytes`]; anything else is an error.
    pub fn from_bytes(b: &[u8]) -> Result<UniqueId> {
        let bad = |reason: String| Error::Malformed {
            what: "UniqueId",
            reason,
        };
        if b.len() != UID_LEN {
            return Err(bad(format!(
                "{} bytes, expected {UID_LEN} (was it produced by get_unique_id?)",
                b.len()
            )));
        }
        if &b[..6] != UID_MAGIC {
            return Err(bad("not a shmem UniqueId (bad magic)".into()));
        }
        if b[6] != UID_VERSION {
            return Err(bad(format!(
                "format version {} is not supported (this library speaks {UID_VERSION})",
                b[6]
            )));
        }
        let port = u16::from_be_bytes([b[8], b[9]]);
        if port == 0 {
            return Err(bad("port 0".into()));
        }
        let mut ip = [0u8; 16];
        ip.copy_from_slice(&b[10..26]);
        let v6 = Ipv6Addr::from(ip);
        let ip = match b[7] {
            4 => IpAddr::V4(
                v6.to_ipv4_mapped()
                    .ok_or_else(|| bad("IPv4 family with a non-IPv4 address".into()))?,
            ),
            6 => IpAddr::V6(v6),
            f => return Err(bad(format!("address family {f}"))),
        };
        Ok(UniqueId {
            addr: SocketAddr::new(ip, port),
            secret: b[26..].to_vec(),
        })
    }
}

/// Parses `tcp://host:port` or `tcp6://[addr]:port`.
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
        v[6] = 99;
        assert!(UniqueId::from_bytes(&v)
            .unwrap_err()
            .to_string()
            .contains("version"));
        assert!(UniqueId::from_bytes(&[0u8; UID_LEN]).is_err());
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
