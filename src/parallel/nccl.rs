//! Halo blocks over NCCL (`--halo nccl`): device memory to device memory on the copy
//! streams, with no host staging between MPI ranks and no host call per block. NCCL is
//! loaded at run time (libnccl.so); a machine without it is told so by name.
//!
//! NCCL rank k is the run's slab k: in one process the slabs' devices form one clique
//! (ncclCommInitAll), under mpirun each rank's device joins a communicator whose id rank
//! 0 makes and hands to the others over MPI. Every process queues its blocks in the
//! order of the run's transfer list, so the sends and receives between two slabs pair up
//! in the same order on both sides.

use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaStream};
use cudarc::nccl::{result, sys};

use super::world::{self, World};
use crate::error::{Error, Result};

/// One halo block of this process: `bytes` bytes at device address `at`, sent to or
/// received from the run's slab `peer`, by this process's slab `slab` on `stream`.
pub struct Block<'a> {
    pub slab: usize,
    pub peer: usize,
    pub at: u64,
    pub bytes: usize,
    pub send: bool,
    pub stream: &'a Arc<CudaStream>,
}

/// The communicators of this process's slabs.
pub struct Nccl {
    comms: Vec<sys::ncclComm_t>,
}

// SAFETY: a communicator is used from one thread at a time (the one driving the passes);
// NCCL allows a communicator to move between threads.
unsafe impl Send for Nccl {}

fn failed(what: &str, e: result::NcclError) -> Error {
    let code = e.0;
    // SAFETY: ncclGetErrorString returns a static NUL-terminated string for any code.
    let text = unsafe { std::ffi::CStr::from_ptr(sys::ncclGetErrorString(code)) };
    Error::Cuda(format!(
        "NCCL {what}: {} ({code:?}; NCCL_DEBUG=WARN says more)",
        text.to_string_lossy()
    ))
}

/// The NCCL library's version (major.minor.patch), or None where it cannot be loaded.
pub fn version() -> Option<String> {
    require().ok()?;
    let v = result::get_nccl_version().ok()?;
    Some(format!("{}.{}.{}", v / 10000, v % 10000 / 100, v % 100))
}

/// What to say where NCCL cannot be loaded. cudarc opens it as libnccl.so (or .so.13,
/// .so.12, ...), not by the runtime package's libnccl.so.2 alone.
pub const NOT_FOUND: &str = "the NCCL library was not found on this machine (looked for \
     libnccl.so on the library path: install NCCL, or where only libnccl.so.2 is there, \
     link libnccl.so to it in a folder on LD_LIBRARY_PATH)";

/// Whether NCCL can be loaded; the error to show when it cannot.
pub fn require() -> Result<()> {
    // SAFETY: only tries to open the library.
    if unsafe { sys::is_culib_present() } {
        return Ok(());
    }
    Err(Error::Cuda(format!(
        "--halo nccl: {NOT_FOUND}; or leave --halo at auto (peer copies between GPUs of \
         one process, MPI between ranks)"
    )))
}

impl Nccl {
    /// One communicator per device of this process, slab k on `ctxs[k]` (distinct
    /// devices: NCCL takes one rank per GPU).
    pub fn in_process(ctxs: &[Arc<CudaContext>]) -> Result<Self> {
        require()?;
        let ordinals: Vec<i32> = ctxs.iter().map(|c| c.ordinal() as i32).collect();
        let mut comms = vec![std::ptr::null_mut(); ctxs.len()];
        // SAFETY: `comms` has room for one communicator per listed device.
        unsafe { result::comm_init_all(comms.as_mut_ptr(), ctxs.len() as i32, ordinals.as_ptr()) }
            .map_err(|e| failed("could not join the devices", e))?;
        Ok(Self { comms })
    }

    /// This rank's communicator, on `ctx`: the id from rank 0 over MPI. Collective.
    pub fn across_ranks(world: World, ctx: &Arc<CudaContext>) -> Result<Self> {
        require()?;
        let mine = match world.rank {
            0 => {
                let id = result::get_uniqueid().map_err(|e| failed("could not make an id", e))?;
                id.internal.iter().map(|&c| c as u8).collect()
            }
            _ => Vec::new(),
        };
        let mut counts = vec![0; world.size];
        counts[0] = 128;
        let got = world::all_gather(&mine, &counts)?;
        let mut id = sys::ncclUniqueId { internal: [0; 128] };
        for (d, &s) in id.internal.iter_mut().zip(&got) {
            *d = s as std::ffi::c_char;
        }
        ctx.bind_to_thread()?;
        let mut comm = std::ptr::null_mut();
        // SAFETY: `comm` receives the communicator; every rank passes the same id and size.
        unsafe { result::comm_init_rank(&mut comm, world.size as i32, id, world.rank as i32) }
            .map_err(|e| {
                failed(
                    &format!("rank {} could not join the other ranks", world.rank),
                    e,
                )
            })?;
        Ok(Self { comms: vec![comm] })
    }

    /// Queue `blocks` as one group (one call per pass; NCCL pairs each send with its
    /// peer's receive in the order queued).
    pub fn exchange(&self, blocks: &[Block]) -> Result<()> {
        result::group_start().map_err(|e| failed("group start", e))?;
        let mut first = Ok(());
        for b in blocks {
            let comm = self.comms[b.slab];
            let stream = b.stream.cu_stream() as sys::cudaStream_t;
            let peer = b.peer as i32;
            let u8 = sys::ncclDataType_t::ncclUint8;
            // SAFETY: the caller's block lies inside a live buffer of slab `b.slab` on the
            // stream's device, and the stream's events order it after the kernels that
            // wrote it (send) or before those that read it (receive).
            let r = unsafe {
                if b.send {
                    result::send(b.at as *const _, b.bytes, u8, peer, comm, stream)
                } else {
                    result::recv(b.at as *mut _, b.bytes, u8, peer, comm, stream)
                }
            };
            if let (Err(e), Ok(())) = (r, &first) {
                first = Err(failed("could not queue a halo block", e));
            }
        }
        // The group ends even after a failed call, so NCCL is left usable for the error path.
        result::group_end().map_err(|e| failed("group end", e))?;
        first
    }
}

impl Drop for Nccl {
    fn drop(&mut self) {
        for &c in &self.comms {
            // SAFETY: each communicator was made by NCCL and is destroyed once.
            let _ = unsafe { result::comm_destroy(c) };
        }
    }
}
