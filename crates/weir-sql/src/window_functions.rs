//! The window functions of GROUP BY: `tumble(ts, size)`, `hop(ts, slide, size)` and
//! `session(ts, gap)`, each standing for the start of the row's window. The streaming planner
//! turns them into window operators. `tumble` is also an ordinary function (the start of the
//! tumbling window `ts` falls in), so a tumbling query runs as a batch query too, which is how
//! tests check windows against batch answers; a row is in several hopping windows and a
//! session depends on other rows, so `hop` and `session` only work in a streaming GROUP BY.
//!
//! The window's end is `tumble_end`, `hop_end` or `session_end` in the SELECT list, with the
//! same arguments as the GROUP BY's window (as Flink's `TUMBLE_END`). They are aggregate
//! functions so that DataFusion accepts them beside the group keys; the window operator fills
//! them in from the window it emits, and outside a streaming window they fail.
//!
//! Flink's windowing table functions (`window_table_functions.rs`) are written with three more,
//! all ordinary functions, so those queries run as batch queries too: `descriptor(ts)` (the
//! time column itself; the planner requires it to be a time attribute), `hop_starts(ts, slide,
//! size)` (the starts of every hopping window holding `ts`, a list to unnest) and
//! `cumulate_ends(ts, step, size)` (the ends of every cumulating window holding `ts`). These
//! and `tumble` take an optional last argument, Flink's window offset: windows are aligned to
//! the epoch plus the offset (`INTERVAL '-8' HOUR` gives days of UTC+8).

use std::sync::Arc;

use datafusion::arrow::array::{
    Array, Int64Array, ListBuilder, TimestampMillisecondArray, TimestampMillisecondBuilder,
};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Field, TimeUnit};
use datafusion::common::{ScalarValue, exec_err};
use datafusion::logical_expr::function::AccumulatorArgs;
use datafusion::logical_expr::{
    Accumulator, AggregateUDF, AggregateUDFImpl, ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl,
    Signature, TypeSignature, Volatility,
};
use weir_engine::operators::window_start;

pub const TUMBLE: &str = "tumble";
pub const HOP: &str = "hop";
pub const SESSION: &str = "session";
pub const TUMBLE_END: &str = "tumble_end";
pub const HOP_END: &str = "hop_end";
pub const SESSION_END: &str = "session_end";
pub const DESCRIPTOR: &str = "descriptor";
pub const HOP_STARTS: &str = "hop_starts";
pub const CUMULATE_ENDS: &str = "cumulate_ends";

/// The window function whose end `name` is (`hop_end` -> `hop`), if it is a window end.
pub fn window_of_end(name: &str) -> Option<&'static str> {
    match name {
        TUMBLE_END => Some(TUMBLE),
        HOP_END => Some(HOP),
        SESSION_END => Some(SESSION),
        _ => None,
    }
}

/// An interval literal as milliseconds, if it is a fixed positive duration (no months).
pub fn interval_ms(value: &ScalarValue) -> Option<i64> {
    signed_interval_ms(value).filter(|ms| *ms > 0)
}

/// An interval literal as milliseconds of either sign, if it is a fixed duration (no months).
pub fn signed_interval_ms(value: &ScalarValue) -> Option<i64> {
    match value {
        ScalarValue::IntervalMonthDayNano(Some(v)) if v.months == 0 => {
            Some(i64::from(v.days) * 86_400_000 + v.nanoseconds / 1_000_000)
        }
        ScalarValue::IntervalDayTime(Some(v)) => Some(i64::from(v.days) * 86_400_000 + i64::from(v.milliseconds)),
        _ => None,
    }
}

/// A window offset (Flink's OFFSET): a fixed interval of either sign, or zero.
fn offset_ms(function: &str, value: Option<&ColumnarValue>) -> datafusion::error::Result<i64> {
    let ms = match value {
        None => Some(0),
        Some(ColumnarValue::Scalar(value)) => signed_interval_ms(value),
        Some(ColumnarValue::Array(_)) => None,
    };
    match ms {
        Some(ms) => Ok(ms),
        None => exec_err!("{function}: the window offset must be a fixed interval, such as INTERVAL '-8' HOUR"),
    }
}

