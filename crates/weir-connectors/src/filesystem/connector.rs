//! `connector = 'filesystem'`: a directory (or file) of Parquet, JSON-lines or CSV files, read
//! as a bounded source and written by a two-phase commit.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use weir_engine::two_phase_commit::TwoPhaseCommitSink;

use super::{FileFormat, FileSink, FileSinkConfig, FileSource, HivePartitions, PartitionCommit};
use crate::connector::{Connector, ConnectorTable, NodeContext, PlannedSink, PlannedSource, SourceRows};
use crate::csv_format::{self, CsvFormat};
use crate::options::{Kind, OptionSpec, option, required};
use crate::{Error, Result, plan_err};

pub struct FilesystemConnector;

const OPTIONS: &[OptionSpec] = &[
    required("path", Kind::Path),
    required("format", Kind::OneOf(&["parquet", "json", "csv"])),
    // Columns whose values name the rows' directories (also written PARTITIONED BY (...)).
    option("partition.fields", Kind::Text),
    option("sink.rolling-policy.file-size", Kind::Size),
    // Files roll at every checkpoint (when they become visible) and by size: Flink's time-based
    // rolling asks for nothing more.
    option("sink.rolling-policy.rollover-interval", Kind::Duration),
    option("sink.rolling-policy.check-interval", Kind::Duration),
    option("sink.rolling-policy.inactivity-interval", Kind::Duration),
    // Flink's partition commit (`partition_commit.rs`).
    option("sink.partition-commit.policy.kind", Kind::Text),
    option("sink.partition-commit.trigger", Kind::OneOf(&["process-time", "partition-time"])),
    option("sink.partition-commit.delay", Kind::Duration),
    option("sink.partition-commit.success-file.name", Kind::Text),
    option("sink.partition-commit.watermark-time-zone", Kind::OneOf(&["UTC"])),
    option("partition.time-extractor.kind", Kind::Text),
    option("partition.time-extractor.timestamp-pattern", Kind::Text),
    option("partition.time-extractor.timestamp-formatter", Kind::Text),
    csv_format::OPTIONS[0],
    csv_format::OPTIONS[1],
    csv_format::OPTIONS[2],
    csv_format::OPTIONS[3],
    csv_format::OPTIONS[4],
    csv_format::OPTIONS[5],
];

/// A sink's rolling size unless the table says (Flink's default): a partition's rows go to a
/// file once they take this much memory, before the checkpoint that commits them.
const DEFAULT_ROLLING_BYTES: u64 = 128 << 20;
/// Rows per batch read from a file.
const READ_BATCH_ROWS: usize = 8192;

/// A table's directory (or file), format and partitioning.
fn layout(table: &ConnectorTable) -> Result<(PathBuf, FileFormat, Option<HivePartitions>, Option<PartitionCommit>)> {
    let (Some(path), Some(format)) = (table.options.get("path"), table.options.get("format")) else {
        return plan_err!("table '{}': a filesystem table needs 'path' and 'format'", table.name);
    };
    let format = match format {
        "parquet" => FileFormat::Parquet,
        "json" => FileFormat::Json,
        "csv" => FileFormat::Csv(
            CsvFormat::of(&table.options, &table.schema)
                .map_err(|e| Error::Plan(format!("table '{}': {e}", table.name)))?,
        ),
        other => return plan_err!("table '{}': format '{other}' is not one of 'parquet', 'json', 'csv'", table.name),
    };
    if !matches!(format, FileFormat::Csv(_))
        && let Some(option) = table.options.values.keys().find(|k| k.starts_with("csv."))
    {
        return plan_err!("table '{}': option '{option}' is for format 'csv'", table.name);
    }
    let partitioning = HivePartitions::new(&table.schema, &table.options.list("partition.fields"))
        .map_err(|e| Error::Plan(format!("table '{}': {e}", table.name)))?;
    let commit = PartitionCommit::of(&table.options, partitioning.is_some())
        .map_err(|e| Error::Plan(format!("table '{}': {e}", table.name)))?;
    Ok((PathBuf::from(path), format, partitioning, commit))
}

impl Connector for FilesystemConnector {
    fn name(&self) -> &'static str {
        "filesystem"
    }

    /// Flink writes the path as a URL: `file:///data/out` is `/data/out`.
    fn take_flink_options(&self, _written: &str, options: &mut BTreeMap<String, String>) -> Result<()> {
        if let Some(path) = options.get_mut("path") {
            if let Some(local) = path.strip_prefix("file://") {
                *path = local.to_string();
            } else if let Some((scheme, _)) = path.split_once("://") {
                return plan_err!(
                    "path '{path}': weir's filesystem connector writes local paths (file://), not {scheme}://"
                );
            }
        }
        Ok(())
    }

    fn options(&self) -> &'static [OptionSpec] {
        OPTIONS
    }

    fn check(&self, table: &ConnectorTable) -> Result<()> {
        layout(table).map(|_| ())
    }

    fn reading(&self, table: &ConnectorTable) -> String {
        format!(
            "{}: the {} files under '{}'",
            table.name,
            table.options.get("format").unwrap_or_default(),
            table.options.get("path").unwrap_or_default()
        )
    }

    /// The files there when the pipeline starts.
    fn bounded(&self, _: &ConnectorTable) -> bool {
        true
    }

    fn source(&self, table: &ConnectorTable, _: usize, _: NodeContext<'_>) -> Result<PlannedSource> {
        let (path, format, partitioning, _) = layout(table)?;
        // A source path is read at once: one that is not there is the user's mistake, not an
        // empty input (a sink's path, by contrast, is made when written).
        if !path.exists() {
            return plan_err!(
                "table '{}': path '{}' does not exist: a filesystem table is read from an existing file or directory",
                table.name,
                path.display()
            );
        }
        let schema = table.schema.clone();
        Ok(PlannedSource {
            factory: Arc::new(move |_| {
                Ok(Box::new(FileSource::new(
                    path.clone(),
                    format.clone(),
                    schema.clone(),
                    partitioning.clone(),
                    READ_BATCH_ROWS,
                )))
            }),
            state: "the rows read of each file".into(),
            assigns_watermarks: false,
            rows: SourceRows::Appends,
            preflight: Vec::new(),
            transactional_prefixes: Vec::new(),
        })
    }

    fn sink(&self, table: &ConnectorTable, updating: bool, _: NodeContext<'_>) -> Result<PlannedSink> {
        if updating {
            return plan_err!(
                "table '{}': a filesystem table takes append-only rows, and this query's result is updating (a changelog): aggregate over a window, or write to a table that takes updates",
                table.name
            );
        }
        let (dir, format, partitioning, commit) = layout(table)?;
        let config = FileSinkConfig {
            dir,
            format,
            schema: table.schema.clone(),
            partitioning,
            rolling_bytes: usize::try_from(table.options.size("sink.rolling-policy.file-size", DEFAULT_ROLLING_BYTES))
                .unwrap_or(usize::MAX),
            commit,
        };
        Ok(PlannedSink {
            factory: Arc::new(move |_| Ok(Box::new(TwoPhaseCommitSink::new(FileSink::new(config.clone()))))),
            state: Some("the files written for checkpoints not yet complete".into()),
            preflight: Vec::new(),
            transactional_prefixes: Vec::new(),
        })
    }
}
