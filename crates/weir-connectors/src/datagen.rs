//! `connector = 'datagen'`: Flink's data generator, rows of random or sequential values for
//! the table's declared columns, with Flink's options: `rows-per-second` (10000),
//! `number-of-rows` (unbounded without it), and per column `fields.<column>.kind` (`random`,
//! or `sequence` from `.start` to `.end`, which then bounds the rows), `.min` / `.max` (numbers),
//! `.length` (text, 100), `.max-past` (timestamps: up to that far before the source started)
//! and `.null-rate`. Row n is a function of (`seed`, n) alone (`replayable_random.rs`) and
//! rows are split, paced and checkpointed as the Nexmark generator's (`generated_source.rs`),
//! so a restore goes on exactly where the checkpoint was, at any parallelism up to `splits`.
//! Nested, binary and interval columns are refused at CREATE TABLE, naming the column.

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, BooleanArray, Float64Array, Int64Array, TimestampMillisecondArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::arrow::error::ArrowError;
use datafusion::arrow::record_batch::RecordBatch;

use crate::connector::{Connector, ConnectorTable, NodeContext, PlannedSource, SourceRows};
use crate::generated_source::{GeneratedSource, Pacing, RowGenerator};
use crate::options::{ANY_COUNT, ConnectorOptions, Kind, OptionSpec, option, parse_duration};
use crate::replayable_random::Random;
use crate::{Error, Result, plan_err};

pub struct DatagenConnector;

const OPTIONS: &[OptionSpec] = &[
    option("rows-per-second", Kind::Integer { min: 1, max: u64::MAX }),
    option("number-of-rows", ANY_COUNT),
    option("splits", Kind::Integer { min: 1, max: 1024 }),
    option("seed", ANY_COUNT),
];

/// The properties a column's `fields.<column>.` options may set.
const FIELD_PROPERTIES: &[&str] = &["kind", "min", "max", "max-past", "length", "start", "end", "null-rate"];

/// How one column's values are made.
#[derive(Debug, Clone, PartialEq)]
enum Values {
    /// `start + n`, as the column's type (numbers, or their text).
    Sequence {
        start: i64,
    },
    Integer {
        min: i64,
        max: i64,
    },
    Float {
        min: f64,
        max: f64,
    },
    Text {
        length: usize,
    },
    Boolean,
    /// Milliseconds before the start, up to `max_past`.
    Time {
        max_past: i64,
    },
}

#[derive(Debug, Clone, PartialEq)]
struct Column {
    values: Values,
    null_rate: f64,
}

/// The generator of a datagen table's rows.
#[derive(Debug, Clone)]
pub struct DatagenGenerator {
    schema: SchemaRef,
    columns: Vec<Column>,
    pacing: Pacing,
    seed: u64,
    /// What random times count back from: when the table was planned.
    started_ms: i64,
}

/// The `fields.<column>.<property>` option of a table, if given.
fn field<'a>(options: &'a ConnectorOptions, column: &str, property: &str) -> Option<&'a str> {
    options.get(&format!("fields.{column}.{property}"))
}

