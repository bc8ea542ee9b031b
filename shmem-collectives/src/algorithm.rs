//! Which algorithm each collective uses: the `SHMEM_<COLLECTIVE>_ALGORITHM`
//! variables, parsed once, and the automatic choice by size and team.
//!
//! The choice must be the same on every PE of a team. It depends only on
//! the team size, the element count and type (which the entry handshake of
//! each call checks) and on the configuration (compared across PEs once, in
//! `Collectives::new`, so PEs run with different settings fail instead of
//! hanging).

use shmem_core::{Config, Error, Result};

macro_rules! algorithm_enum {
    ($(#[$doc:meta])* $name:ident, $var:literal { $($(#[$vdoc:meta])* $variant:ident = $text:literal $(| $alias:literal)*),* $(,)? }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name {
            $( $(#[$vdoc])* $variant, )*
        }

        impl $name {
            /// Every algorithm, in declaration order (what tests iterate over).
            pub const ALL: &'static [$name] = &[$($name::$variant),*];
            /// The environment variable that forces one.
            pub const VARIABLE: &'static str = $var;

            /// The name `SHMEM_*_ALGORITHM` accepts.
            pub fn name(self) -> &'static str {
                match self { $( $name::$variant => $text, )* }
            }

            /// Parses a forced choice: `None` for `auto` (or empty).
            ///
            /// # Errors
            /// [`Error::Config`] naming the variable when `text` names no algorithm.
            pub fn parse(text: &str) -> Result<Option<$name>> {
                let t = text.trim().to_ascii_lowercase().replace('-', "_");
                match t.as_str() {
                    "" | "auto" => Ok(None),
                    $( $text $(| $alias)* => Ok(Some($name::$variant)), )*
                    _ => Err(Error::Config {
                        name: $var,
                        value: text.to_string(),
                        reason: format!(
                            "unknown algorithm; expected auto{}",
                            [$($text),*].iter().map(|n| format!(", {n}")).collect::<String>()
                        ),
                    }),
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.name())
            }
        }
    };
}

algorithm_enum! {
    /// How PEs synchronise (barrier, sync, and the argument handshake that
    /// opens every collective).
    BarrierAlgorithm, "SHMEM_BARRIER_ALGORITHM" {
        /// ceil(log2 n) rounds; in round k PE i signals PE i + 2^k.
        Dissemination = "dissemination",
        /// Centralised at team PE 0: where every PE maps PE 0's heap, each
        /// PE counts itself in there and the last to arrive releases
        /// everyone; otherwise everyone signals PE 0, which releases them.
        Linear = "linear" | "central",
    }
}

algorithm_enum! {
    /// How broadcast moves the root's data.
    BroadcastAlgorithm, "SHMEM_BROADCAST_ALGORITHM" {
        /// The root puts to every PE.
        Direct = "direct",
        /// A binomial tree rooted at the root: log2 n hops.
        Binomial = "binomial" | "tree",
    }
}

algorithm_enum! {
    /// How fcollect (and collect) gather every PE's block.
    GatherAlgorithm, "SHMEM_FCOLLECT_ALGORITHM" {
        /// Every PE puts its block to every PE.
        Direct = "direct",
        /// Blocks travel around a ring, n - 1 steps.
        Ring = "ring",
    }
}

algorithm_enum! {
    /// How alltoall exchanges blocks.
    AlltoallAlgorithm, "SHMEM_ALLTOALL_ALGORITHM" {
        /// Every PE puts (with a signal) to every PE at once.
        Direct = "direct",
        /// n - 1 rounds; in round s PE i sends to i + s and waits for i - s.
        Pairwise = "pairwise",
    }
}

algorithm_enum! {
    /// How reductions combine.
    ReduceAlgorithm, "SHMEM_REDUCE_ALGORITHM" {
        /// Recursive doubling (partners exchange partial results), best for
        /// small arrays.
        RecursiveDoubling = "recursive_doubling" | "rd",
        /// Ring reduce-scatter followed by a ring allgather, best for large
        /// arrays.
        Ring = "ring" | "reduce_scatter_allgather" | "rsag",
    }
}

algorithm_enum! {
    /// How prefix scans combine.
    ScanAlgorithm, "SHMEM_SCAN_ALGORITHM" {
        /// PE i waits for PE i - 1's prefix and passes its own on.
        Linear = "linear" | "chain",
        /// Hillis-Steele: log2 n rounds, PE i sends to PE i + 2^k.
        RecursiveDoubling = "recursive_doubling" | "rd",
    }
}

/// The forced algorithms of a job (`None`: chosen per call).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AlgorithmChoice {
    /// `SHMEM_BARRIER_ALGORITHM`.
    pub barrier: Option<BarrierAlgorithm>,
    /// `SHMEM_BROADCAST_ALGORITHM`.
    pub broadcast: Option<BroadcastAlgorithm>,
    /// `SHMEM_FCOLLECT_ALGORITHM`.
    pub fcollect: Option<GatherAlgorithm>,
    /// `SHMEM_COLLECT_ALGORITHM`.
    pub collect: Option<GatherAlgorithm>,
    /// `SHMEM_ALLTOALL_ALGORITHM`.
    pub alltoall: Option<AlltoallAlgorithm>,
    /// `SHMEM_REDUCE_ALGORITHM`.
    pub reduce: Option<ReduceAlgorithm>,
    /// `SHMEM_SCAN_ALGORITHM`.
    pub scan: Option<ScanAlgorithm>,
}

