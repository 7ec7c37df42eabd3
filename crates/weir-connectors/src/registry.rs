//! Every connector weir has, by name: what a table's `connector` option is looked up in, and
//! what its other options are validated against.

use std::collections::BTreeMap;
use std::sync::{Arc, LazyLock};

use crate::connector::Connector;
use crate::datagen::DatagenConnector;
use crate::filesystem::FilesystemConnector;
use crate::kafka::KafkaConnector;
use crate::nexmark::NexmarkConnector;
use crate::options::{ConnectorOptions, check_options};
use crate::sinks::{BlackholeConnector, PreviewConnector};
use crate::{Error, Result};

/// Connectors by name, in the order they are listed to users.
pub struct Registry {
    connectors: Vec<Arc<dyn Connector>>,
}

static BUILT_IN: LazyLock<Registry> = LazyLock::new(|| {
    let mut registry = Registry { connectors: Vec::new() };
    registry.register(Arc::new(NexmarkConnector));
    registry.register(Arc::new(KafkaConnector));
    registry.register(Arc::new(FilesystemConnector));
    registry.register(Arc::new(DatagenConnector));
    registry.register(Arc::new(PreviewConnector));
    registry.register(Arc::new(BlackholeConnector));
    registry
});

impl Registry {
    /// The connectors weir is built with.
    pub fn built_in() -> &'static Registry {
        &BUILT_IN
    }

    fn register(&mut self, connector: Arc<dyn Connector>) {
        self.connectors.retain(|c| c.name() != connector.name());
        self.connectors.push(connector);
    }

    /// The connector of name (or alias) `name`.
    pub fn get(&self, name: &str) -> Option<&dyn Connector> {
        self.connectors.iter().find(|c| c.name() == name || c.aliases().contains(&name)).map(|c| c.as_ref())
    }

    /// Every connector, in the order they are listed to users.
    pub fn all(&self) -> impl Iterator<Item = &dyn Connector> {
        self.connectors.iter().map(|c| c.as_ref())
    }

    /// The connector `name`, or an error listing the known ones.
    pub fn connector(&self, name: &str) -> Result<&dyn Connector> {
        self.get(name)
            .ok_or_else(|| Error::Options(format!("connector '{name}' is unknown: expected one of {}", self.names())))
    }

    fn names(&self) -> String {
        self.connectors.iter().map(|c| c.name()).collect::<Vec<_>>().join(", ")
    }

    /// Validates a table's WITH options against its connector's; the error names the option and
    /// what it accepts.
    pub fn validate(&self, options: BTreeMap<String, String>) -> Result<ConnectorOptions> {
        // Flink's legacy (pre-1.11) property names: 'connector.type', 'connector.path', 'format.type'.
        let mut options = options;
        for (legacy, name) in [("connector.type", "connector"), ("connector.path", "path"), ("format.type", "format")] {
            if let Some(value) = options.remove(legacy) {
                options.entry(name.to_string()).or_insert(value);
            }
        }
        let Some(name) = options.get("connector").cloned() else {
            return Err(Error::Options(format!("option 'connector' is missing: expected one of {}", self.names())));
        };
        let connector = self.connector(&name)?;
        let mut values = options;
        values.remove("connector");
        connector.take_flink_options(&name, &mut values)?;
        let name = connector.name();
        check_options(name, connector.options(), connector.pass_through(), &values)?;
        Ok(ConnectorOptions { connector: name.to_string(), values })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn options(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn validate(pairs: &[(&str, &str)]) -> Result<ConnectorOptions> {
        Registry::built_in().validate(options(pairs))
    }

    #[test]
    fn valid_options_pass_and_are_read_back() {
        let nexmark =
            validate(&[("connector", "nexmark"), ("events", "1000"), ("as_fast_as_possible", "true")]).unwrap();
        assert_eq!(nexmark.connector, "nexmark");
        assert_eq!(nexmark.integer("events", 0), 1000);
        assert!(nexmark.boolean("as_fast_as_possible", false));
        let kafka = validate(&[
            ("connector", "kafka"),
            ("bootstrap.servers", "127.0.0.1:9092"),
            ("topic", "in"),
            ("format", "json"),
            ("kafka.fetch.min.bytes", "1"),
            ("event_time", "ts"),
            ("watermark_delay", "5 seconds"),
        ])
        .unwrap();
        assert_eq!(kafka.duration("watermark_delay"), Some(Duration::from_secs(5)));
    }

    #[test]
    fn errors_name_the_option_and_what_it_accepts() {
        let error = |pairs: &[(&str, &str)]| validate(pairs).unwrap_err().to_string();
        assert_eq!(
            error(&[("connector", "kafak")]),
            "connector 'kafak' is unknown: expected one of nexmark, kafka, filesystem, datagen, preview, blackhole"
        );
        assert!(error(&[]).contains("option 'connector' is missing"));
        assert_eq!(
            error(&[("connector", "nexmark"), ("rate", "fast")]),
            "option 'rate' = 'fast' is invalid: expected an integer of at least 1"
        );
        assert!(
            error(&[("connector", "nexmark"), ("speed", "1")])
                .starts_with("option 'speed' is unknown for connector 'nexmark': expected seed, rate,")
        );
        assert!(error(&[("connector", "kafka"), ("speed", "1")]).ends_with(", or 'kafka.<client property>'"));
        assert_eq!(
            error(&[("connector", "kafka"), ("bootstrap.servers", "b"), ("topic", "t"), ("format", "xml")]),
            "option 'format' = 'xml' is invalid: expected one of 'json', 'csv', 'raw', 'debezium_json', 'upsert'"
        );
        assert_eq!(
            error(&[("connector", "filesystem"), ("format", "json")]),
            "option 'path' is required by connector 'filesystem' (a path)"
        );
        assert!(
            error(&[("connector", "blackhole"), ("watermark_delay", "soon")])
                .contains("a duration such as '5 seconds'")
        );
    }
}
