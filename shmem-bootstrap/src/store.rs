//! The config store: a small TCP key-value and collective service.
//!
//! It runs on rank 0 (or inside `shmemrun`). Every connection must open with
//! a HELLO carrying the job secret; anything else is logged and dropped
//! without disturbing the job. Connections stay open for the job's life, so
//! a PE that dies is noticed at once (its socket closes) and every other
//! member is told which PE it was.

use std::collections::HashMap;
use std::io::{self, Read};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use shmem_core::{shmem_log, Error, Result};

use crate::protocol::{read_frame, write_frame, Reply, Request, MAX_HELLO_FRAME};

/// Time after which a member whose link went silent counts as exited.
const LINK_TIMEOUT: Duration = Duration::from_secs(5);

/// What the store allows a connection that has not authenticated yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreLimits {
    /// The whole HELLO must have arrived this long after the connection was
    /// accepted (a client trickling bytes is dropped at the deadline).
    pub hello_timeout: Duration,
    /// Most connections that may be waiting for their HELLO at once, on top
    /// of the job's PE count; further ones are refused at once.
    pub max_unauthenticated: usize,
}

impl Default for StoreLimits {
    fn default() -> Self {
        StoreLimits {
            hello_timeout: Duration::from_secs(10),
            max_unauthenticated: 64,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Membership {
    Absent,
    Joined,
    Left,
    Died,
}

struct Member {
    writer: TcpStream,
}

struct State {
    nranks: Option<usize>,
    members: Vec<Option<Member>>,
    status: Vec<Membership>,
    kv: HashMap<Vec<u8>, Vec<u8>>,
    waiting: HashMap<Vec<u8>, Vec<usize>>,
    colls: HashMap<u64, Vec<Option<Vec<u8>>>>,
    /// Failures in the order the store saw them: (rank, what).
    failures: Vec<(usize, String)>,
    /// Hang reports started so far.
    hang_rounds: u64,
    /// The report being gathered: round, the PE that asked, states by rank.
    hang: Option<(u64, usize, Vec<Option<String>>)>,
    /// No new report before this (a few stuck PEs ask at about the same time).
    hang_quiet_until: Option<Instant>,
    /// PEs that did not answer the last hang report.
    unresponsive: Vec<usize>,
}

impl State {
    fn record_failure(&mut self, rank: usize, what: String) {
        if !self.failures.iter().any(|(r, _)| *r == rank) {
            self.failures.push((rank, what));
        }
    }
}

struct Shared {
    secret: Vec<u8>,
    limits: StoreLimits,
    /// Connections accepted whose HELLO has not been judged yet.
    unauthenticated: AtomicUsize,
    state: Mutex<State>,
    changed: Condvar,
    stop: AtomicBool,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A running config store. Dropping it stops the service.
pub struct StoreServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for StoreServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreServer")
            .field("addr", &self.addr)
            .finish()
    }
}

impl StoreServer {
    /// Binds `addr` and starts serving. `nranks` may be unknown (UniqueId
    /// init), in which case the first member fixes it.
    ///
    /// # Errors
    /// The address is in use or cannot be bound, or the service thread
    /// cannot be started.
    pub fn bind(addr: SocketAddr, nranks: Option<usize>, secret: Vec<u8>) -> Result<StoreServer> {
        Self::bind_with_limits(addr, nranks, secret, StoreLimits::default())
    }

    /// [`StoreServer::bind`] with explicit limits for unauthenticated
    /// connections.
    ///
    /// # Errors
    /// As [`StoreServer::bind`].
    pub fn bind_with_limits(
        addr: SocketAddr,
        nranks: Option<usize>,
        secret: Vec<u8>,
        limits: StoreLimits,
    ) -> Result<StoreServer> {
        let listener = TcpListener::bind(addr).map_err(|e| {
            if e.kind() == io::ErrorKind::AddrInUse {
                Error::Bootstrap(format!(
                    "cannot start the config store on {addr}: address already in use (another job or program holds this port; pick another port)"
                ))
            } else {
                Error::os(format!("binding the config store to {addr}"), e)
            }
        })?;
        let addr = listener
            .local_addr()
            .map_err(|e| Error::os("getsockname of the config store", e))?;
        let shared = Arc::new(Shared {
            secret,
            limits,
            unauthenticated: AtomicUsize::new(0),
            state: Mutex::new(State {
                nranks,
                members: Vec::new(),
                status: Vec::new(),
                kv: HashMap::new(),
                waiting: HashMap::new(),
                colls: HashMap::new(),
                failures: Vec::new(),
                hang_rounds: 0,
                hang: None,
                hang_quiet_until: None,
                unresponsive: Vec::new(),
            }),
            changed: Condvar::new(),
            stop: AtomicBool::new(false),
        });
        if let Some(n) = nranks {
            shared.lock().resize(n);
        }
        let s2 = shared.clone();
        let accept = std::thread::Builder::new()
            .name("shmem-store".into())
            .spawn(move || accept_loop(listener, s2))
            .map_err(|e| Error::os("spawning the config store thread", e))?;
        shmem_log!(Debug, "config store listening on {addr}");
        Ok(StoreServer {
            addr,
            shared,
            accept: Some(accept),
        })
    }

    /// The address clients connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Tells the members that `rank` ended (known to a launcher that reaped
    /// it) before its socket close is noticed.
    pub fn report_exit(&self, rank: usize, detail: &str) {
        let mut st = self.shared.lock();
        if st.status.get(rank) == Some(&Membership::Joined)
            || st.status.get(rank) == Some(&Membership::Absent)
        {
            mark_died(&mut st, rank, detail);
        }
    }

    /// The PE whose failure the store learned of first, by time: the first
    /// to call global_exit or to drop its connection without leaving; with
    /// what is known of it. Launchers name this PE rather than the first
    /// one they happen to reap.
    pub fn first_failure(&self) -> Option<(usize, String)> {
        self.shared.lock().failures.first().cloned()
    }

    /// Waits until no member is connected (every rank that joined has left
    /// or died), or `timeout` passes; returns the ranks still connected
    /// then (none: empty). Ranks that never joined are not waited for.
    pub fn wait_members_gone(&self, timeout: Duration) -> Vec<usize> {
        let deadline = Instant::now() + timeout;
        let mut st = self.shared.lock();
        loop {
            let connected: Vec<usize> = st
                .status
                .iter()
                .enumerate()
                .filter(|(_, s)| **s == Membership::Joined)
                .map(|(rank, _)| rank)
                .collect();
            let now = Instant::now();
            if connected.is_empty() || now >= deadline {
                return connected;
            }
            st = crate::wait_changed(&self.shared.changed, st, deadline - now);
        }
    }

    /// Waits until every member has left or died, or `timeout` passes.
    /// Returns whether all are gone.
    pub fn wait_all_departed(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut st = self.shared.lock();
        loop {
            let done = st.nranks.is_some()
                && st
                    .status
                    .iter()
                    .all(|s| matches!(s, Membership::Left | Membership::Died));
            if done {
                return true;
            }
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            st = crate::wait_changed(&self.shared.changed, st, deadline - now);
        }
    }
}

impl Drop for StoreServer {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        // Unblock accept().
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_millis(200));
        {
            let mut st = self.shared.lock();
            for m in st.members.iter_mut().flatten() {
                let _ = m.writer.shutdown(Shutdown::Both);
            }
        }
        if let Some(h) = self.accept.take() {
            let _ = h.join();
        }
    }
}