impl DatagenGenerator {
    /// The generator `table` asks for; the error names the option or column that does not fit.
    fn of(table: &ConnectorTable) -> Result<Self> {
        let options = &table.options;
        let name = &table.name;
        let fail = |message: String| Error::Plan(format!("table '{name}': {message}"));
        for key in options.values.keys().filter(|k| k.starts_with("fields.")) {
            let known = table.schema.fields().iter().any(|f| {
                key.strip_prefix(&format!("fields.{}.", f.name())).is_some_and(|p| FIELD_PROPERTIES.contains(&p))
            });
            if !known {
                return Err(fail(format!(
                    "option '{key}' is not fields.<column>.<property> of a column, the property one of {}",
                    FIELD_PROPERTIES.join(", ")
                )));
            }
        }
        let number = |column: &str, property: &str| -> Result<Option<f64>> {
            field(options, column, property)
                .map(|v| {
                    v.trim()
                        .parse::<f64>()
                        .map_err(|_| fail(format!("'fields.{column}.{property}' = '{v}' is not a number")))
                })
                .transpose()
        };
        let mut rows = options.get("number-of-rows").and_then(|v| v.parse::<u64>().ok());
        let mut columns = Vec::new();
        for f in table.schema.fields() {
            let column = f.name().as_str();
            let data_type = f.data_type();
            let values = match field(options, column, "kind").unwrap_or("random") {
                "sequence" => {
                    let (Some(start), Some(end)) = (number(column, "start")?, number(column, "end")?) else {
                        return Err(fail(format!(
                            "column '{column}' is a sequence: give 'fields.{column}.start' and 'fields.{column}.end'"
                        )));
                    };
                    if !(data_type.is_integer() || matches!(data_type, DataType::Utf8 | DataType::LargeUtf8)) {
                        return Err(fail(format!(
                            "column '{column}' is {data_type}: a sequence is of integers or their text"
                        )));
                    }
                    let count = (end - start + 1.0).max(0.0) as u64;
                    rows = Some(rows.map_or(count, |r| r.min(count)));
                    Values::Sequence { start: start as i64 }
                }
                "random" => match data_type {
                    t if t.is_integer() => {
                        // By default the type's range (Flink's), within i64.
                        let (low, high) = match t {
                            DataType::Int8 => (i8::MIN as f64, i8::MAX as f64),
                            DataType::Int16 => (i16::MIN as f64, i16::MAX as f64),
                            DataType::Int32 => (i32::MIN as f64, i32::MAX as f64),
                            DataType::UInt8 => (0.0, u8::MAX as f64),
                            DataType::UInt16 => (0.0, u16::MAX as f64),
                            DataType::UInt32 => (0.0, u32::MAX as f64),
                            _ => (i64::MIN as f64, i64::MAX as f64),
                        };
                        let (min, max) =
                            (number(column, "min")?.unwrap_or(low), number(column, "max")?.unwrap_or(high));
                        Values::Integer { min: min as i64, max: max as i64 }
                    }
                    t if t.is_floating() || matches!(t, DataType::Decimal128(..) | DataType::Decimal256(..)) => {
                        let (min, max) =
                            (number(column, "min")?.unwrap_or(0.0), number(column, "max")?.unwrap_or(1_000_000.0));
                        Values::Float { min, max }
                    }
                    DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => {
                        Values::Text { length: number(column, "length")?.unwrap_or(100.0) as usize }
                    }
                    DataType::Boolean => Values::Boolean,
                    DataType::Timestamp(..) | DataType::Date32 | DataType::Date64 => {
                        let max_past = match field(options, column, "max-past") {
                            Some(text) => {
                                parse_duration(text).map_err(|e| fail(format!("'fields.{column}.max-past': {e}")))?
                            }
                            None => std::time::Duration::ZERO,
                        };
                        Values::Time { max_past: i64::try_from(max_past.as_millis()).unwrap_or(i64::MAX) }
                    }
                    other => {
                        return Err(fail(format!("column '{column}' is {other}, which datagen does not generate")));
                    }
                },
                other => return Err(fail(format!("'fields.{column}.kind' = '{other}' is not 'random' or 'sequence'"))),
            };
            let null_rate = number(column, "null-rate")?.unwrap_or(0.0);
            if !(0.0..=1.0).contains(&null_rate) {
                return Err(fail(format!("'fields.{column}.null-rate' must be between 0 and 1")));
            }
            columns.push(Column { values, null_rate });
        }
        Ok(Self {
            schema: table.schema.clone(),
            columns,
            pacing: Pacing {
                rate: options.integer("rows-per-second", 10_000),
                as_fast_as_possible: false,
                rows,
                splits: u32::try_from(options.integer("splits", 4)).unwrap_or(4),
                batch_size: 1024,
            },
            seed: options.integer("seed", 0),
            started_ms: weir_engine::operators::state_ttl::now_ms(),
        })
    }
}

