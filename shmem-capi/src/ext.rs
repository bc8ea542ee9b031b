//! `shmemx.h`: UniqueId and URL start-up, engine selection and streams.

use std::ffi::{c_char, c_int, c_void, CStr};

use shmem::{Error, Stream, SymSlice, UniqueId};

use crate::state::Sym;
use crate::sync::export;
use crate::{ffi, ffi_bare, ffi_status};

/// Bytes of C's `shmemx_uniqueid_t` (the encoded id is shorter).
const UID_BYTES: usize = 128;

fn status(name: &str, r: shmem::Result<()>) -> c_int {
    match r {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("shmem: {name}: {e}");
            -1
        }
    }
}

export!("shmemx_get_uniqueid", fn(uid: *mut u8) -> c_int {
    ffi_bare("shmemx_get_uniqueid", || {
        status("shmemx_get_uniqueid", (|| {
            if uid.is_null() {
                return Err(Error::invalid("uid", "is NULL"));
            }
            let bytes = shmem::get_unique_id()?.to_bytes();
            let mut out = [0u8; UID_BYTES];
            out[..bytes.len()].copy_from_slice(&bytes);
            // SAFETY: the C caller's shmemx_uniqueid_t holds UID_BYTES bytes.
            unsafe { std::ptr::copy_nonoverlapping(out.as_ptr(), uid, UID_BYTES) };
            Ok(())
        })())
    })
});

export!("shmemx_init_with_uniqueid", fn(rank: c_int, nranks: c_int, mem_size: usize, uid: *const u8) -> c_int {
    ffi_bare("shmemx_init_with_uniqueid", || {
        status("shmemx_init_with_uniqueid", (|| {
            if uid.is_null() || rank < 0 || nranks < 1 {
                return Err(Error::invalid("uid/rank/nranks", "a NULL id or a negative rank or size"));
            }
            // SAFETY: the C caller's shmemx_uniqueid_t holds UID_BYTES bytes.
            let raw = unsafe { std::slice::from_raw_parts(uid, UID_BYTES) };
            let id = UniqueId::from_bytes(raw)?;
            let size = (mem_size > 0).then_some(mem_size);
            crate::setup::init_with(|| shmem::init_with_unique_id(rank as usize, nranks as usize, size, &id))
        })())
    })
});

export!("shmemx_init_attr", fn(rank: c_int, nranks: c_int, mem_size: usize, url: *const c_char) -> c_int {
    ffi_bare("shmemx_init_attr", || {
        status("shmemx_init_attr", (|| {
            if url.is_null() || rank < 0 || nranks < 1 {
                return Err(Error::invalid("url/rank/nranks", "a NULL URL or a negative rank or size"));
            }
            // SAFETY: a NUL-terminated C string from the caller.
            let url = unsafe { CStr::from_ptr(url) }.to_string_lossy().into_owned();
            let size = (mem_size > 0).then_some(mem_size);
            crate::setup::init_with(|| shmem::init_attr(rank as usize, nranks as usize, size, &url))
        })())
    })
});

export!("shmemx_set_engine", fn(name: *const c_char) -> c_int {
    ffi_bare("shmemx_set_engine", || {
        if crate::state::is_initialized() || name.is_null() {
            eprintln!("shmem: shmemx_set_engine: call it with a name before shmem_init");
            return -1;
        }
        // SAFETY: a NUL-terminated C string from the caller.
        let name = unsafe { CStr::from_ptr(name) }.to_string_lossy().into_owned();
        // SAFETY: called before init, when the library has no threads of its own.
        unsafe { std::env::set_var("SHMEM_TEST_ENGINE", name) };
        0
    })
});

export!("shmemx_engine_for", fn(pe: c_int) -> *const c_char {
    ffi("shmemx_engine_for", |st| {
        let name = st.rt.engine_for(pe.max(0) as usize)?;
        Ok(match name {
            "HCCS" => c"HCCS".as_ptr(),
            "SDMA" => c"SDMA".as_ptr(),
            "ROCE" => c"ROCE".as_ptr(),
            _ => c"OTHER".as_ptr(),
        })
    })
});

// ----- streams ------------------------------------------------------------------

export!("shmemx_stream_create", fn(stream: *mut *mut c_void) -> c_int {
    ffi_status("shmemx_stream_create", |st| {
        if stream.is_null() {
            return Err(Error::invalid("stream", "is NULL"));
        }
        let s = st.shmem.create_stream()?;
        // SAFETY: non-null output from the C caller.
        unsafe { *stream = Box::into_raw(Box::new(s)).cast() };
        Ok(())
    })
});

fn stream_ref<'a>(s: *mut c_void) -> shmem::Result<&'a Stream> {
    if s.is_null() {
        return Err(Error::invalid("stream", "is NULL"));
    }
    // SAFETY: a handle from shmemx_stream_create, not yet destroyed (C contract).
    Ok(unsafe { &*(s as *const Stream) })
}

export!("shmemx_stream_destroy", fn(stream: *mut c_void) -> c_int {
    ffi_status("shmemx_stream_destroy", |_| {
        let s = stream_ref(stream)?;
        s.synchronize()?;
        // SAFETY: created by Box::into_raw in shmemx_stream_create.
        drop(unsafe { Box::from_raw(stream as *mut Stream) });
        Ok(())
    })
});

export!("shmemx_stream_sync", fn(stream: *mut c_void) -> c_int {
    ffi_status("shmemx_stream_sync", |_| stream_ref(stream)?.synchronize())
});

export!("shmemx_barrier_all_on_stream", fn(stream: *mut c_void) -> c_int {
    ffi_status("shmemx_barrier_all_on_stream", |st| st.shmem.barrier_all_on_stream(stream_ref(stream)?))
});

fn heap_slice(st: &crate::State, p: *const c_void, n: usize) -> shmem::Result<SymSlice<u8>> {
    match st.locate(p.cast(), n)? {
        Sym::Heap(off) => Ok(SymSlice::from_raw_parts(off, n, st.rt.instance())),
        Sym::Static(..) => Err(Error::Unsupported(
            "stream copies need symmetric-heap buffers on both sides".into(),
        )),
    }
}

export!("shmemx_putmem_on_stream", fn(dest: *mut c_void, src: *const c_void, n: usize, pe: c_int, stream: *mut c_void) -> c_int {
    ffi_status("shmemx_putmem_on_stream", |st| {
        let pe = st.target_pe(crate::CTX_DEFAULT, pe)?;
        stream_ref(stream)?.put(heap_slice(st, dest, n)?, heap_slice(st, src, n)?, pe)
    })
});

export!("shmemx_getmem_on_stream", fn(dest: *mut c_void, src: *const c_void, n: usize, pe: c_int, stream: *mut c_void) -> c_int {
    ffi_status("shmemx_getmem_on_stream", |st| {
        let pe = st.target_pe(crate::CTX_DEFAULT, pe)?;
        stream_ref(stream)?.get(heap_slice(st, dest, n)?, heap_slice(st, src, n)?, pe)
    })
});
