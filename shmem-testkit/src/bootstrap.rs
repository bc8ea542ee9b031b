//! A [`Bootstrap`] whose PEs are threads of this process.

use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use shmem_core::{Bootstrap, Error, PeId, PeerHealth, Result};

/// The state every PE of one in-process job shares.
#[derive(Debug)]
pub struct InProcessJob {
    n: usize,
    timeout: Duration,
    state: Mutex<JobState>,
    changed: Condvar,
}

#[derive(Debug, Default)]
struct JobState {
    /// Completed collective rounds.
    generation: u64,
    /// Contributions to the round in progress.
    slots: Vec<Option<Vec<u8>>>,
    arrived: usize,
    /// Result of the last completed round.
    last: Arc<Vec<Vec<u8>>>,
    /// First PE that failed or left, with why; ends every later call.
    dead: Vec<(PeId, String)>,
    /// Health records of the PEs' runtimes, told of every death.
    watchers: Vec<Arc<PeerHealth>>,
}

impl InProcessJob {
    /// A job of `n` PEs whose collectives give up after `timeout`.
    pub fn new(n: usize, timeout: Duration) -> Arc<InProcessJob> {
        Arc::new(InProcessJob {
            n,
            timeout,
            state: Mutex::new(JobState {
                slots: vec![None; n],
                ..JobState::default()
            }),
            changed: Condvar::new(),
        })
    }

    /// The bootstrap of PE `rank`.
    ///
    /// # Errors
    /// [`Error::PeOutOfRange`] when `rank` is not below the job's size.
    pub fn member(self: &Arc<Self>, rank: PeId) -> Result<InProcessBootstrap> {
        if rank >= self.n {
            return Err(Error::PeOutOfRange {
                pe: rank,
                n_pes: self.n,
            });
        }
        Ok(InProcessBootstrap {
            job: self.clone(),
            rank,
        })
    }

    fn lock(&self) -> MutexGuard<'_, JobState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records that `pe` has failed or gone (`why`): every PE's next
    /// collective, wait or operation aimed at it fails naming it.
    pub fn mark_dead(&self, pe: PeId, why: &str) {
        let mut s = self.lock();
        if !s.dead.iter().any(|(p, _)| *p == pe) {
            s.dead.push((pe, why.to_string()));
        }
        for w in &s.watchers {
            w.mark_dead(pe, why);
        }
        drop(s);
        self.changed.notify_all();
    }

    fn dead_error(s: &JobState) -> Option<Error> {
        s.dead.first().map(|(pe, why)| Error::PeerExited {
            pe: *pe,
            detail: why.clone(),
        })
    }
}

/// One PE's view of an [`InProcessJob`].
#[derive(Debug)]
pub struct InProcessBootstrap {
    job: Arc<InProcessJob>,
    rank: PeId,
}

impl Bootstrap for InProcessBootstrap {
    fn rank(&self) -> PeId {
        self.rank
    }

    fn size(&self) -> usize {
        self.job.n
    }

    fn allgather(&self, data: &[u8]) -> Result<Vec<Vec<u8>>> {
        let job = &self.job;
        let deadline = Instant::now() + job.timeout;
        let mut s = job.lock();
        if let Some(e) = InProcessJob::dead_error(&s) {
            return Err(e);
        }
        let round = s.generation;
        if s.slots[self.rank].is_some() {
            return Err(Error::Bootstrap(format!(
                "PE {} entered one collective round twice",
                self.rank
            )));
        }
        s.slots[self.rank] = Some(data.to_vec());
        s.arrived += 1;
        if s.arrived == job.n {
            let all: Vec<Vec<u8>> = s
                .slots
                .iter_mut()
                .map(|x| x.take().unwrap_or_default())
                .collect();
            s.last = Arc::new(all);
            s.arrived = 0;
            s.generation += 1;
            job.changed.notify_all();
        }
        while s.generation == round {
            if let Some(e) = InProcessJob::dead_error(&s) {
                return Err(e);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                let missing: Vec<String> = s
                    .slots
                    .iter()
                    .enumerate()
                    .filter(|(_, x)| x.is_none())
                    .map(|(pe, _)| pe.to_string())
                    .collect();
                return Err(Error::Timeout {
                    what: format!(
                        "in-process collective round {round}: PE(s) {} never arrived",
                        missing.join(", ")
                    ),
                    secs: job.timeout.as_secs_f64(),
                });
            }
            s = job
                .changed
                .wait_timeout(s, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        // Later rounds cannot complete before this PE contributes to them,
        // so `last` is still this round's result.
        Ok(s.last.as_ref().clone())
    }

    fn check_peers(&self) -> Result<()> {
        match InProcessJob::dead_error(&self.job.lock()) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    fn abort(&self, status: i32, message: &str) -> Result<()> {
        self.job.mark_dead(
            self.rank,
            &format!(
                "PE {} aborted the job (status {status}): {message}",
                self.rank
            ),
        );
        Ok(())
    }

    fn finalize(&self) -> Result<()> {
        Ok(())
    }

    fn watch_peers(&self, health: Arc<PeerHealth>) {
        let mut s = self.job.lock();
        for (pe, why) in &s.dead {
            health.mark_dead(*pe, why);
        }
        s.watchers.push(health);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allgather_orders_contributions_by_rank_and_rounds_do_not_mix() {
        let job = InProcessJob::new(3, Duration::from_secs(20));
        let out: Vec<Vec<Vec<u8>>> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..3)
                .map(|r| {
                    let b = job.member(r).unwrap();
                    s.spawn(move || {
                        let mut v = Vec::new();
                        for round in 0..50u8 {
                            let got = b.allgather(&[r as u8, round]).unwrap();
                            v.push(got.concat());
                        }
                        v.concat()
                    })
                })
                .collect();
            hs.into_iter().map(|h| vec![h.join().unwrap()]).collect()
        });
        let want: Vec<u8> = (0..50u8)
            .flat_map(|round| [0, round, 1, round, 2, round])
            .collect();
        for o in out {
            assert_eq!(o[0], want);
        }
    }

    #[test]
    fn a_dead_pe_ends_the_others_collectives() {
        let job = InProcessJob::new(2, Duration::from_secs(20));
        let b0 = job.member(0).unwrap();
        assert!(job.member(2).is_err());
        job.mark_dead(1, "test says so");
        let e = b0.allgather(b"x").unwrap_err().to_string();
        assert!(e.contains("PE 1") && e.contains("test says so"), "{e}");
        assert!(b0.check_peers().is_err());
    }
}
