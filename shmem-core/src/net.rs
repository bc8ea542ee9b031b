//! Socket settings shared by every TCP user of the library (bootstrap,
//! software verbs): no Nagle delay, and a bounded time to notice a dead
//! link, so a cut cable or a vanished host becomes an error naming the peer
//! instead of a hang.

use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::time::Duration;

fn setopt(fd: i32, level: i32, name: i32, value: i32) {
    // SAFETY: setsockopt with a pointer to a live i32 of the right size.
    unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&value as *const i32).cast(),
            std::mem::size_of::<i32>() as libc::socklen_t,
        );
    }
}

/// Disables Nagle and makes a silent peer an error after about `link_timeout`:
/// keepalive probes every second once idle for a second, and
/// `TCP_USER_TIMEOUT` for unacknowledged data.
pub fn tune(stream: &TcpStream, link_timeout: Duration) {
    let _ = stream.set_nodelay(true);
    let fd = stream.as_raw_fd();
    let secs = link_timeout.as_secs().clamp(2, 3600) as i32;
    setopt(fd, libc::SOL_SOCKET, libc::SO_KEEPALIVE, 1);
    setopt(fd, libc::IPPROTO_TCP, libc::TCP_KEEPIDLE, 1);
    setopt(fd, libc::IPPROTO_TCP, libc::TCP_KEEPINTVL, 1);
    setopt(fd, libc::IPPROTO_TCP, libc::TCP_KEEPCNT, (secs - 1).max(1));
    setopt(
        fd,
        libc::IPPROTO_TCP,
        libc::TCP_USER_TIMEOUT,
        link_timeout.as_millis().clamp(1000, i32::MAX as u128) as i32,
    );
}
