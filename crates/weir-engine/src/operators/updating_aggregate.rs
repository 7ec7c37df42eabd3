//! A non-windowed `GROUP BY`: an updating aggregate. Its output is a changelog
//! ([`crate::changelog`]): after each input batch, every group it touched emits `+I` when it is
//! new, `-U` old / `+U` new when its values changed, and `-D` when a retracting input emptied it.
//! A changelog input is aggregated with `retract_batch`, by the accumulators DataFusion makes
//! for sliding window frames (the planner only allows functions whose sliding form takes back
//! any row), and min, max and DISTINCT counts by [`ValueCounts`]. With a time-to-live, groups
//! not touched for that long (processing time, as Flink's state TTL) are forgotten without
//! output: a later row for the key starts afresh.
//!
//! The snapshot holds each group's accumulator state, row count and last access, keyed by the
//! hash of the group columns (the input's partitioning).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use datafusion::arrow::array::{Array, ArrayRef, Int64Array};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::{ScalarValue, exec_err};
use datafusion::logical_expr::Accumulator;
use datafusion::physical_expr::aggregate::AggregateFunctionExpr;

use crate::changelog::{Change, change_array, changes};
use crate::error::{Error, Result};
use crate::operator::{Collector, Operator, RestoredState, StateTable};
use crate::operators::accumulators::{self, AggregateCall};
use crate::operators::state_ttl::{StateTtl, now_ms};
use crate::operators::value_counts::{Reported, ValueCounts};
use crate::operators::window_aggregate::ALL_IN_ONE;
use crate::partition::key_hashes;
use crate::state_table::KeyedTable;

const GROUPS: &str = "groups";

/// What a [`ValueCounts`] reports for `aggregate` over a changelog, if it takes its place:
/// min and max, and DISTINCT counts of one argument.
fn value_counts_for(aggregate: &AggregateFunctionExpr) -> Option<Reported> {
    match aggregate.fun().name().to_lowercase().as_str() {
        "min" => Some(Reported::Min),
        "max" => Some(Reported::Max),
        "count" if aggregate.is_distinct() && aggregate.expressions().len() == 1 => Some(Reported::DistinctCount),
        _ => None,
    }
}
const ROWS: &str = "__rows";
const LAST_ACCESS: &str = "__last_access_ms";

struct Group {
    accumulators: Vec<Box<dyn Accumulator>>,
    /// Input rows in the group (inserts less retractions).
    rows: i64,
    /// The aggregate values last emitted.
    emitted: Option<Vec<ScalarValue>>,
    /// Wall-clock milliseconds of the last row, for the time-to-live.
    last_access_ms: i64,
}

pub struct UpdatingAggregate {
    /// The group columns' names in the input (none for a global aggregate).
    group_columns: Vec<String>,
    aggregates: Vec<AggregateCall>,
    /// Group columns, aggregates, then the change column.
    output: SchemaRef,
    ttl: StateTtl,
    /// The input is a changelog: use accumulators that can take rows back.
    retracting: bool,
    groups: HashMap<Vec<ScalarValue>, Group>,
}

impl Clone for UpdatingAggregate {
    /// A fresh instance with the same plan.
    fn clone(&self) -> Self {
        Self::new(
            self.group_columns.clone(),
            self.aggregates.clone(),
            self.output.clone(),
            self.ttl.ttl(),
            self.retracting,
        )
    }
}

impl UpdatingAggregate {
    pub fn new(
        group_columns: Vec<String>,
        aggregates: Vec<AggregateCall>,
        output: SchemaRef,
        ttl: Option<Duration>,
        retracting: bool,
    ) -> Self {
        Self { group_columns, aggregates, output, ttl: StateTtl::new(ttl), retracting, groups: HashMap::new() }
    }

    /// Whether `aggregate` can aggregate a changelog: its retracting accumulator must take
    /// back any row, not only the oldest. DataFusion's sliding accumulators are built for
    /// window frames, which retract in arrival order; those whose state is a sum (count, sum,
    /// avg, variances) are right for any order. Min and max (a queue of candidates there) and
    /// DISTINCT counts (right in any order, but whose state forgets how many rows held a value)
    /// use [`ValueCounts`] instead. So: those functions only.
    pub fn can_retract(aggregate: &AggregateFunctionExpr) -> Result<bool> {
        const ANY_ORDER: &[&str] =
            &["count", "sum", "avg", "mean", "stddev", "stddev_pop", "var", "var_samp", "var_pop", "regr_count"];
        let function = aggregate.fun().name().to_lowercase();
        if value_counts_for(aggregate).is_some() {
            return Ok(true);
        }
        Ok(ANY_ORDER.contains(&function.as_str()) && aggregate.create_sliding_accumulator()?.supports_retract_batch())
    }

