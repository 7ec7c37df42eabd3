//! A table's WITH options: what values each option takes ([`OptionSpec`]), their validation
//! against the connector's specs, and the validated values ([`ConnectorOptions`]). Validation
//! happens at CREATE TABLE, so a typo fails then, with the option's name and what it accepts,
//! never at run time.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::Error;

/// What values an option takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Integer {
        min: u64,
        max: u64,
    },
    Boolean,
    Text,
    OneOf(&'static [&'static str]),
    /// A duration such as '5 seconds', '200 ms', '1 minute'.
    Duration,
    /// A size such as '128 MB', '64kb', '1048576'.
    Size,
    /// A path on the local filesystem: confined to the directories a service allows.
    Path,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OptionSpec {
    pub name: &'static str,
    pub kind: Kind,
    pub required: bool,
}

pub const fn option(name: &'static str, kind: Kind) -> OptionSpec {
    OptionSpec { name, kind, required: false }
}

pub const fn required(name: &'static str, kind: Kind) -> OptionSpec {
    OptionSpec { name, kind, required: true }
}

/// Any count, zero included.
pub const ANY_COUNT: Kind = Kind::Integer { min: 0, max: u64::MAX };

/// Options every table accepts: which column is the event time, and how late its records may
/// be (the watermark is the largest event time seen minus this delay); or the name of a
/// processing-time column to add; the columns computed from the others (SQL, `expression AS
/// name, ...`: the SQL front end computes them after the source); and the declared `PRIMARY KEY`
/// (columns, comma-separated: what an upsert sink keys its records by).
pub const TIME: [OptionSpec; 5] = [
    option("event_time", Kind::Text),
    option("watermark_delay", Kind::Duration),
    option("proctime", Kind::Text),
    option("computed_columns", Kind::Text),
    option("primary_key", Kind::Text),
];

/// A table's connector and its validated options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectorOptions {
    pub connector: String,
    /// Every option but `connector`, by name, as written.
    pub values: BTreeMap<String, String>,
}

impl ConnectorOptions {
    pub fn get(&self, name: &str) -> Option<&str> {
        self.values.get(name).map(String::as_str)
    }

    /// An integer option (validated already), or `default`.
    pub fn integer(&self, name: &str, default: u64) -> u64 {
        self.get(name).and_then(|v| v.parse().ok()).unwrap_or(default)
    }

    pub fn boolean(&self, name: &str, default: bool) -> bool {
        self.get(name).and_then(parse_bool).unwrap_or(default)
    }

    pub fn duration(&self, name: &str) -> Option<Duration> {
        self.get(name).and_then(|v| parse_duration(v).ok())
    }

    /// A size option in bytes (validated already), or `default`.
    pub fn size(&self, name: &str, default: u64) -> u64 {
        self.get(name).and_then(|v| parse_size(v).ok()).unwrap_or(default)
    }

    /// A comma-separated list of names ('dt, hr'), empty when not given.
    pub fn list(&self, name: &str) -> Vec<String> {
        self.get(name).map_or_else(Vec::new, |v| {
            v.split(',').map(str::trim).filter(|n| !n.is_empty()).map(str::to_string).collect()
        })
    }
}

/// '128 MB', '64kb', '1 GiB', '1048576' (bytes); units are powers of 1024, as Flink's sizes.
pub fn parse_size(value: &str) -> Result<u64, String> {
    let value = value.trim();
    let split = value.find(|c: char| !c.is_ascii_digit()).unwrap_or(value.len());
    let (number, unit) = value.split_at(split);
    let number: u64 = number.parse().map_err(|_| format!("'{value}' does not start with a number"))?;
    let factor: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" | "bytes" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        other => return Err(format!("unknown unit '{other}' in '{value}'")),
    };
    Ok(number.saturating_mul(factor))
}

fn parse_bool(value: &str) -> Option<bool> {
    match value.to_ascii_lowercase().as_str() {
        "true" => Some(true),
        "false" => Some(false),
        _ => None,
    }
}

