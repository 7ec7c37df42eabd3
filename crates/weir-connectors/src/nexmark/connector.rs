//! `connector = 'nexmark'`: the generator's options, its fixed schema, and its source.

use std::sync::Arc;

use datafusion::arrow::datatypes::SchemaRef;

use super::generator::{NexmarkConfig, nexmark_schema};
use super::source::NexmarkSource;
use crate::connector::{Connector, ConnectorTable, NodeContext, PlannedSource};
use crate::options::{ANY_COUNT, ConnectorOptions, Kind, OptionSpec, option};
use crate::{Result, plan_err};

pub struct NexmarkConnector;

const OPTIONS: &[OptionSpec] = &[
    option("seed", ANY_COUNT),
    option("rate", Kind::Integer { min: 1, max: u64::MAX }),
    option("events", ANY_COUNT),
    option("splits", Kind::Integer { min: 1, max: 1024 }),
    option("batch_size", Kind::Integer { min: 1, max: 1_000_000 }),
    option("as_fast_as_possible", Kind::Boolean),
];

/// The generator's configuration a table's options give.
fn config(options: &ConnectorOptions) -> NexmarkConfig {
    let defaults = NexmarkConfig::default();
    NexmarkConfig {
        seed: options.integer("seed", defaults.seed),
        rate: options.integer("rate", defaults.rate),
        as_fast_as_possible: options.boolean("as_fast_as_possible", defaults.as_fast_as_possible),
        events: options.get("events").and_then(|v| v.parse().ok()),
        splits: options.integer("splits", u64::from(defaults.splits)).try_into().unwrap_or(defaults.splits),
        batch_size: options.integer("batch_size", defaults.batch_size as u64).try_into().unwrap_or(defaults.batch_size),
        ..defaults
    }
}

impl Connector for NexmarkConnector {
    fn name(&self) -> &'static str {
        "nexmark"
    }

    fn options(&self) -> &'static [OptionSpec] {
        OPTIONS
    }

    fn fixed_schema(&self) -> Option<SchemaRef> {
        Some(nexmark_schema())
    }

    fn reading(&self, table: &ConnectorTable) -> String {
        let config = config(&table.options);
        let events = match config.events {
            Some(n) => format!("{n} events"),
            None => "events without end".to_string(),
        };
        let pace = match config.as_fast_as_possible {
            true => " as fast as it can".to_string(),
            false => format!(" at {} events/s", config.rate),
        };
        format!("{}: the nexmark generator, {events}{pace}, from its first event", table.name)
    }

    fn source(&self, table: &ConnectorTable, parallelism: usize, _: NodeContext<'_>) -> Result<PlannedSource> {
        let config = config(&table.options);
        if parallelism > config.splits as usize {
            return plan_err!(
                "table '{}' has {} splits; the pipeline's parallelism {parallelism} needs at least as many (option 'splits')",
                table.name,
                config.splits
            );
        }
        // Event time on `date_time` (the one timestamp column) is tracked per split by the
        // source itself; the planner's generic assigner would take one watermark over all of a
        // subtask's splits.
        let delay_ms = match &table.event_time {
            Some((column, delay)) if column == "date_time" => Some(delay.as_millis() as i64),
            _ => None,
        };
        Ok(PlannedSource {
            factory: Arc::new(move |_| {
                let source = NexmarkSource::new(config.clone());
                Ok(Box::new(match delay_ms {
                    Some(delay_ms) => source.with_watermarks(delay_ms),
                    None => source,
                }))
            }),
            state: "the next event number of each split".into(),
            assigns_watermarks: delay_ms.is_some(),
            changelog: false,
            preflight: Vec::new(),
            transactional_prefixes: Vec::new(),
        })
    }
}