impl State {
    fn resize(&mut self, n: usize) {
        self.members.resize_with(n, || None);
        self.status.resize(n, Membership::Absent);
    }
}

fn send(st: &mut State, rank: usize, reply: &Reply) {
    let body = reply.encode();
    if let Some(Some(m)) = st.members.get_mut(rank) {
        if let Err(e) = write_frame(&mut m.writer, &body) {
            shmem_log!(Debug, "config store: write to PE {rank} failed: {e}");
        }
    }
}

fn broadcast(st: &mut State, reply: &Reply, except: Option<usize>) {
    let body = reply.encode();
    for (r, m) in st.members.iter_mut().enumerate() {
        if Some(r) == except {
            continue;
        }
        if let Some(m) = m {
            let _ = write_frame(&mut m.writer, &body);
        }
    }
}

/// Starts a hang report for `prober` unless one runs or ran recently.
fn start_hang_report(st: &mut State, prober: usize, quiet: Duration, shared: Arc<Shared>) {
    let now = Instant::now();
    if st.hang.is_some() || st.hang_quiet_until.is_some_and(|t| now < t) {
        shmem_log!(
            Debug,
            "config store: hang probe from PE {prober} ignored (a report ran recently)"
        );
        return;
    }
    shmem_log!(Debug, "config store: hang report asked by PE {prober}");
    st.hang_rounds += 1;
    let round = st.hang_rounds;
    let rows = st
        .status
        .iter()
        .map(|s| match s {
            Membership::Joined => None,
            Membership::Left => Some("has finalized (left the job)".to_string()),
            Membership::Died => Some("has exited".to_string()),
            Membership::Absent => Some("has not joined".to_string()),
        })
        .collect();
    st.hang = Some((round, prober, rows));
    st.hang_quiet_until = Some(now + quiet);
    broadcast(st, &Reply::HangQuery { round }, None);
    finish_hang_report(st, false);
    // A stopped or wedged PE never answers: close the round without it.
    let wait = quiet.clamp(Duration::from_millis(200), Duration::from_secs(5));
    let _ = std::thread::Builder::new()
        .name("shmem-store-hang".into())
        .spawn(move || {
            std::thread::sleep(wait);
            let mut st = shared.lock();
            if st.hang.as_ref().is_some_and(|h| h.0 == round) {
                finish_hang_report(&mut st, true);
            }
        });
}

