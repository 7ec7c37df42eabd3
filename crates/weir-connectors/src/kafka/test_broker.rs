//! The real Kafka broker every Kafka test runs against.
//!
//! `WEIR_KAFKA_BOOTSTRAP` names a broker to use as is; otherwise the broker of
//! `tests/kafka/broker.sh` is started (or found running) once per test process. Tests never
//! share topics: each asks for fresh names.

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;

/// A broker that answered, with its bootstrap address.
#[derive(Debug)]
pub struct TestBroker {
    bootstrap: String,
}

static BROKER: OnceLock<Result<TestBroker, String>> = OnceLock::new();

impl TestBroker {
    /// The broker for this test process: `WEIR_KAFKA_BOOTSTRAP`, or tests/kafka/broker.sh's.
    pub fn get() -> Result<&'static TestBroker, String> {
        BROKER
            .get_or_init(|| match std::env::var("WEIR_KAFKA_BOOTSTRAP") {
                Ok(bootstrap) if !bootstrap.is_empty() => Ok(TestBroker { bootstrap }),
                _ => start_script_broker().map(|bootstrap| TestBroker { bootstrap }),
            })
            .as_ref()
            .map_err(Clone::clone)
    }

    pub fn bootstrap(&self) -> &str {
        &self.bootstrap
    }

    /// A topic name no other test (nor an earlier run) uses.
    pub fn unique_name(stem: &str) -> String {
        format!("{stem}-{}", uuid::Uuid::new_v4().simple())
    }

    /// Creates a fresh topic with `partitions` partitions and returns its name.
    pub async fn create_topic(&self, stem: &str, partitions: i32) -> Result<String, String> {
        let name = Self::unique_name(stem);
        let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
            .set("bootstrap.servers", &self.bootstrap)
            .create()
            .map_err(|e| format!("admin client: {e}"))?;
        let topic = NewTopic::new(&name, partitions, TopicReplication::Fixed(1));
        let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
        let results = admin.create_topics([&topic], &options).await.map_err(|e| format!("create topic {name}: {e}"))?;
        for result in results {
            result.map_err(|(topic, code)| format!("create topic {topic}: {code}"))?;
        }
        Ok(name)
    }
}

fn start_script_broker() -> Result<String, String> {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/kafka/broker.sh");
    let output = Command::new("bash")
        .arg(&script)
        .arg("start")
        .output()
        .map_err(|e| format!("running {}: {e}", script.display()))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        return Err(format!(
            "{} start failed ({}):\n{stdout}{}",
            script.display(),
            output.status,
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    stdout
        .lines()
        .find_map(|line| line.strip_prefix("bootstrap: "))
        .map(str::to_string)
        .ok_or_else(|| format!("{} start printed no bootstrap line:\n{stdout}", script.display()))
}
