//! A run's whole output — numbered series, pieces, final set — as one set. Everything a
//! run writes goes into its *stage*, a hidden folder inside the output folder; only when
//! the run has completed is the stage published: its files replace those the previous run
//! wrote (named in that run's `summary.json`), the previous run's files this one did not
//! write again are removed, and nothing else in the folder is touched. A run that fails or
//! is interrupted leaves the previous one as it was; its stage is kept only when a
//! checkpoint names it (a restart continues its series from there).

use std::collections::HashSet;
use std::fs::File;
use std::path::{Path, PathBuf};

use super::OutputDir;
use crate::error::{Error, Result};
use crate::parallel::world;

/// Stage folders start with this, inside the output folder.
pub const PREFIX: &str = ".keisan-run-";
/// The file that records which files of the folder the previous run wrote.
const RECORD: &str = "summary.json";
/// The most bytes of a previous summary.json read for its record.
const MAX_RECORD_BYTES: u64 = 64 << 20;

/// The stage of a run in progress.
pub struct Stage {
    out: PathBuf,
    folder: OutputDir,
    /// This process created the stage (the writing rank): it publishes or removes it.
    owner: bool,
    /// Kept after the run, for a restart from a checkpoint that names it.
    keep: bool,
    /// Held while the stage is live, so that a later run can tell an abandoned stage
    /// from one in use.
    _lock: Option<File>,
}

fn io_error(kind: std::io::ErrorKind, msg: String) -> std::io::Error {
    std::io::Error::new(kind, msg)
}

/// Hold an exclusive lock on folder `path` (None when it cannot be opened or is held).
fn lock_folder(path: &Path) -> Option<File> {
    let f = File::open(path).ok()?;
    f.try_lock().ok()?;
    Some(f)
}

impl Stage {
    /// Begin the run's stage in the output folder `out` (collective under mpirun: the
    /// writing rank creates the folders, every rank learns the stage's path).
    pub fn begin(out: &Path) -> Result<Stage> {
        let owner = world::writes_files();
        let mut name = Vec::new();
        let mut lock = None;
        if owner {
            let dir = OutputDir::create(out)?;
            let t = tempfile::Builder::new()
                .prefix(PREFIX)
                .tempdir_in(dir.path())
                .map_err(|e| Error::io(dir.path(), e))?;
            let path = t.keep();
            lock = lock_folder(&path);
            name = path
                .file_name()
                .expect("a temporary folder has a name")
                .to_string_lossy()
                .into_owned()
                .into_bytes();
        }
        let name = String::from_utf8_lossy(&world::from_first(&name)?).into_owned();
        Ok(Stage {
            out: out.to_path_buf(),
            folder: OutputDir::existing(out.join(name)),
            owner,
            keep: false,
            _lock: lock,
        })
    }

    /// The stage folder: where the run writes every output file.
    pub fn dir(&self) -> &OutputDir {
        &self.folder
    }

    /// The stage's name inside the output folder (recorded in checkpoints).
    pub fn name(&self) -> String {
        self.folder
            .path()
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    }

    /// Keep the stage when the run ends without publishing (a checkpoint names it).
    pub fn keep(&mut self) {
        self.keep = true;
    }

    /// The files in the stage so far (names, sorted).
    pub fn files(&self) -> Result<Vec<String>> {
        let mut names = Vec::new();
        let entries =
            std::fs::read_dir(self.folder.path()).map_err(|e| Error::io(self.folder.path(), e))?;
        for e in entries {
            let e = e.map_err(|e| Error::io(self.folder.path(), e))?;
            let name = e.file_name().to_string_lossy().into_owned();
            if !name.starts_with(".keisan-") && e.file_type().is_ok_and(|t| t.is_file()) {
                names.push(name);
            }
        }
        names.sort();
        Ok(names)
    }

    /// Bring files of an earlier run's series into the stage (a restart): each `name`
    /// from the first of `from` that has it, hard-linked where the file system allows,
    /// else copied. The names found.
    pub fn adopt(&self, names: &[String], from: &[PathBuf]) -> Result<HashSet<String>> {
        let mut found = HashSet::new();
        for name in names {
            let Some(src) = from
                .iter()
                .map(|d| d.join(name))
                .find(|p| p.symlink_metadata().is_ok_and(|m| m.is_file()))
            else {
                continue;
            };
            let dst = self.folder.file(name);
            if std::fs::hard_link(&src, &dst).is_err() {
                std::fs::copy(&src, &dst).map_err(|e| Error::io(&src, e))?;
            }
            found.insert(name.clone());
        }
        Ok(found)
    }

