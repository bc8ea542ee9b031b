//! The initialised PE behind every C call: runtime, collectives, static
//! data table, AMO service and staging area; handles for teams and contexts.

use std::ffi::{c_int, c_long};
use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use shmem::collectives::Collectives;
use shmem::{Error, PeId, Result, Runtime, Shmem, Team};

use crate::statics::{AmoService, StaticData};
use crate::{CtxHandle, TeamHandle, CTX_DEFAULT, TEAM_INVALID, TEAM_SHARED, TEAM_WORLD};

/// Bytes of heap the library keeps for collectives on static data.
const STAGE_BYTES: usize = 1 << 20;

static STATE: RwLock<Option<Arc<State>>> = RwLock::new(None);
static FINALIZED: AtomicBool = AtomicBool::new(false);
/// The installed PE for the hot path: every C call reads it with one plain
/// load (no lock, no reference count). It points into an `Arc` held by
/// `STATE` or, after finalize, by `RETIRED`.
static ACTIVE: AtomicPtr<State> = AtomicPtr::new(std::ptr::null_mut());
/// Finalized PEs, kept until the process exits so that a call racing with
/// `shmem_finalize` in another thread still reads valid memory (it then
/// fails as a use after finalize, or completes).
static RETIRED: Mutex<Vec<Arc<State>>> = Mutex::new(Vec::new());

/// One initialised PE as the C API sees it.
pub(crate) struct State {
    pub(crate) shmem: Shmem,
    pub(crate) rt: Arc<Runtime>,
    pub(crate) coll: Arc<Collectives>,
    pub(crate) statics: StaticData,
    pub(crate) amo: AmoService,
    /// Heap offset and size of the staging area for static-data collectives.
    pub(crate) stage: (usize, usize),
    /// Serialises collectives that use the staging area (THREAD_MULTIPLE).
    pub(crate) stage_lock: Mutex<()>,
    /// `SHMEM_DEBUG=1`: heap accesses are checked against live allocations.
    pub(crate) debug: bool,
}

/// Where a symmetric address lives.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Sym {
    /// Symmetric heap offset.
    Heap(usize),
    /// Static data: segment index and offset within it.
    Static(usize, usize),
}

/// The initialised PE (one atomic load on the hot path).
#[inline]
pub(crate) fn current() -> std::result::Result<&'static State, ()> {
    let p = ACTIVE.load(Ordering::Acquire);
    if p.is_null() {
        return Err(());
    }
    // SAFETY: `p` came from `Arc::as_ptr` of a State that is never dropped:
    // `STATE` holds it while installed and `RETIRED` for the rest of the
    // process after finalize.
    Ok(unsafe { &*p })
}

/// The common case of a C call on the symmetric heap, decided with no
/// error value built: the default context, no `SHMEM_DEBUG` checks, `addr`
/// in this PE's heap, and the `len` bytes there (aligned to `align`) on a
/// PE this PE reaches by load and store, with the job healthy
/// ([`shmem_core::Runtime::load_store_span`]). Returns that PE's mapped
/// heap and the heap offset; `None` sends the call down its checked path
/// inside [`crate::ffi`], which does the same access or reports why not.
///
/// It runs outside `ffi`'s panic guard, and so must what callers do with
/// its answer: comparisons, loads and stores, and `loadstore`'s copies and
/// atomics, none of which can panic.
#[inline(always)]
pub(crate) fn load_store(
    ctx: CtxHandle,
    pe: c_int,
    addr: *const u8,
    len: usize,
    align: usize,
    nbi: bool,
) -> Option<(*mut u8, usize)> {
    if ctx != CTX_DEFAULT {
        return None;
    }
    let st = current().ok()?;
    if st.debug {
        return None;
    }
    let pe = usize::try_from(pe).ok()?;
    let off = st.rt.offset_of(addr)?;
    let base = st.rt.load_store_span(pe, off, len, align, nbi)?;
    Some((base.as_ptr(), off))
}

/// Set when the process is ending through `shmem_global_exit` or a fatal
/// error: no implicit finalize at exit then.
static LEAVING: AtomicBool = AtomicBool::new(false);

/// Records that the process is ending without a collective finalize.
pub(crate) fn mark_leaving() {
    LEAVING.store(true, Ordering::Release);
}

/// See [`mark_leaving`].
pub(crate) fn leaving() -> bool {
    LEAVING.load(Ordering::Acquire)
}

/// Why [`current`] found no PE.
pub(crate) fn not_initialized_text() -> String {
    if FINALIZED.load(Ordering::Acquire) {
        "called after shmem_finalize".into()
    } else {
        "called before shmem_init".into()
    }
}

pub(crate) fn is_initialized() -> bool {
    STATE.read().unwrap_or_else(|p| p.into_inner()).is_some()
}

/// When `e` says another PE ended the job, this process is already on its
/// way out: the bootstrap's reader thread has printed the one line that points
/// at that PE and is calling `exit` with its status. Saying more here would
/// print the other PE's message a second time, and a second concurrent `exit`
/// is undefined, so this thread waits for the process to end (with a late
/// exit of its own should the reader never get there).
pub(crate) fn quiet_if_aborted_elsewhere(st: &State, e: &Error) {
    if let Error::Aborted { pe, status, .. } = e {
        if *pe != st.rt.my_pe() {
            mark_leaving();
            std::thread::sleep(std::time::Duration::from_secs(10));
            std::process::exit(*status)
        }
    }
}

