//! The options `SET` gives the next pipelines, parsed once, when set, into typed
//! [`PipelineOptions`]; the planner and the runtime configuration read the typed values, and a
//! service stores them with each pipeline as JSON, to plan it again exactly so on a resume.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use weir_connectors::PlanOptions;
use weir_connectors::options::parse_duration;
use weir_engine::{CheckpointMode, PipelineConfig};

use crate::identifiers::{Dialect, IdentifierCase};

/// Every pipeline option, with what it accepts (for errors and for clients to complete).
pub const PIPELINE_OPTIONS: &[(&str, &str)] = &[
    ("checkpoint.mode", "'exactly_once' or 'at_least_once'"),
    ("checkpoint.unaligned", "'true' or 'false'"),
    ("checkpoint.aligned_timeout", "a duration such as '100 ms'"),
    ("checkpoint.interval", "a duration such as '10 s', or 'off'"),
    ("checkpoint.max_concurrent", "an integer from 1 to 16"),
    ("checkpoint.timeout", "a duration such as '2 min' (a checkpoint not complete by then is aborted)"),
    ("checkpoint.retained", "an integer from 1 to 1000"),
    ("checkpoint.incremental", "'true' (the default: keyed state writes what changed) or 'false' (full snapshots)"),
    ("parallelism", "an integer from 1 to 256"),
    ("state.ttl", "a duration such as '1 hour', or 'off' (updating aggregates and regular joins)"),
    (
        "restart.attempts",
        "how often a failing pipeline restarts in a row (no checkpoint completed between) before it stops as failed: an integer from 0, or 'unlimited' (the default)",
    ),
    ("pipeline.name", "a name of letters, digits, '-' and '_' (names the pipelines' Kafka transactional ids)"),
    ("sql.dialect", "'weir' or 'flink' (Flink's rule for names: unquoted names kept as written, matched exactly)"),
    (
        "sql.identifiers",
        "'lowercase' (unquoted names lowercased) or 'as_written' (kept and matched exactly, as in Flink)",
    ),
];

/// Flink's names of the same settings, so a Flink job's `SET 'execution.checkpointing.interval'
/// = '10s'` runs unchanged: (Flink's name, weir's).
pub const FLINK_OPTIONS: &[(&str, &str)] = &[
    ("parallelism.default", "parallelism"),
    ("execution.checkpointing.interval", "checkpoint.interval"),
    ("execution.checkpointing.mode", "checkpoint.mode"),
    ("execution.checkpointing.unaligned", "checkpoint.unaligned"),
    ("execution.checkpointing.unaligned.enabled", "checkpoint.unaligned"),
    ("execution.checkpointing.aligned-checkpoint-timeout", "checkpoint.aligned_timeout"),
    ("execution.checkpointing.timeout", "checkpoint.timeout"),
    ("execution.checkpointing.max-concurrent-checkpoints", "checkpoint.max_concurrent"),
    ("execution.checkpointing.num-retained", "checkpoint.retained"),
    ("state.checkpoints.num-retained", "checkpoint.retained"),
    ("execution.checkpointing.incremental", "checkpoint.incremental"),
    ("state.backend.incremental", "checkpoint.incremental"),
    ("table.exec.state.ttl", "state.ttl"),
    ("restart-strategy.fixed-delay.attempts", "restart.attempts"),
    ("restart-strategy.exponential-delay.attempts-before-reset-backoff", "restart.attempts"),
    ("pipeline.name", "pipeline.name"),
];

/// Option `name` = `value` under weir's name and in weir's spelling, when `name` is Flink's:
/// Flink writes modes in capitals (`EXACTLY_ONCE`) and a state TTL of 0 for none.
fn from_flink<'a>(name: &'a str, value: &'a str) -> (&'a str, String) {
    let Some((_, weir)) = FLINK_OPTIONS.iter().find(|(flink, _)| *flink == name) else {
        return (name, value.to_string());
    };
    let value = match *weir {
        "checkpoint.mode" | "checkpoint.unaligned" | "checkpoint.incremental" => value.to_ascii_lowercase(),
        "state.ttl" | "checkpoint.interval" if parse_duration(value).is_ok_and(|d| d.is_zero()) => "off".into(),
        _ => value.to_string(),
    };
    (weir, value)
}

