//! A PE's side of the config store: [`TcpBootstrap`], the [`Bootstrap`]
//! implementation every start-up path ends in.

use std::collections::HashMap;
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use shmem_core::{shmem_log, Activity, Bootstrap, Error, HangPolicy, PeId, PeerHealth, Result};

use crate::protocol::{read_frame, write_frame, Reply, Request};
use crate::store::StoreServer;

#[derive(Debug, Clone)]
enum Failure {
    PeerExited {
        pe: usize,
        detail: String,
    },
    Aborted {
        pe: usize,
        status: i32,
        message: String,
    },
    Lost(String),
}

impl Failure {
    fn to_error(&self) -> Error {
        match self {
            Failure::PeerExited { pe, detail } => Error::PeerExited {
                pe: *pe,
                detail: detail.clone(),
            },
            Failure::Aborted {
                pe,
                status,
                message,
            } => Error::Aborted {
                pe: *pe,
                status: *status,
                message: message.clone(),
            },
            Failure::Lost(m) => Error::PeerExited {
                pe: 0,
                detail: m.clone(),
            },
        }
    }
}

#[derive(Default)]
struct ClientState {
    values: HashMap<Vec<u8>, Vec<u8>>,
    colls: HashMap<u64, Vec<Vec<u8>>>,
    failure: Option<Failure>,
    bye_ok: bool,
    /// Every PE reported dead, in order.
    dead: Vec<(usize, String)>,
    /// Data-plane records to mark when a PE dies.
    watchers: Vec<Arc<PeerHealth>>,
    /// Summary of the last hang report.
    last_hang: Option<String>,
}

/// The hang watch of one PE: which call it was seen in, since when.
struct HangWatch {
    activity: Arc<Activity>,
    policy: HangPolicy,
    generation: u64,
    since: Instant,
    probed: bool,
}

struct Shared {
    /// Requests go out under this lock (the reader thread answers hang
    /// queries too).
    writer: Mutex<TcpStream>,
    hang: Mutex<Option<HangWatch>>,
    state: Mutex<ClientState>,
    changed: Condvar,
    failed: AtomicBool,
    leaving: AtomicBool,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, ClientState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn send_raw(&self, req: &Request) -> std::io::Result<()> {
        let mut w = self.writer.lock().unwrap_or_else(|p| p.into_inner());
        write_frame(&mut *w, &req.encode())
    }

    fn hang_watch(&self) -> MutexGuard<'_, Option<HangWatch>> {
        self.hang.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Called while this PE waits: once it has stayed in one call longer
    /// than the hang-report delay, asks the store for a report (once per
    /// call).
    fn hang_check(&self) {
        let mut guard = self.hang_watch();
        let Some(h) = guard.as_mut() else { return };
        if !h.activity.busy() {
            return;
        }
        let generation = h.activity.generation();
        let now = Instant::now();
        if generation != h.generation {
            (h.generation, h.since, h.probed) = (generation, now, false);
            return;
        }
        if h.probed || now.duration_since(h.since) < h.policy.report_after {
            return;
        }
        h.probed = true;
        let quiet_ms = h.policy.report_after.as_millis().min(u64::MAX as u128) as u64;
        drop(guard);
        let _ = self.send_raw(&Request::HangProbe { quiet_ms });
    }

    /// What this PE is doing, for a hang report.
    fn hang_state(&self) -> String {
        let guard = self.hang_watch();
        let Some(h) = guard.as_ref() else {
            return "unknown (no hang watch)".into();
        };
        let st = h.activity.state();
        let at = st
            .location
            .map(|l| format!(", called at {l}"))
            .unwrap_or_default();
        match st.label {
            Some(label) if st.generation == h.generation => {
                format!(
                    "{label}, waiting {:.1} s{at}",
                    h.since.elapsed().as_secs_f64()
                )
            }
            Some(label) => format!("{label}, just entered{at}"),
            None => "in no shmem call (computing, or blocked outside the library)".into(),
        }
    }
    fn fail(&self, f: Failure) {
        let mut st = self.lock();
        if st.failure.is_none() {
            st.failure = Some(f);
        }
        self.failed.store(true, Ordering::SeqCst);
        self.changed.notify_all();
    }
}

/// A member of a job, connected to its config store.
pub struct TcpBootstrap {
    rank: PeId,
    size: usize,
    store_addr: SocketAddr,
    shared: Arc<Shared>,
    seq: AtomicU64,
    timeout: Duration,
    reader: Mutex<Option<JoinHandle<()>>>,
    hosted: Mutex<Option<StoreServer>>,
    finalized: AtomicBool,
}

