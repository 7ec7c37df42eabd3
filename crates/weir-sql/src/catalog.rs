//! Tables and views a session knows.

use std::collections::BTreeMap;
use std::time::Duration;

use datafusion::arrow::datatypes::SchemaRef;

use crate::options::ConnectorOptions;

/// A table: its schema and where its records come from or go to.
#[derive(Debug, Clone, PartialEq)]
pub struct TableDef {
    pub name: String,
    pub schema: SchemaRef,
    pub connector: ConnectorOptions,
    /// The event-time column and its bounded out-of-orderness; `None`: processing time.
    pub event_time: Option<(String, Duration)>,
}

/// A view: a named query, planned where it is used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ViewDef {
    pub name: String,
    pub query: String,
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