/// Prints why `name` failed and ends the job.
pub(crate) fn fatal(name: &str, msg: &str) -> ! {
    mark_leaving();
    let st = STATE.read().ok().and_then(|g| g.clone());
    match st {
        Some(st) => {
            let me = st.rt.my_pe();
            // A failure caused by another PE's death is that PE's story: say
            // so in one line and leave without ending the job a second time
            // (the launcher names the PE that died first).
            if let Some((pe, detail)) = st.rt.dead_pes().first() {
                shmem_core::log::write_line(&format!(
                    "shmem: PE {me}: {name}: stopping: PE {pe} exited first ({detail})"
                ));
                std::process::exit(1)
            }
            let line = format!("shmem: PE {me}: {name}: {msg}");
            shmem_core::log::write_line(&line);
            st.rt.global_exit(1, &line)
        }
        None => {
            shmem_core::log::write_line(&format!("shmem: {name}: {msg}"));
            std::process::exit(1)
        }
    }
}

/// Finishes initialisation of a joined PE (collective) and installs it.
pub(crate) fn install(shmem: Shmem) -> Result<()> {
    // A hang report should not name this library's glue code as the caller.
    shmem_core::Activity::hide_source_locations();
    let rt = shmem.runtime().clone();
    let coll = shmem.collectives().clone();
    let statics = StaticData::exchange(&rt)?;
    // PEs on other nodes then read and write our static data with the
    // engine's own RMA (libfabric's) instead of through our AMO service.
    // Collective: every PE calls it, with nothing when its static data is
    // not symmetric.
    // SAFETY: the static segments stay mapped for the process's life.
    unsafe { rt.expose_memory(&statics.exposable()) }?;
    let amo = AmoService::start(&rt, &statics)?;
    let stage_len = STAGE_BYTES.min(rt.heap_size() / 8) / 64 * 64;
    let stage_off = rt.malloc_bytes(stage_len, 64)?;
    let debug = rt.config().debug;
    let st = State {
        shmem,
        rt,
        coll,
        statics,
        amo,
        stage: (stage_off, stage_len),
        stage_lock: Mutex::new(()),
        debug,
    };
    let st = Arc::new(st);
    let mut g = STATE.write().unwrap_or_else(|p| p.into_inner());
    ACTIVE.store(Arc::as_ptr(&st) as *mut State, Ordering::Release);
    *g = Some(st);
    Ok(())
}

/// Leaves the job: barrier, stop the AMO service, finalize the runtime.
pub(crate) fn finalize() -> Result<()> {
    let st = match current() {
        Ok(st) => st,
        Err(_) => return Ok(()),
    };
    st.coll.barrier_all()?;
    st.amo.stop(&st.rt);
    FINALIZED.store(true, Ordering::Release);
    ACTIVE.store(std::ptr::null_mut(), Ordering::Release);
    if let Some(old) = STATE.write().unwrap_or_else(|p| p.into_inner()).take() {
        RETIRED.lock().unwrap_or_else(|p| p.into_inner()).push(old);
    }
    st.shmem.finalize()
}

/// A context created by `shmem_ctx_create` / `shmem_team_create_ctx`.
#[derive(Debug)]
pub(crate) struct CtxInner {
    magic: u64,
    /// The team whose PE numbers the context uses (`None`: world).
    pub(crate) team: Option<Team>,
    /// The handle `shmem_ctx_get_team` returns.
    pub(crate) team_handle: TeamHandle,
    #[allow(dead_code)]
    pub(crate) options: c_long,
}

/// A team created by a split.
#[derive(Debug)]
pub(crate) struct TeamInner {
    magic: u64,
    pub(crate) team: Team,
}

const CTX_LIVE: u64 = 0x5348_4d45_4d43_5458; // "SHMEMCTX"
const TEAM_LIVE: u64 = 0x5348_4d45_4d54_4d53; // "SHMEMTMS"
const DEAD: u64 = 0xdead_dead_dead_dead;

pub(crate) fn new_ctx(team: Option<Team>, team_handle: TeamHandle, options: c_long) -> CtxHandle {
    Box::into_raw(Box::new(CtxInner {
        magic: CTX_LIVE,
        team,
        team_handle,
        options,
    }))
    .cast()
}

pub(crate) fn new_team_handle(team: Team) -> TeamHandle {
    Box::into_raw(Box::new(TeamInner {
        magic: TEAM_LIVE,
        team,
    }))
    .cast()
}

impl State {
    /// The context behind a handle (`None`: the default context).
    #[inline(always)]
    pub(crate) fn ctx<'a>(&self, ctx: CtxHandle) -> Result<Option<&'a CtxInner>> {
        if ctx == CTX_DEFAULT {
            return Ok(None);
        }
        Self::other_ctx(ctx)
    }

