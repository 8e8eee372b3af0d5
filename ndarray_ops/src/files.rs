//! Files written whole or not at all: a save that fails part way (a full disk, an array whose
//! producing op failed) leaves the file as it was. Used by every writer of the crate (arrays,
//! checkpoints, symbol JSON).

use std::io::{BufWriter, Write};
use std::path::Path;

use crate::error::{NdError, Result};

/// Writes a file so that a failure never leaves it half-written: the bytes go to a temporary
/// file beside it, which is flushed to the disk and then renamed over `path`. If anything fails
/// (a disk full, an array whose producing op failed), the temporary file is removed and `path`
/// keeps whatever it held before. A `path` that exists and is not a regular file (a device, a
/// pipe) is written directly, as renaming over it would replace it. A symbolic link is followed
/// (the file it points to is replaced, the link stays), and a file replaced keeps its
/// permissions.
pub(crate) fn write_atomically(
    op: &str,
    path: &Path,
    write: impl FnOnce(&mut BufWriter<std::fs::File>) -> Result<()>,
) -> Result<()> {
    let target = follow_links(path);
    let path = target.as_path();
    let special = std::fs::metadata(path).is_ok_and(|m| !m.is_file());
    if special {
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(path)
            .map_err(|e| file_error(op, path, "cannot open", e))?;
        let mut w = BufWriter::new(file);
        write(&mut w)?;
        return w
            .flush()
            .map_err(|e| file_error(op, path, "cannot write", e));
    }
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let name = path.file_name().map_or_else(
        || std::ffi::OsString::from("file"),
        std::ffi::OsStr::to_os_string,
    );
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(&name);
    tmp_name.push(format!(".tmp-{}-{n}", std::process::id()));
    let tmp = path.with_file_name(tmp_name);
    let file = std::fs::File::create(&tmp)
        .map_err(|e| file_error(op, path, "cannot create a temporary file beside", e))?;
    if let Ok(old) = std::fs::metadata(path) {
        // Best effort, as `cp -p` would: a file system without permissions keeps its default.
        let _ = std::fs::set_permissions(&tmp, old.permissions());
    }
    let mut w = BufWriter::new(file);
    let written = write(&mut w).and_then(|()| {
        let file = w
            .into_inner()
            .map_err(|e| file_error(op, path, "cannot write", e.into_error()))?;
        file.sync_all()
            .map_err(|e| file_error(op, path, "cannot flush to the disk", e))?;
        std::fs::rename(&tmp, path).map_err(|e| file_error(op, path, "cannot replace", e))
    });
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

/// The file `path` names once symbolic links are followed (a dangling link: the path it
/// points to, made relative to the link's folder); `path` itself when it is no link.
fn follow_links(path: &Path) -> std::path::PathBuf {
    let mut at = path.to_path_buf();
    // A bound on the chain, as the system puts one: a loop of links ends here.
    for _ in 0..40 {
        match std::fs::symlink_metadata(&at) {
            Ok(m) if m.file_type().is_symlink() => match std::fs::read_link(&at) {
                Ok(next) => {
                    at = match at.parent() {
                        Some(dir) if next.is_relative() => dir.join(next),
                        _ => next,
                    }
                }
                Err(_) => return at,
            },
            _ => return at,
        }
    }
    at
}

/// An I/O failure on `path` while doing `doing`, as the error of `op`.
pub(crate) fn file_error(op: &str, path: &Path, doing: &str, e: std::io::Error) -> NdError {
    NdError::Invalid {
        op: op.into(),
        reason: format!("{doing} {}: {e}", path.display()),
    }
}