    /// Move the run's files into the output folder as one set: the files of the previous
    /// run (its record) are replaced or, where this run did not write them, removed; a file
    /// or folder keisan did not write is never touched — when one stands where an output
    /// must go, nothing is replaced and the outputs stay in the stage, whose path the error
    /// names. The final paths.
    /// `fail_at`: the tests' fault injection (a file name at which publishing fails like
    /// a full disk).
    pub fn publish(mut self, fail_at: Option<&str>) -> Result<Vec<PathBuf>> {
        let out = self.out.clone();
        let _folder_lock = File::open(&out).ok().filter(|f| f.lock().is_ok());
        let names = self.files()?;
        if let Some(name) = fail_at.filter(|n| names.iter().any(|m| m == n)) {
            return Err(Error::io(
                self.folder.file(name),
                io_error(
                    std::io::ErrorKind::StorageFull,
                    "injected write failure".into(),
                ),
            ));
        }
        let previous = record(&out);
        let stage = self.folder.path().to_path_buf();
        for name in &names {
            let target = out.join(name);
            let Ok(m) = target.symlink_metadata() else {
                continue;
            };
            if m.is_dir() || !previous.contains(name) {
                self.keep();
                let what = if m.is_dir() { "a folder" } else { "a file" };
                return Err(Error::io(
                    &target,
                    io_error(
                        std::io::ErrorKind::AlreadyExists,
                        format!(
                            "is {what} that no earlier keisan run in {} wrote, and this run's \
                             output of that name would replace it; nothing was replaced: this \
                             run's outputs are kept in {} (move or remove {} and move them \
                             into place, or choose another --out)",
                            out.display(),
                            stage.display(),
                            target.display()
                        ),
                    ),
                ));
            }
        }
        let new: HashSet<&String> = names.iter().collect();
        let stale: Vec<&String> = previous
            .iter()
            .filter(|n| !new.contains(n))
            .filter(|n| out.join(n).symlink_metadata().is_ok_and(|m| !m.is_dir()))
            .collect();
        let aside = stage.join(".keisan-replaced");
        std::fs::create_dir(&aside).map_err(|e| Error::io(&aside, e))?;
        let mut moved_aside = Vec::new();
        let mut moved_in = Vec::new();
        let result = (|| -> std::io::Result<()> {
            for name in names.iter().chain(stale.iter().copied()) {
                let target = out.join(name);
                if target.symlink_metadata().is_ok() {
                    std::fs::rename(&target, aside.join(name))?;
                    moved_aside.push(name);
                }
            }
            for name in &names {
                std::fs::rename(stage.join(name), out.join(name))?;
                moved_in.push(name);
            }
            Ok(())
        })();
        if let Err(e) = result {
            for name in moved_in {
                let _ = std::fs::rename(out.join(name), stage.join(name));
            }
            for name in moved_aside {
                let _ = std::fs::rename(aside.join(name), out.join(name));
            }
            self.keep();
            return Err(Error::io(&out, e));
        }
        self.keep = false;
        Ok(names.iter().map(|n| out.join(n)).collect())
    }
}

impl Drop for Stage {
    fn drop(&mut self) {
        // A kept stage with no files has nothing for a restart to bring along.
        let empty = || self.files().is_ok_and(|f| f.is_empty());
        if self.owner && (!self.keep || empty()) {
            let _ = std::fs::remove_dir_all(self.folder.path());
        }
    }
}

/// The files of folder `out` that the previous keisan run there wrote: the outputs its
/// summary.json lists (and summary.json itself); empty when there is none.
pub fn record(out: &Path) -> HashSet<String> {
    let path = out.join(RECORD);
    let Ok(m) = path.symlink_metadata() else {
        return HashSet::new();
    };
    if !m.is_file() || m.len() > MAX_RECORD_BYTES {
        return HashSet::new();
    }
    let Ok(text) = std::fs::read_to_string(&path) else {
        return HashSet::new();
    };
    let Ok(v) = serde_json::from_str::<serde_json::Value>(&text) else {
        return HashSet::new();
    };
    let Some(outputs) = v.get("outputs").and_then(|o| o.as_array()) else {
        return HashSet::new();
    };
    let mut names: HashSet<String> = outputs
        .iter()
        .filter_map(|o| o.as_str())
        .filter_map(|p| Path::new(p).file_name())
        .map(|n| n.to_string_lossy().into_owned())
        .filter(|n| !n.starts_with('.'))
        .collect();
    names.insert(RECORD.to_string());
    names
}

/// Remove stages in `out` that no process holds, that `keep` (the stage a checkpoint of
/// that folder names) is not, and that hold no complete run (a summary.json: outputs a
/// failed publishing kept, which the user was told of): what interrupted runs left behind
/// that nothing can restart from any more.
pub fn remove_abandoned(out: &Path, keep: Option<&str>) {
    let Ok(entries) = std::fs::read_dir(out) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if !name.starts_with(PREFIX) || Some(name.as_str()) == keep {
            continue;
        }
        if e.file_type().is_ok_and(|t| t.is_dir())
            && !e.path().join(RECORD).exists()
            && lock_folder(&e.path()).is_some()
        {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}
