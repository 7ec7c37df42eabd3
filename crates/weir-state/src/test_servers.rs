//! The servers tests run against, started by the scripts in `tests/`: the S3-compatible one
//! for checkpoints on S3 ([`TestS3`]), and [`StartedScript`], which the Kafka test broker uses too.
//!
//! `WEIR_S3_ENDPOINT` (with `WEIR_S3_ACCESS_KEY_ID` and `WEIR_S3_SECRET_ACCESS_KEY`) names one
//! to use as is; otherwise `tests/s3/seaweedfs.sh`'s is started (or found running) once per
//! test process. Tests never share a prefix: each asks for a fresh URL.

use std::hash::{BuildHasher, Hasher, RandomState};
use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

/// The bucket every test writes to, under prefixes of its own (the server creates it at the
/// first upload).
const BUCKET: &str = "weir-test";

/// A server that answered, with how to reach it.
#[derive(Debug)]
pub struct TestS3 {
    endpoint: String,
    access_key_id: String,
    secret_access_key: String,
}

static SERVER: OnceLock<Result<TestS3, String>> = OnceLock::new();

impl TestS3 {
    /// The server for this test process.
    pub fn get() -> Result<&'static TestS3, String> {
        SERVER
            .get_or_init(|| match std::env::var("WEIR_S3_ENDPOINT") {
                Ok(endpoint) if !endpoint.is_empty() => Ok(TestS3 {
                    endpoint,
                    access_key_id: std::env::var("WEIR_S3_ACCESS_KEY_ID").unwrap_or_default(),
                    secret_access_key: std::env::var("WEIR_S3_SECRET_ACCESS_KEY").unwrap_or_default(),
                }),
                _ => start_script_server(),
            })
            .as_ref()
            .map_err(Clone::clone)
    }

    /// An `s3://` URL no other test (nor an earlier run) uses.
    pub fn fresh_url(&self, stem: &str) -> String {
        format!("s3://{BUCKET}/{stem}-{:016x}", RandomState::new().build_hasher().finish())
    }

    /// The options that reach this server: its endpoint (plain HTTP) and credentials.
    pub fn options(&self) -> Vec<(String, String)> {
        [
            ("endpoint", self.endpoint.as_str()),
            ("allow_http", "true"),
            ("region", "us-east-1"),
            ("access_key_id", self.access_key_id.as_str()),
            ("secret_access_key", self.secret_access_key.as_str()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
    }
}

fn start_script_server() -> Result<TestS3, String> {
    let started = StartedScript::start("tests/s3/seaweedfs.sh")?;
    Ok(TestS3 {
        endpoint: started.field("endpoint")?,
        access_key_id: started.field("access_key_id")?,
        secret_access_key: started.field("secret_access_key")?,
    })
}

/// What one of `tests/`' server scripts printed when asked to `start` its server: `name: value`
/// lines (the S3 server's here, the Kafka broker's in weir-connectors' test broker).
pub struct StartedScript {
    script: PathBuf,
    stdout: String,
}

impl StartedScript {
    /// Runs `<repository>/<relative> start`; an error holds what it printed.
    pub fn start(relative: &str) -> Result<Self, String> {
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..").join(relative);
        let output = Command::new("bash")
            .arg(&script)
            .arg("start")
            .output()
            .map_err(|e| format!("running {}: {e}", script.display()))?;
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        if !output.status.success() {
            return Err(format!(
                "{} start failed ({}):\n{stdout}{}",
                script.display(),
                output.status,
                String::from_utf8_lossy(&output.stderr)
            ));
        }
        Ok(Self { script, stdout })
    }

    /// The value of its `name: value` line.
    pub fn field(&self, name: &str) -> Result<String, String> {
        self.stdout
            .lines()
            .find_map(|line| line.strip_prefix(name)?.strip_prefix(": "))
            .map(str::to_string)
            .ok_or_else(|| format!("{} start printed no '{name}' line:\n{}", self.script.display(), self.stdout))
    }
}
