//! A deliberate deadlock, to show the hang report: PE 0 allocates while the
//! other PEs enter a barrier, so each waits for the others forever.
//!
//! ```text
//! SHMEM_HANG_REPORT=2 SHMEM_HANG_ABORT=1 cargo run --example mismatch -- --pes 4
//! ```

fn main() -> shmem::Result<()> {
    if let Some(code) = shmem::launch::launch_self_if_requested() {
        std::process::exit(code);
    }
    let pe = shmem::init()?;
    pe.barrier_all()?;
    if pe.my_pe() == 0 {
        let buf = pe.calloc::<u64>(1024)?; // the others never call calloc here
        pe.free(buf)?;
    }
    pe.barrier_all()?;
    pe.finalize()
}
