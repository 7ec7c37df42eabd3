//! One process per data directory. Two processes on one directory would share its checkpoint
//! directories and its pipelines' Kafka transactional ids, and fence each other's transactions
//! (or restore each other's checkpoints). The lock is an OS file lock on `<dir>/weir.lock`, so a
//! process that dies (even by SIGKILL) releases it; the file names the holder for the error.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};

const LOCK_FILE: &str = "weir.lock";

/// Held while the process uses the directory; dropping it releases the lock.
#[derive(Debug)]
pub struct DataDirLock {
    _file: File,
    pub path: PathBuf,
}

impl DataDirLock {
    /// Locks `dir` (created if missing) for this process, `holder` saying what it is (`weir
    /// serve`); fails naming the process that holds it.
    pub fn acquire(dir: &Path, holder: &str) -> Result<Self, String> {
        std::fs::create_dir_all(dir).map_err(|e| format!("data directory {}: {e}", dir.display()))?;
        let path = dir.join(LOCK_FILE);
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                let mut by = String::new();
                let _ = file.read_to_string(&mut by);
                let by = by.trim();
                let by = if by.is_empty() { "another process".to_string() } else { by.to_string() };
                return Err(format!(
                    "data directory {} is in use by {by}: one process per data directory (stop it, or give this one another --data-dir)",
                    dir.display()
                ));
            }
            Err(TryLockError::Error(e)) => return Err(format!("locking {}: {e}", path.display())),
        }
        let holder = format!("{holder} (pid {})", std::process::id());
        let written = file.set_len(0).and_then(|()| file.rewind()).and_then(|()| file.write_all(holder.as_bytes()));
        written.map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(Self { _file: file, path })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_holder_is_refused_until_the_first_lets_go() {
        let dir = tempfile::tempdir().unwrap();
        let first = DataDirLock::acquire(dir.path(), "weir serve").unwrap();
        let error = DataDirLock::acquire(dir.path(), "weir run").unwrap_err();
        assert!(error.contains(&format!("in use by weir serve (pid {})", std::process::id())), "{error}");
        drop(first);
        DataDirLock::acquire(dir.path(), "weir run").unwrap();
    }
}