    /// The columns the input is partitioned by.
    pub fn partition_columns(group_columns: &[String]) -> Vec<String> {
        if group_columns.is_empty() { vec![ALL_IN_ONE.to_string()] } else { group_columns.to_vec() }
    }

    fn accumulators(&self) -> Result<Vec<Box<dyn Accumulator>>> {
        let create = |a: &AggregateCall| -> datafusion::error::Result<Box<dyn Accumulator>> {
            let function = &a.function;
            match (self.retracting, value_counts_for(function)) {
                (true, Some(reported)) => {
                    // The values counted are the argument's: min/max return their type, a
                    // distinct count's state is a list of them.
                    let data_type = match reported {
                        Reported::DistinctCount => match function.state_fields()?.first().map(|f| f.data_type()) {
                            Some(DataType::List(values)) => values.data_type().clone(),
                            other => return exec_err!("count(DISTINCT) has a state of {other:?}, not a list"),
                        },
                        _ => function.field().data_type().clone(),
                    };
                    Ok(Box::new(ValueCounts::new(reported, data_type)?))
                }
                (true, None) => function.create_sliding_accumulator(),
                (false, _) => function.create_accumulator(),
            }
        };
        Ok(self.aggregates.iter().map(create).collect::<datafusion::error::Result<_>>()?)
    }

    /// The types of each accumulator's state, as a fresh one reports it (sliding accumulators
    /// keep more than `state_fields` says).
    /// The groups table: the group columns, the row count and last access, then each
    /// accumulator's state columns; with the number of state columns of each accumulator.
    fn groups_table(&self) -> Result<(KeyedTable, Vec<usize>)> {
        let mut fields = Vec::new();
        for (i, name) in self.group_columns.iter().enumerate() {
            fields.push(Field::new(name, self.output.field(i).data_type().clone(), true));
        }
        fields.push(Field::new(ROWS, DataType::Int64, false));
        fields.push(Field::new(LAST_ACCESS, DataType::Int64, false));
        let widths = accumulators::push_state_fields(&mut fields, self.accumulators()?)?;
        Ok((KeyedTable::new(fields), widths))
    }

    /// Forgets groups idle for longer than the time-to-live (checked every half of it).
    fn expire(&mut self, now: i64) {
        let Some(oldest) = self.ttl.sweep_due(now) else { return };
        self.groups.retain(|_, group| group.last_access_ms >= oldest);
    }

    fn emit(&self, rows: Vec<(Change, Vec<ScalarValue>)>, out: &mut Collector) -> Result<()> {
        if rows.is_empty() {
            return Ok(());
        }
        let (kinds, rows): (Vec<Change>, Vec<Vec<ScalarValue>>) = rows.into_iter().unzip();
        let width = self.output.fields().len() - 1;
        let mut columns = accumulators::columns(&rows, &self.output.fields()[..width])?;
        columns.push(change_array(&kinds));
        out.emit(RecordBatch::try_new(self.output.clone(), columns)?);
        Ok(())
    }
}

#[async_trait]
impl Operator for UpdatingAggregate {
    async fn open(&mut self, _info: &crate::SubtaskInfo, restored: RestoredState) -> Result<()> {
        let keys = self.group_columns.len();
        let (table, widths) = self.groups_table()?;
        let fields = table.fields();
        for batch in restored.table(GROUPS) {
            let key_columns = table.read(batch, &fields[..keys])?;
            let counters = table.read(batch, &fields[keys..keys + 2])?;
            let states = table.read(batch, &fields[keys + 2..])?;
            let int = |column: &ArrayRef| {
                column
                    .as_any()
                    .downcast_ref::<Int64Array>()
                    .cloned()
                    .ok_or_else(|| Error::Graph("restored state: a counter column is not Int64".into()))
            };
            let (counts, accesses) = (int(&counters[0])?, int(&counters[1])?);
            for row in 0..batch.num_rows() {
                let key = accumulators::row_values(&key_columns, row)?;
                let mut accumulators = self.accumulators()?;
                accumulators::restore_row(&mut accumulators, &states, &widths, row)?;
                // Every batch's changes were emitted before the snapshot: the emitted values
                // are the current ones.
                let emitted =
                    accumulators.iter_mut().map(|a| a.evaluate()).collect::<datafusion::error::Result<_>>()?;
                let group = Group {
                    accumulators,
                    rows: counts.value(row),
                    emitted: Some(emitted),
                    last_access_ms: accesses.value(row),
                };
                self.groups.insert(key, group);
            }
        }
        Ok(())
    }