impl AlgorithmChoice {
    /// Reads the `SHMEM_*_ALGORITHM` fields of `config`; an unknown name is an
    /// error naming the variable.
    ///
    /// # Errors
    /// [`Error::Config`] naming the variable whose value names no algorithm.
    pub fn from_config(config: &Config) -> Result<AlgorithmChoice> {
        let collect = GatherAlgorithm::parse(&config.collect_algorithm).map_err(|e| match e {
            Error::Config { value, reason, .. } => Error::Config {
                name: "SHMEM_COLLECT_ALGORITHM",
                value,
                reason,
            },
            other => other,
        })?;
        Ok(AlgorithmChoice {
            barrier: BarrierAlgorithm::parse(&config.barrier_algorithm)?,
            broadcast: BroadcastAlgorithm::parse(&config.broadcast_algorithm)?,
            fcollect: GatherAlgorithm::parse(&config.fcollect_algorithm)?,
            collect,
            alltoall: AlltoallAlgorithm::parse(&config.alltoall_algorithm)?,
            reduce: ReduceAlgorithm::parse(&config.reduce_algorithm)?,
            scan: ScanAlgorithm::parse(&config.scan_algorithm)?,
        })
    }

    /// A stable number summarising the forced choices (compared across PEs
    /// at set-up).
    pub(crate) fn fingerprint(&self) -> u64 {
        fn idx<T: PartialEq>(all: &[T], v: Option<T>) -> u64 {
            v.and_then(|v| all.iter().position(|a| *a == v))
                .map_or(0, |i| i as u64 + 1)
        }
        let parts = [
            idx(BarrierAlgorithm::ALL, self.barrier),
            idx(BroadcastAlgorithm::ALL, self.broadcast),
            idx(GatherAlgorithm::ALL, self.fcollect),
            idx(GatherAlgorithm::ALL, self.collect),
            idx(AlltoallAlgorithm::ALL, self.alltoall),
            idx(ReduceAlgorithm::ALL, self.reduce),
            idx(ScanAlgorithm::ALL, self.scan),
        ];
        parts.iter().fold(0, |acc, p| acc * 8 + p)
    }

    /// Barrier algorithm (dissemination unless forced).
    pub fn barrier(&self) -> BarrierAlgorithm {
        self.barrier_for(false)
    }

    /// Barrier algorithm when some node runs more PEs than it has cores
    /// (`oversubscribed`): there the centralised handshake needs fewer
    /// context switches than the log(n) rounds of dissemination, each of
    /// which must wait for its partner to be scheduled.
    pub fn barrier_for(&self, oversubscribed: bool) -> BarrierAlgorithm {
        self.barrier.unwrap_or(if oversubscribed {
            BarrierAlgorithm::Linear
        } else {
            BarrierAlgorithm::Dissemination
        })
    }

    /// Broadcast of `bytes` over `n` PEs: the root puts to everyone when the
    /// team is small and the data fits in a few pages, a tree otherwise.
    pub fn broadcast(&self, n: usize, bytes: usize) -> BroadcastAlgorithm {
        self.broadcast
            .unwrap_or(if n <= 2 || (n <= 8 && bytes <= 16 << 10) {
                BroadcastAlgorithm::Direct
            } else {
                BroadcastAlgorithm::Binomial
            })
    }

