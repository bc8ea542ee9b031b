//! The facade's builder takes any bootstrap, heap and extra engine: here
//! the test kit's in-process bootstrap (PEs are threads), a heap of the
//! test's own type and the example plugin's engine, linked as an extra
//! transport and forced.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use shmem::{Builder, Config, Heap, MemfdHeap};
use shmem_core::HeapExport;

/// A memfd heap that counts how often engines ask for its export.
#[derive(Debug)]
struct CountingHeap {
    inner: MemfdHeap,
    exports: AtomicUsize,
}

// SAFETY: forwards to a MemfdHeap, which upholds the contract.
unsafe impl Heap for CountingHeap {
    fn base(&self) -> NonNull<u8> {
        self.inner.base()
    }
    fn size(&self) -> usize {
        self.inner.size()
    }
    fn export(&self) -> HeapExport {
        self.exports.fetch_add(1, Ordering::Relaxed);
        self.inner.export()
    }
}

static MEMCPY: shmem::TransportRegistration = shmem::TransportRegistration {
    name: shmem_plugin_example::NAME,
    priority: 5,
    create: shmem_plugin_example::create,
};

#[test]
fn builder_takes_any_bootstrap_heap_and_extra_engine() {
    const N: usize = 2;
    let job = shmem_testkit::InProcessJob::new(N, Duration::from_secs(60));
    let results: Vec<Result<(), String>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..N)
            .map(|pe| {
                let job = job.clone();
                s.spawn(move || -> Result<(), String> {
                    let heap = Arc::new(CountingHeap {
                        inner: MemfdHeap::new(8 << 20).map_err(|e| e.to_string())?,
                        exports: AtomicUsize::new(0),
                    });
                    let mut config = Config::from_lookup(|_| None).map_err(|e| e.to_string())?;
                    config.test_engine = "MEMCPY".into();
                    let sh = Builder::new()
                        .bootstrap(Arc::new(job.member(pe).map_err(|e| e.to_string())?))
                        .heap(heap.clone())
                        .transport(&MEMCPY)
                        .instance(pe as u32)
                        .config(config)
                        .init()
                        .map_err(|e| e.to_string())?;
                    let peer = (pe + 1) % N;
                    let check = |ok: bool, what: &str| {
                        if ok {
                            Ok(())
                        } else {
                            Err(format!("PE {pe}: {what}"))
                        }
                    };
                    check(
                        sh.heap_base() == heap.base(),
                        "the runtime uses another heap",
                    )?;
                    check(sh.heap_size() == 8 << 20, "heap size")?;
                    check(
                        heap.exports.load(Ordering::Relaxed) > 0,
                        "the engine never exported our heap",
                    )?;
                    check(
                        sh.engine_for(peer).map_err(|e| e.to_string())? == "MEMCPY",
                        "route",
                    )?;
                    let x = sh.calloc::<u64>(4).map_err(|e| e.to_string())?;
                    sh.put(&x, &[pe as u64 + 40; 4], peer)
                        .map_err(|e| e.to_string())?;
                    sh.barrier_all().map_err(|e| e.to_string())?;
                    let got = sh.read_local(&x).map_err(|e| e.to_string())?;
                    check(got == vec![peer as u64 + 40; 4], &format!("read {got:?}"))?;
                    sh.free(x).map_err(|e| e.to_string())?;
                    sh.finalize().map_err(|e| e.to_string())
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err("panicked".into())))
            .collect()
    });
    for r in results {
        r.unwrap();
    }
}

#[test]
fn an_unknown_heap_kind_is_refused_naming_the_known_ones() {
    let job = shmem_testkit::InProcessJob::new(1, Duration::from_secs(30));
    let mut config = Config::from_lookup(|_| None).unwrap();
    config.heap = "hugepages".into();
    let e = Builder::new()
        .bootstrap(Arc::new(job.member(0).unwrap()))
        .instance(77)
        .config(config)
        .init()
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("SHMEM_HEAP") && e.contains("hugepages") && e.contains("memfd"),
        "{e}"
    );
}
