//! keisan (計算): GPU solvers for grid and particle simulations.
//!
//! Data flows one way: problem file → [`problem::Problem`] → device choice
//! ([`device::select`]) → solver engine → [`run::drive`] → outputs and a
//! [`summary::Summary`]. See docs/ARCHITECTURE.md.

pub mod bench;
pub mod checkpoint;
pub mod device;
pub mod error;
pub mod execute;
pub mod input;
pub mod memory;
pub mod output;
pub mod parallel;
pub mod precision;
pub mod problem;
pub mod run;
pub mod signals;
pub mod solver;
pub mod solvers;
pub mod summary;
pub mod terminal;
pub mod tuning;
pub mod units;
pub mod vector;

pub use error::{Error, Result};
