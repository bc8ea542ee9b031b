//! Bring-up: joining the job, creating the heap, building the engines and
//! fixing the per-peer routes (collective).

use super::*;

impl Runtime {
    /// Joins the job: creates the heap, discovers the topology, builds the
    /// linked transports and the per-peer routing table (collective).
    ///
    /// # Errors
    /// When the PEs disagree on heap size or engines, the heap cannot be
    /// created, an engine cannot be built or reaches no route for some PE,
    /// or a bootstrap call fails.
    pub fn new(bootstrap: Arc<dyn Bootstrap>, opts: RuntimeOptions) -> Result<Arc<Runtime>> {
        Runtime::with_parts(bootstrap, opts, RuntimeParts::default())
    }

    /// [`Runtime::new`] with a heap and extra engines of the caller's.
    ///
    /// # Errors
    /// As [`Runtime::new`]; also when an extra engine has the name of a
    /// linked or plugin one.
    pub fn with_parts(
        bootstrap: Arc<dyn Bootstrap>,
        opts: RuntimeOptions,
        parts: RuntimeParts,
    ) -> Result<Arc<Runtime>> {
        let my_pe = bootstrap.rank();
        let n_pes = bootstrap.size();
        crate::log::set_pe(my_pe);
        let config = opts.config;
        let size = match &parts.heap {
            Some(h) => h.size(),
            None => opts.mem_size.unwrap_or(config.symmetric_size.0),
        };

        // Agree on heap size and linked engines before touching anything else.
        let mut engines = transport::available(&config)?;
        for reg in &parts.extra_engines {
            if engines.iter().any(|e| e.name() == reg.name) {
                return Err(Error::EngineUnavailable {
                    requested: reg.name.to_string(),
                    reason: "an engine of that name is already linked or loaded".into(),
                    available: transport::registered_names(),
                });
            }
            engines.push(transport::EngineSource::Linked(reg));
        }
        engines.sort_by(|a, b| b.priority().cmp(&a.priority()).then(a.name().cmp(b.name())));
        let names: Vec<&str> = engines.iter().map(|r| r.name()).collect();
        let hello = wire::InitHello {
            heap_size: size as u64,
            engines: names.iter().map(|n| n.to_string()).collect(),
        };
        let all = bootstrap.allgather(&wire::encode(&hello))?;
        let mut sizes_differ = Vec::new();
        for (pe, m) in all.iter().enumerate() {
            let their: wire::InitHello = wire::decode("init hello", m)?;
            if their.heap_size != size as u64 {
                sizes_differ.push(format!("PE {pe}: {} bytes", their.heap_size));
            }
            if their.engines != hello.engines {
                return Err(Error::CollectiveMismatch {
                    op: "init",
                    details: format!(
                        "PE {pe} links engines [{}], PE {my_pe} links [{}]; run the same binary on every PE",
                        their.engines.join(","),
                        names.join(",")
                    ),
                });
            }
        }
        if !sizes_differ.is_empty() {
            return Err(Error::CollectiveMismatch {
                op: "init (mem_size)",
                details: format!(
                    "PE {my_pe} asked for {size} bytes; {}",
                    sizes_differ.join(", ")
                ),
            });
        }

        let heap: Arc<dyn Heap> = match parts.heap {
            Some(h) => h,
            None => crate::heap::create_heap(&config.heap, size)?,
        };
        let topology = Topology::discover(bootstrap.as_ref())?;
        // Before any engine starts a thread: they inherit the placement.
        place_bound_pe(&config, &topology);
        let init = TransportInit {
            bootstrap: bootstrap.as_ref(),
            heap: &heap,
            topology: &topology,
            config: &config,
        };

        let forced = config.test_engine.trim().to_ascii_uppercase();
        let (transports, routes) = if forced.is_empty() || forced == "AUTO" {
            let mut built = Vec::new();
            for reg in &engines {
                built.push(reg.create(&init)?);
            }
            let mut routes = Vec::with_capacity(n_pes);
            for pe in 0..n_pes {
                let idx = built.iter().position(|t| t.can_reach(pe)).ok_or_else(|| {
                    Error::Unreachable {
                        pe,
                        available: transport::registered_names(),
                    }
                })?;
                routes.push(idx as u8);
            }
            (built, routes)
        } else {
            let reg = engines.iter().find(|r| r.name() == forced).ok_or_else(|| {
                Error::EngineUnavailable {
                    requested: config.test_engine.clone(),
                    reason: "neither linked into this program nor loaded from SHMEM_TRANSPORT_PLUGINS (SHMEM_TEST_ENGINE)".into(),
                    available: transport::registered_names(),
                }
            })?;
            let t = reg.create(&init)?;
            if let Some(pe) = (0..n_pes).find(|&pe| !t.can_reach(pe)) {
                return Err(Error::EngineUnavailable {
                    requested: config.test_engine.clone(),
                    reason: format!(
                        "it cannot reach PE {pe} (SHMEM_TEST_ENGINE forces it for every peer)"
                    ),
                    available: transport::registered_names(),
                });
            }
            (vec![t], vec![0u8; n_pes])
        };

        let async_routes = (0..n_pes)
            .map(|pe| {
                transports
                    .iter()
                    .position(|t| t.capabilities().contains(Capabilities::ASYNC) && t.can_reach(pe))
                    .map_or(routes[pe], |i| i as u8)
            })
            .collect::<Vec<u8>>();
        let direct = (0..n_pes)
            .map(|pe| {
                let t = &transports[routes[pe] as usize];
                if !t.capabilities().contains(Capabilities::LOAD_STORE) {
                    return None;
                }
                if pe == my_pe {
                    Some(heap.base())
                } else {
                    // SAFETY: `pe < n_pes` and offset 0 is inside every heap.
                    unsafe { t.peer_ptr(pe, 0) }
                }
            })
            .collect();
        let mut in_use: Vec<u8> = routes.iter().chain(&async_routes).copied().collect();
        in_use.sort_unstable();
        in_use.dedup();
        let quiet_is_local = in_use.iter().all(|&r| {
            transports[r as usize]
                .capabilities()
                .contains(Capabilities::DIRECT_POINTER)
        });
        let driven = in_use
            .iter()
            .map(|&r| &transports[r as usize])
            .filter(|t| t.wants_progress())
            .cloned()
            .collect();
        // PEs in other network namespaces of this kernel (the namespace
        // "hosts" of the multi-host tests) compete for the same cores.
        let local = topology.machine_pes();
        let cores = config.cores();
        // Engines without a direct mapping move data on progress threads.
        let progress = routes.iter().any(|&r| {
            !transports[r as usize]
                .capabilities()
                .contains(Capabilities::DIRECT_POINTER)
        });
        // Those that the waiting thread drives itself (manual-progress
        // libfabric providers) get their CPU time from the spin; only the
        // others' threads need the core back soon. An 8-byte put-with-signal
        // ping-pong over `tcp;ofi_rxm` between two namespaces: 10-12 us per
        // hop with a 2-us spin (the waiter yields to its own progress thread
        // and sleeps), 6.3-8.3 with 50 us.
        let undriven = routes.iter().any(|&r| {
            let t = &transports[r as usize];
            !t.capabilities().contains(Capabilities::DIRECT_POINTER) && !t.wants_progress()
        });
        let policy = WaitPolicy {
            spin: config.spin_duration(local, undriven)?,
            // PEs with cores of their own and no progress threads to leave
            // time to; SHMEM_SPIN_US, when set, is kept as set.
            adapt: (config.spin_is_auto() && local <= cores && !progress)
                .then_some(&wait::PROCESS_SPIN),
            yield_for: if local > cores || progress {
                Duration::from_micros(500)
            } else {
                Duration::ZERO
            },
            poll: config.wait_poll.max(Duration::from_millis(1)),
            timeout: (!config.wait_timeout.is_zero()).then_some(config.wait_timeout),
        };
        // Non-blocking copies this large go to an asynchronous engine that
        // asks for them, instead of being copied inline.
        let async_threshold = transports
            .iter()
            .filter(|t| t.capabilities().contains(Capabilities::ASYNC))
            .filter_map(|t| t.bulk_threshold())
            .min()
            .unwrap_or(usize::MAX);
        let rt = Runtime {
            instance: opts.instance,
            my_pe,
            n_pes,
            base: heap.base(),
            size,
            heap,
            bootstrap,
            allocator: Mutex::new(Allocator::new(size)),
            gens: Generations::new(),
            topology,
            transports,
            routes,
            async_routes,
            driven,
            in_use,
            quiet_is_local,
            direct,
            async_threshold,
            config,
            policy,
            finalized: AtomicBool::new(false),
            health: Arc::new(PeerHealth::new()),
            activity: Arc::new(Activity::new()),
            alloc_seq: std::sync::atomic::AtomicU64::new(0),
        };
        rt.bootstrap.watch_peers(rt.health.clone());
        if !rt.config.hang_report.is_zero() {
            rt.bootstrap.watch_activity(
                rt.activity.clone(),
                HangPolicy {
                    report_after: rt.config.hang_report,
                    abort: rt.config.hang_abort,
                },
            );
        }
        // How this process's writers order their data before they look for
        // sleepers (`wait`'s module docs). When its waiters issue no
        // membarrier, every heap they may sleep on makes all writers fence;
        // marked before the barrier, so before any peer writes.
        if !wait::setup_light_writes(rt.config.wait_membarrier) {
            for pe in 0..n_pes {
                if let Some(base) = rt.mapped_heap(pe)? {
                    // SAFETY: a mapped heap starts with its control block.
                    unsafe { wait::mark_strict(base.as_ptr() as *const ControlBlock) };
                }
            }
        }
        shmem_log!(
            Info,
            "PE {my_pe}/{n_pes}: heap {size} bytes, routes {}",
            rt.route_summary()
        );
        if rt.config.info && my_pe == 0 {
            eprint!("{}", rt.config.info_table());
            eprintln!("  routes: {}", rt.route_summary());
            eprintln!(
                "  writers' fence: {}",
                if wait::light_writes().0 {
                    "none; a wait about to sleep issues membarrier(GLOBAL_EXPEDITED)"
                } else {
                    "a full fence per write (SHMEM_WAIT_MEMBARRIER=0, or no membarrier here)"
                }
            );
        }
        // Everyone has mapped everyone before any data moves.
        rt.bootstrap.barrier()?;
        Ok(Arc::new(rt))
    }
}

/// Moves a PE that `shmemrun` bound to one core when other launchers' PEs
/// share its machine ([`crate::placement`]); a failure only costs speed,
/// so it is logged, not returned.
fn place_bound_pe(config: &Config, topology: &Topology) {
    let bound = match crate::placement::Bound::parse(&config.bound_cpus) {
        Ok(Some(b)) => b,
        Ok(None) => return,
        Err(why) => {
            shmem_log!(Warn, "SHMEM_BOUND_CPUS ignored: {why}");
            return;
        }
    };
    match crate::placement::apply(&bound, topology) {
        Ok(Some(what)) => shmem_log!(Info, "this PE {what}"),
        Ok(None) => {}
        Err(why) => shmem_log!(Warn, "could not change this PE's cores ({why})"),
    }
}
