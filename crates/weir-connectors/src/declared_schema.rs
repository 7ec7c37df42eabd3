//! The columns a table declares over a connector that makes its own (the Nexmark generator),
//! as a Flink table declares them: Flink's Nexmark DDL writes `person ROW<id BIGINT,
//! emailAddress VARCHAR, ...>` over the generator's `person.email_address`. Declared columns and
//! struct fields are matched to the connector's by name, ignoring case and underscores, in the
//! declared order; any subset may be declared; the types must be the same.

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::{Array, ArrayRef, AsArray, StructArray};
use datafusion::arrow::datatypes::{DataType, FieldRef, Fields, Schema, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;

use weir_engine::SubtaskInfo;
use weir_engine::operator::{RestoredState, Source, SourceEvent, StateTable};

use crate::{Result, plan_err};

/// How a connector's batches become the declared columns.
#[derive(Debug, Clone)]
pub struct Conform {
    columns: Vec<Pick>,
    schema: SchemaRef,
}

/// One declared column or field: the connector's at `index`, and for a struct its fields.
#[derive(Debug, Clone)]
struct Pick {
    index: usize,
    field: FieldRef,
    children: Option<Vec<Pick>>,
}

/// Names equal ignoring case and underscores: `emailAddress`, `emailaddress`, `email_address`.
pub fn same_name(a: &str, b: &str) -> bool {
    let key = |s: &str| s.chars().filter(|c| *c != '_').flat_map(char::to_lowercase).collect::<String>();
    key(a) == key(b)
}

/// How `produced` (the connector's columns) gives `declared` (table `table`'s); an error names
/// a declared column the connector does not have, or one of another type.
pub fn conform(table: &str, produced: &Schema, declared: &Schema) -> Result<Conform> {
    let columns = picks(table, "", produced.fields(), declared.fields())?;
    Ok(Conform { columns, schema: Arc::new(declared.clone()) })
}

fn picks(table: &str, path: &str, produced: &Fields, declared: &Fields) -> Result<Vec<Pick>> {
    declared
        .iter()
        .map(|field| {
            let name = format!("{path}{}", field.name());
            let Some((index, source)) = produced.iter().enumerate().find(|(_, f)| same_name(f.name(), field.name()))
            else {
                let known: Vec<&str> = produced.iter().map(|f| f.name().as_str()).collect();
                return plan_err!(
                    "table '{table}': its connector has a fixed schema, with no column '{name}' (declare some of {}, or none)",
                    known.join(", ")
                );
            };
            let children = match (source.data_type(), field.data_type()) {
                (DataType::Struct(inner), DataType::Struct(wanted)) => {
                    Some(picks(table, &format!("{name}."), inner, wanted)?)
                }
                (given, wanted) if given == wanted => None,
                (given, wanted) => {
                    return plan_err!("table '{table}': column '{name}' is {given} from the connector, not {wanted}");
                }
            };
            Ok(Pick { index, field: field.clone(), children })
        })
        .collect()
}

impl Conform {
    /// Whether the declared columns are the connector's own, as they are.
    pub fn is_identity(&self, produced: &Schema) -> bool {
        produced == self.schema.as_ref()
    }

    /// `batch` (the connector's columns) as the declared columns.
    pub fn apply(&self, batch: &RecordBatch) -> Result<RecordBatch> {
        let columns = self.columns.iter().map(|pick| pick.apply(batch.column(pick.index))).collect::<Result<_>>()?;
        Ok(RecordBatch::try_new(self.schema.clone(), columns)?)
    }
}

/// A source whose batches are conformed to the declared columns.
pub struct Conformed {
    pub inner: Box<dyn Source>,
    pub conform: Conform,
}

#[async_trait]
impl Source for Conformed {
    async fn open(&mut self, info: &SubtaskInfo, restored: RestoredState) -> weir_engine::Result<()> {
        self.inner.open(info, restored).await
    }

    async fn next(&mut self) -> weir_engine::Result<SourceEvent> {
        Ok(match self.inner.next().await? {
            SourceEvent::Batch(batch) => {
                SourceEvent::Batch(self.conform.apply(&batch).map_err(|e| weir_engine::Error::Graph(e.to_string()))?)
            }
            other => other,
        })
    }

    async fn snapshot(&mut self, checkpoint_id: u64) -> weir_engine::Result<Vec<StateTable>> {
        self.inner.snapshot(checkpoint_id).await
    }

    async fn checkpoint_complete(&mut self, checkpoint_id: u64) -> weir_engine::Result<()> {
        self.inner.checkpoint_complete(checkpoint_id).await
    }

    async fn checkpoint_aborted(&mut self, checkpoint_id: u64) -> weir_engine::Result<()> {
        self.inner.checkpoint_aborted(checkpoint_id).await
    }

    async fn close(&mut self) -> weir_engine::Result<()> {
        self.inner.close().await
    }
}

impl Pick {
    fn apply(&self, column: &ArrayRef) -> Result<ArrayRef> {
        let Some(children) = &self.children else { return Ok(column.clone()) };
        let DataType::Struct(fields) = self.field.data_type() else { return Ok(column.clone()) };
        let parent = column.as_struct();
        let arrays =
            children.iter().map(|child| child.apply(parent.column(child.index))).collect::<Result<Vec<_>>>()?;
        Ok(Arc::new(StructArray::try_new(fields.clone(), arrays, parent.nulls().cloned())?))
    }
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::{Int64Array, StringArray};
    use datafusion::arrow::datatypes::Field;

    use super::*;

    #[test]
    fn declared_names_pick_the_connectors_columns_and_fields_in_the_declared_order() {
        let inner = Fields::from(vec![
            Field::new("id", DataType::Int64, true),
            Field::new("email_address", DataType::Utf8, true),
        ]);
        let produced = Schema::new(vec![
            Field::new("event_type", DataType::Int64, false),
            Field::new("person", DataType::Struct(inner.clone()), true),
        ]);
        let person = StructArray::try_new(
            inner,
            vec![Arc::new(Int64Array::from(vec![7])), Arc::new(StringArray::from(vec!["a@b"]))],
            None,
        )
        .unwrap();
        let batch = RecordBatch::try_new(
            Arc::new(produced.clone()),
            vec![Arc::new(Int64Array::from(vec![0])), Arc::new(person)],
        )
        .unwrap();
        let declared = Schema::new(vec![Field::new(
            "person",
            DataType::Struct(Fields::from(vec![Field::new("emailAddress", DataType::Utf8, true)])),
            true,
        )]);
        let conformed = conform("t", &produced, &declared).unwrap().apply(&batch).unwrap();
        assert_eq!(conformed.schema().as_ref(), &declared);
        let fields = conformed.column(0).as_struct();
        assert_eq!(fields.column(0).as_string::<i32>().value(0), "a@b");

        let missing = Schema::new(vec![Field::new("nope", DataType::Int64, true)]);
        let error = conform("t", &produced, &missing).unwrap_err().to_string();
        assert!(
            error.contains("fixed schema, with no column 'nope' (declare some of event_type, person, or none)"),
            "{error}"
        );
        let wrong = Schema::new(vec![Field::new("event_type", DataType::Utf8, true)]);
        let error = conform("t", &produced, &wrong).unwrap_err().to_string();
        assert!(error.contains("column 'event_type' is Int64 from the connector, not Utf8"), "{error}");
    }
}
