use std::io::{BufWriter, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use crate::error::{Error, Result};

/// Write `path` through `body` into a temporary file beside it, then rename it into
/// place. On any error the temporary file is removed and `path` is left untouched.
pub fn write_atomic(
    path: &Path,
    body: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> Result<()> {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let tmp = tempfile::Builder::new()
        .prefix(".keisan-")
        .suffix(".tmp")
        // tempfile's default 0600 would hide results from collaborators.
        .permissions(std::fs::Permissions::from_mode(0o644))
        .tempfile_in(dir)
        .map_err(|e| Error::io(dir, e))?;
    {
        let mut w = BufWriter::with_capacity(1 << 20, tmp.as_file());
        body(&mut w).map_err(|e| Error::io(path, e))?;
        w.flush().map_err(|e| Error::io(path, e))?;
    }
    tmp.persist(path).map_err(|e| Error::io(path, e.error))?;
    Ok(())
}
