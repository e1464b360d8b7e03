//! Output writers. A run's files are written as a *set* ([`OutputSet`]): into a hidden
//! staging folder beside the results, moved into place only when every file of the set
//! is complete, so a failure or a signal while writing leaves the previous complete set
//! untouched and no temporary files. Writers take host data and never know its device.

mod atomic;
pub mod csv;
pub mod gif;
pub mod npy;
pub mod png;
pub mod pvd;
pub mod pvtk;
pub mod stage;
pub mod vti;
pub mod vtp;
pub mod vtr;

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::precision::Real;
use crate::run::{Field, Piece};
pub use atomic::write_atomic;

/// One file's writing, to run beside others ([`in_parallel`]).
pub type Job<'a> = Box<dyn FnOnce() -> Result<()> + Send + 'a>;

/// Write several files at once, one per thread: a large run's files (hundreds of MB
/// each at 512³) otherwise take turns through one thread's conversion and page-cache
/// copy. The first failure, in the jobs' order.
pub fn in_parallel(jobs: Vec<Job<'_>>) -> Result<()> {
    use rayon::prelude::*;
    jobs.into_par_iter()
        .map(|job| job())
        .collect::<Vec<_>>()
        .into_iter()
        .collect()
}

/// An output folder that exists and is writable.
#[derive(Debug, Clone)]
pub struct OutputDir {
    path: PathBuf,
}

fn folder_error(path: &Path, why: &str, e: std::io::Error) -> Error {
    Error::io(path, std::io::Error::new(e.kind(), format!("{why}: {e}")))
}

/// Show, before any long computation and without creating anything, that `path` can
/// become a writable output folder: it is one, or its nearest existing ancestor is a
/// writable folder.
pub fn check_writable(path: &Path) -> Result<()> {
    let mut at = path;
    loop {
        match std::fs::metadata(at) {
            Ok(m) if m.is_dir() => break,
            Ok(_) => {
                return Err(folder_error(
                    path,
                    "cannot create the output folder",
                    std::io::Error::new(
                        std::io::ErrorKind::NotADirectory,
                        format!("{} is a file", at.display()),
                    ),
                ));
            }
            Err(_) if at.symlink_metadata().is_ok() => {
                let to = std::fs::read_link(at).map_or("?".into(), |t| t.display().to_string());
                return Err(folder_error(
                    path,
                    "cannot create the output folder",
                    std::io::Error::new(
                        std::io::ErrorKind::NotFound,
                        format!(
                            "{} is a symbolic link to {to}, which does not exist",
                            at.display()
                        ),
                    ),
                ));
            }
            Err(_) => match at.parent() {
                Some(p) if !p.as_os_str().is_empty() => at = p,
                _ => {
                    at = Path::new(".");
                    break;
                }
            },
        }
    }
    tempfile::Builder::new()
        .prefix(".keisan-probe")
        .tempfile_in(at)
        .map(drop)
        .map_err(|e| folder_error(path, "the output folder is not writable", e))
}

impl OutputDir {
    /// Create the folder if needed.
    pub fn create(path: &Path) -> Result<Self> {
        std::fs::create_dir_all(path)
            .map_err(|e| folder_error(path, "cannot create the output folder", e))?;
        Ok(Self {
            path: path.to_path_buf(),
        })
    }

    /// A folder known to exist (another process created it).
    pub fn existing(path: PathBuf) -> Self {
        Self { path }
    }

    pub fn file(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// VTK's name of a precision's values.
fn vtk_type(p: crate::precision::Precision) -> &'static str {
    match p {
        crate::precision::Precision::F32 => "Float32",
        crate::precision::Precision::F64 => "Float64",
    }
}

/// Per-axis values in VTK's x, y, z order from ours (slowest axis first), `fill` for the
/// axes a 2D field lacks.
fn xyz<T: Copy>(v: &[T], fill: T) -> [T; 3] {
    let mut a = [fill; 3];
    for (k, x) in v.iter().rev().enumerate() {
        a[k] = *x;
    }
    a
}

/// The extent "x0 x1 y0 y1 z0 z1" of the points of a grid of `shape` (slowest axis
/// first) whose slowest axis runs over the points `rows` (the others over all theirs).
fn extent(shape: &[usize], rows: std::ops::RangeInclusive<usize>) -> String {
    let mut e = xyz(shape, 1).map(|n| (0, n - 1));
    e[shape.len() - 1] = (*rows.start(), *rows.end());
    e.map(|(a, b)| format!("{a} {b}")).join(" ")
}

/// The VTK file a 2D/3D field is written as: ImageData (uniform) or RectilinearGrid.
pub fn vtk_extension<T>(u: &Field<T>) -> &'static str {
    if u.coords.is_some() { "vtr" } else { "vti" }
}

