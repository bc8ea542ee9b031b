//! The whole conformance suite with ROCE forced for every peer: the
//! software verbs provider over loopback TCP (PEs are threads of this test
//! process; see `shmem-testkit`).

shmem_testkit::conformance_tests!("ROCE", shmem_transport_roce::link());
