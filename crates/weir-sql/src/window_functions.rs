//! The window functions of GROUP BY: `tumble(ts, size)`, `hop(ts, slide, size)` and
//! `session(ts, gap)`, each standing for the start of the row's window. The streaming planner
//! turns them into window operators. `tumble` is also an ordinary function (the start of the
//! tumbling window `ts` falls in), so a tumbling query runs as a batch query too, which is how
//! tests check windows against batch answers; a row is in several hopping windows and a
//! session depends on other rows, so `hop` and `session` only work in a streaming GROUP BY.

use std::sync::Arc;

use datafusion::arrow::array::{Array, Int64Array, TimestampMillisecondArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, TimeUnit};
use datafusion::common::{ScalarValue, exec_err};
use datafusion::logical_expr::{ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility};

pub const TUMBLE: &str = "tumble";
pub const HOP: &str = "hop";
pub const SESSION: &str = "session";

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
