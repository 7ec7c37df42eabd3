//! The sinks that keep nothing: `blackhole` (drops every row, for benchmarks and dry runs) and
//! `preview` (keeps the last rows in memory, for watching).

use std::sync::Arc;

use weir_engine::operators::{Blackhole, PreviewBuffer, PreviewSink};

use crate::Result;
use crate::connector::{Connector, ConnectorTable, NodeContext, PlannedSink};
use crate::options::{Kind, OptionSpec, option};

pub struct BlackholeConnector;

impl Connector for BlackholeConnector {
    fn name(&self) -> &'static str {
        "blackhole"
    }

    fn options(&self) -> &'static [OptionSpec] {
        &[]
    }

    fn sink(&self, _: &ConnectorTable, _: bool, _: NodeContext<'_>) -> Result<PlannedSink> {
        Ok(PlannedSink::stateless(Arc::new(|_| Ok(Box::new(Blackhole)))))
    }
}

pub struct PreviewConnector;

/// Rows a `preview` table keeps unless its `capacity` says otherwise.
const DEFAULT_CAPACITY: u64 = 10_000;

impl Connector for PreviewConnector {
    fn name(&self) -> &'static str {
        "preview"
    }

    fn options(&self) -> &'static [OptionSpec] {
        const OPTIONS: &[OptionSpec] = &[option("capacity", Kind::Integer { min: 1, max: 10_000_000 })];
        OPTIONS
    }

    fn sink(&self, table: &ConnectorTable, _: bool, _: NodeContext<'_>) -> Result<PlannedSink> {
        let buffer = PreviewBuffer::new(table.options.integer("capacity", DEFAULT_CAPACITY) as usize);
        Ok(PlannedSink::stateless(Arc::new(move |_| Ok(Box::new(PreviewSink::new(buffer.clone()))))))
    }
}
