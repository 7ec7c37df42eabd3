//! `connector = 'nexmark'`: the generator's options, its fixed schema, and its source.

use std::sync::Arc;

use datafusion::arrow::datatypes::SchemaRef;

use super::generator::{AUCTION_PROPORTION, GROUP, NexmarkConfig, PERSON_PROPORTION, nexmark_schema};
use super::{NexmarkGenerator, NexmarkSource, UnreadText};
use weir_engine::operator::Source;

use crate::connector::{Connector, ConnectorTable, NodeContext, PlannedSource, SourceRows};
use crate::declared_schema::{Conformed, conform, same_name};
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
    // Flink's nexmark connector's names.
    option("first-event.rate", Kind::Integer { min: 1, max: u64::MAX }),
    option("next-event.rate", Kind::Integer { min: 1, max: u64::MAX }),
    option("events.num", ANY_COUNT),
    option("person.proportion", ANY_COUNT),
    option("auction.proportion", ANY_COUNT),
    option("bid.proportion", ANY_COUNT),
];

/// Flink's names of options, and weir's.
const FLINK_NAMES: [(&str, &str); 2] = [("first-event.rate", "rate"), ("events.num", "events")];

/// The generator's configuration a table's options give.
fn config(options: &ConnectorOptions) -> NexmarkConfig {
    let defaults = NexmarkConfig::default();
    let value = |name: &str| {
        let flink = FLINK_NAMES.iter().find(|(_, weir)| *weir == name).map(|(flink, _)| *flink);
        options.get(name).or_else(|| flink.and_then(|flink| options.get(flink)))
    };
    NexmarkConfig {
        seed: options.integer("seed", defaults.seed),
        rate: value("rate").and_then(|v| v.parse().ok()).unwrap_or(defaults.rate),
        as_fast_as_possible: options.boolean("as_fast_as_possible", defaults.as_fast_as_possible),
        events: value("events").and_then(|v| v.parse().ok()),
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

    fn takes_declared_columns(&self) -> bool {
        true
    }

    /// Flink's options where weir's generator differs: one rate, Nexmark's proportions.
    fn check(&self, table: &ConnectorTable) -> Result<()> {
        let options = &table.options;
        for (flink, weir) in FLINK_NAMES {
            if options.get(flink).is_some() && options.get(weir).is_some() {
                return plan_err!("table '{}': give '{weir}' or Flink's '{flink}', not both", table.name);
            }
        }
        let (first, next) = (options.get("first-event.rate"), options.get("next-event.rate"));
        if first.is_some() && next.is_some() && first != next {
            return plan_err!(
                "table '{}': weir's generator keeps one rate: 'next-event.rate' must equal 'first-event.rate'",
                table.name
            );
        }
        for (name, proportion) in [
            ("person.proportion", PERSON_PROPORTION),
            ("auction.proportion", AUCTION_PROPORTION),
            ("bid.proportion", GROUP - PERSON_PROPORTION - AUCTION_PROPORTION),
        ] {
            if options.get(name).is_some_and(|v| v.parse::<u64>().ok() != Some(proportion)) {
                return plan_err!(
                    "table '{}': weir's generator has Nexmark's proportions 1:3:46 (person, auction, bid); '{name}' must be {proportion}",
                    table.name
                );
            }
        }
        Ok(())
    }

    fn bounded(&self, table: &ConnectorTable) -> bool {
        config(&table.options).events.is_some()
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

    fn source(&self, table: &ConnectorTable, parallelism: usize, context: NodeContext<'_>) -> Result<PlannedSource> {
        let config = config(&table.options);
        let unread = UnreadText::unless(|column, field| context.read.reads(column, field, same_name));
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
            Some((column, delay)) if same_name(column, "date_time") => Some(delay.as_millis() as i64),
            _ => None,
        };
        // Declared columns (Flink's names, a subset) are picked out of every batch.
        let produced = nexmark_schema();
        let conform = conform(&table.name, &produced, &table.schema)?;
        let conform = (!conform.is_identity(&produced)).then_some(conform);
        Ok(PlannedSource {
            factory: Arc::new(move |_| {
                let source = NexmarkSource::new(NexmarkGenerator::new(config.clone()).with_unread(unread));
                let source: Box<dyn Source> = match delay_ms {
                    Some(delay_ms) => Box::new(source.with_watermarks(delay_ms)),
                    None => Box::new(source),
                };
                Ok(match &conform {
                    Some(conform) => Box::new(Conformed { inner: source, conform: conform.clone() }),
                    None => source,
                })
            }),
            state: "the next event number of each split".into(),
            assigns_watermarks: delay_ms.is_some(),
            rows: SourceRows::Appends,
            preflight: Vec::new(),
            transactional_prefixes: Vec::new(),
        })
    }
}
