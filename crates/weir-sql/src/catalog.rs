//! Tables and views a session knows.

use std::collections::BTreeMap;
use std::time::Duration;

use datafusion::arrow::datatypes::SchemaRef;

use weir_connectors::ConnectorTable;
use weir_connectors::options::ConnectorOptions;

/// A table: its schema and where its records come from or go to.
#[derive(Debug, Clone, PartialEq)]
pub struct TableDef {
    pub name: String,
    pub schema: SchemaRef,
    pub connector: ConnectorOptions,
    /// The event-time column and its bounded out-of-orderness.
    pub event_time: Option<(String, Duration)>,
    /// The processing-time column (`pt AS PROCTIME()`): the last column of `schema`, filled in
    /// as records are read, not by the connector.
    pub proctime: Option<String>,
    /// The computed columns (`name AS expression`, SQL), by name: the last columns of
    /// `schema`, computed after the source reads a batch, not by the connector.
    pub computed: Vec<(String, String)>,
}

impl TableDef {
    /// The table as its connector sees it: without the processing-time and computed columns
    /// (and without an event time computed after it).
    pub fn connector_view(&self) -> ConnectorTable {
        let computed = |name: &str| self.computed.iter().any(|(column, _)| column == name);
        let fields = self
            .schema
            .fields()
            .iter()
            .filter(|f| Some(f.name()) != self.proctime.as_ref() && !computed(f.name()))
            .cloned()
            .collect::<Vec<_>>();
        ConnectorTable {
            name: self.name.clone(),
            schema: std::sync::Arc::new(datafusion::arrow::datatypes::Schema::new(fields)),
            options: self.connector.clone(),
            event_time: self.event_time.clone().filter(|(column, _)| !computed(column)),
        }
    }

    /// The table as an INSERT writes it: the connector's view without the columns it only
    /// reads (Flink's VIRTUAL metadata columns, the option `virtual_columns`).
    pub fn sink_view(&self) -> ConnectorTable {
        let mut table = self.connector_view();
        let read_only = self.connector.list(crate::metadata_columns::VIRTUAL_OPTION);
        if !read_only.is_empty() {
            let fields = table.schema.fields().iter().filter(|f| !read_only.contains(f.name())).cloned();
            table.schema = std::sync::Arc::new(datafusion::arrow::datatypes::Schema::new(fields.collect::<Vec<_>>()));
        }
        table
    }

    /// The columns the source stage gives: the connector's and the processing time.
    pub fn read_schema(&self) -> SchemaRef {
        let width = self.schema.fields().len() - self.computed.len();
        std::sync::Arc::new(datafusion::arrow::datatypes::Schema::new(self.schema.fields()[..width].to_vec()))
    }
}

/// A view: a named query, planned where it is used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ViewDef {
    pub name: String,
    pub query: String,
    /// How its query's unquoted names are read: as when it was created.
    pub identifiers: crate::identifiers::IdentifierCase,
}

#[derive(Debug, Clone, Default)]
pub struct Catalog {
    pub tables: BTreeMap<String, TableDef>,
    pub views: BTreeMap<String, ViewDef>,
}

impl Catalog {
    pub fn contains(&self, name: &str) -> bool {
        self.tables.contains_key(name) || self.views.contains_key(name)
    }
}