impl RowGenerator for DatagenGenerator {
    fn name(&self) -> &'static str {
        "datagen"
    }

    fn pacing(&self) -> Pacing {
        self.pacing
    }

    fn batch(&self, rows: &[u64]) -> std::result::Result<RecordBatch, ArrowError> {
        let mut arrays: Vec<ArrayRef> = Vec::with_capacity(self.columns.len());
        for (index, (column, field)) in self.columns.iter().zip(self.schema.fields()).enumerate() {
            // Each column draws from its own generator of (seed, row), so adding a column
            // changes no other column's values.
            // Row n's first draw decides NULL (by the null rate); its value comes from the rest.
            let draw = |n: u64| {
                let mut random = Random::for_row(self.seed ^ (index as u64).wrapping_mul(0xA24B_AED4_963E_E407), n);
                let null = random.unit() < column.null_rate;
                (!null).then_some(random)
            };
            let array: ArrayRef = match &column.values {
                Values::Sequence { start } => {
                    Arc::new(rows.iter().map(|&n| draw(n).map(|_| *start + n as i64)).collect::<Int64Array>())
                }
                Values::Integer { min, max } => {
                    let span = (*max as i128 - *min as i128 + 1).max(1) as u128;
                    let value = |mut d: Random| (*min as i128 + (u128::from(d.next()) % span) as i128) as i64;
                    Arc::new(rows.iter().map(|&n| draw(n).map(value)).collect::<Int64Array>())
                }
                Values::Float { min, max } => Arc::new(
                    rows.iter().map(|&n| draw(n).map(|mut d| min + d.unit() * (max - min))).collect::<Float64Array>(),
                ),
                Values::Text { length } => {
                    let mut builder = datafusion::arrow::array::StringBuilder::new();
                    for &n in rows {
                        let Some(mut d) = draw(n) else {
                            builder.append_null();
                            continue;
                        };
                        d.write_letters(&mut builder, *length).map_err(|e| ArrowError::ComputeError(e.to_string()))?;
                        builder.append_value("");
                    }
                    Arc::new(builder.finish())
                }
                Values::Boolean => {
                    Arc::new(rows.iter().map(|&n| draw(n).map(|mut d| d.next() & 1 == 1)).collect::<BooleanArray>())
                }
                Values::Time { max_past } => {
                    let value = |mut d: Random| {
                        let back = if *max_past > 0 { (d.next() % (*max_past as u64 + 1)) as i64 } else { 0 };
                        self.started_ms - back
                    };
                    Arc::new(rows.iter().map(|&n| draw(n).map(value)).collect::<TimestampMillisecondArray>())
                }
            };
            // A text sequence is the numbers' text; the rest casts to the column's type.
            arrays.push(cast(&array, field.data_type())?);
        }
        RecordBatch::try_new(self.schema.clone(), arrays)
    }
}

