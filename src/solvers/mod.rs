//! One folder per solver: its problem types, CPU engine, CUDA engine and kernels.

pub mod heat;
pub mod jacobi;