impl std::fmt::Debug for TcpBootstrap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TcpBootstrap")
            .field("rank", &self.rank)
            .field("size", &self.size)
            .field("store", &self.store_addr)
            .finish()
    }
}

/// What a PE needs to join a job.
#[derive(Debug, Clone)]
pub struct JoinParams {
    /// This PE's rank.
    pub rank: PeId,
    /// Number of PEs.
    pub nranks: usize,
    /// Where the store listens.
    pub store_addr: SocketAddr,
    /// The job secret.
    pub secret: Vec<u8>,
    /// How long to keep trying to reach the store and to wait for the others.
    pub init_timeout: Duration,
    /// Timeout of each later call.
    pub call_timeout: Duration,
    /// Time to declare a silent link dead.
    pub link_timeout: Duration,
}

/// Validates rank and job size.
///
/// # Errors
/// [`Error::InvalidArgument`] for `nranks` 0 or above `u32::MAX`, or `rank >= nranks`.
pub fn check_rank(rank: PeId, nranks: usize) -> Result<()> {
    if nranks == 0 {
        return Err(Error::invalid("nranks", "must be at least 1"));
    }
    if nranks > u32::MAX as usize {
        return Err(Error::invalid("nranks", format!("{nranks} is too large")));
    }
    if rank >= nranks {
        return Err(Error::invalid(
            "rank",
            format!("{rank} is out of range for a job of {nranks} PEs (valid 0..{nranks})"),
        ));
    }
    Ok(())
}

impl TcpBootstrap {
    /// Connects to the store (retrying until `init_timeout`), proves the
    /// secret, and waits until all `nranks` PEs have joined. `hosted` keeps a
    /// store this process runs alive until the job ends.
    ///
    /// # Errors
    /// As every join (see the [crate-level errors](crate#errors)).
    pub fn join(p: JoinParams, hosted: Option<StoreServer>) -> Result<TcpBootstrap> {
        check_rank(p.rank, p.nranks)?;
        let deadline = Instant::now() + p.init_timeout;
        let stream = loop {
            let stream = connect_until(&p, deadline)?;
            match hello(&p, stream, deadline)? {
                Some(s) => break s,
                // The store is busy with unauthenticated connections: retry.
                None => std::thread::sleep(Duration::from_millis(50)),
            }
        };
        let _ = stream.set_read_timeout(None);
        let reader_stream = stream
            .try_clone()
            .map_err(|e| Error::os("cloning the bootstrap socket", e))?;
        let shared = Arc::new(Shared {
            writer: Mutex::new(stream),
            hang: Mutex::new(None),
            state: Mutex::new(ClientState::default()),
            changed: Condvar::new(),
            failed: AtomicBool::new(false),
            leaving: AtomicBool::new(false),
        });
        let s2 = shared.clone();
        let me = p.rank;
        let reader = std::thread::Builder::new()
            .name("shmem-bootstrap".into())
            .spawn(move || reader_loop(reader_stream, s2, me))
            .map_err(|e| Error::os("spawning the bootstrap reader", e))?;
        let bs = TcpBootstrap {
            rank: p.rank,
            size: p.nranks,
            store_addr: p.store_addr,
            shared,
            seq: AtomicU64::new(0),
            timeout: p.call_timeout,
            reader: Mutex::new(Some(reader)),
            hosted: Mutex::new(hosted),
            finalized: AtomicBool::new(false),
        };
        // The first collective doubles as "everyone has joined".
        bs.collective(
            &[],
            p.init_timeout,
            "waiting for all PEs to join the job",
            "SHMEM_INIT_TIMEOUT",
        )?;
        Ok(bs)
    }

    /// Address of the config store.
    pub fn store_addr(&self) -> SocketAddr {
        self.store_addr
    }

    fn send(&self, req: &Request) -> Result<()> {
        self.shared.send_raw(req).map_err(|e| {
            self.check_peers().err().unwrap_or_else(|| {
                Error::os(
                    format!("writing to the config store at {}", self.store_addr),
                    e,
                )
            })
        })
    }

