//! Setup, query and memory management: `shmem_init` ... `shmem_finalize`,
//! `shmem_ptr`, `shmem_malloc` and friends, and their deprecated names.

use std::ffi::{c_char, c_int, c_long, c_void};

use shmem::{Error, Result};

use crate::state::{self, Sym};
use crate::sync::export;
use crate::{ffi, ffi_bare, State, TeamHandle};

const THREAD_MULTIPLE: c_int = 3;
/// Alignment of `shmem_malloc` (that of C's `max_align_t`).
const MALLOC_ALIGN: usize = 16;

/// Lets same-user peers read and write this process's static data with
/// `process_vm_writev`/`readv` where Yama restricts ptrace to descendants.
fn allow_peer_access() {
    // SAFETY: PR_SET_PTRACER takes plain integer arguments; failure (no Yama)
    // is harmless and ignored.
    unsafe { libc::prctl(libc::PR_SET_PTRACER, libc::PR_SET_PTRACER_ANY, 0, 0, 0) };
}

/// Joins the job from the launcher environment (or as one PE).
pub(crate) fn init_with(join: impl FnOnce() -> Result<shmem::Shmem>) -> Result<()> {
    if state::is_initialized() {
        return Ok(());
    }
    allow_peer_access();
    // Before the runtime starts its threads.
    crate::statics::prepare();
    state::install(join()?)?;
    finalize_at_exit();
    Ok(())
}

#[cfg(target_env = "gnu")]
extern "C" {
    /// glibc's `on_exit`: like `atexit`, with the exit status.
    fn on_exit(f: extern "C" fn(c_int, *mut c_void), arg: *mut c_void) -> c_int;
}

/// A program that returns from `main` (or calls `exit(0)`) without
/// `shmem_finalize` finalizes there, collectively, as OpenSHMEM programs
/// written for `start_pes` expect (the OSU benchmarks, for one); otherwise
/// a PE that is done first would leave while the others still read its
/// memory. A non-zero exit status, `shmem_global_exit` or a fatal error
/// leaves at once, as before.
fn finalize_at_exit() {
    #[cfg(target_env = "gnu")]
    {
        extern "C" fn at_exit(status: c_int, _arg: *mut c_void) {
            if status != 0 || state::leaving() || !state::is_initialized() {
                return;
            }
            let r = std::panic::catch_unwind(state::finalize);
            if let Ok(Err(e)) = r {
                eprintln!("shmem: the implicit shmem_finalize at exit failed: {e}");
            }
        }
        static REGISTERED: std::sync::Once = std::sync::Once::new();
        // SAFETY: registers a plain extern "C" function with no argument.
        REGISTERED.call_once(|| unsafe {
            on_exit(at_exit, std::ptr::null_mut());
        });
    }
}

fn init_or_exit() {
    ffi_bare("shmem_init", || {
        if let Err(e) = init_with(shmem::init) {
            eprintln!("shmem: shmem_init failed: {e}");
            std::process::exit(1);
        }
    })
}

export!("shmem_init", fn() -> () { init_or_exit() });
export!("start_pes", fn(_npes: c_int) -> () { init_or_exit() });

export!("shmem_init_thread", fn(_requested: c_int, provided: *mut c_int) -> c_int {
    ffi_bare("shmem_init_thread", || match init_with(shmem::init) {
        Ok(()) => {
            if !provided.is_null() {
                // SAFETY: non-null output from the C caller.
                unsafe { *provided = THREAD_MULTIPLE };
            }
            0
        }
        Err(e) => {
            eprintln!("shmem: shmem_init_thread failed: {e}");
            -1
        }
    })
});

export!("shmem_query_thread", fn(provided: *mut c_int) -> () {
    if !provided.is_null() {
        // SAFETY: non-null output from the C caller.
        unsafe { *provided = THREAD_MULTIPLE };
    }
});

export!("shmem_finalize", fn() -> () {
    ffi_bare("shmem_finalize", || {
        if let Err(e) = state::finalize() {
            eprintln!("shmem: shmem_finalize failed: {e}");
            std::process::exit(1);
        }
    })
});

export!("shmem_initialized", fn() -> c_int { state::is_initialized() as c_int });

export!("shmem_my_pe", fn() -> c_int { ffi("shmem_my_pe", |st| Ok(st.rt.my_pe() as c_int)) });
export!("shmem_n_pes", fn() -> c_int { ffi("shmem_n_pes", |st| Ok(st.rt.n_pes() as c_int)) });
export!("_my_pe", fn() -> c_int { ffi("_my_pe", |st| Ok(st.rt.my_pe() as c_int)) });
export!("_num_pes", fn() -> c_int { ffi("_num_pes", |st| Ok(st.rt.n_pes() as c_int)) });

export!("shmem_global_exit", fn(status: c_int) -> () {
    state::mark_leaving();
    ffi_bare("shmem_global_exit", || match state::current() {
        Ok(st) => {
            let why = format!("shmem_global_exit({status}) called by PE {}", st.rt.my_pe());
            st.rt.global_exit(status, &why)
        }
        Err(_) => std::process::exit(status),
    })
});

export!("shmem_pe_accessible", fn(pe: c_int) -> c_int {
    ffi("shmem_pe_accessible", |st| Ok((pe >= 0 && st.rt.pe_accessible(pe as usize)) as c_int))
});

export!("shmem_addr_accessible", fn(addr: *const c_void, pe: c_int) -> c_int {
    ffi("shmem_addr_accessible", |st| {
        Ok((pe >= 0 && st.rt.pe_accessible(pe as usize) && st.locate(addr.cast(), 1).is_ok()) as c_int)
    })
});

