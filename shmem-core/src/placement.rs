//! Where a PE that `shmemrun` bound to one core runs once the whole job is
//! known.
//!
//! A launcher binds its own PEs to the first of the cores it may use, one
//! each; it cannot see PEs that other launchers of the same job start on
//! the same machine (several `--nnodes` launchers on one host, as in the
//! network-namespace tests or a two-"node" trial on a laptop), and each of
//! them would put its first PE on the same core. At init every PE knows
//! which PEs share its machine ([`Topology::machine_pes`]), so a PE that
//! the launcher bound (it says so in `SHMEM_BOUND_CPUS`) takes the core of
//! its place among them, or runs on all the launcher's cores when they do
//! not fit. One launcher per machine keeps its placement unchanged.

use crate::topology::Topology;

/// What [`Config::bound_cpus`](crate::Config) says: the core the launcher
/// bound this PE to and the cores it could place PEs on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bound {
    /// The core this PE was bound to.
    pub cpu: usize,
    /// The cores the launcher may use, in its order.
    pub cpus: Vec<usize>,
}

impl Bound {
    /// Parses `CPU/LIST` (`LIST` comma-separated); None when empty.
    ///
    /// # Errors
    /// A description of what is malformed.
    pub fn parse(s: &str) -> std::result::Result<Option<Bound>, String> {
        let s = s.trim();
        if s.is_empty() {
            return Ok(None);
        }
        let (cpu, list) = s
            .split_once('/')
            .ok_or_else(|| format!("{s:?} is not CPU/LIST"))?;
        let num = |t: &str| {
            t.trim()
                .parse::<usize>()
                .map_err(|_| format!("{t:?} in {s:?} is not a CPU number"))
        };
        let cpu = num(cpu)?;
        let cpus = list.split(',').map(num).collect::<Result<Vec<_>, _>>()?;
        if !cpus.contains(&cpu) {
            return Err(format!("CPU {cpu} is not in the list of {s:?}"));
        }
        Ok(Some(Bound { cpu, cpus }))
    }
}

/// Where a bound PE goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Placement {
    /// Stays on its core.
    Keep,
    /// Moves to this core.
    Move(usize),
    /// Runs on every core of the launcher's list (the machine's PEs do not
    /// fit one core each).
    Spread(Vec<usize>),
}

/// The placement of the PE that is `index`-th of the `machine_pes` PEs on
/// its machine (in rank order), bound as `bound` says.
pub fn decide(bound: &Bound, index: usize, machine_pes: usize) -> Placement {
    if machine_pes > bound.cpus.len() {
        return Placement::Spread(bound.cpus.clone());
    }
    match bound.cpus.get(index) {
        Some(&c) if c != bound.cpu => Placement::Move(c),
        _ => Placement::Keep,
    }
}

/// This PE's place among the PEs of its machine: (index in rank order,
/// count).
pub fn machine_index(topology: &Topology) -> (usize, usize) {
    let mine = topology.machine_of.get(topology.my_pe);
    let index = topology.machine_of[..topology.my_pe.min(topology.machine_of.len())]
        .iter()
        .filter(|&m| Some(m) == mine)
        .count();
    (index, topology.machine_pes())
}

/// The CPUs the calling thread may run on.
fn current_cpus() -> Option<Vec<usize>> {
    // SAFETY: sched_getaffinity fills the zeroed set we own.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return None;
        }
        Some(
            (0..libc::CPU_SETSIZE as usize)
                .filter(|&c| libc::CPU_ISSET(c, &set))
                .collect(),
        )
    }
}

/// Applies the placement of a PE bound as `bound` says to every thread of
/// the process (threads inherit their creator's CPUs, so all of them ran
/// on the launcher's core). Returns what it did, for the log; None when
/// nothing changed: the placement keeps the core, or the PE no longer runs
/// on the core the launcher gave it (a prefix such as `numactl` bound it
/// itself, which is kept).
///
/// # Errors
/// A description of the system call that failed.
pub fn apply(bound: &Bound, topology: &Topology) -> std::result::Result<Option<String>, String> {
    if current_cpus().as_deref() != Some(&[bound.cpu][..]) {
        return Ok(None);
    }
    let (index, n) = machine_index(topology);
    let (cpus, what) = match decide(bound, index, n) {
        Placement::Keep => return Ok(None),
        Placement::Move(c) => (
            vec![c],
            format!(
                "moved from core {} to core {c}: {n} PEs of this job, from several launchers, share this machine",
                bound.cpu
            ),
        ),
        Placement::Spread(all) => {
            let what = format!(
                "runs on cores {all:?}, no longer on core {} alone: {n} PEs of this job, from several launchers, share these {} cores",
                bound.cpu,
                all.len()
            );
            (all, what)
        }
    };
    // SAFETY: a zeroed cpu_set_t is empty; CPU_SET on indices below
    // CPU_SETSIZE (those came from the launcher's own affinity mask).
    let set = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for &c in &cpus {
            if c < libc::CPU_SETSIZE as usize {
                libc::CPU_SET(c, &mut set);
            }
        }
        set
    };
    let tasks = std::fs::read_dir("/proc/self/task")
        .map_err(|e| format!("listing /proc/self/task: {e}"))?;
    for t in tasks.flatten() {
        let Some(tid) = t.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        // SAFETY: a valid, initialised set; a thread that has exited in the
        // meantime makes the call fail with ESRCH, which is ignored.
        let r =
            unsafe { libc::sched_setaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &set) };
        if r != 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::ESRCH) {
                return Err(format!("sched_setaffinity of thread {tid}: {e}"));
            }
        }
    }
    Ok(Some(what))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_launchers_word_is_parsed_or_refused() {
        assert_eq!(Bound::parse("").unwrap(), None);
        assert_eq!(
            Bound::parse("1/0,1,2").unwrap(),
            Some(Bound {
                cpu: 1,
                cpus: vec![0, 1, 2]
            })
        );
        assert!(Bound::parse("3").is_err());
        assert!(Bound::parse("3/0,1").is_err());
        assert!(Bound::parse("x/0,1").is_err());
        assert!(Bound::parse("0/0,,1").is_err());
    }

    #[test]
    fn pes_of_several_launchers_get_cores_of_their_own() {
        let b = |cpu| Bound {
            cpu,
            cpus: vec![0, 1, 2, 3],
        };
        // One launcher with every PE of the machine: unchanged.
        assert_eq!(decide(&b(1), 1, 2), Placement::Keep);
        // Two launchers of one PE each both bound to core 0.
        assert_eq!(decide(&b(0), 0, 2), Placement::Keep);
        assert_eq!(decide(&b(0), 1, 2), Placement::Move(1));
        // Two launchers of two PEs: the second's are moved to 2 and 3.
        assert_eq!(decide(&b(0), 2, 4), Placement::Move(2));
        assert_eq!(decide(&b(1), 3, 4), Placement::Move(3));
        // More PEs than cores: spread over all of them.
        assert_eq!(decide(&b(1), 4, 5), Placement::Spread(vec![0, 1, 2, 3]));
    }

    #[test]
    fn the_index_counts_earlier_pes_of_the_machine() {
        let t = Topology {
            node_of: vec![0, 1, 2, 3],
            machine_of: vec![0, 1, 0, 0],
            pid_of: vec![1, 2, 3, 4],
            uid_of: vec![0; 4],
            my_pe: 3,
        };
        assert_eq!(machine_index(&t), (2, 3));
        assert_eq!(machine_index(&Topology { my_pe: 1, ..t }), (0, 1));
    }
}