/// Whether `first` (a hop's slide, a cumulating window's step) and `size` make windows: the
/// size must be at least the first, and a whole number of steps for CUMULATE. The planner asks
/// too, to refuse them at planning.
pub fn window_list_fits(function: &str, first: i64, size: i64) -> bool {
    first <= size && (function != CUMULATE_ENDS || size % first == 0)
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct Tumble {
    signature: Signature,
}

impl ScalarUDFImpl for Tumble {
    fn name(&self) -> &str {
        TUMBLE
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> datafusion::error::Result<DataType> {
        Ok(DataType::Timestamp(TimeUnit::Millisecond, None))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> datafusion::error::Result<ColumnarValue> {
        let [time, ColumnarValue::Scalar(size), offset @ ..] = args.args.as_slice() else {
            return exec_err!(
                "tumble(time, INTERVAL '...' [, offset]) takes a time column, an interval literal and an optional offset"
            );
        };
        let size = fixed_interval(TUMBLE, "window size", size)?;
        let offset = offset_ms(TUMBLE, offset.first())?;
        let millis = millis_of(TUMBLE, time, args.number_rows)?;
        let starts: TimestampMillisecondArray =
            millis.iter().map(|t| t.map(|t| window_start(t, size, offset))).collect();
        Ok(ColumnarValue::Array(Arc::new(starts)))
    }
}

/// An interval argument as positive milliseconds.
fn fixed_interval(function: &str, what: &str, value: &ScalarValue) -> datafusion::error::Result<i64> {
    match interval_ms(value) {
        Some(ms) => Ok(ms),
        None => exec_err!("{function}: the {what} must be a fixed positive interval, such as INTERVAL '10' SECOND"),
    }
}

/// A time argument as milliseconds since the epoch.
fn millis_of(function: &str, time: &ColumnarValue, rows: usize) -> datafusion::error::Result<Int64Array> {
    let times = time.to_array(rows)?;
    let millis = cast(&cast(&times, &DataType::Timestamp(TimeUnit::Millisecond, None))?, &DataType::Int64)?;
    match millis.as_any().downcast_ref::<Int64Array>() {
        Some(millis) => Ok(millis.clone()),
        None => exec_err!("{function}: the time did not cast to milliseconds"),
    }
}

/// `descriptor(ts)`: the time column of a windowing table function, as it is.
#[derive(Debug, PartialEq, Eq, Hash)]
struct Descriptor {
    signature: Signature,
}

impl ScalarUDFImpl for Descriptor {
    fn name(&self) -> &str {
        DESCRIPTOR
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, args: &[DataType]) -> datafusion::error::Result<DataType> {
        match args {
            [time] => Ok(time.clone()),
            _ => exec_err!("descriptor(column) takes one column"),
        }
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> datafusion::error::Result<ColumnarValue> {
        match args.args.as_slice() {
            [time] => Ok(time.clone()),
            _ => exec_err!("descriptor(column) takes one column"),
        }
    }
}

/// The windows holding a time, as a list of their starts (`hop_starts`) or ends
/// (`cumulate_ends`), for UNNEST to give each window a row.
#[derive(Debug, PartialEq, Eq, Hash)]
struct WindowList {
    name: &'static str,
    signature: Signature,
}

impl WindowList {
    /// The list for time `t` given the interval arguments in milliseconds.
    fn windows(&self, t: i64, first: i64, size: i64, offset: i64) -> Vec<i64> {
        if self.name == HOP_STARTS {
            // Every start on the slide's grid whose window [start, start + size) holds t.
            let (slide, mut start, mut starts) = (first, window_start(t, first, offset), Vec::new());
            while start + size > t {
                starts.push(start);
                start -= slide;
            }
            starts.reverse();
            starts
        } else {
            // Windows [start, start + k * step) of the size-long period holding t, for each k
            // whose window holds t.
            let (step, start) = (first, window_start(t, size, offset));
            (1..=size / step).map(|k| start + k * step).filter(|end| *end > t).collect()
        }
    }
}

impl ScalarUDFImpl for WindowList {
    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> datafusion::error::Result<DataType> {
        Ok(DataType::List(Arc::new(Field::new_list_field(DataType::Timestamp(TimeUnit::Millisecond, None), true))))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> datafusion::error::Result<ColumnarValue> {
        let [time, ColumnarValue::Scalar(first), ColumnarValue::Scalar(size), offset @ ..] = args.args.as_slice()
        else {
            return exec_err!(
                "{}(time, INTERVAL '...', INTERVAL '...' [, offset]) takes a time column, two intervals and an optional offset",
                self.name
            );
        };
        let offset = offset_ms(self.name, offset.first())?;
        let first_name = if self.name == HOP_STARTS { "slide" } else { "step" };
        let (first, size) =
            (fixed_interval(self.name, first_name, first)?, fixed_interval(self.name, "window size", size)?);
        if !window_list_fits(self.name, first, size) {
            return exec_err!(
                "{}: the window size ({size} ms) must be at least the {first_name} ({first} ms){}",
                self.name,
                if self.name == CUMULATE_ENDS { " and a whole number of steps" } else { "" }
            );
        }
        let millis = millis_of(self.name, time, args.number_rows)?;
        let mut lists = ListBuilder::new(TimestampMillisecondBuilder::new());
        for t in millis.iter() {
            match t {
                Some(t) => {
                    lists.values().append_slice(&self.windows(t, first, size, offset));
                    lists.append(true);
                }
                None => lists.append_null(),
            }
        }
        Ok(ColumnarValue::Array(Arc::new(lists.finish())))
    }
}

/// `hop` and `session`: only meaningful as GROUP BY keys of a streaming query, which the
/// planner replaces by a window operator; evaluated as a function, they fail.
#[derive(Debug, PartialEq, Eq, Hash)]
struct StreamingOnly {
    name: &'static str,
    usage: &'static str,
    signature: Signature,
}

impl ScalarUDFImpl for StreamingOnly {
    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> datafusion::error::Result<DataType> {
        Ok(DataType::Timestamp(TimeUnit::Millisecond, None))
    }

    fn invoke_with_args(&self, _args: ScalarFunctionArgs) -> datafusion::error::Result<ColumnarValue> {
        exec_err!("{} only works as the window of a streaming GROUP BY, as in GROUP BY {}", self.name, self.usage)
    }
}

/// `tumble_end`, `hop_end`, `session_end`: the end of the row group's window, filled in by
/// the streaming window operator.
#[derive(Debug, PartialEq, Eq, Hash)]
struct WindowEnd {
    name: &'static str,
    window: &'static str,
    signature: Signature,
}

impl AggregateUDFImpl for WindowEnd {
    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> datafusion::error::Result<DataType> {
        Ok(DataType::Timestamp(TimeUnit::Millisecond, None))
    }

    fn accumulator(&self, _args: AccumulatorArgs) -> datafusion::error::Result<Box<dyn Accumulator>> {
        exec_err!(
            "{} is the end of a streaming window: it only works beside GROUP BY {}(...) with the same arguments",
            self.name,
            self.window
        )
    }
}

/// The window-end functions to register with a DataFusion context.
pub fn window_end_functions() -> Vec<AggregateUDF> {
    [(TUMBLE_END, TUMBLE, 2), (HOP_END, HOP, 3), (SESSION_END, SESSION, 2)]
        .into_iter()
        .map(|(name, window, arguments)| {
            AggregateUDF::from(WindowEnd { name, window, signature: Signature::any(arguments, Volatility::Immutable) })
        })
        .collect()
}

/// `arguments` arguments, or one more: a window offset.
fn with_optional_offset(arguments: usize) -> Signature {
    Signature::one_of(vec![TypeSignature::Any(arguments), TypeSignature::Any(arguments + 1)], Volatility::Immutable)
}

/// The window functions to register with a DataFusion context.
pub fn window_functions() -> Vec<ScalarUDF> {
    vec![
        ScalarUDF::from(Tumble { signature: with_optional_offset(2) }),
        ScalarUDF::from(Descriptor { signature: Signature::any(1, Volatility::Immutable) }),
        ScalarUDF::from(WindowList { name: HOP_STARTS, signature: with_optional_offset(3) }),
        ScalarUDF::from(WindowList { name: CUMULATE_ENDS, signature: with_optional_offset(3) }),
        ScalarUDF::from(StreamingOnly {
            name: HOP,
            usage: "hop(ts, INTERVAL '1' SECOND, INTERVAL '10' SECOND) (slide, then size)",
            signature: Signature::any(3, Volatility::Immutable),
        }),
        ScalarUDF::from(StreamingOnly {
            name: SESSION,
            usage: "session(ts, INTERVAL '30' SECOND) (the gap that ends a session)",
            signature: Signature::any(2, Volatility::Immutable),
        }),
    ]
}