    fn wait_reply<T>(
        &self,
        timeout: Duration,
        what: &str,
        governed_by: &str,
        mut take: impl FnMut(&mut ClientState) -> Option<T>,
    ) -> Result<T> {
        let deadline = Instant::now() + timeout;
        let mut st = self.shared.lock();
        loop {
            if let Some(v) = take(&mut st) {
                return Ok(v);
            }
            if let Some(f) = &st.failure {
                return Err(f.to_error());
            }
            let now = Instant::now();
            if now >= deadline {
                let mut what = format!("PE {}: {what} ({governed_by})", self.rank);
                if let Some(h) = &st.last_hang {
                    what.push_str(&format!("; last hang report: {h}"));
                }
                drop(st);
                let e = Error::Timeout {
                    what,
                    secs: timeout.as_secs_f64(),
                };
                self.note_failure(&e.to_string());
                return Err(e);
            }
            // Wake now and then to see whether this wait needs a hang report.
            st = crate::wait_changed(
                &self.shared.changed,
                st,
                (deadline - now).min(Duration::from_millis(200)),
            );
            drop(st);
            self.shared.hang_check();
            st = self.shared.lock();
        }
    }

    fn live(&self) -> Result<()> {
        if self.finalized.load(Ordering::SeqCst) {
            return Err(Error::NotInitialized);
        }
        self.check_peers()
    }

    fn collective(
        &self,
        data: &[u8],
        timeout: Duration,
        what: &str,
        governed_by: &str,
    ) -> Result<Vec<Vec<u8>>> {
        self.live()?;
        // The answer carries every PE's contribution in one frame.
        let limit = crate::protocol::MAX_FRAME / self.size.max(1) - 64;
        if data.len() > limit {
            return Err(Error::invalid(
                "data",
                format!(
                    "{} bytes per PE is more than the control plane carries for {} PEs ({limit} bytes); move bulk data through the symmetric heap",
                    data.len(),
                    self.size
                ),
            ));
        }
        let seq = self.seq.fetch_add(1, Ordering::SeqCst);
        self.send(&Request::Collective {
            seq,
            data: data.to_vec(),
        })?;
        self.wait_reply(timeout, what, governed_by, |st| st.colls.remove(&seq))
    }

    /// Stores `value` under `key` in the job's key-value store.
    ///
    /// # Errors
    /// [`Error::NotInitialized`] after finalize; [`Error::InvalidArgument`] when `key`
    /// and `value` do not fit one frame; [`Error::PeerExited`] or [`Error::Aborted`]
    /// once a PE has died or aborted the job; [`Error::Os`] when the store connection
    /// fails.
    pub fn set(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.live()?;
        if key.len() + value.len() > crate::protocol::MAX_FRAME - 64 {
            return Err(Error::invalid(
                "value",
                format!("{} bytes is too large for the config store", value.len()),
            ));
        }
        self.send(&Request::Set {
            key: key.to_vec(),
            value: value.to_vec(),
        })
    }

    /// Waits for `key` to be set and returns its value.
    ///
    /// # Errors
    /// As [`TcpBootstrap::set`] (except the size check), and [`Error::Timeout`] when
    /// `key` is not set within `SHMEM_BOOTSTRAP_TIMEOUT`.
    pub fn get(&self, key: &[u8]) -> Result<Vec<u8>> {
        self.live()?;
        if let Some(v) = self.shared.lock().values.get(key).cloned() {
            return Ok(v);
        }
        self.send(&Request::Get { key: key.to_vec() })?;
        let what = format!("waiting for key {:?}", String::from_utf8_lossy(key));
        self.wait_reply(self.timeout, &what, BOOTSTRAP_TIMEOUT, |st| {
            st.values.get(key).cloned()
        })
    }
}

/// Key under which a PE leaves the reason it is failing (see
/// [`Bootstrap::note_failure`]); the store cites it if the PE then exits.
pub fn failure_key(rank: PeId) -> Vec<u8> {
    format!("shmem/failure/{rank}").into_bytes()
}

/// The variable that bounds control-plane calls after start-up.
const BOOTSTRAP_TIMEOUT: &str = "SHMEM_BOOTSTRAP_TIMEOUT";

