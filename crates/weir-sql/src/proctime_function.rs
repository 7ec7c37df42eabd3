//! `PROCTIME()` in a query (Flink's `SELECT *, PROCTIME() AS pt FROM t`): the time a row
//! reached the pipeline's stamp there. The planner replaces a projection's `proctime()` by a
//! processing-time operator (`weir_engine::ProcessingTimeStamp`), which stamps the rows and
//! makes the column a time attribute with watermarks following the clock; evaluated anywhere
//! else (inside another expression, in a batch query) it is the time now.
//!
//! `current_row_timestamp()` is the same clock and never a time attribute: Flink's
//! `CURRENT_ROW_TIMESTAMP()`, and what Flink's dialect makes of `CURRENT_TIMESTAMP`, `NOW()`,
//! `CURRENT_DATE`... (`flink_functions.rs`), which Flink evaluates for each record in a stream
//! where DataFusion's are the time the query was planned.

use std::sync::Arc;

use datafusion::arrow::array::TimestampMillisecondArray;
use datafusion::arrow::datatypes::{DataType, TimeUnit};
use datafusion::logical_expr::{ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility};
use weir_engine::operators::state_ttl::now_ms;

pub const PROCTIME: &str = "proctime";

/// The time now, in milliseconds, whenever it is evaluated.
#[derive(Debug, PartialEq, Eq, Hash)]
struct Proctime {
    name: &'static str,
    signature: Signature,
}

impl ScalarUDFImpl for Proctime {
    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> datafusion::error::Result<DataType> {
        Ok(DataType::Timestamp(TimeUnit::Millisecond, None))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> datafusion::error::Result<ColumnarValue> {
        let now = now_ms();
        Ok(ColumnarValue::Array(Arc::new(TimestampMillisecondArray::from(vec![now; args.number_rows]))))
    }
}

/// `proctime()` and `current_row_timestamp()`, to register with a DataFusion context.
pub fn proctime_functions() -> [ScalarUDF; 2] {
    ["proctime", "current_row_timestamp"]
        .map(|name| ScalarUDF::from(Proctime { name, signature: Signature::nullary(Volatility::Volatile) }))
}
