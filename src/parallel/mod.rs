//! Decomposed runs: a grid cut into slabs along its slowest axis, one engine per slab,
//! and halo exchange as what the distributed field does between passes — never code
//! inside a solver (the Oceananigans model: the architecture is a placement, the model
//! code is unchanged).
//!
//! A solver takes part by building its engines on a [`Window`] (the rows a slab owns and
//! the halo rows it reads) and implementing [`Subdomain`]; [`Distributed`] then drives
//! any number of them as one [`crate::run::Engine`], on CPU subdomains or on CUDA devices
//! (several slabs may share one device; distinct devices exchange by peer copies), or
//! one slab per MPI rank ([`world`], cargo feature `mpi`).

mod distributed;
mod nccl;
mod slabs;
mod trace;
pub mod world;

pub use distributed::{
    Distributed, PARTIAL_STEPS, Partials, Rows, Subdomain, advance_alone, row_totals, slab_of,
    slab_view,
};
pub use nccl::{NOT_FOUND as NCCL_NOT_FOUND, require as nccl_require, version as nccl_version};
pub use slabs::{Window, windows};
pub use world::World;
