//! `shmem._shmem`: the native core of the `shmem` Python package.
//!
//! The Python modules (`shmem`, `shmem.core`, `shmem.torch`) are thin
//! layers over these functions. Everything here maps library errors to
//! `ShmemError` / `ShmemInvalid` with messages naming the PE and size, and
//! releases the GIL while it blocks (waits, barriers, collectives, large
//! copies, stream and handle synchronisation).
//!
//! ```python
//! import numpy as np, shmem.core as core
//! core.init()                          # shmemrun / torchrun env, or one PE
//! buf = core.buffer(1024)
//! arr = np.asarray(buf).view(np.int64) # symmetric memory, no copy
//! core.put(buf, np.arange(128), (core.my_pe() + 1) % core.n_pes())
//! core.barrier_all()
//! core.free(buf); core.finalize()
//! ```

mod args;
mod blocking;
mod dlpack;
mod dtype;
mod errors;
mod init;
mod memory;
mod rma;
mod state;
mod streams;
mod teams;
mod torch_shim;
mod waits;

use pyo3::prelude::*;

#[pymodule]
fn _shmem(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("ShmemError", py.get_type::<errors::ShmemError>())?;
    m.add("ShmemInvalid", py.get_type::<errors::ShmemInvalid>())?;
    m.add_class::<memory::Buffer>()?;
    m.add_class::<streams::Stream>()?;
    m.add_class::<streams::Event>()?;
    m.add_class::<streams::Handle>()?;
    m.add_class::<teams::Team>()?;
    m.add("DETACH_BYTES", 64usize << 10)?;

    macro_rules! functions {
        ($($f:path),* $(,)?) => { $( m.add_function(wrap_pyfunction!($f, m)?)?; )* };
    }
    functions!(
        init::version,
        torch_shim::_torch_shim_state,
        torch_shim::_torch_layout,
        init::get_unique_id,
        init::unique_id_len,
        init::uid_address,
        init::init_uid,
        init::init_attr,
        init::init_env,
        init::finalize,
        init::is_initialized,
        init::current_instance,
        init::set_instance,
        init::instances,
        init::my_pe,
        init::n_pes,
        init::heap_info,
        init::route_summary,
        init::pe_accessible,
        init::global_exit,
        init::parse_size,
        init::launch,
        memory::malloc,
        memory::free,
        memory::get_peer_buffer,
        memory::ptr,
        memory::is_symmetric,
        memory::sym_info,
        memory::torch_view,
        rma::put,
        rma::get,
        rma::put_nbi,
        rma::get_nbi,
        rma::p,
        rma::g,
        rma::iput,
        rma::iget,
        rma::put_signal,
        rma::signal_op,
        rma::signal_fetch,
        rma::signal_wait,
        rma::fence,
        rma::quiet,
        rma::atomic,
        waits::wait_test,
        streams::create_stream,
        streams::get_default_stream,
        streams::stream_synchronize,
        streams::handle_wait,
        streams::put_handle,
        streams::get_handle,
        teams::team_world,
        teams::team_shared,
        teams::team_split_strided,
        teams::team_split_2d,
        teams::team_destroy,
        teams::barrier,
        teams::barrier_all,
        teams::sync,
        teams::sync_all,
        teams::broadcast,
        teams::fcollect,
        teams::collect,
        teams::alltoall,
        teams::reduce,
        teams::and_reduce,
        teams::or_reduce,
        teams::xor_reduce,
        teams::min_reduce,
        teams::max_reduce,
        teams::sum_reduce,
        teams::prod_reduce,
        teams::scan,
        teams::kv_shuffle,
    );
    Ok(())
}