/// A duration that may be switched off.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Every {
    Off,
    Every(Duration),
}

impl Every {
    fn duration(self) -> Option<Duration> {
        match self {
            Every::Off => None,
            Every::Every(duration) => Some(duration),
        }
    }
}

/// The options set, each `None` until `SET` (the runtime's default then applies).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct PipelineOptions {
    /// `checkpoint.mode`: whether checkpoints are exactly-once (barriers aligned).
    pub exactly_once: Option<bool>,
    pub unaligned: Option<bool>,
    pub aligned_timeout: Option<Duration>,
    pub checkpoint_interval: Option<Every>,
    pub max_concurrent_checkpoints: Option<usize>,
    pub checkpoint_timeout: Option<Duration>,
    pub retained_checkpoints: Option<usize>,
    pub incremental_checkpoints: Option<bool>,
    pub parallelism: Option<usize>,
    pub state_ttl: Option<Every>,
    /// `restart.attempts`; unset: unlimited.
    pub restart_attempts: Option<u32>,
    pub pipeline_name: Option<String>,
    pub dialect: Option<Dialect>,
    pub identifiers: Option<IdentifierCase>,
}

impl PipelineOptions {
    /// Sets option `name` from its SQL text; the error names what it accepts.
    pub fn set(&mut self, name: &str, value: &str) -> Result<(), String> {
        let (name, value) = from_flink(name, value);
        let value = value.as_str();
        let Some((_, accepted)) = PIPELINE_OPTIONS.iter().find(|(n, _)| *n == name) else {
            let names: Vec<&str> = PIPELINE_OPTIONS.iter().map(|(n, _)| *n).collect();
            return Err(format!("'{name}' is not a pipeline option: expected one of {}", names.join(", ")));
        };
        let invalid = || format!("'{name}' = '{value}' is invalid: expected {accepted}");
        let count = |min: usize, max: usize| {
            value.parse::<usize>().ok().filter(|v| (min..=max).contains(v)).ok_or_else(invalid)
        };
        let boolean = || match value {
            "true" => Ok(true),
            "false" => Ok(false),
            _ => Err(invalid()),
        };
        let positive = || parse_duration(value).ok().filter(|d| !d.is_zero()).ok_or_else(invalid);
        let every = || match value {
            "off" => Ok(Every::Off),
            _ => positive().map(Every::Every),
        };
        match name {
            "checkpoint.mode" => {
                self.exactly_once = Some(match value {
                    "exactly_once" => true,
                    "at_least_once" => false,
                    _ => return Err(invalid()),
                })
            }
            "checkpoint.unaligned" => self.unaligned = Some(boolean()?),
            "checkpoint.aligned_timeout" => self.aligned_timeout = Some(parse_duration(value).map_err(|_| invalid())?),
            "checkpoint.interval" => self.checkpoint_interval = Some(every()?),
            "checkpoint.max_concurrent" => self.max_concurrent_checkpoints = Some(count(1, 16)?),
            "checkpoint.timeout" => self.checkpoint_timeout = Some(positive()?),
            "checkpoint.retained" => self.retained_checkpoints = Some(count(1, 1000)?),
            "checkpoint.incremental" => self.incremental_checkpoints = Some(boolean()?),
            "parallelism" => self.parallelism = Some(count(1, 256)?),
            "state.ttl" => self.state_ttl = Some(every()?),
            "restart.attempts" => {
                self.restart_attempts = match value {
                    "unlimited" => None,
                    _ => Some(value.parse().map_err(|_| invalid())?),
                }
            }
            "sql.dialect" => {
                let dialect = [Dialect::Weir, Dialect::Flink].into_iter().find(|d| d.option_value() == value);
                self.dialect = Some(dialect.ok_or_else(invalid)?);
            }
            "sql.identifiers" => {
                let rule = [IdentifierCase::Lowercase, IdentifierCase::AsWritten];
                self.identifiers = Some(rule.into_iter().find(|c| c.option_value() == value).ok_or_else(invalid)?);
            }
            _ => {
                if value.is_empty() || !value.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
                    return Err(invalid());
                }
                self.pipeline_name = Some(value.to_string());
            }
        }
        Ok(())
    }

    /// How unquoted names are read: `sql.identifiers`, else the dialect's rule.
    pub fn identifier_case(&self) -> IdentifierCase {
        self.identifiers.unwrap_or_else(|| self.dialect.unwrap_or_default().identifiers())
    }

    /// The runtime configuration the options describe (the runtime's defaults where unset).
    pub fn config(&self) -> PipelineConfig {
        let mut config = PipelineConfig::default();
        let checkpoint = &mut config.checkpoint;
        if let Some(interval) = self.checkpoint_interval {
            checkpoint.interval = interval.duration();
        }
        checkpoint.mode = match (self.exactly_once, self.unaligned, self.aligned_timeout) {
            (Some(false), _, _) => CheckpointMode::AtLeastOnce,
            (_, Some(true), _) => CheckpointMode::Unaligned,
            (_, _, Some(timeout)) => CheckpointMode::AlignedTimeout(timeout),
            _ => CheckpointMode::Aligned,
        };
        if let Some(n) = self.max_concurrent_checkpoints {
            checkpoint.max_concurrent = n;
        }
        if let Some(timeout) = self.checkpoint_timeout {
            checkpoint.timeout = timeout;
        }
        if let Some(n) = self.retained_checkpoints {
            checkpoint.retained = n;
        }
        if let Some(incremental) = self.incremental_checkpoints {
            checkpoint.incremental = incremental;
        }
        config.restart.max_restarts = self.restart_attempts;
        config
    }

    /// What planning needs, for the pipeline named `name` running with `config`.
    pub fn plan_options(&self, name: &str, config: &PipelineConfig) -> PlanOptions {
        PlanOptions {
            parallelism: self.parallelism.unwrap_or(1),
            state_ttl: self.state_ttl.and_then(Every::duration),
            pipeline_name: name.to_string(),
            checkpoint_interval: config.checkpoint.interval,
            exactly_once_checkpoints: !matches!(config.checkpoint.mode, CheckpointMode::AtLeastOnce),
            max_concurrent_checkpoints: config.checkpoint.max_concurrent,
            checkpoint_timeout: config.checkpoint.timeout,
            max_restart_backoff: config.restart.max_backoff,
        }
    }

    /// The options as the `SET` statements that give them, one per line (what a reader of a
    /// pipeline is shown).
    pub fn to_sql(&self) -> String {
        let duration = |d: &Duration| {
            let ms = d.as_millis();
            match ms {
                _ if ms > 0 && ms.is_multiple_of(3_600_000) => format!("{} hours", ms / 3_600_000),
                _ if ms > 0 && ms.is_multiple_of(60_000) => format!("{} min", ms / 60_000),
                _ if ms > 0 && ms.is_multiple_of(1000) => format!("{} s", ms / 1000),
                _ => format!("{ms} ms"),
            }
        };
        let every = |e: &Every| match e {
            Every::Off => "off".to_string(),
            Every::Every(d) => duration(d),
        };
        let mode = |exactly_once: &bool| if *exactly_once { "exactly_once" } else { "at_least_once" }.to_string();
        let settings: [(&str, Option<String>); 14] = [
            ("checkpoint.mode", self.exactly_once.as_ref().map(mode)),
            ("checkpoint.unaligned", self.unaligned.map(|b| b.to_string())),
            ("checkpoint.aligned_timeout", self.aligned_timeout.as_ref().map(duration)),
            ("checkpoint.interval", self.checkpoint_interval.as_ref().map(every)),
            ("checkpoint.max_concurrent", self.max_concurrent_checkpoints.map(|n| n.to_string())),
            ("checkpoint.timeout", self.checkpoint_timeout.as_ref().map(duration)),
            ("checkpoint.retained", self.retained_checkpoints.map(|n| n.to_string())),
            ("checkpoint.incremental", self.incremental_checkpoints.map(|b| b.to_string())),
            ("parallelism", self.parallelism.map(|n| n.to_string())),
            ("state.ttl", self.state_ttl.as_ref().map(every)),
            ("restart.attempts", self.restart_attempts.map(|n| n.to_string())),
            ("pipeline.name", self.pipeline_name.clone()),
            ("sql.dialect", self.dialect.map(|d| d.option_value().to_string())),
            ("sql.identifiers", self.identifiers.map(|c| c.option_value().to_string())),
        ];
        settings
            .into_iter()
            .filter_map(|(name, value)| value.map(|v| format!("SET {name} = '{}';\n", v.replace('\'', "''"))))
            .collect()
    }

    /// The options as stored with a pipeline.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|_| "{}".into())
    }

    /// Options stored by [`Self::to_json`].
    pub fn from_json(json: &str) -> Result<Self, serde_json::Error> {
        serde_json::from_str(json)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_are_parsed_once_into_typed_values_and_survive_json() {
        let mut options = PipelineOptions::default();
        options.set("checkpoint.interval", "200 ms").unwrap();
        options.set("checkpoint.unaligned", "true").unwrap();
        options.set("state.ttl", "off").unwrap();
        options.set("parallelism", "3").unwrap();
        options.set("pipeline.name", "orders_1").unwrap();
        assert_eq!(options.checkpoint_interval, Some(Every::Every(Duration::from_millis(200))));
        let config = options.config();
        assert_eq!(config.checkpoint.interval, Some(Duration::from_millis(200)));
        assert_eq!(config.checkpoint.mode, CheckpointMode::Unaligned);
        let plan = options.plan_options("orders_1-1", &config);
        assert_eq!((plan.parallelism, plan.state_ttl), (3, None));
        assert_eq!(PipelineOptions::from_json(&options.to_json()).unwrap(), options);
        assert_eq!(
            options.to_sql(),
            "SET checkpoint.unaligned = 'true';\nSET checkpoint.interval = '200 ms';\nSET parallelism = '3';\nSET state.ttl = 'off';\nSET pipeline.name = 'orders_1';\n"
        );
        // What is shown gives the same options when run.
        let mut again = PipelineOptions::default();
        for line in options.to_sql().lines() {
            let (name, value) = line.trim_start_matches("SET ").trim_end_matches("';").split_once(" = '").unwrap();
            again.set(name, value).unwrap();
        }
        assert_eq!(again, options);
        assert_eq!(PipelineOptions::from_json("{}").unwrap(), PipelineOptions::default());
    }

    #[test]
    fn a_wrong_value_names_what_the_option_accepts() {
        let mut options = PipelineOptions::default();
        assert_eq!(
            options.set("checkpoint.mode", "sometimes").unwrap_err(),
            "'checkpoint.mode' = 'sometimes' is invalid: expected 'exactly_once' or 'at_least_once'"
        );
        assert!(options.set("checkpoint.timeout", "0 s").is_err());
        assert!(options.set("parallelism", "257").is_err());
        assert!(options.set("pipeline.name", "a b").is_err());
        assert!(options.set("paralelism", "2").unwrap_err().starts_with("'paralelism' is not a pipeline option"));
        assert_eq!(options, PipelineOptions::default());
    }

    #[test]
    fn flinks_names_set_the_same_options() {
        let mut options = PipelineOptions::default();
        options.set("execution.checkpointing.interval", "10s").unwrap();
        options.set("execution.checkpointing.mode", "AT_LEAST_ONCE").unwrap();
        options.set("parallelism.default", "4").unwrap();
        options.set("table.exec.state.ttl", "1 d").unwrap();
        assert_eq!(options.checkpoint_interval, Some(Every::Every(Duration::from_secs(10))));
        assert_eq!((options.exactly_once, options.parallelism), (Some(false), Some(4)));
        assert_eq!(options.state_ttl, Some(Every::Every(Duration::from_secs(86_400))));
        options.set("restart-strategy.fixed-delay.attempts", "3").unwrap();
        assert_eq!(options.config().restart.max_restarts, Some(3));
        options.set("restart.attempts", "unlimited").unwrap();
        assert_eq!(options.config().restart.max_restarts, None);
        options.set("table.exec.state.ttl", "0 ms").unwrap();
        assert_eq!(options.state_ttl, Some(Every::Off), "Flink's TTL of 0 is none");
        let error = options.set("execution.checkpointing.mode", "sometimes").unwrap_err();
        assert!(error.contains("'checkpoint.mode' = 'sometimes' is invalid"), "{error}");
    }
}