/// Files that appear together or not at all: written into a staging folder inside the
/// output folder, then renamed into place by [`OutputSet::commit`]. Dropped without a
/// commit (an error, a signal), the staging folder and all in it are removed.
pub struct OutputSet<'a> {
    dir: &'a OutputDir,
    staging: tempfile::TempDir,
    names: Vec<String>,
}

impl<'a> OutputSet<'a> {
    pub fn begin(dir: &'a OutputDir) -> Result<Self> {
        let staging = tempfile::Builder::new()
            .prefix(".keisan-set-")
            .tempdir_in(dir.path())
            .map_err(|e| Error::io(dir.path(), e))?;
        Ok(Self {
            dir,
            staging,
            names: Vec::new(),
        })
    }

    /// Where to write the file `name` of the set.
    pub fn file(&mut self, name: &str) -> PathBuf {
        self.names.push(name.to_string());
        self.staging.path().join(name)
    }

    /// Move every file into the output folder (renames within one file system); the
    /// final paths. The files it replaces are moved aside first and moved back if any
    /// rename fails, so the folder holds the old set or the new one. (Signals only set a
    /// flag, so SIGINT/SIGTERM never land between the renames; SIGKILL or a power cut
    /// can.)
    pub fn commit(self) -> Result<Vec<PathBuf>> {
        let old = self.staging.path().join(".replaced");
        std::fs::create_dir(&old).map_err(|e| Error::io(&old, e))?;
        let mut moved_aside = Vec::new();
        let mut moved_in = Vec::new();
        let result = (|| -> std::io::Result<()> {
            for name in &self.names {
                let target = self.dir.file(name);
                if target.symlink_metadata().is_ok() {
                    std::fs::rename(&target, old.join(name))?;
                    moved_aside.push(name);
                }
            }
            for name in &self.names {
                std::fs::rename(self.staging.path().join(name), self.dir.file(name))?;
                moved_in.push(name);
            }
            Ok(())
        })();
        if let Err(e) = result {
            for name in moved_in {
                let _ = std::fs::rename(self.dir.file(name), self.staging.path().join(name));
            }
            for name in moved_aside {
                let _ = std::fs::rename(old.join(name), self.dir.file(name));
            }
            return Err(Error::io(self.dir.path(), e));
        }
        Ok(self.names.iter().map(|n| self.dir.file(n)).collect())
    }

    /// This process's piece of a field: `<stem>_r<rank>.npy` (its owned rows) and, for a
    /// 2D or 3D grid, `<stem>_r<rank>.vti|vtr` (with the row it shares with the next
    /// piece); rank 0 adds the index `<stem>.pvti|pvtr` once every piece is in place.
    pub fn piece<T: Real>(&mut self, stem: &str, p: &Piece<T>) -> Result<()> {
        let name = pvtk::piece_stem(stem, p.rank);
        let mut shape = p.whole.shape.clone();
        shape[0] = p.rows().len();
        npy::write(&self.file(&format!("{name}.npy")), &shape, &p.data)?;
        if shape.len() >= 2 && p.whole.is_grid() {
            let u = p.field(true);
            let first = p.rows().start;
            let file = self.file(&format!("{name}.{}", vtk_extension(&u)));
            match &u.coords {
                Some(c) => vtr::write_at(&file, c, first, &[vtr::Array::scalar(u.name, &u.data)])?,
                None => vti::write_at(&file, &u, first)?,
            }
        }
        Ok(())
    }

    /// Write a field as `<stem>.npy`, plus `<stem>.vti` and a picture `<stem>.png` (the
    /// field, or its middle z-plane) when it is 2D or 3D, the files side by side.
    pub fn field<T: Real>(&mut self, stem: &str, u: &Field<T>) -> Result<()> {
        let npy_file = self.file(&format!("{stem}.npy"));
        let mut jobs: Vec<Job> = vec![Box::new(move || npy::write(&npy_file, &u.shape, &u.data))];
        if u.shape.len() >= 2 && u.is_grid() {
            let file = self.file(&format!("{stem}.{}", vtk_extension(u)));
            jobs.push(Box::new(move || match &u.coords {
                Some(c) => vtr::write(&file, c, &[vtr::Array::scalar(u.name, &u.data)]),
                None => vti::write(&file, u),
            }));
        }
        if png::applies(u) {
            let file = self.file(&format!("{stem}.png"));
            jobs.push(Box::new(move || png::write(&file, u)));
        }
        in_parallel(jobs)
    }

    /// `<stem>.png`: the field, or its middle z-plane, when it is 2D or 3D.
    pub fn picture<T: Real>(&mut self, stem: &str, u: &Field<T>) -> Result<()> {
        if png::applies(u) {
            png::write(&self.file(&format!("{stem}.png")), u)?;
        }
        Ok(())
    }
}
