//! The whole conformance suite with HCCS forced for every peer (PEs are
//! threads of this test process; see `shmem-testkit`).

shmem_testkit::conformance_tests!("HCCS", shmem_transport_hccs::link());

/// The harness itself: a PE that fails is named, and its failure ends the
/// other PEs' waits instead of hanging them.
#[test]
fn a_failing_pe_is_named_and_ends_the_others_waits() {
    shmem_transport_hccs::link();
    let r = shmem_testkit::run_pes(3, "HCCS", |rt| {
        let sig = rt.calloc::<u64>(1)?;
        if rt.my_pe() == 1 {
            return Err(shmem_testkit::Failure("PE 1 gives up".into()));
        }
        // Nobody ever signals: only PE 1's failure ends this wait.
        rt.signal_wait_until(sig.at(0)?, shmem_core::Cmp::Eq, 1)?;
        Ok(())
    });
    let e = r.expect_err("PE 1 failed, so the job must fail");
    let pes: Vec<usize> = e.failures.iter().map(|(pe, _)| *pe).collect();
    assert_eq!(pes, vec![0, 1, 2], "{e}");
    assert!(e.failures[1].1 .0.contains("gives up"), "{e}");
    assert!(e.failures[0].1 .0.contains("PE 1"), "{e}");
}

/// Forcing an engine that is not linked fails at start-up, naming it.
#[test]
fn an_unlinked_engine_is_refused() {
    shmem_transport_hccs::link();
    let e = shmem_testkit::run_pes(2, "NOSUCH", |_| Ok(())).unwrap_err();
    assert!(e.to_string().contains("NOSUCH"), "{e}");
}
