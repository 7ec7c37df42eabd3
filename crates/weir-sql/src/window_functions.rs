//! `tumble(ts, INTERVAL ...)`: the start of the tumbling window `ts` falls in. As a GROUP BY key
//! it makes a tumbling-window aggregate; DataFusion evaluates it like any function, so the same
//! query also runs as a batch query (which is how tests check windows against batch answers).

use std::sync::Arc;

use datafusion::arrow::array::{Array, Int64Array, TimestampMillisecondArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, TimeUnit};
use datafusion::common::{ScalarValue, exec_err};
use datafusion::logical_expr::{ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility};

pub const TUMBLE: &str = "tumble";

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

/// The window functions to register with a DataFusion context.
pub fn window_functions() -> Vec<ScalarUDF> {
    vec![ScalarUDF::from(Tumble { signature: Signature::any(2, Volatility::Immutable) })]
}
