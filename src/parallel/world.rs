//! The processes of an `mpirun` (cargo feature `mpi`, rsmpi over the system's MPI): which
//! rank this is, and the few operations decomposed runs need — halo blocks between ranks
//! and gathers — on bytes, so any field type travels. Without the feature, or in a
//! process started alone, there is no world and runs stay in one process.

use crate::error::Result;

/// This process among several.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct World {
    pub rank: usize,
    pub size: usize,
}

impl World {
    /// The world of this run: Some when started by mpirun with more than one process.
    pub fn current() -> Option<World> {
        imp::current()
    }
}

/// Whether this process writes files and prints: rank 0, or the only process.
pub fn writes_files() -> bool {
    World::current().is_none_or(|w| w.rank == 0)
}

/// Whether an MPI launcher started this process (Open MPI, MPICH, Slurm's PMI).
pub fn launched_by_mpirun() -> bool {
    ["OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"]
        .iter()
        .any(|v| std::env::var_os(v).is_some())
}

/// The rank among the processes of this node (one GPU each).
pub fn local_rank() -> usize {
    [
        "OMPI_COMM_WORLD_LOCAL_RANK",
        "MPI_LOCALRANKID",
        "SLURM_LOCALID",
    ]
    .iter()
    .find_map(|v| std::env::var(v).ok()?.parse().ok())
    .unwrap_or(0)
}

/// The processes on this node (all of them share its memory).
pub fn local_size() -> usize {
    [
        "OMPI_COMM_WORLD_LOCAL_SIZE",
        "MPI_LOCALNRANKS",
        "SLURM_NTASKS_PER_NODE",
    ]
    .iter()
    .find_map(|v| std::env::var(v).ok()?.parse().ok())
    .unwrap_or(1)
}

/// Whether every rank says yes (collective; true without a world).
pub fn all(mine: bool) -> Result<bool> {
    let Some(w) = World::current() else {
        return Ok(mine);
    };
    let votes = all_gather(&[u8::from(mine)], &vec![1; w.size])?;
    Ok(votes.iter().all(|&v| v == 1))
}

/// The first rank's `bytes`, on every rank (collective; `bytes` itself without a world).
pub fn from_first(bytes: &[u8]) -> Result<Vec<u8>> {
    let Some(w) = World::current() else {
        return Ok(bytes.to_vec());
    };
    let mine = if w.rank == 0 { bytes.len() as u64 } else { 0 };
    let lengths = all_gather(&mine.to_le_bytes(), &vec![8; w.size])?;
    let len = u64::from_le_bytes(lengths[..8].try_into().expect("8 bytes")) as usize;
    let mut counts = vec![0; w.size];
    counts[0] = len;
    let part = if w.rank == 0 { bytes } else { &[] };
    all_gather(part, &counts)
}

/// Wait until every rank gets here (nothing without a world).
pub fn barrier() -> Result<()> {
    all(true).map(drop)
}

/// A block of bytes to send: (rank, tag, bytes).
pub type Send = (usize, i32, Vec<u8>);
/// A block to receive: (rank, tag, length in bytes).
pub type Receive = (usize, i32, usize);

/// Post every receive and send at once and wait for all: the received blocks, in the
/// order of `receives`.
pub fn exchange(sends: &[Send], receives: &[Receive]) -> Result<Vec<Vec<u8>>> {
    imp::exchange(sends, receives)
}

/// [`exchange`] from and into buffers the caller holds (page-locked ones, say): each
/// receive's bytes land in its buffer, whose length is the block's.
pub fn exchange_in_place(
    sends: &[(usize, i32, &[u8])],
    receives: &mut [(usize, i32, &mut [u8])],
) -> Result<()> {
    imp::exchange_in_place(sends, receives)
}

/// Under mpirun, where this rank may run on fewer cores than its share of the node's
/// (the node's online cores over its ranks): (its cores, that share). None elsewhere, or
/// where the node's cores cannot be read (/sys, Linux).
pub fn narrow_binding() -> Option<(usize, usize)> {
    World::current()?;
    let mine = std::thread::available_parallelism().ok()?.get();
    let online = std::fs::read_to_string("/sys/devices/system/cpu/online").ok()?;
    let share = cpus_in(&online)? / local_size().max(1);
    (mine < share).then_some((mine, share))
}