/// Records `rank`'s state in the running report (if it is `round`).
fn hang_answer(st: &mut State, round: Option<u64>, rank: usize, state: String) {
    if let Some((r, _, rows)) = st.hang.as_mut() {
        if round.is_none_or(|x| x == *r) {
            if let Some(slot) = rows.get_mut(rank) {
                slot.get_or_insert(state);
            }
        }
    }
    finish_hang_report(st, false);
}

/// Sends the table to every PE once every PE has answered (or, with
/// `now`, at once, naming the PEs that did not answer).
fn finish_hang_report(st: &mut State, now: bool) {
    let complete = st
        .hang
        .as_ref()
        .is_some_and(|(_, _, rows)| rows.iter().all(Option::is_some));
    if !complete && !now {
        return;
    }
    if let Some((round, prober, rows)) = st.hang.take() {
        st.unresponsive = (0..rows.len()).filter(|&r| rows[r].is_none()).collect();
        let rows = rows
            .into_iter()
            .map(|r| r.unwrap_or_else(|| "has not answered (stopped or wedged?)".into()))
            .collect();
        broadcast(
            st,
            &Reply::HangTable {
                round,
                prober: prober as u32,
                rows,
            },
            None,
        );
    }
}

fn mark_died(st: &mut State, rank: usize, detail: &str) {
    // A PE that said why it was failing exited because of that.
    let noted = st.kv.get(&crate::client::failure_key(rank)).map(|v| {
        format!(
            "it exited after failing with: {}",
            String::from_utf8_lossy(v)
        )
    });
    // Otherwise, if a hang report found PEs not answering, they are the
    // likelier cause.
    let silent: Vec<String> = st
        .unresponsive
        .iter()
        .filter(|&&r| r != rank)
        .map(|r| format!("PE {r}"))
        .collect();
    let detail = match noted {
        Some(n) => n,
        None if !silent.is_empty() => format!(
            "{detail}; meanwhile {} has not answered the hang report (stopped or wedged?)",
            silent.join(", ")
        ),
        None => detail.to_string(),
    };
    let detail = detail.as_str();
    st.record_failure(rank, format!("exited: {detail}"));
    hang_answer(st, None, rank, "has exited".into());
    if let Some(s) = st.status.get_mut(rank) {
        *s = Membership::Died;
    }
    if let Some(slot) = st.members.get_mut(rank) {
        if let Some(m) = slot.take() {
            let _ = m.writer.shutdown(Shutdown::Both);
        }
    }
    shmem_log!(Debug, "config store: PE {rank} exited: {detail}");
    broadcast(
        st,
        &Reply::PeerExited {
            rank: rank as u32,
            detail: detail.to_string(),
        },
        Some(rank),
    );
}

fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    loop {
        let conn = listener.accept();
        if shared.stop.load(Ordering::SeqCst) {
            return;
        }
        match conn {
            Ok((stream, peer)) => {
                let cap = shared.limits.max_unauthenticated + shared.lock().nranks.unwrap_or(0);
                if shared.unauthenticated.load(Ordering::SeqCst) >= cap {
                    shmem_log!(
                        Warn,
                        "config store: refused {peer}: {cap} connections are already waiting to authenticate"
                    );
                    refuse_busy(stream);
                    continue;
                }
                shared.unauthenticated.fetch_add(1, Ordering::SeqCst);
                let s2 = shared.clone();
                let spawned = std::thread::Builder::new()
                    .name("shmem-store-conn".into())
                    .spawn(move || serve(stream, peer, s2));
                if let Err(e) = spawned {
                    shared.unauthenticated.fetch_sub(1, Ordering::SeqCst);
                    shmem_log!(Warn, "config store: cannot serve {peer}: {e}");
                }
            }
            Err(e) => {
                shmem_log!(Warn, "config store: accept failed: {e}");
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
}

/// Text of the refusal sent to a connection over the unauthenticated cap;
/// a joining PE that reads it tries again.
pub(crate) const BUSY: &str = "busy: too many connections are waiting to authenticate";

fn refuse_busy(mut stream: TcpStream) {
    let _ = stream.set_write_timeout(Some(Duration::from_millis(100)));
    let _ = write_frame(&mut stream, &Reply::Reject(BUSY.into()).encode());
    let _ = stream.shutdown(Shutdown::Both);
}

/// Counts a connection as unauthenticated until dropped.
struct PendingSlot<'a>(&'a AtomicUsize);

impl Drop for PendingSlot<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Reads exactly `buf.len()` bytes, all of them by `deadline`.
fn read_exact_by(stream: &mut TcpStream, buf: &mut [u8], deadline: Instant) -> io::Result<()> {
    let mut got = 0;
    while got < buf.len() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "HELLO incomplete at its deadline ({got} of {} bytes)",
                    buf.len()
                ),
            ));
        }
        stream.set_read_timeout(Some(left))?;
        match stream.read(&mut buf[got..]) {
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(k) => got += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Reads the first frame of a connection: at most [`MAX_HELLO_FRAME`]
/// bytes, all of it by `deadline`. `Ok(None)` when the peer closed first.
fn read_hello(stream: &mut TcpStream, deadline: Instant) -> io::Result<Option<Vec<u8>>> {
    let mut len = [0u8; 4];
    match read_exact_by(stream, &mut len, deadline) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let n = u32::from_le_bytes(len) as usize;
    if n == 0 || n > MAX_HELLO_FRAME {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("first frame of {n} bytes (a HELLO is at most {MAX_HELLO_FRAME})"),
        ));
    }
    let mut body = vec![0u8; n];
    read_exact_by(stream, &mut body, deadline)?;
    Ok(Some(body))
}

