//! `shmem-bench`: OSU-style benchmarks of the shmem library (being written).

fn main() {}