/// The CPUs of a kernel CPU list ("0-31", "0-3,8-11", "5").
fn cpus_in(list: &str) -> Option<usize> {
    list.trim()
        .split(',')
        .map(|r| match r.split_once('-') {
            Some((a, b)) => (b.parse::<usize>().ok()? + 1).checked_sub(a.parse().ok()?),
            None => r.parse::<usize>().ok().map(|_| 1),
        })
        .sum()
}

#[cfg(test)]
mod tests {
    #[test]
    fn cpu_lists_count_their_cpus() {
        assert_eq!(super::cpus_in("0-31\n"), Some(32));
        assert_eq!(super::cpus_in("0-3,8-11"), Some(8));
        assert_eq!(super::cpus_in("5"), Some(1));
        assert_eq!(super::cpus_in("0,2-3"), Some(3));
        assert_eq!(super::cpus_in("x"), None);
        assert_eq!(super::cpus_in("3-1"), None);
    }
}

/// Every rank's `mine` (of `counts[r]` bytes on rank r), concatenated in rank order, on
/// every rank.
pub fn all_gather(mine: &[u8], counts: &[usize]) -> Result<Vec<u8>> {
    imp::all_gather(mine, counts)
}

/// The bytes of plain numbers (f32, f64, u64), for MPI.
pub fn to_bytes<T: Copy>(v: &[T]) -> Vec<u8> {
    // SAFETY: T is a plain number type: every byte is initialised and any is valid to read.
    unsafe { std::slice::from_raw_parts(v.as_ptr().cast::<u8>(), std::mem::size_of_val(v)) }
        .to_vec()
}

/// Plain numbers back from their bytes (the length a multiple of the size).
pub fn from_bytes<T: Copy + Default>(b: &[u8]) -> Vec<T> {
    let n = b.len() / std::mem::size_of::<T>();
    let mut v = vec![T::default(); n];
    // SAFETY: v has room for n values; any bit pattern is a valid f32, f64 or u64.
    unsafe {
        std::ptr::copy_nonoverlapping(
            b.as_ptr(),
            v.as_mut_ptr().cast::<u8>(),
            n * std::mem::size_of::<T>(),
        )
    };
    v
}

/// End every rank of the run with `code` (MPI_Abort); without a world, exit.
pub fn abort(code: i32) -> ! {
    imp::abort(code)
}

#[cfg(feature = "mpi")]
mod imp {
    use std::sync::OnceLock;

    use mpi::datatype::PartitionMut;
    use mpi::topology::SimpleCommunicator;
    use mpi::traits::*;

    use super::{Receive, Send, World};
    use crate::error::Result;

    static WORLD: OnceLock<Option<World>> = OnceLock::new();

    /// Start MPI when mpirun started this process; the universe ends MPI when dropped
    /// (keep it for the life of `main`).
    pub fn init() -> Option<mpi::environment::Universe> {
        if !super::launched_by_mpirun() {
            return None;
        }
        let universe = mpi::initialize()?;
        let w = universe.world();
        let (rank, size) = (w.rank() as usize, w.size() as usize);
        let _ = WORLD.set((size > 1).then_some(World { rank, size }));
        Some(universe)
    }

    pub fn current() -> Option<World> {
        WORLD.get().copied().flatten()
    }

    fn comm() -> SimpleCommunicator {
        SimpleCommunicator::world()
    }

    pub fn abort(code: i32) -> ! {
        comm().abort(code)
    }

    pub fn exchange(sends: &[Send], receives: &[Receive]) -> Result<Vec<Vec<u8>>> {
        let mut got: Vec<Vec<u8>> = receives.iter().map(|r| vec![0u8; r.2]).collect();
        let sends: Vec<(usize, i32, &[u8])> =
            sends.iter().map(|(r, t, d)| (*r, *t, &d[..])).collect();
        let mut into: Vec<(usize, i32, &mut [u8])> = (receives.iter().zip(got.iter_mut()))
            .map(|((r, t, _), b)| (*r, *t, &mut b[..]))
            .collect();
        exchange_in_place(&sends, &mut into)?;
        Ok(got)
    }