fn serve(mut stream: TcpStream, peer: SocketAddr, shared: Arc<Shared>) {
    let pending = PendingSlot(&shared.unauthenticated);
    let deadline = Instant::now() + shared.limits.hello_timeout;
    shmem_core::net::tune(&stream, LINK_TIMEOUT);
    let _ = stream.set_write_timeout(Some(Duration::from_secs(30)));
    let hello = match read_hello(&mut stream, deadline).map(|f| f.map(|b| Request::decode(&b))) {
        Ok(Some(Ok(Request::Hello {
            rank,
            nranks,
            secret,
        }))) => (rank as usize, nranks as usize, secret),
        Ok(None) => return,
        Ok(Some(Err(e @ Error::ProtocolMismatch { .. }))) => {
            // Another build of the library: say so, in words its PE can
            // print even though it cannot decode this reply's body (the
            // version in the header is enough for it to name both).
            shmem_log!(Warn, "config store: rejected {peer}: {e}");
            let _ = write_frame(&mut stream, &Reply::Reject(e.to_string()).encode());
            return;
        }
        other => {
            if !shared.stop.load(Ordering::SeqCst) {
                shmem_log!(
                    Warn,
                    "config store: dropped connection from {peer}: no valid HELLO ({})",
                    describe(other)
                );
            }
            return;
        }
    };
    let (rank, nranks, secret) = hello;
    let reject = |stream: &mut TcpStream, why: String| {
        shmem_log!(Warn, "config store: rejected {peer}: {why}");
        let _ = write_frame(stream, &Reply::Reject(why).encode());
    };
    // The job size comes before the secret: a default secret is derived
    // from the size, so a PE that disagrees on it would otherwise only hear
    // "wrong job secret".
    let known = shared.lock().nranks;
    if let Some(n) = known.filter(|&n| n != nranks) {
        reject(
            &mut stream,
            format!("PE {rank} says the job has {nranks} PEs, the others say {n}"),
        );
        return;
    }
    if !constant_time_eq(&secret, &shared.secret) {
        reject(&mut stream, "wrong job secret".into());
        return;
    }
    let writer = match stream.try_clone() {
        Ok(w) => w,
        Err(e) => {
            shmem_log!(Warn, "config store: cannot clone socket of {peer}: {e}");
            return;
        }
    };
    {
        let mut st = shared.lock();
        let n = *st.nranks.get_or_insert(nranks);
        if st.status.len() != n {
            st.resize(n);
        }
        if nranks != n {
            drop(st);
            reject(
                &mut stream,
                format!("PE {rank} says the job has {nranks} PEs, the others say {n}"),
            );
            return;
        }
        if rank >= n {
            drop(st);
            reject(
                &mut stream,
                format!("rank {rank} is out of range for {n} PEs"),
            );
            return;
        }
        if st.status[rank] != Membership::Absent {
            drop(st);
            reject(
                &mut stream,
                format!("rank {rank} has already joined (duplicate rank)"),
            );
            return;
        }
        st.members[rank] = Some(Member { writer });
        st.status[rank] = Membership::Joined;
        send(&mut st, rank, &Reply::Welcome);
        // Tell the newcomer about PEs that already died.
        let dead: Vec<usize> = (0..n)
            .filter(|&r| st.status[r] == Membership::Died)
            .collect();
        for r in dead {
            send(
                &mut st,
                rank,
                &Reply::PeerExited {
                    rank: r as u32,
                    detail: "exited before this PE joined".into(),
                },
            );
        }
        shared.changed.notify_all();
    }
    drop(pending);
    let _ = stream.set_read_timeout(None);
    let end = loop {
        let frame = match read_frame(&mut stream) {
            Ok(Some(f)) => f,
            Ok(None) => break "its connection to the config store closed before finalize (process died or was killed)".to_string(),
            Err(e) => break format!("its connection to the config store failed: {e}"),
        };
        let req = match Request::decode(&frame) {
            Ok(r) => r,
            Err(e) => break format!("it sent a malformed request: {e}"),
        };
        let mut st = shared.lock();
        match req {
            Request::Hello { .. } => {
                drop(st);
                break "it sent a second HELLO".into();
            }
            Request::Set { key, value } => {
                if let Some(ranks) = st.waiting.remove(&key) {
                    for r in ranks {
                        send(
                            &mut st,
                            r,
                            &Reply::Value {
                                key: key.clone(),
                                value: value.clone(),
                            },
                        );
                    }
                }
                st.kv.insert(key, value);
            }
            Request::Get { key } => {
                if let Some(v) = st.kv.get(&key).cloned() {
                    send(&mut st, rank, &Reply::Value { key, value: v });
                } else {
                    st.waiting.entry(key).or_default().push(rank);
                }
            }
            Request::Collective { seq, data } => {
                let n = st.status.len();
                let slot = st.colls.entry(seq).or_insert_with(|| vec![None; n]);
                slot[rank] = Some(data);
                if slot.iter().all(|s| s.is_some()) {
                    let done: Vec<Vec<u8>> = st
                        .colls
                        .remove(&seq)
                        .unwrap_or_default()
                        .into_iter()
                        .map(|d| d.unwrap_or_default())
                        .collect();
                    broadcast(&mut st, &Reply::CollectiveDone { seq, data: done }, None);
                }
            }
            Request::Abort { status, message } => {
                st.record_failure(rank, format!("ended the job (status {status}): {message}"));
                broadcast(
                    &mut st,
                    &Reply::Abort {
                        rank: rank as u32,
                        status,
                        message,
                    },
                    None,
                );
            }
            Request::HangProbe { quiet_ms } => {
                start_hang_report(
                    &mut st,
                    rank,
                    Duration::from_millis(quiet_ms),
                    shared.clone(),
                );
            }
            Request::HangState { round, state } => {
                hang_answer(&mut st, Some(round), rank, state);
            }
            Request::Bye => {
                hang_answer(&mut st, None, rank, "has finalized (left the job)".into());
                send(&mut st, rank, &Reply::ByeOk);
                st.status[rank] = Membership::Left;
                st.members[rank] = None;
                shared.changed.notify_all();
                return;
            }
        }
    };
    let mut st = shared.lock();
    if st.status.get(rank) == Some(&Membership::Joined) {
        mark_died(&mut st, rank, &end);
    }
    shared.changed.notify_all();
}

fn describe<T: std::fmt::Debug>(r: io::Result<Option<Result<T>>>) -> String {
    match r {
        Ok(Some(Ok(req))) => format!("first request was {req:?}"),
        Ok(Some(Err(e))) => e.to_string(),
        Ok(None) => "closed".into(),
        Err(e) => e.to_string(),
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
