//! Compiled kernels kept on disk between runs, so that only a machine's first run of a
//! kernel variant pays for NVRTC.
//!
//! An entry is the machine code (CUBIN) NVRTC made for one real architecture, named by
//! the SHA-256 of everything that went into it: NVRTC's version, the architecture, every
//! option and the whole source text (developer overrides included). So an entry is either
//! the module the compile would give or absent; there is nothing to invalidate. (NVRTC's
//! version is its major.minor, as NVRTC reports it: another patch release of the same
//! minor reuses the entries, valid machine code for the architecture either way.) A
//! missing, unreadable or unwritable directory only means compiling again.
//!
//! Where: `KEISAN_KERNEL_CACHE` names the directory (`off` or `0`: no cache), else
//! `$XDG_CACHE_HOME/keisan/kernels`, else `$HOME/.cache/keisan/kernels`. Deleting the
//! directory is always safe.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// The cache directory, or None when the cache is off or no home is known.
pub fn dir() -> Option<PathBuf> {
    match std::env::var_os("KEISAN_KERNEL_CACHE") {
        Some(v) if v == "off" || v == "0" => None,
        Some(v) if !v.is_empty() => Some(PathBuf::from(v)),
        _ => {
            let base = std::env::var_os("XDG_CACHE_HOME")
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
                .or_else(|| {
                    std::env::var_os("HOME")
                        .filter(|v| !v.is_empty())
                        .map(|h| PathBuf::from(h).join(".cache"))
                })?;
            Some(base.join("keisan").join("kernels"))
        }
    }
}

/// The name of the entry for one compile: 64 hex digits.
pub fn key(nvrtc_version: (i32, i32), arch: &str, options: &[String], source: &str) -> String {
    let mut h = Sha256::new();
    // Each part length-prefixed, so no two different inputs share a byte stream.
    let mut part = |bytes: &[u8]| {
        h.update((bytes.len() as u64).to_le_bytes());
        h.update(bytes);
    };
    part(b"keisan kernel cache 1");
    part(format!("nvrtc {}.{}", nvrtc_version.0, nvrtc_version.1).as_bytes());
    part(arch.as_bytes());
    for o in options {
        part(o.as_bytes());
    }
    part(source.as_bytes());
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

fn path(dir: &Path, key: &str) -> PathBuf {
    dir.join(format!("{key}.cubin"))
}

/// The entry `key` in `dir`, if there is one that looks like machine code (an ELF image).
pub fn load(dir: &Path, key: &str) -> Option<Vec<u8>> {
    let bytes = std::fs::read(path(dir, key)).ok()?;
    bytes.starts_with(b"\x7fELF").then_some(bytes)
}

/// Store `cubin` as entry `key`: written beside it and renamed into place, so that a
/// reader (another rank, another run) sees the whole entry or none. Failures are
/// ignored: the cache only saves time.
pub fn store(dir: &Path, key: &str, cubin: &[u8]) {
    let write = || -> std::io::Result<()> {
        std::fs::create_dir_all(dir)?;
        let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
        std::io::Write::write_all(&mut tmp, cubin)?;
        tmp.persist(path(dir, key)).map_err(|e| e.error)?;
        Ok(())
    };
    let _ = write();
}

/// Entries and their bytes in `dir` (for `keisan info`).
pub fn usage(dir: &Path) -> (usize, u64) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return (0, 0);
    };
    entries
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "cubin"))
        .fold((0, 0), |(n, b), e| {
            (n + 1, b + e.metadata().map(|m| m.len()).unwrap_or(0))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_input_changes_the_key() {
        let opts = |o: &[&str]| o.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let base = key((13, 0), "sm_90", &opts(&["-Dreal=float"]), "src");
        assert_eq!(base.len(), 64);
        assert_eq!(base, key((13, 0), "sm_90", &opts(&["-Dreal=float"]), "src"));
        for other in [
            key((13, 1), "sm_90", &opts(&["-Dreal=float"]), "src"),
            key((13, 0), "sm_80", &opts(&["-Dreal=float"]), "src"),
            key((13, 0), "sm_90", &opts(&["-Dreal=double"]), "src"),
            key((13, 0), "sm_90", &opts(&["-Dreal=float"]), "src2"),
            // The same characters split differently between options and source.
            key((13, 0), "sm_90", &opts(&["-Dreal=floa"]), "tsrc"),
            key((13, 0), "sm_90", &opts(&["-Dreal=float", ""]), "src"),
        ] {
            assert_ne!(base, other);
        }
    }

    #[test]
    fn entries_round_trip_and_reject_what_is_not_machine_code() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("nested").join("kernels");
        assert_eq!(load(&d, "k"), None);
        store(&d, "k", b"\x7fELF image");
        assert_eq!(load(&d, "k").as_deref(), Some(&b"\x7fELF image"[..]));
        store(&d, "bad", b"PTX text");
        assert_eq!(load(&d, "bad"), None);
        assert_eq!(usage(&d), (2, 18));
    }
}
