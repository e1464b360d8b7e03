//! Floating-point precision as a type parameter (Rust side) and a macro (CUDA side).

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    F32,
    F64,
}

impl Precision {
    pub fn name(self) -> &'static str {
        match self {
            Precision::F32 => "f32",
            Precision::F64 => "f64",
        }
    }

    pub fn bytes(self) -> usize {
        match self {
            Precision::F32 => 4,
            Precision::F64 => 8,
        }
    }
}

impl std::fmt::Display for Precision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The scalar types a solver can run in.
pub trait Real:
    num_traits::Float
    + Send
    + Sync
    + Default
    + std::fmt::Debug
    + std::fmt::Display
    + std::iter::Sum
    + cudarc::driver::DeviceRepr
    + cudarc::driver::ValidAsZeroBits
    + npyz::AutoSerialize
    + 'static
{
    const PRECISION: Precision;
    /// The C type name handed to NVRTC as `-Dreal=...`.
    const CUDA_TYPE: &'static str;

    fn lit(v: f64) -> Self;
    fn as_f64(self) -> f64;
    /// Append the little-endian bytes of `self` (for binary writers).
    fn push_le_bytes(self, out: &mut Vec<u8>);
}

impl Real for f32 {
    const PRECISION: Precision = Precision::F32;
    const CUDA_TYPE: &'static str = "float";
    fn lit(v: f64) -> Self {
        v as f32
    }
    fn as_f64(self) -> f64 {
        self as f64
    }
    fn push_le_bytes(self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_le_bytes());
    }
}

impl Real for f64 {
    const PRECISION: Precision = Precision::F64;
    const CUDA_TYPE: &'static str = "double";
    fn lit(v: f64) -> Self {
        v
    }
    fn as_f64(self) -> f64 {
        self
    }
    fn push_le_bytes(self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_le_bytes());
    }
}