/// '5 seconds', '5s', '200 ms', '1 minute', '2 hours'.
pub fn parse_duration(value: &str) -> Result<Duration, String> {
    let value = value.trim();
    let split = value.find(|c: char| !c.is_ascii_digit()).unwrap_or(value.len());
    let (number, unit) = value.split_at(split);
    let number: u64 = number.parse().map_err(|_| format!("'{value}' does not start with a number"))?;
    let millis = match unit.trim().to_ascii_lowercase().as_str() {
        "ms" | "millisecond" | "milliseconds" => 1,
        "" | "s" | "second" | "seconds" => 1000,
        "m" | "min" | "minute" | "minutes" => 60_000,
        "h" | "hour" | "hours" => 3_600_000,
        "d" | "day" | "days" => 86_400_000,
        other => return Err(format!("unknown unit '{other}' in '{value}'")),
    };
    Ok(Duration::from_millis(number.saturating_mul(millis)))
}

fn accepted(kind: Kind) -> String {
    match kind {
        Kind::Integer { min, max } if max == u64::MAX => format!("an integer of at least {min}"),
        Kind::Integer { min, max } => format!("an integer from {min} to {max}"),
        Kind::Boolean => "'true' or 'false'".into(),
        Kind::Text => "any text".into(),
        Kind::Path => "a path".into(),
        Kind::OneOf(values) => {
            format!("one of {}", values.iter().map(|v| format!("'{v}'")).collect::<Vec<_>>().join(", "))
        }
        Kind::Duration => "a duration such as '5 seconds' or '200 ms'".into(),
        Kind::Size => "a size such as '128 MB' or '64 kb'".into(),
    }
}

fn check(spec: &OptionSpec, value: &str) -> crate::Result<()> {
    let valid = match spec.kind {
        Kind::Integer { min, max } => value.parse::<u64>().is_ok_and(|v| (min..=max).contains(&v)),
        Kind::Boolean => parse_bool(value).is_some(),
        Kind::Text | Kind::Path => !value.is_empty(),
        Kind::OneOf(values) => values.contains(&value),
        Kind::Duration => parse_duration(value).is_ok(),
        Kind::Size => parse_size(value).is_ok_and(|bytes| bytes > 0),
    };
    if valid {
        Ok(())
    } else {
        Err(Error::Options(format!("option '{}' = '{value}' is invalid: expected {}", spec.name, accepted(spec.kind))))
    }
}

/// Checks `values` (every WITH option but `connector`) against the options of `connector`
/// (`specs` and the [`TIME`] options; names under `pass_through` go to the connector's client
/// as they are); the error names the option and what it accepts.
pub fn check_options(
    connector: &str,
    specs: &[OptionSpec],
    pass_through: Option<&str>,
    values: &BTreeMap<String, String>,
) -> crate::Result<()> {
    for (name, value) in values {
        if pass_through.is_some_and(|prefix| name.starts_with(prefix)) {
            continue;
        }
        let Some(spec) = specs.iter().chain(TIME.iter()).find(|s| s.name == name) else {
            let known: Vec<&str> = specs.iter().chain(TIME.iter()).map(|s| s.name).collect();
            let extra = pass_through.map(|prefix| format!(", or '{prefix}<client property>'")).unwrap_or_default();
            return Err(Error::Options(format!(
                "option '{name}' is unknown for connector '{connector}': expected {}{extra}",
                known.join(", ")
            )));
        };
        check(spec, value)?;
    }
    for spec in specs.iter().filter(|s| s.required) {
        if !values.contains_key(spec.name) {
            return Err(Error::Options(format!(
                "option '{}' is required by connector '{connector}' ({})",
                spec.name,
                accepted(spec.kind)
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_the_usual_units() {
        assert_eq!(parse_duration("200 ms"), Ok(Duration::from_millis(200)));
        assert_eq!(parse_duration("5s"), Ok(Duration::from_secs(5)));
        assert_eq!(parse_duration("1 minute"), Ok(Duration::from_secs(60)));
        assert!(parse_duration("5 fortnights").is_err());
    }

    #[test]
    fn sizes_and_lists_read_the_usual_forms() {
        assert_eq!(parse_size("128 MB"), Ok(128 << 20));
        assert_eq!(parse_size("64kb"), Ok(64 << 10));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert!(parse_size("big").is_err());
        let table = ConnectorOptions {
            connector: "filesystem".into(),
            values: BTreeMap::from([("partition.fields".to_string(), " dt, hr ".to_string())]),
        };
        assert_eq!(table.list("partition.fields"), vec!["dt", "hr"]);
        assert_eq!(table.size("sink.rolling-policy.file-size", 7), 7);
    }
}