    /// Allgather of `block_bytes` per PE over `n` PEs (the ring spreads the
    /// copying when blocks are large).
    pub fn fcollect(&self, n: usize, block_bytes: usize) -> GatherAlgorithm {
        self.fcollect.unwrap_or_else(|| auto_gather(n, block_bytes))
    }

    /// Collect whose largest block is `max_block_bytes`.
    pub fn collect(&self, n: usize, max_block_bytes: usize) -> GatherAlgorithm {
        self.collect
            .unwrap_or_else(|| auto_gather(n, max_block_bytes))
    }

    /// Alltoall of `block_bytes` per pair over `n` PEs.
    pub fn alltoall(&self, n: usize, block_bytes: usize) -> AlltoallAlgorithm {
        self.alltoall
            .unwrap_or(if n > 8 && block_bytes >= 32 << 10 {
                AlltoallAlgorithm::Pairwise
            } else {
                AlltoallAlgorithm::Direct
            })
    }

    /// Reduction of `bytes` over `n` PEs: recursive doubling for small
    /// arrays (latency), reduce-scatter + allgather for large (bandwidth).
    pub fn reduce(&self, n: usize, bytes: usize) -> ReduceAlgorithm {
        self.reduce.unwrap_or(if n <= 2 || bytes <= 8 << 10 {
            ReduceAlgorithm::RecursiveDoubling
        } else {
            ReduceAlgorithm::Ring
        })
    }

    /// Scan over `n` PEs.
    pub fn scan(&self, n: usize) -> ScanAlgorithm {
        self.scan.unwrap_or(if n <= 3 {
            ScanAlgorithm::Linear
        } else {
            ScanAlgorithm::RecursiveDoubling
        })
    }
}

fn auto_gather(n: usize, block_bytes: usize) -> GatherAlgorithm {
    if n > 2 && block_bytes >= 64 << 10 {
        GatherAlgorithm::Ring
    } else {
        GatherAlgorithm::Direct
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_and_unknown_names_the_variable() {
        assert_eq!(BroadcastAlgorithm::parse("auto").unwrap(), None);
        assert_eq!(
            BroadcastAlgorithm::parse(" Binomial ").unwrap(),
            Some(BroadcastAlgorithm::Binomial)
        );
        assert_eq!(
            ReduceAlgorithm::parse("recursive-doubling").unwrap(),
            Some(ReduceAlgorithm::RecursiveDoubling)
        );
        let err = AlltoallAlgorithm::parse("bruck").unwrap_err().to_string();
        assert!(
            err.contains("SHMEM_ALLTOALL_ALGORITHM") && err.contains("pairwise"),
            "{err}"
        );
        for a in ScanAlgorithm::ALL {
            assert_eq!(ScanAlgorithm::parse(a.name()).unwrap(), Some(*a));
        }
    }

    #[test]
    fn config_fields_are_read() {
        let cfg = Config::from_lookup(|n| match n {
            "SHMEM_COLLECT_ALGORITHM" => Some("ring".into()),
            "SHMEM_BARRIER_ALGORITHM" => Some("linear".into()),
            _ => None,
        })
        .unwrap();
        let c = AlgorithmChoice::from_config(&cfg).unwrap();
        assert_eq!(c.collect, Some(GatherAlgorithm::Ring));
        assert_eq!(c.fcollect, None);
        assert_eq!(c.barrier(), BarrierAlgorithm::Linear);
        assert_ne!(c.fingerprint(), AlgorithmChoice::default().fingerprint());
        let bad =
            Config::from_lookup(|n| (n == "SHMEM_COLLECT_ALGORITHM").then(|| "x".into())).unwrap();
        let err = AlgorithmChoice::from_config(&bad).unwrap_err().to_string();
        assert!(err.contains("SHMEM_COLLECT_ALGORITHM"), "{err}");
    }

    #[test]
    fn automatic_choice_depends_on_size() {
        let c = AlgorithmChoice::default();
        assert_eq!(c.reduce(8, 64), ReduceAlgorithm::RecursiveDoubling);
        assert_eq!(c.reduce(8, 1 << 20), ReduceAlgorithm::Ring);
        assert_eq!(c.broadcast(16, 1 << 20), BroadcastAlgorithm::Binomial);
        assert_eq!(c.fcollect(4, 1 << 20), GatherAlgorithm::Ring);
        assert_eq!(c.fcollect(4, 8), GatherAlgorithm::Direct);
    }
}
