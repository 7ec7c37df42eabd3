//! `connector = 'filesystem'`: a directory (or file) of Parquet or JSON-lines files, read as a
//! bounded source and written by a two-phase commit.

use std::path::PathBuf;
use std::sync::Arc;

use weir_engine::two_phase_commit::TwoPhaseCommitSink;

use super::{FileFormat, FileSink, FileSinkConfig, FileSource, HivePartitions};
use crate::connector::{Connector, ConnectorTable, NodeContext, PlannedSink, PlannedSource};
use crate::options::{Kind, OptionSpec, option, required};
use crate::{Error, Result, plan_err};

pub struct FilesystemConnector;

const OPTIONS: &[OptionSpec] = &[
    required("path", Kind::Path),
    required("format", Kind::OneOf(&["parquet", "json"])),
    // Columns whose values name the rows' directories (also written PARTITIONED BY (...)).
    option("partition.fields", Kind::Text),
    option("sink.rolling-policy.file-size", Kind::Size),
];

/// A sink's rolling size unless the table says (Flink's default): a partition's rows go to a
/// file once they take this much memory, before the checkpoint that commits them.
const DEFAULT_ROLLING_BYTES: u64 = 128 << 20;
/// Rows per batch read from a file.
const READ_BATCH_ROWS: usize = 8192;

/// A table's directory (or file), format and partitioning.
fn layout(table: &ConnectorTable) -> Result<(PathBuf, FileFormat, Option<HivePartitions>)> {
    let (Some(path), Some(format)) = (table.options.get("path"), table.options.get("format")) else {
        return plan_err!("table '{}': a filesystem table needs 'path' and 'format'", table.name);
    };
    let Some(format) = FileFormat::parse(format) else {
        return plan_err!("table '{}': format '{format}' is not one of 'parquet', 'json'", table.name);
    };
    let partitioning = HivePartitions::new(&table.schema, &table.options.list("partition.fields"))
        .map_err(|e| Error::Plan(format!("table '{}': {e}", table.name)))?;
    Ok((PathBuf::from(path), format, partitioning))
}

impl Connector for FilesystemConnector {
    fn name(&self) -> &'static str {
        "filesystem"
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

    fn source(&self, table: &ConnectorTable, _: usize, _: NodeContext<'_>) -> Result<PlannedSource> {
        let (path, format, partitioning) = layout(table)?;
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
                    format,
                    schema.clone(),
                    partitioning.clone(),
                    READ_BATCH_ROWS,
                )))
            }),
            state: "the rows read of each file".into(),
            assigns_watermarks: false,
            changelog: false,
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
        let (dir, format, partitioning) = layout(table)?;
        let config = FileSinkConfig {
            dir,
            format,
            schema: table.schema.clone(),
            partitioning,
            rolling_bytes: usize::try_from(table.options.size("sink.rolling-policy.file-size", DEFAULT_ROLLING_BYTES))
                .unwrap_or(usize::MAX),
        };
        Ok(PlannedSink {
            factory: Arc::new(move |_| Ok(Box::new(TwoPhaseCommitSink::new(FileSink::new(config.clone()))))),
            state: Some("the files written for checkpoints not yet complete".into()),
            preflight: Vec::new(),
            transactional_prefixes: Vec::new(),
        })
    }
}
