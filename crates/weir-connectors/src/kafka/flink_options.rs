//! Flink's Kafka connector options, and its `upsert-kafka` connector, turned into weir's before
//! a table's options are checked, so that a Flink table declaration runs as written. What has
//! no counterpart in weir is refused by name rather than ignored.

use std::collections::BTreeMap;

use crate::{Result, plan_err};

/// Flink's option names that are weir's under another name.
const RENAMED: &[(&str, &str)] = &[
    ("properties.bootstrap.servers", "bootstrap.servers"),
    ("properties.group.id", "group.id"),
    ("properties.transaction.timeout.ms", "transaction.timeout.ms"),
    ("value.format", "format"),
    ("scan.startup.timestamp-millis", "scan.startup.timestamp_ms"),
    ("scan.topic-partition-discovery.interval", "scan.partition_discovery.interval"),
    ("sink.delivery-guarantee", "delivery"),
    ("sink.transactional-id-prefix", "transactional_id.prefix"),
];

/// Flink's spellings of option values, with weir's (`None`: refused).
const VALUES: &[(&str, &str, Option<&str>)] = &[
    ("format", "debezium-json", Some("debezium_json")),
    ("scan.startup.mode", "earliest-offset", Some("earliest")),
    ("scan.startup.mode", "latest-offset", Some("latest")),
    ("scan.startup.mode", "group-offsets", Some("group")),
    ("scan.startup.mode", "specific-offsets", None),
    ("scan.bounded.mode", "latest-offset", Some("latest")),
    ("scan.bounded.mode", "group-offsets", None),
    ("scan.bounded.mode", "timestamp", None),
    ("scan.bounded.mode", "specific-offsets", None),
    ("delivery", "exactly-once", Some("exactly_once")),
    ("delivery", "at-least-once", Some("at_least_once")),
];

/// Flink's options weir takes for what it does anyway: (name, the one value it takes).
const ALREADY_SO: &[(&str, &str, &str)] = &[
    ("key.format", "json", "weir writes a record's key as the JSON object of its key.fields"),
    ("value.fields-include", "ALL", "weir writes every column into the value"),
    ("sink.partitioner", "default", "weir partitions by the key's hash, or spreads keyless records"),
    ("json.fail-on-missing-field", "false", "a field missing from a JSON record reads as NULL"),
];

/// `options` (written for `connector`, `kafka` or `upsert-kafka`) with Flink's names and
/// values turned into weir's.
pub fn from_flink(connector: &str, options: &mut BTreeMap<String, String>) -> Result<()> {
    for (flink, weir) in RENAMED {
        let Some(value) = options.remove(*flink) else { continue };
        match options.get(*weir) {
            Some(given) if *given != value => {
                return plan_err!("options '{flink}' = '{value}' and '{weir}' = '{given}' say different things");
            }
            _ => {
                options.insert(weir.to_string(), value);
            }
        }
    }
    // Flink's Kafka client properties are librdkafka's here.
    let properties: Vec<String> = options.keys().filter(|k| k.starts_with("properties.")).cloned().collect();
    for name in properties {
        if let Some(value) = options.remove(&name) {
            options.insert(format!("kafka.{}", &name["properties.".len()..]), value);
        }
    }
    for (name, flink, weir) in VALUES {
        if options.get(*name).is_some_and(|v| v.eq_ignore_ascii_case(flink)) {
            match weir {
                Some(weir) => {
                    options.insert(name.to_string(), weir.to_string());
                }
                None => return plan_err!("option '{name}' = '{flink}' is not supported by weir's Kafka connector"),
            }
        }
    }
    for (name, value, because) in ALREADY_SO {
        if let Some(given) = options.remove(*name)
            && !given.eq_ignore_ascii_case(value)
        {
            return plan_err!("option '{name}' = '{given}' is not supported: only '{value}' ({because})");
        }
    }
    for name in ["json.ignore-parse-errors", "csv.ignore-parse-errors"] {
        if let Some(skip) = options.remove(name)
            && skip.eq_ignore_ascii_case("true")
        {
            options.entry("bad_records".into()).or_insert_with(|| "skip".into());
        }
    }
    // Flink separates key fields with ';'.
    if let Some(fields) = options.get_mut("key.fields") {
        *fields = fields.replace(';', ",");
    }
    if connector == "upsert-kafka" {
        match options.get("format").map(String::as_str) {
            None | Some("json") => {
                options.insert("format".into(), "upsert".into());
            }
            Some(other) => {
                return plan_err!(
                    "upsert-kafka: 'value.format' = '{other}' is not supported: weir writes upserts as JSON"
                );
            }
        }
        if !options.contains_key("key.fields") {
            let Some(key) = options.get("primary_key").cloned() else {
                return plan_err!(
                    "an upsert-kafka table needs a key: declare PRIMARY KEY (column, ...) NOT ENFORCED in its column list"
                );
            };
            options.insert("key.fields".into(), key);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn translated(connector: &str, pairs: &[(&str, &str)]) -> Result<BTreeMap<String, String>> {
        let mut options = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        from_flink(connector, &mut options).map(|()| options)
    }

    #[test]
    fn flinks_kafka_options_become_weirs() {
        let options = translated(
            "kafka",
            &[
                ("properties.bootstrap.servers", "127.0.0.1:9092"),
                ("properties.group.id", "g"),
                ("properties.fetch.min.bytes", "1"),
                ("topic", "t"),
                ("value.format", "debezium-json"),
                ("scan.startup.mode", "latest-offset"),
                ("sink.delivery-guarantee", "exactly-once"),
                ("sink.transactional-id-prefix", "p"),
                ("key.format", "json"),
                ("key.fields", "a;b"),
                ("json.ignore-parse-errors", "true"),
            ],
        )
        .unwrap();
        let expected: BTreeMap<String, String> = [
            ("bootstrap.servers", "127.0.0.1:9092"),
            ("group.id", "g"),
            ("kafka.fetch.min.bytes", "1"),
            ("topic", "t"),
            ("format", "debezium_json"),
            ("scan.startup.mode", "latest"),
            ("delivery", "exactly_once"),
            ("transactional_id.prefix", "p"),
            ("key.fields", "a,b"),
            ("bad_records", "skip"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        assert_eq!(options, expected);
    }

    #[test]
    fn upsert_kafka_takes_its_key_from_the_primary_key_and_the_rest_is_refused_by_name() {
        let options =
            translated("upsert-kafka", &[("key.format", "json"), ("value.format", "json"), ("primary_key", "id")])
                .unwrap();
        assert_eq!((options["format"].as_str(), options["key.fields"].as_str()), ("upsert", "id"));
        let error = |connector: &str, pairs: &[(&str, &str)]| translated(connector, pairs).unwrap_err().to_string();
        assert!(error("upsert-kafka", &[("value.format", "json")]).contains("PRIMARY KEY"));
        assert!(
            error("kafka", &[("key.format", "avro")]).contains("'key.format' = 'avro' is not supported: only 'json'")
        );
        assert!(error("kafka", &[("scan.startup.mode", "specific-offsets")]).contains("not supported"));
        assert!(error("kafka", &[("value.format", "json"), ("format", "raw")]).contains("say different things"));
    }
}