    /// [`State::ctx`] for a handle other than the default context.
    #[inline(never)]
    fn other_ctx<'a>(ctx: CtxHandle) -> Result<Option<&'a CtxInner>> {
        if ctx.is_null() {
            return Err(Error::invalid("ctx", "is SHMEM_CTX_INVALID"));
        }
        // SAFETY: non-default, non-null handles are leaked `CtxInner` boxes
        // (never freed; destroy only marks them), per the C contract.
        let c = unsafe { &*(ctx as *const CtxInner) };
        match c.magic {
            CTX_LIVE => Ok(Some(c)),
            DEAD => Err(Error::invalid(
                "ctx",
                "was destroyed with shmem_ctx_destroy",
            )),
            _ => Err(Error::invalid("ctx", "is not a context handle")),
        }
    }

    /// Marks a context destroyed (its memory stays, so later use is an error).
    pub(crate) fn destroy_ctx(&self, ctx: CtxHandle) -> Result<()> {
        if ctx == CTX_DEFAULT {
            return Err(Error::invalid(
                "ctx",
                "SHMEM_CTX_DEFAULT cannot be destroyed",
            ));
        }
        self.ctx(ctx)?;
        // SAFETY: validated live context box above.
        unsafe { (*(ctx as *mut CtxInner)).magic = DEAD };
        Ok(())
    }

    /// The team behind a handle.
    pub(crate) fn team(&self, team: TeamHandle) -> Result<&Team> {
        if team == TEAM_WORLD {
            return Ok(self.coll.world_ref());
        }
        if team == TEAM_SHARED {
            return Ok(self.coll.shared_ref());
        }
        if team == TEAM_INVALID {
            return Err(Error::invalid("team", "is SHMEM_TEAM_INVALID"));
        }
        // SAFETY: other handles are leaked `TeamInner` boxes (never freed).
        let t = unsafe { &*(team as *const TeamInner) };
        match t.magic {
            TEAM_LIVE => Ok(&t.team),
            DEAD => Err(Error::invalid(
                "team",
                "was destroyed with shmem_team_destroy",
            )),
            _ => Err(Error::invalid("team", "is not a team handle")),
        }
    }

    /// Marks a split team's handle destroyed.
    pub(crate) fn forget_team(&self, team: TeamHandle) {
        if team != TEAM_WORLD && team != TEAM_SHARED && !team.is_null() {
            // SAFETY: validated by `team()` before the caller destroyed it.
            unsafe { (*(team as *mut TeamInner)).magic = DEAD };
        }
    }

    /// Heap offset of `addr` when a call on it may skip [`State::locate`]:
    /// the default context (world numbering), no `SHMEM_DEBUG` checks, and
    /// `addr` in the heap (the caller's engine call checks the range).
    #[inline]
    pub(crate) fn fast_heap_offset(&self, ctx: CtxHandle, addr: *const u8) -> Option<usize> {
        if ctx != CTX_DEFAULT || self.debug {
            return None;
        }
        self.rt.offset_of(addr)
    }

    /// World PE of `pe` as numbered by `ctx` (its team's numbering).
    #[inline]
    pub(crate) fn target_pe(&self, ctx: CtxHandle, pe: c_int) -> Result<PeId> {
        let n = self.rt.n_pes();
        let bad = |n_pes| Error::PeOutOfRange {
            pe: pe.max(0) as usize,
            n_pes,
        };
        if pe < 0 {
            return Err(Error::invalid("pe", format!("{pe} is negative")));
        }
        if ctx == CTX_DEFAULT {
            return if (pe as usize) < n {
                Ok(pe as usize)
            } else {
                Err(bad(n))
            };
        }
        match self.ctx(ctx)? {
            Some(CtxInner { team: Some(t), .. }) => {
                t.world_pe(pe as usize).ok_or_else(|| bad(t.n_pes()))
            }
            _ if (pe as usize) < n => Ok(pe as usize),
            _ => Err(bad(n)),
        }
    }

    /// Where `len` bytes at local address `addr` live; an error when they
    /// are neither in the symmetric heap nor in the program's static data.
    #[inline]
    pub(crate) fn locate(&self, addr: *const u8, len: usize) -> Result<Sym> {
        if let Some(off) = self.rt.offset_of(addr) {
            self.rt.check_range(off, len)?;
            if self.debug {
                self.rt.check_allocated(off, len)?;
            }
            return Ok(Sym::Heap(off));
        }
        if let Some((seg, off)) = self.statics.find(addr as usize, len) {
            return Ok(Sym::Static(seg, off));
        }
        Err(self.not_symmetric(addr, len))
    }

    #[cold]
    #[inline(never)]
    fn not_symmetric(&self, addr: *const u8, len: usize) -> Error {
        let base = self.rt.heap_base().as_ptr() as usize;
        Error::invalid(
            "address",
            format!(
                "{:#x} ({len} bytes) is not symmetric: it is neither in the symmetric heap \
                 [{base:#x}, {:#x}) nor in the program's global or static data{}",
                addr as usize,
                base + self.rt.heap_size(),
                self.statics.describe()
            ),
        )
    }
}
