//! `PROCTIME()` in a query (Flink's `SELECT *, PROCTIME() AS pt FROM t`): the time a row
//! reached the pipeline's stamp there. The planner replaces a projection's `proctime()` by a
//! processing-time operator (`weir_engine::ProcessingTimeStamp`), which stamps the rows and
//! makes the column a time attribute with watermarks following the clock; evaluated anywhere
//! else (inside another expression, in a batch query) it is the time now.

use std::sync::Arc;

use datafusion::arrow::array::TimestampMillisecondArray;
use datafusion::arrow::datatypes::{DataType, TimeUnit};
use datafusion::logical_expr::{ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility};
use weir_engine::operators::state_ttl::now_ms;

pub const PROCTIME: &str = "proctime";

#[derive(Debug, PartialEq, Eq, Hash)]
struct Proctime {
    signature: Signature,
}

impl ScalarUDFImpl for Proctime {
    fn name(&self) -> &str {
        PROCTIME
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

/// The function to register with a DataFusion context.
pub fn proctime_function() -> ScalarUDF {
    ScalarUDF::from(Proctime { signature: Signature::nullary(Volatility::Volatile) })
}
