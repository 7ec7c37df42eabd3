//! The seam between the SQL layer and the connectors. A [`Connector`] says which WITH options
//! its tables take, whether it fixes their schema, and turns a table into a planned source or
//! sink: the factory the runtime calls per subtask, what the node's state holds, the checks
//! that only its external system can answer (run before the pipeline starts), and the Kafka
//! transactional-id prefixes it claims. The [`Registry`](crate::registry::Registry) holds every
//! connector by name; the planner asks it, and knows no connector itself.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use datafusion::arrow::datatypes::SchemaRef;
use weir_engine::OperatorFactory;
use weir_engine::graph::SourceFactory;

use crate::options::{ConnectorOptions, OptionSpec};
use crate::read_fields::ReadFields;
use crate::{Result, plan_err};

/// A table as its connector sees it: the columns it reads or writes (a processing-time column,
/// filled in after reading, is not among them) and its validated options.
#[derive(Debug, Clone, PartialEq)]
pub struct ConnectorTable {
    pub name: String,
    pub schema: SchemaRef,
    pub options: ConnectorOptions,
    /// The event-time column and its bounded out-of-orderness.
    pub event_time: Option<(String, Duration)>,
}

/// What a pipeline's options say to the connectors (and to the planner): parallelism,
/// checkpoints, the pipeline's name.
#[derive(Debug, Clone, Default)]
pub struct PlanOptions {
    pub parallelism: usize,
    /// Names the pipeline's transactional ids (`<name>-<sink node>-...`): stable across
    /// restarts of the same pipeline, different between pipelines.
    pub pipeline_name: String,
    /// `None`: checkpoints are off.
    pub checkpoint_interval: Option<Duration>,
    /// Checkpoints align barriers (exactly-once), rather than at-least-once.
    pub exactly_once_checkpoints: bool,
    /// Checkpoints in flight at once: sizes the Kafka writers' pools of transactional ids.
    pub max_concurrent_checkpoints: usize,
    /// How long a checkpoint may take, and the longest wait before a restart: with the
    /// interval, how long a pre-committed transaction may have to stay open.
    pub checkpoint_timeout: Duration,
    pub max_restart_backoff: Duration,
    /// Time-to-live of the state of updating aggregates and regular joins.
    pub state_ttl: Option<Duration>,
}

/// Where in the graph a table is planned: its node's name (which names the node's state and,
/// for Kafka writers, their transactional ids), the pipeline's options, and (for a source)
/// which fields of its struct columns the pipeline reads.
#[derive(Debug, Clone, Copy)]
pub struct NodeContext<'a> {
    pub node: &'a str,
    pub options: &'a PlanOptions,
    pub read: &'a ReadFields,
}

/// A check against an external system before a pipeline starts (a Kafka topic exists, a
/// transaction timeout is within the broker's maximum); the error names the table.
#[async_trait]
pub trait Preflight: Debug + Send + Sync {
    async fn check(&self) -> Result<()>;

    /// When it runs: every check that only reads runs before any that may create something, so
    /// a pipeline refused for a setting leaves nothing behind.
    fn phase(&self) -> PreflightPhase {
        PreflightPhase::Verify
    }
}

/// The order pre-flight checks run in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum PreflightPhase {
    /// Only reads (a setting within the system's limits).
    Verify,
    /// May create what is missing (a topic the table lets weir create).
    Provision,
}

/// What a source's rows are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SourceRows {
    Appends,
    /// Changes, with a `_change` column: `+I`, `-U`, `+U`, `-D`.
    Changes,
    /// Upserts and deletes by this key (a `_change` column of `+U` and `-D` rows, a delete's
    /// row holding only the key, every column nullable): the planner keeps each key's latest
    /// row to make changes of them.
    Upserts {
        key: Vec<String>,
    },
}

impl SourceRows {
    /// Whether the rows have a `_change` column.
    pub fn have_changes(&self) -> bool {
        *self != Self::Appends
    }
}