fn ptr_on(st: &State, dest: *const c_void, pe: usize) -> *mut c_void {
    if pe >= st.rt.n_pes() {
        return std::ptr::null_mut();
    }
    match st.locate(dest.cast(), 0) {
        Ok(Sym::Heap(off)) => match st.rt.peer_ptr(off, pe) {
            Ok(Some(p)) => p.as_ptr().cast(),
            _ => std::ptr::null_mut(),
        },
        Ok(Sym::Static(..)) if pe == st.rt.my_pe() => dest as *mut c_void,
        // A node-local peer's static data is mapped here when it could be
        // shared at init.
        Ok(Sym::Static(seg, off)) => st
            .statics
            .peer_ptr(pe, seg, off)
            .map_or(std::ptr::null_mut(), |p| p.cast()),
        _ => std::ptr::null_mut(),
    }
}

export!("shmem_ptr", fn(dest: *const c_void, pe: c_int) -> *mut c_void {
    ffi("shmem_ptr", |st| Ok(if pe < 0 { std::ptr::null_mut() } else { ptr_on(st, dest, pe as usize) }))
});

export!("shmem_team_ptr", fn(team: TeamHandle, dest: *const c_void, pe: c_int) -> *mut c_void {
    ffi("shmem_team_ptr", |st| {
        let t = st.team(team)?;
        Ok(match (pe >= 0).then(|| t.world_pe(pe as usize)).flatten() {
            Some(w) => ptr_on(st, dest, w),
            None => std::ptr::null_mut(),
        })
    })
});

export!("shmem_info_get_version", fn(major: *mut c_int, minor: *mut c_int) -> () {
    if !major.is_null() && !minor.is_null() {
        // SAFETY: non-null outputs from the C caller.
        unsafe {
            *major = 1;
            *minor = 5;
        }
    }
});

export!("shmem_info_get_name", fn(name: *mut c_char) -> () {
    if name.is_null() {
        return;
    }
    // SHMEM_VENDOR_STRING in shmem.h: the spec's example compares the two.
    let text = "shmem-rs\0";
    // SAFETY: the standard gives `name` SHMEM_MAX_NAME_LEN (256) bytes; the
    // text is far shorter and NUL-terminated.
    unsafe { std::ptr::copy_nonoverlapping(text.as_ptr().cast::<c_char>(), name, text.len().min(256)) };
});

// ----- memory ------------------------------------------------------------------

fn heap_ptr(st: &State, off: usize) -> *mut c_void {
    // SAFETY: `off` is a live allocation inside the heap mapping.
    unsafe { st.rt.heap_base().as_ptr().add(off).cast() }
}

fn out_of_memory(r: Result<usize>) -> Result<Option<usize>> {
    match r {
        Ok(off) => Ok(Some(off)),
        Err(Error::OutOfMemory { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

fn alloc(name: &'static str, size: usize, align: usize, zero: bool) -> *mut c_void {
    ffi(name, |st| {
        if size == 0 {
            return Ok(std::ptr::null_mut());
        }
        let r = if zero {
            st.rt.calloc_bytes(size, align)
        } else {
            st.rt.malloc_bytes(size, align)
        };
        Ok(out_of_memory(r)?.map_or(std::ptr::null_mut(), |off| heap_ptr(st, off)))
    })
}

fn free(name: &'static str, ptr: *mut c_void) {
    ffi(name, |st| {
        if ptr.is_null() {
            return Ok(());
        }
        let off = st.rt.require_offset(ptr.cast())?;
        st.rt.quiet()?;
        st.rt.free_bytes(off)
    })
}

fn realloc(name: &'static str, ptr: *mut c_void, size: usize) -> *mut c_void {
    if ptr.is_null() {
        return alloc(name, size, MALLOC_ALIGN, false);
    }
    if size == 0 {
        free(name, ptr);
        return std::ptr::null_mut();
    }
    ffi(name, |st| {
        let off = st.rt.require_offset(ptr.cast())?;
        st.rt.quiet()?;
        Ok(out_of_memory(st.rt.realloc_bytes(off, size))?
            .map_or(std::ptr::null_mut(), |o| heap_ptr(st, o)))
    })
}

fn align(name: &'static str, alignment: usize, size: usize) -> *mut c_void {
    if !alignment.is_power_of_two() {
        return std::ptr::null_mut();
    }
    alloc(name, size, alignment.max(MALLOC_ALIGN), false)
}

export!("shmem_malloc", fn(size: usize) -> *mut c_void { alloc("shmem_malloc", size, MALLOC_ALIGN, false) });
export!("shmalloc", fn(size: usize) -> *mut c_void { alloc("shmalloc", size, MALLOC_ALIGN, false) });
export!("shmem_malloc_with_hints", fn(size: usize, _hints: c_long) -> *mut c_void {
    alloc("shmem_malloc_with_hints", size, MALLOC_ALIGN, false)
});
export!("shmem_calloc", fn(count: usize, size: usize) -> *mut c_void {
    match count.checked_mul(size) {
        Some(bytes) => alloc("shmem_calloc", bytes, MALLOC_ALIGN, true),
        None => std::ptr::null_mut(),
    }
});
export!("shmem_align", fn(alignment: usize, size: usize) -> *mut c_void { align("shmem_align", alignment, size) });
export!("shmemalign", fn(alignment: usize, size: usize) -> *mut c_void { align("shmemalign", alignment, size) });
export!("shmem_realloc", fn(ptr: *mut c_void, size: usize) -> *mut c_void { realloc("shmem_realloc", ptr, size) });
export!("shrealloc", fn(ptr: *mut c_void, size: usize) -> *mut c_void { realloc("shrealloc", ptr, size) });
export!("shmem_free", fn(ptr: *mut c_void) -> () { free("shmem_free", ptr) });
export!("shfree", fn(ptr: *mut c_void) -> () { free("shfree", ptr) });