impl Connector for DatagenConnector {
    fn name(&self) -> &'static str {
        "datagen"
    }

    fn options(&self) -> &'static [OptionSpec] {
        OPTIONS
    }

    /// `fields.<column>.<property>`: checked against the columns by [`Connector::check`].
    fn pass_through(&self) -> Option<&'static str> {
        Some("fields.")
    }

    fn check(&self, table: &ConnectorTable) -> Result<()> {
        DatagenGenerator::of(table).map(|_| ())
    }

    fn bounded(&self, table: &ConnectorTable) -> bool {
        table.options.get("number-of-rows").is_some()
    }

    fn reading(&self, table: &ConnectorTable) -> String {
        let rows = match table.options.get("number-of-rows") {
            Some(rows) => format!("{rows} rows"),
            None => "rows without end".to_string(),
        };
        format!("{}: datagen, {rows} at {} rows/s", table.name, table.options.get("rows-per-second").unwrap_or("10000"))
    }

    fn source(&self, table: &ConnectorTable, _: usize, _: NodeContext<'_>) -> Result<PlannedSource> {
        if table.schema.fields().is_empty() {
            return plan_err!("table '{}': a datagen table needs columns", table.name);
        }
        let generator = DatagenGenerator::of(table)?;
        Ok(PlannedSource {
            factory: Arc::new(move |_| Ok(Box::new(GeneratedSource::new(generator.clone())))),
            state: "the next row number of each split".into(),
            assigns_watermarks: false,
            rows: SourceRows::Appends,
            preflight: Vec::new(),
            transactional_prefixes: Vec::new(),
        })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use datafusion::arrow::array::{Array, StringArray};
    use datafusion::arrow::datatypes::{Field, Schema, TimeUnit};

    use super::*;

    fn table(pairs: &[(&str, &str)]) -> ConnectorTable {
        let values: BTreeMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        ConnectorTable {
            name: "gen".into(),
            schema: Arc::new(Schema::new(vec![
                Field::new("id", DataType::Int64, true),
                Field::new("score", DataType::Int32, true),
                Field::new("name", DataType::Utf8, true),
                Field::new("at", DataType::Timestamp(TimeUnit::Millisecond, None), true),
            ])),
            options: ConnectorOptions { connector: "datagen".into(), values },
            event_time: None,
        }
    }

    #[test]
    fn rows_follow_flinks_field_options_and_replay_the_same() {
        let table = table(&[
            ("fields.id.kind", "sequence"),
            ("fields.id.start", "10"),
            ("fields.id.end", "19"),
            ("fields.score.min", "1"),
            ("fields.score.max", "6"),
            ("fields.name.length", "5"),
            ("fields.name.null-rate", "0.5"),
            ("fields.at.max-past", "1 h"),
        ]);
        let generator = DatagenGenerator::of(&table).unwrap();
        assert_eq!(generator.pacing().rows, Some(10), "the sequence bounds the rows");
        let batch = generator.batch(&(0..10).collect::<Vec<_>>()).unwrap();
        let ids = batch.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
        assert_eq!(ids.values().to_vec(), (10..20).collect::<Vec<_>>());
        let scores = cast(batch.column(1), &DataType::Int64).unwrap();
        let scores = scores.as_any().downcast_ref::<Int64Array>().unwrap();
        assert!(scores.iter().all(|s| s.is_some_and(|s| (1..=6).contains(&s))), "{scores:?}");
        let names = batch.column(2).as_any().downcast_ref::<StringArray>().unwrap();
        assert!(names.iter().flatten().all(|n| n.len() == 5));
        assert!((1..10).contains(&names.null_count()), "about half are NULL: {}", names.null_count());
        let times = batch.column(3).as_any().downcast_ref::<TimestampMillisecondArray>().unwrap();
        assert!(times.iter().flatten().all(|t| t <= generator.started_ms && t >= generator.started_ms - 3_600_000));
        let again = generator.batch(&[3, 7]).unwrap();
        let expected =
            datafusion::arrow::compute::concat_batches(&batch.schema(), &[batch.slice(3, 1), batch.slice(7, 1)])
                .unwrap();
        assert_eq!(again, expected, "a row is the same whenever it is made");
    }

    #[test]
    fn what_datagen_cannot_make_is_refused_by_name() {
        let error = |pairs: &[(&str, &str)]| DatagenGenerator::of(&table(pairs)).unwrap_err().to_string();
        assert!(error(&[("fields.id.kind", "sequence")]).contains("give 'fields.id.start' and 'fields.id.end'"));
        assert!(
            error(&[("fields.nope.min", "1")]).contains("option 'fields.nope.min' is not fields.<column>.<property>")
        );
        assert!(error(&[("fields.id.kind", "zipf")]).contains("is not 'random' or 'sequence'"));
        assert!(error(&[("fields.id.null-rate", "2")]).contains("between 0 and 1"));
    }
}
