//! The whole conformance suite with SDMA forced for every peer (PEs are
//! threads of this test process; see `shmem-testkit`).

shmem_testkit::conformance_tests!("SDMA", shmem_transport_sdma::link());