    pub fn exchange_in_place(
        sends: &[(usize, i32, &[u8])],
        receives: &mut [(usize, i32, &mut [u8])],
    ) -> Result<()> {
        let world = comm();
        mpi::request::scope(|scope| {
            let mut pending = Vec::new();
            for (rank, tag, buf) in receives.iter_mut() {
                pending.push(
                    world
                        .process_at_rank(*rank as i32)
                        .immediate_receive_into_with_tag(scope, &mut buf[..], *tag),
                );
            }
            let mut sent = Vec::new();
            for (rank, tag, data) in sends {
                sent.push(world.process_at_rank(*rank as i32).immediate_send_with_tag(
                    scope,
                    &data[..],
                    *tag,
                ));
            }
            for r in pending {
                r.wait();
            }
            for r in sent {
                r.wait();
            }
        });
        Ok(())
    }

    /// Displacements, in order, of blocks of `counts` bytes.
    fn offsets(counts: &[usize]) -> Vec<usize> {
        counts
            .iter()
            .scan(0, |at, &c| {
                let d = *at;
                *at += c;
                Some(d)
            })
            .collect()
    }

    /// The most bytes one MPI gather moves in all: its counts and displacements are i32.
    /// `KEISAN_MPI_GATHER_BYTES` lowers it (the tests use it to gather in several rounds).
    fn round_bytes() -> usize {
        std::env::var("KEISAN_MPI_GATHER_BYTES")
            .ok()
            .and_then(|v| v.parse().ok())
            .map_or(i32::MAX as usize, |b: usize| b.clamp(1, i32::MAX as usize))
    }

    pub fn all_gather(mine: &[u8], counts: &[usize]) -> Result<Vec<u8>> {
        let world = comm();
        let total: usize = counts.iter().sum();
        let at = offsets(counts);
        let mut all = crate::memory::try_filled(total, 0u8, "the gathered field")?;
        // Rounds of at most `per` bytes from each rank, so that every gather's counts fit.
        let per = (round_bytes() / counts.len()).max(1);
        let rounds = counts.iter().max().map_or(1, |&m| m.div_ceil(per).max(1));
        let mut buf = Vec::new();
        for r in 0..rounds {
            let lo = r * per;
            let part: Vec<usize> = counts
                .iter()
                .map(|&c| c.saturating_sub(lo).min(per))
                .collect();
            let ds = offsets(&part);
            buf.resize(part.iter().sum(), 0u8);
            let to_i32 = |v: &[usize]| -> Vec<i32> { v.iter().map(|&c| c as i32).collect() };
            let (cs, ds32) = (to_i32(&part), to_i32(&ds));
            let send = &mine[lo.min(mine.len())..(lo + per).min(mine.len())];
            {
                let mut into = PartitionMut::new(&mut buf[..], &cs[..], &ds32[..]);
                world.all_gather_varcount_into(send, &mut into);
            }
            for (k, &c) in part.iter().enumerate().filter(|(_, c)| **c > 0) {
                all[at[k] + lo..at[k] + lo + c].copy_from_slice(&buf[ds[k]..ds[k] + c]);
            }
        }
        Ok(all)
    }
}

#[cfg(not(feature = "mpi"))]
mod imp {
    use super::{Receive, Send, World};
    use crate::error::{Error, Result};

    pub fn current() -> Option<World> {
        None
    }

    pub fn abort(code: i32) -> ! {
        std::process::exit(code)
    }

    fn absent() -> Error {
        Error::Parse("internal: an MPI operation in a build without the `mpi` feature".into())
    }

    pub fn exchange(_: &[Send], _: &[Receive]) -> Result<Vec<Vec<u8>>> {
        Err(absent())
    }

    pub fn exchange_in_place(
        _: &[(usize, i32, &[u8])],
        _: &mut [(usize, i32, &mut [u8])],
    ) -> Result<()> {
        Err(absent())
    }

    pub fn all_gather(_: &[u8], _: &[usize]) -> Result<Vec<u8>> {
        Err(absent())
    }
}

#[cfg(feature = "mpi")]
pub use imp::init;
