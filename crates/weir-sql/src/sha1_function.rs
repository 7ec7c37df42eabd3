//! `sha1(text)`: the SHA-1 digest of a text as 40 hex digits, as Flink's `SHA1` (DataFusion has
//! the SHA-2 family and MD5, not SHA-1). NULL in, NULL out.

use std::sync::Arc;

use datafusion::arrow::array::{Array, StringArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::DataType;
use datafusion::common::exec_err;
use datafusion::logical_expr::{ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility};
use sha1::{Digest, Sha1};

#[derive(Debug, PartialEq, Eq, Hash)]
struct Sha1Hex {
    signature: Signature,
}

impl ScalarUDFImpl for Sha1Hex {
    fn name(&self) -> &str {
        "sha1"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> datafusion::error::Result<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> datafusion::error::Result<ColumnarValue> {
        let [text] = args.args.as_slice() else { return exec_err!("sha1(text) takes one text") };
        let texts = cast(&text.to_array(args.number_rows)?, &DataType::Utf8)?;
        let Some(texts) = texts.as_any().downcast_ref::<StringArray>() else {
            return exec_err!("sha1: the argument did not cast to text");
        };
        let digests: StringArray = texts
            .iter()
            .map(|t| t.map(|t| Sha1::digest(t.as_bytes()).iter().map(|b| format!("{b:02x}")).collect::<String>()))
            .collect();
        Ok(ColumnarValue::Array(Arc::new(digests)))
    }
}

/// The function to register with a DataFusion context.
pub fn sha1_function() -> ScalarUDF {
    ScalarUDF::from(Sha1Hex { signature: Signature::any(1, Volatility::Immutable) })
}
