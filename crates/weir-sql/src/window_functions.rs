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

use std::sync::Arc;

use datafusion::arrow::array::{Array, Int64Array, TimestampMillisecondArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, TimeUnit};
use datafusion::common::{ScalarValue, exec_err};
use datafusion::logical_expr::function::AccumulatorArgs;
use datafusion::logical_expr::{
    Accumulator, AggregateUDF, AggregateUDFImpl, ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl,
    Signature, Volatility,
};

pub const TUMBLE: &str = "tumble";
pub const HOP: &str = "hop";
pub const SESSION: &str = "session";
pub const TUMBLE_END: &str = "tumble_end";
pub const HOP_END: &str = "hop_end";
pub const SESSION_END: &str = "session_end";

/// The window function whose end `name` is (`hop_end` -> `hop`), if it is a window end.
pub fn window_of_end(name: &str) -> Option<&'static str> {
    match name {
        TUMBLE_END => Some(TUMBLE),
        HOP_END => Some(HOP),
        SESSION_END => Some(SESSION),
        _ => None,
    }
}

/// An interval literal as milliseconds, if it is a fixed duration (no months).
pub fn interval_ms(value: &ScalarValue) -> Option<i64> {
    match value {
        ScalarValue::IntervalMonthDayNano(Some(v)) if v.months == 0 => {
            Some(i64::from(v.days) * 86_400_000 + v.nanoseconds / 1_000_000)
        }
        ScalarValue::IntervalDayTime(Some(v)) => Some(i64::from(v.days) * 86_400_000 + i64::from(v.milliseconds)),
        _ => None,
    }
    .filter(|ms| *ms > 0)
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
        let [time, ColumnarValue::Scalar(size)] = args.args.as_slice() else {
            return exec_err!("tumble(time, INTERVAL '...') takes a time column and an interval literal");
        };
        let Some(size) = interval_ms(size) else {
            return exec_err!(
                "tumble: the window size must be a fixed positive interval, such as INTERVAL '10' SECOND"
            );
        };
        let times = time.to_array(args.number_rows)?;
        let millis = cast(&cast(&times, &DataType::Timestamp(TimeUnit::Millisecond, None))?, &DataType::Int64)?;
        let Some(millis) = millis.as_any().downcast_ref::<Int64Array>() else {
            return exec_err!("tumble: the time did not cast to milliseconds");
        };
        let starts: TimestampMillisecondArray = millis.iter().map(|t| t.map(|t| t.div_euclid(size) * size)).collect();
        Ok(ColumnarValue::Array(Arc::new(starts)))
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

/// The window functions to register with a DataFusion context.
pub fn window_functions() -> Vec<ScalarUDF> {
    vec![
        ScalarUDF::from(Tumble { signature: Signature::any(2, Volatility::Immutable) }),
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