/// A table planned as a source.
pub struct PlannedSource {
    pub factory: SourceFactory,
    /// What its snapshot holds, in words (EXPLAIN shows it).
    pub state: String,
    /// It emits watermarks itself (Kafka, per partition); otherwise the planner adds a
    /// watermark assigner after it when the table has an event time.
    pub assigns_watermarks: bool,
    pub rows: SourceRows,
    pub preflight: Vec<Arc<dyn Preflight>>,
    /// Prefixes of the transactional ids its exactly-once writers use (dead letters).
    pub transactional_prefixes: Vec<String>,
}

/// A table planned as a sink.
pub struct PlannedSink {
    pub factory: OperatorFactory,
    /// What its snapshot holds, in words, if anything.
    pub state: Option<String>,
    pub preflight: Vec<Arc<dyn Preflight>>,
    pub transactional_prefixes: Vec<String>,
}

/// A kind of table: its name in `WITH ('connector' = ...)`, its options, and how it reads and
/// writes.
pub trait Connector: Send + Sync {
    fn name(&self) -> &'static str;

    /// The options its tables take (besides the event-time ones every table takes).
    fn options(&self) -> &'static [OptionSpec];

    /// A prefix of options handed to its client unchecked (`kafka.` for librdkafka's).
    fn pass_through(&self) -> Option<&'static str> {
        None
    }

    /// Other names its tables may give as `connector` (Flink's `upsert-kafka` is `kafka`).
    fn aliases(&self) -> &'static [&'static str] {
        &[]
    }

    /// Turns Flink's names and values of its options into its own, before they are checked;
    /// `written`: the `connector` as written (its name or an alias).
    fn take_flink_options(&self, written: &str, options: &mut BTreeMap<String, String>) -> Result<()> {
        let _ = (written, options);
        Ok(())
    }

    /// The schema of its tables when the connector fixes it (no column list is written).
    fn fixed_schema(&self) -> Option<SchemaRef> {
        None
    }

    /// Whether a table may still declare columns over the fixed schema, matched to it by name
    /// (`declared_schema`), as Flink's Nexmark DDL declares the generator's.
    fn takes_declared_columns(&self) -> bool {
        false
    }

    /// Checks a table at CREATE TABLE, beyond its options' values (which the registry checked):
    /// options that contradict each other or the columns.
    fn check(&self, table: &ConnectorTable) -> Result<()> {
        let _ = table;
        Ok(())
    }

    /// Where reading `table` starts, in words, for the reader of a preview.
    fn reading(&self, table: &ConnectorTable) -> String {
        format!("{}: {}", table.name, self.name())
    }

    /// Whether reading `table` comes to an end (a file source, a generator with a count, a
    /// Kafka table read up to the offsets of its start): a client waits for such a query's
    /// last row, and reads a stream's rows as they come.
    fn bounded(&self, table: &ConnectorTable) -> bool {
        let _ = table;
        false
    }

    /// `table` as the source of node `context.node`, read by `parallelism` subtasks.
    fn source(&self, table: &ConnectorTable, parallelism: usize, context: NodeContext<'_>) -> Result<PlannedSource> {
        let _ = (parallelism, context);
        plan_err!("table '{}': reading from a '{}' table is not supported", table.name, self.name())
    }

    /// `table` as the sink of node `context.node`; `updating`: the rows are a changelog.
    fn sink(&self, table: &ConnectorTable, updating: bool, context: NodeContext<'_>) -> Result<PlannedSink> {
        let _ = (updating, context);
        plan_err!("table '{}': writing to a '{}' table is not supported", table.name, self.name())
    }
}

impl PlannedSink {
    /// A sink that keeps no state and needs no checks.
    pub fn stateless(factory: OperatorFactory) -> Self {
        Self { factory, state: None, preflight: Vec::new(), transactional_prefixes: Vec::new() }
    }
}