/// Connects to the store, retrying until `deadline`.
fn connect_until(p: &JoinParams, deadline: Instant) -> Result<TcpStream> {
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let last = match TcpStream::connect_timeout(
            &p.store_addr,
            left.clamp(Duration::from_millis(1), Duration::from_secs(2)),
        ) {
            // A connect to a closed local port can land on itself
            // (TCP simultaneous open); that is not the store.
            Ok(s) if s.local_addr().ok() == s.peer_addr().ok() => {
                "nothing listens there".to_string()
            }
            Ok(s) => return Ok(s),
            Err(e) => e.to_string(),
        };
        if Instant::now() >= deadline {
            return Err(Error::Timeout {
                what: format!(
                    "PE {} could not reach the config store at {} (is rank 0 running and reachable? last error: {last}); SHMEM_INIT_TIMEOUT sets the wait",
                    p.rank, p.store_addr
                ),
                secs: p.init_timeout.as_secs_f64(),
            });
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Presents the HELLO; `Ok(None)` when the store asks to try again later
/// (too many connections waiting to authenticate) and `deadline` allows it.
fn hello(p: &JoinParams, mut stream: TcpStream, deadline: Instant) -> Result<Option<TcpStream>> {
    shmem_core::net::tune(&stream, p.link_timeout);
    let _ = stream.set_write_timeout(Some(Duration::from_secs(30)));
    write_frame(
        &mut stream,
        &Request::Hello {
            rank: p.rank as u32,
            nranks: p.nranks as u32,
            secret: p.secret.clone(),
        }
        .encode(),
    )
    .map_err(|e| {
        Error::os(
            format!("sending HELLO to the config store at {}", p.store_addr),
            e,
        )
    })?;
    let _ = stream.set_read_timeout(Some(p.init_timeout.max(Duration::from_millis(100))));
    let first = read_frame(&mut stream)
        .map_err(|e| {
            Error::Bootstrap(format!(
                "no answer from the config store at {}: {e}",
                p.store_addr
            ))
        })?
        .ok_or_else(|| {
            Error::Bootstrap(format!(
                "the config store at {} closed the connection during HELLO",
                p.store_addr
            ))
        })?;
    match Reply::decode(&first) {
        Ok(Reply::Welcome) => Ok(Some(stream)),
        Ok(Reply::Reject(why)) if why == crate::store::BUSY && Instant::now() < deadline => {
            Ok(None)
        }
        Ok(Reply::Reject(why)) => Err(Error::Bootstrap(format!(
            "the config store at {} refused PE {}: {why}",
            p.store_addr, p.rank
        ))),
        // Another protocol version (the error names both) or garbage.
        Err(e) => Err(e),
        Ok(other) => Err(Error::Bootstrap(format!(
            "unexpected answer to HELLO from the config store at {}: {other:?}",
            p.store_addr
        ))),
    }
}

fn reader_loop(mut stream: TcpStream, shared: Arc<Shared>, me: PeId) {
    loop {
        let frame = match read_frame(&mut stream) {
            Ok(Some(f)) => f,
            Ok(None) | Err(_) => {
                if !shared.leaving.load(Ordering::SeqCst) {
                    shared.fail(Failure::Lost(
                        "the config store (hosted by rank 0 or the launcher) closed its connection; the job is gone".into(),
                    ));
                }
                return;
            }
        };
        let reply = match Reply::decode(&frame) {
            Ok(r) => r,
            Err(e) => {
                shared.fail(Failure::Lost(format!("garbage from the config store: {e}")));
                return;
            }
        };
        match reply {
            Reply::Value { key, value } => {
                shared.lock().values.insert(key, value);
                shared.changed.notify_all();
            }
            Reply::CollectiveDone { seq, data } => {
                shared.lock().colls.insert(seq, data);
                shared.changed.notify_all();
            }
            Reply::PeerExited { rank, detail } => {
                {
                    let mut st = shared.lock();
                    for w in &st.watchers {
                        w.mark_dead(rank as usize, &detail);
                    }
                    st.dead.push((rank as usize, detail.clone()));
                }
                if !shared.leaving.load(Ordering::SeqCst) {
                    shared.fail(Failure::PeerExited {
                        pe: rank as usize,
                        detail,
                    });
                }
            }
            Reply::Abort {
                rank,
                status,
                message,
            } => {
                // The PE that aborted has said why; the others say only
                // where to look, in one line.
                if rank as usize != me {
                    shmem_core::log::write_line(&format!(
                        "shmem: PE {me}: stopping: the job was ended by PE {rank} (status {status}); see its message"
                    ));
                }
                shared.fail(Failure::Aborted {
                    pe: rank as usize,
                    status,
                    message,
                });
                std::process::exit(status);
            }
            Reply::ByeOk => {
                shared.lock().bye_ok = true;
                shared.changed.notify_all();
                return;
            }
            Reply::HangQuery { round } => {
                let state = shared.hang_state();
                let _ = shared.send_raw(&Request::HangState { round, state });
            }
            Reply::HangTable { rows, prober, .. } => {
                let (text, summary) = hang_table(prober as usize, &rows);
                shared.lock().last_hang = Some(summary.clone());
                if prober as usize != me {
                    continue;
                }
                let abort = shared.hang_watch().as_ref().is_some_and(|h| h.policy.abort);
                let mut text = text;
                text.push_str(if abort {
                    "shmem: ending the job (SHMEM_HANG_ABORT=1)"
                } else {
                    "shmem: the job goes on waiting (SHMEM_HANG_ABORT=1 would end it)"
                });
                shmem_core::log::write_line(&text);
                if abort {
                    let _ = shared.send_raw(&Request::Abort {
                        status: 1,
                        message: format!("hang report: {summary}"),
                    });
                }
            }
            Reply::Welcome | Reply::Reject(_) => {}
        }
    }
}

/// The hang report printed by the PE that asked for it, and its one-line
/// summary: every PE's state, then which PEs diverged.
pub fn hang_table(me: PeId, rows: &[String]) -> (String, String) {
    let mut text = format!("shmem: hang report (asked by PE {me}): what every PE is doing\n");
    for (pe, r) in rows.iter().enumerate() {
        text.push_str(&format!("  PE {pe:<4} {r}\n"));
    }
    // Group the PEs by the call they are in (without the time waited).
    let mut groups: Vec<(String, Vec<usize>)> = Vec::new();
    for (pe, r) in rows.iter().enumerate() {
        let call = r
            .split(", waiting ")
            .next()
            .and_then(|c| c.split(", just entered").next())
            .unwrap_or(r)
            .to_string();
        match groups.iter_mut().find(|(c, _)| *c == call) {
            Some((_, pes)) => pes.push(pe),
            None => groups.push((call, vec![pe])),
        }
    }
    let phrase = |call: &str, pes: &[usize]| {
        let (who, one) = match pes {
            [p] => (format!("PE {p}"), true),
            many => (
                format!(
                    "PEs {}",
                    many.iter()
                        .map(|p| p.to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                false,
            ),
        };
        match call.strip_prefix("has ") {
            Some(rest) => format!("{who} {} {rest}", if one { "has" } else { "have" }),
            None if call.starts_with("in ") => {
                format!("{who} {} {call}", if one { "is" } else { "are" })
            }
            None => format!("{who} {} in {call}", if one { "is" } else { "are" }),
        }
    };
    // Different collective calls (or numbers of them) can never meet: a
    // mismatch. A PE outside every call may just be late.
    let in_collectives = groups
        .iter()
        .filter(|(c, _)| !c.starts_with("in ") && !c.starts_with("has ") && c != "wait_until")
        .count();
    let parts = groups
        .iter()
        .map(|(call, pes)| phrase(call, pes))
        .collect::<Vec<_>>()
        .join("; ");
    let summary = if in_collectives > 1 {
        format!("the PEs diverged (collective mismatch): {parts}")
    } else if groups.len() > 1 {
        format!("the PEs diverged: {parts}")
    } else {
        format!(
            "no PE diverged: {parts}; unless that is expected, they wait for something no PE does (a put or signal never sent)"
        )
    };
    text.push_str(&format!("shmem: {summary}\n"));
    (text, summary)
}

impl Bootstrap for TcpBootstrap {
    fn rank(&self) -> PeId {
        self.rank
    }
    fn size(&self) -> usize {
        self.size
    }
    fn allgather(&self, data: &[u8]) -> Result<Vec<Vec<u8>>> {
        let all = self.collective(data, self.timeout, "allgather", BOOTSTRAP_TIMEOUT)?;
        if all.len() != self.size {
            return Err(Error::Bootstrap(format!(
                "allgather returned {} entries for {} PEs",
                all.len(),
                self.size
            )));
        }
        Ok(all)
    }
    fn barrier(&self) -> Result<()> {
        self.collective(&[], self.timeout, "barrier", BOOTSTRAP_TIMEOUT)
            .map(|_| ())
    }
    fn broadcast(&self, root: PeId, data: &[u8]) -> Result<Vec<u8>> {
        if root >= self.size {
            return Err(Error::PeOutOfRange {
                pe: root,
                n_pes: self.size,
            });
        }
        let mine = if root == self.rank { data } else { &[] };
        let mut all = self.collective(mine, self.timeout, "broadcast", BOOTSTRAP_TIMEOUT)?;
        Ok(std::mem::take(&mut all[root]))
    }
    fn local_ip(&self) -> Option<std::net::IpAddr> {
        let w = self.shared.writer.lock().unwrap_or_else(|p| p.into_inner());
        w.local_addr().ok().map(|a| a.ip())
    }
    fn check_peers(&self) -> Result<()> {
        if !self.shared.failed.load(Ordering::Relaxed) {
            self.shared.hang_check();
            return Ok(());
        }
        match &self.shared.lock().failure {
            Some(f) => Err(f.to_error()),
            None => Ok(()),
        }
    }
    fn watch_activity(&self, activity: Arc<Activity>, policy: HangPolicy) {
        let generation = activity.generation();
        *self.shared.hang_watch() = Some(HangWatch {
            activity,
            policy,
            generation,
            since: Instant::now(),
            probed: false,
        });
    }
    fn hang_summary(&self) -> Option<String> {
        self.shared.lock().last_hang.clone()
    }
    fn note_failure(&self, what: &str) {
        let _ = self.shared.send_raw(&Request::Set {
            key: failure_key(self.rank),
            value: what.as_bytes().to_vec(),
        });
    }
    fn watch_peers(&self, health: Arc<PeerHealth>) {
        let mut st = self.shared.lock();
        for (pe, detail) in &st.dead {
            health.mark_dead(*pe, detail);
        }
        st.watchers.push(health);
    }
    fn abort(&self, status: i32, message: &str) -> Result<()> {
        self.send(&Request::Abort {
            status,
            message: message.to_string(),
        })?;
        // The store records the end of the job and echoes it to every PE,
        // this one included, whose reader thread then exits with `status`.
        // Waiting for that echo (at most 2 s) keeps this process from
        // exiting before the store has the message: a launcher that reaped
        // it first took its exit for a crash and stopped the other PEs with
        // SIGTERM instead of letting them exit with `status`.
        let _echoed = self.shared.changed.wait_timeout_while(
            self.shared.lock(),
            Duration::from_secs(2),
            |st| st.failure.is_none(),
        );
        Ok(())
    }
    fn finalize(&self) -> Result<()> {
        if self.finalized.swap(true, Ordering::SeqCst) {
            return Err(Error::NotInitialized);
        }
        self.shared.leaving.store(true, Ordering::SeqCst);
        let sent = self.send(&Request::Bye);
        let acked = sent.and_then(|_| {
            self.wait_reply(Duration::from_secs(10), "finalize", "a fixed 10 s", |st| {
                st.bye_ok.then_some(())
            })
        });
        if let Some(server) = self.hosted.lock().unwrap_or_else(|p| p.into_inner()).take() {
            if !server.wait_all_departed(self.timeout) {
                shmem_log!(
                    Warn,
                    "finalize: some PEs did not leave the job within {:?}",
                    self.timeout
                );
            }
        }
        let w = self.shared.writer.lock().unwrap_or_else(|p| p.into_inner());
        let _ = w.shutdown(Shutdown::Both);
        drop(w);
        if let Some(h) = self.reader.lock().unwrap_or_else(|p| p.into_inner()).take() {
            let _ = h.join();
        }
        acked
    }
}

impl Drop for TcpBootstrap {
    fn drop(&mut self) {
        self.shared.leaving.store(true, Ordering::SeqCst);
        if let Ok(w) = self.shared.writer.lock() {
            let _ = w.shutdown(Shutdown::Both);
        }
        if let Some(h) = self.reader.lock().ok().and_then(|mut r| r.take()) {
            let _ = h.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::hang_table;

    #[test]
    fn the_hang_table_names_the_pes_that_diverged() {
        let rows = vec![
            "malloc #3, waiting 10.2 s".to_string(),
            "barrier #7 (team WORLD), waiting 10.0 s".to_string(),
            "barrier #7 (team WORLD), waiting 10.1 s".to_string(),
            "has exited".to_string(),
        ];
        let (text, summary) = hang_table(1, &rows);
        assert_eq!(
            summary,
            "the PEs diverged (collective mismatch): PE 0 is in malloc #3; PEs 1, 2 are in barrier #7 (team WORLD); PE 3 has exited"
        );
        assert!(
            text.contains("  PE 0    malloc #3, waiting 10.2 s\n"),
            "{text}"
        );
        assert!(
            text.starts_with("shmem: hang report (asked by PE 1)"),
            "{text}"
        );
        let same = vec!["barrier #2 (team WORLD), waiting 3.0 s".to_string(); 2];
        let (_, summary) = hang_table(0, &same);
        assert!(
            summary.starts_with("no PE diverged: PEs 0, 1 are in barrier #2 (team WORLD)"),
            "{summary}"
        );
    }
}
