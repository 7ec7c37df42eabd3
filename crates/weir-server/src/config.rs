//! The service's configuration in one typed place: a TOML file, then the environment, then
//! flags (each later one overrides), with defaults that work on a laptop.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;

/// Request bodies larger than this are refused (413).
pub const DEFAULT_MAX_BODY_BYTES: usize = 1024 * 1024;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerConfig {
    /// Default 127.0.0.1:8080 (local only).
    pub listen: SocketAddr,
    /// Default ./weir-data: the SQLite database and every pipeline's checkpoints.
    pub data_dir: PathBuf,
    /// If set, every API route needs `Authorization: Bearer <token>` (health checks do not).
    pub token: Option<String>,
    pub max_body_bytes: usize,
    /// If set, filesystem tables may only use paths under these directories.
    pub filesystem_dirs: Option<Vec<PathBuf>>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            data_dir: PathBuf::from("weir-data"),
            token: None,
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            filesystem_dirs: None,
        }
    }
}

/// The config file's shape: every key optional.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    pub listen: Option<SocketAddr>,
    pub data_dir: Option<PathBuf>,
    pub token: Option<String>,
    pub max_body_bytes: Option<usize>,
    pub filesystem_dirs: Option<Vec<PathBuf>>,
}

impl FileConfig {
    pub fn read(path: &Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        toml::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))
    }
}

impl ServerConfig {
    /// Defaults, overridden by the file's values, overridden by `overrides` (environment and
    /// flags, already merged by the command line parser).
    pub fn resolve(file: FileConfig, overrides: FileConfig) -> Self {
        let defaults = Self::default();
        Self {
            listen: overrides.listen.or(file.listen).unwrap_or(defaults.listen),
            data_dir: overrides.data_dir.or(file.data_dir).unwrap_or(defaults.data_dir),
            token: overrides.token.or(file.token).filter(|t| !t.is_empty()),
            max_body_bytes: overrides.max_body_bytes.or(file.max_body_bytes).unwrap_or(defaults.max_body_bytes),
            filesystem_dirs: overrides.filesystem_dirs.or(file.filesystem_dirs),
        }
    }
}
