//! Output writers. Every file is written under a temporary name in its final folder and
//! renamed when complete, so a failed or interrupted run never leaves a half-written
//! file or clobbers a good one. Writers take host data and never know its device.

mod atomic;
pub mod csv;
pub mod npy;
pub mod png;
pub mod vti;

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
pub use atomic::write_atomic;

/// An output folder that has been created and shown to be writable.
#[derive(Debug, Clone)]
pub struct OutputDir {
    path: PathBuf,
}

impl OutputDir {
    /// Create the folder if needed and prove it writable, before any long computation.
    pub fn prepare(path: &Path) -> Result<Self> {
        std::fs::create_dir_all(path).map_err(|e| {
            Error::io(
                path,
                std::io::Error::new(e.kind(), format!("cannot create the output folder: {e}")),
            )
        })?;
        tempfile::Builder::new()
            .prefix(".keisan-probe")
            .tempfile_in(path)
            .map_err(|e| {
                Error::io(
                    path,
                    std::io::Error::new(
                        e.kind(),
                        format!("the output folder is not writable: {e}"),
                    ),
                )
            })?;
        Ok(Self {
            path: path.to_path_buf(),
        })
    }

    pub fn file(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }
}
