//! The service's configuration in one typed place: a TOML file, then the environment, then
//! flags (each later one overrides), with defaults that work on a laptop.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;

/// Request bodies larger than this are refused (413).
pub const DEFAULT_MAX_BODY_BYTES: usize = 1024 * 1024;

/// A worker silent this long is declared lost.
pub const DEFAULT_WORKER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerConfig {
    /// Default 127.0.0.1:8080 (local only).
    pub listen: SocketAddr,
    /// Default ./weir-data: the SQLite database and every pipeline's checkpoints.
    pub data_dir: PathBuf,
    /// If set, every API route needs `Authorization: Bearer <token>` (health checks do not).
    pub token: Option<String>,
    pub max_body_bytes: usize,
    /// Directories filesystem tables may use besides `<data dir>/files` (where relative paths
    /// go); none else if unset.
    pub filesystem_dirs: Option<Vec<PathBuf>>,
    /// Serve a non-loopback address without a token (refused otherwise).
    pub allow_unauthenticated: bool,
    /// Where to speak the Postgres protocol too (`--pg-listen`); off unless set.
    pub pg_listen: Option<SocketAddr>,
    /// TLS on the Postgres port: a PEM certificate chain and its PEM private key (both or
    /// neither).
    pub pg_tls_cert: Option<PathBuf>,
    pub pg_tls_key: Option<PathBuf>,
    /// Where pipelines keep their checkpoints: a directory, `file:///dir` or
    /// `s3://bucket/prefix` ([`weir_state::CheckpointStorage`]); default `<data dir>/pipelines`.
    pub checkpoint_url: Option<String>,
    /// S3's settings (`endpoint`, `region`, `access_key_id`, ...), over the `AWS_*` environment.
    pub checkpoint_options: Vec<(String, String)>,
    /// Workers (`weir worker`) join only with this secret; none join without one.
    pub cluster_secret: Option<String>,
    /// A worker silent this long is declared lost (default 10 s).
    pub worker_timeout: std::time::Duration,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            data_dir: PathBuf::from("weir-data"),
            token: None,
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            filesystem_dirs: None,
            allow_unauthenticated: false,
            pg_listen: None,
            pg_tls_cert: None,
            pg_tls_key: None,
            checkpoint_url: None,
            checkpoint_options: Vec::new(),
            cluster_secret: None,
            worker_timeout: DEFAULT_WORKER_TIMEOUT,
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
    pub allow_unauthenticated: Option<bool>,
    pub pg_listen: Option<SocketAddr>,
    pub pg_tls_cert: Option<PathBuf>,
    pub pg_tls_key: Option<PathBuf>,
    pub checkpoint_url: Option<String>,
    /// A table of S3 settings, e.g. `endpoint = "http://127.0.0.1:9000"`.
    pub checkpoint_options: Option<std::collections::BTreeMap<String, String>>,
    pub cluster_secret: Option<String>,
    pub worker_timeout_ms: Option<u64>,
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
            allow_unauthenticated: overrides.allow_unauthenticated.or(file.allow_unauthenticated).unwrap_or(false),
            pg_listen: overrides.pg_listen.or(file.pg_listen),
            pg_tls_cert: overrides.pg_tls_cert.or(file.pg_tls_cert),
            pg_tls_key: overrides.pg_tls_key.or(file.pg_tls_key),
            checkpoint_url: overrides.checkpoint_url.or(file.checkpoint_url).filter(|u| !u.is_empty()),
            // The file's settings, each overridden by the same key given by a flag.
            checkpoint_options: file
                .checkpoint_options
                .unwrap_or_default()
                .into_iter()
                .chain(overrides.checkpoint_options.unwrap_or_default())
                .collect::<std::collections::BTreeMap<_, _>>()
                .into_iter()
                .collect(),
            cluster_secret: overrides.cluster_secret.or(file.cluster_secret).filter(|s| !s.is_empty()),
            worker_timeout: overrides
                .worker_timeout_ms
                .or(file.worker_timeout_ms)
                .map_or(defaults.worker_timeout, std::time::Duration::from_millis),
        }
    }

    /// Where pipelines keep their checkpoints, opened (each pipeline under its id).
    pub fn checkpoint_storage(&self) -> Result<weir_state::CheckpointStorage, String> {
        let default = self.data_dir.join("pipelines");
        weir_state::CheckpointStorage::open_or_local(self.checkpoint_url.as_deref(), &self.checkpoint_options, &default)
            .map_err(|e| e.to_string())
    }

    /// Where filesystem tables' relative paths go, and the one directory they may always use.
    pub fn files_dir(&self) -> PathBuf {
        self.data_dir.join("files")
    }

    /// Refuses to serve the API to the network without a token: anyone who reached it could
    /// run SQL that reads and writes files and connects to any Kafka address the server can
    /// reach. Loopback addresses are the user's own machine.
    /// The same holds for the Postgres port, where the token is the password.
    pub fn check(&self) -> Result<(), String> {
        for listen in std::iter::once(self.listen).chain(self.pg_listen) {
            if !(listen.ip().is_loopback() || self.token.is_some() || self.allow_unauthenticated) {
                return Err(format!(
                    "refusing to serve {listen} without a token: anyone who can reach it could run any SQL. Set one with --token or WEIR_TOKEN (clients then give it too), or say --allow-unauthenticated if that is what you want"
                ));
            }
        }
        if self.pg_tls_cert.is_some() != self.pg_tls_key.is_some() {
            return Err("TLS on the Postgres port needs both --pg-tls-cert and --pg-tls-key".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_network_gets_the_api_only_with_a_token_or_when_asked() {
        let on = |listen: &str, token: Option<&str>, allow: bool| ServerConfig {
            listen: listen.parse().unwrap_or_else(|e| panic!("{listen}: {e}")),
            token: token.map(str::to_string),
            allow_unauthenticated: allow,
            ..ServerConfig::default()
        };
        assert!(on("127.0.0.1:8080", None, false).check().is_ok());
        assert!(on("[::1]:8080", None, false).check().is_ok());
        let refused = on("0.0.0.0:8080", None, false).check().unwrap_err();
        assert!(refused.contains("--token") && refused.contains("--allow-unauthenticated"), "{refused}");
        assert!(on("0.0.0.0:8080", Some("t"), false).check().is_ok());
        assert!(on("0.0.0.0:8080", None, true).check().is_ok());
        let pg = |address: &str| ServerConfig { pg_listen: address.parse().ok(), ..on("127.0.0.1:8080", None, false) };
        assert!(pg("127.0.0.1:5432").check().is_ok());
        assert!(pg("0.0.0.0:5432").check().unwrap_err().contains("0.0.0.0:5432"));
        let half_tls = ServerConfig { pg_tls_cert: Some("c.pem".into()), ..pg("127.0.0.1:5432") };
        assert!(half_tls.check().unwrap_err().contains("--pg-tls-key"));
    }
}