    async fn process_batch(&mut self, _input: usize, batch: RecordBatch, out: &mut Collector) -> Result<()> {
        let now = now_ms();
        self.expire(now);
        let kinds = changes(&batch)?;
        let key_columns: Vec<ArrayRef> = self
            .group_columns
            .iter()
            .map(|c| {
                batch.column_by_name(c).cloned().ok_or_else(|| Error::Graph(format!("group column '{c}' is missing")))
            })
            .collect::<Result<_>>()?;
        let arguments = accumulators::arguments(&self.aggregates, &batch)?;
        // Rows of each group, in first-seen order (so the output order follows the input),
        // split into added and retracted.
        let mut order: Vec<Vec<ScalarValue>> = Vec::new();
        let mut rows_of: HashMap<Vec<ScalarValue>, (Vec<u32>, Vec<u32>)> = HashMap::new();
        for (row, kind) in kinds.iter().enumerate() {
            let key: Vec<ScalarValue> = key_columns
                .iter()
                .map(|c| ScalarValue::try_from_array(c, row))
                .collect::<datafusion::error::Result<_>>()?;
            let entry = rows_of.entry(key.clone()).or_insert_with(|| {
                order.push(key);
                (Vec::new(), Vec::new())
            });
            if kind.is_retraction() { entry.1.push(row as u32) } else { entry.0.push(row as u32) }
        }
        let mut output = Vec::new();
        for key in order {
            let Some((added, retracted)) = rows_of.remove(&key) else { continue };
            if !self.groups.contains_key(&key) {
                if added.is_empty() {
                    continue; // retracting a group that expired or never was: nothing to take back
                }
                let accumulators = self.accumulators()?;
                self.groups.insert(key.clone(), Group { accumulators, rows: 0, emitted: None, last_access_ms: now });
            }
            let Some(group) = self.groups.get_mut(&key) else { continue };
            for (indices, retract) in [(added, false), (retracted, true)] {
                if indices.is_empty() {
                    continue;
                }
                group.rows += if retract { -(indices.len() as i64) } else { indices.len() as i64 };
                accumulators::feed(&mut group.accumulators, &arguments, &indices, retract)?;
            }
            group.last_access_ms = now;
            let row_of = |values: &[ScalarValue]| key.iter().chain(values).cloned().collect::<Vec<_>>();
            if group.rows <= 0 {
                if let Some(old) = &group.emitted {
                    output.push((Change::Delete, row_of(old)));
                }
                self.groups.remove(&key);
                continue;
            }
            let new: Vec<ScalarValue> =
                group.accumulators.iter_mut().map(|a| a.evaluate()).collect::<datafusion::error::Result<_>>()?;
            match &group.emitted {
                None => output.push((Change::Insert, row_of(&new))),
                Some(old) if *old != new => {
                    output.push((Change::UpdateBefore, row_of(old)));
                    output.push((Change::UpdateAfter, row_of(&new)));
                }
                Some(_) => {}
            }
            group.emitted = Some(new);
        }
        self.emit(output, out)
    }

    async fn process_watermark(&mut self, _watermark: i64, _out: &mut Collector) -> Result<()> {
        // Updating results carry no event time on: later rows may change any group.
        Ok(())
    }

    async fn snapshot(&mut self, _checkpoint_id: u64) -> Result<Vec<StateTable>> {
        let (table, _) = self.groups_table()?;
        let schema = table.schema().clone();
        if self.groups.is_empty() {
            return Ok(vec![StateTable {
                name: GROUPS.into(),
                schema: schema.clone(),
                batches: vec![RecordBatch::new_empty(schema)],
            }]);
        }
        let mut rows: Vec<Vec<ScalarValue>> = Vec::new();
        let fresh = (0..self.groups.len()).map(|_| self.accumulators()).collect::<Result<Vec<_>>>()?;
        for ((key, group), fresh) in self.groups.iter_mut().zip(fresh) {
            let mut row = key.clone();
            row.push(ScalarValue::Int64(Some(group.rows)));
            row.push(ScalarValue::Int64(Some(group.last_access_ms)));
            row.extend(accumulators::snapshot_states(&mut group.accumulators, fresh)?);
            rows.push(row);
        }
        let columns = accumulators::columns(&rows, &schema.fields()[1..])?;
        let partition = Self::partition_columns(&self.group_columns);
        let keyed = match self.group_columns.is_empty() {
            true => RecordBatch::try_new(
                Arc::new(Schema::new(vec![Field::new(ALL_IN_ONE, DataType::Int64, true)])),
                vec![Arc::new(Int64Array::from(vec![0; rows.len()]))],
            )?,
            false => RecordBatch::try_new(
                Arc::new(Schema::new(schema.fields()[1..=self.group_columns.len()].to_vec())),
                columns[..self.group_columns.len()].to_vec(),
            )?,
        };
        let mut all: Vec<ArrayRef> = vec![Arc::new(key_hashes(&keyed, &partition)?)];
        all.extend(columns);
        Ok(vec![StateTable {
            name: GROUPS.into(),
            schema: schema.clone(),
            batches: vec![RecordBatch::try_new(schema, all)?],
        }])
    }
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::StringArray;
    use datafusion::functions_aggregate::sum::sum_udaf;
    use datafusion::physical_expr::aggregate::AggregateExprBuilder;
    use datafusion::physical_expr::expressions::col;

    use super::*;
    use crate::SubtaskInfo;
    use crate::changelog::{changelog_schema, changes};

    fn input(rows: &[(&str, i64)], kinds: Option<&[Change]>) -> RecordBatch {
        let mut fields = vec![Field::new("k", DataType::Utf8, false), Field::new("v", DataType::Int64, false)];
        let mut columns: Vec<ArrayRef> = vec![
            Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.0))),
            Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.1))),
        ];
        if let Some(kinds) = kinds {
            fields.push(Field::new(crate::changelog::CHANGE_COLUMN, DataType::Utf8, false));
            columns.push(change_array(kinds));
        }
        RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).unwrap()
    }

    fn sum_by_key(ttl: Option<Duration>) -> UpdatingAggregate {
        let schema = input(&[], None).schema();
        let sum = AggregateExprBuilder::new(sum_udaf(), vec![col("v", &schema).unwrap()])
            .schema(schema.clone())
            .alias("total")
            .build()
            .unwrap();
        let output =
            Schema::new(vec![Field::new("k", DataType::Utf8, true), Field::new("total", DataType::Int64, true)]);
        let sum = AggregateCall { function: Arc::new(sum), filter: None };
        UpdatingAggregate::new(vec!["k".into()], vec![sum], changelog_schema(&output), ttl, true)
    }

    /// The changes as "kind key value" lines.
    fn lines(out: &Collector) -> Vec<String> {
        let mut lines = Vec::new();
        for batch in &out.batches {
            let keys = batch.column(0).as_any().downcast_ref::<StringArray>().unwrap();
            let totals = batch.column(1).as_any().downcast_ref::<Int64Array>().unwrap();
            for (row, kind) in changes(batch).unwrap().into_iter().enumerate() {
                lines.push(format!("{} {} {}", kind.code(), keys.value(row), totals.value(row)));
            }
        }
        lines
    }

    async fn feed(aggregate: &mut UpdatingAggregate, batch: RecordBatch) -> Vec<String> {
        let mut out = Collector::default();
        aggregate.process_batch(0, batch, &mut out).await.unwrap();
        lines(&out)
    }

    #[tokio::test]
    async fn groups_are_inserted_updated_and_deleted_as_a_changelog() {
        let mut aggregate = sum_by_key(None);
        assert_eq!(feed(&mut aggregate, input(&[("a", 1), ("b", 2), ("a", 3)], None)).await, ["+I a 4", "+I b 2"]);
        assert_eq!(feed(&mut aggregate, input(&[("a", 5)], None)).await, ["-U a 4", "+U a 9"]);
        // A changelog input: taking back b's only row deletes the group.
        let retract = input(&[("b", 2), ("a", 1)], Some(&[Change::Delete, Change::UpdateBefore]));
        assert_eq!(feed(&mut aggregate, retract).await, ["-D b 2", "-U a 9", "+U a 8"]);
        // An unchanged value emits nothing.
        let same = input(&[("a", 0)], None);
        assert_eq!(feed(&mut aggregate, same).await, Vec::<String>::new());
    }

    #[tokio::test]
    async fn a_restored_aggregate_continues_from_the_values_it_had_emitted() {
        let mut aggregate = sum_by_key(None);
        feed(&mut aggregate, input(&[("a", 1), ("b", 2)], None)).await;
        let tables = aggregate.snapshot(1).await.unwrap();
        let mut restored = sum_by_key(None);
        let state =
            RestoredState { checkpoint_id: Some(1), tables: tables.into_iter().map(|t| (t.name, t.batches)).collect() };
        let info = SubtaskInfo::new("aggregate", 0, 1);
        restored.open(&info, state).await.unwrap();
        assert_eq!(feed(&mut restored, input(&[("a", 10)], None)).await, ["-U a 1", "+U a 11"]);
    }

    #[tokio::test]
    async fn groups_idle_longer_than_the_ttl_are_forgotten() {
        let mut aggregate = sum_by_key(Some(Duration::from_millis(20)));
        assert_eq!(feed(&mut aggregate, input(&[("a", 1)], None)).await, ["+I a 1"]);
        tokio::time::sleep(Duration::from_millis(60)).await;
        assert_eq!(feed(&mut aggregate, input(&[("a", 2)], None)).await, ["+I a 2"], "a starts afresh");
        assert_eq!(feed(&mut aggregate, input(&[("a", 3)], None)).await, ["-U a 2", "+U a 5"]);
    }
}
