//! Flink's functions that need code of their own rather than an expression of DataFusion's
//! (`flink_functions.rs` rewrites the others): `sha1(text)`, the SHA-1 digest as 40 hex digits
//! (DataFusion has the SHA-2 family and MD5); `json_string(value)`, a value of any type as JSON
//! text (Flink's `JSON_STRING`, and what `JSON_OBJECT` / `JSON_ARRAY` are built of). NULL in,
//! NULL out.

use std::sync::Arc;

use datafusion::arrow::array::{Array, StringArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::DataType;
use datafusion::arrow::datatypes::{Field, Schema};
use datafusion::arrow::json::writer::LineDelimited;
use datafusion::arrow::record_batch::RecordBatch;
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

#[derive(Debug, PartialEq, Eq, Hash)]
struct JsonString {
    signature: Signature,
}

impl ScalarUDFImpl for JsonString {
    fn name(&self) -> &str {
        "json_string"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> datafusion::error::Result<DataType> {
        Ok(DataType::Utf8)
    }

    /// arrow-json writes each value as the field `v` of an object, `{"v":<value>}` (`{}` for
    /// NULL): the value's text is what is between.
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> datafusion::error::Result<ColumnarValue> {
        let [value] = args.args.as_slice() else { return exec_err!("json_string(value) takes one value") };
        let values = value.to_array(args.number_rows)?;
        let schema = Arc::new(Schema::new(vec![Field::new("v", values.data_type().clone(), true)]));
        let batch = RecordBatch::try_new(schema, vec![values])?;
        let mut lines = Vec::new();
        {
            let mut writer = datafusion::arrow::json::WriterBuilder::new().build::<_, LineDelimited>(&mut lines);
            writer.write(&batch)?;
            writer.finish()?;
        }
        let text = String::from_utf8_lossy(&lines);
        let texts: StringArray =
            text.lines().map(|line| line.strip_prefix("{\"v\":").and_then(|rest| rest.strip_suffix('}'))).collect();
        Ok(ColumnarValue::Array(Arc::new(texts)))
    }
}

/// The functions to register with a DataFusion context.
pub fn flink_udfs() -> Vec<ScalarUDF> {
    vec![
        ScalarUDF::from(Sha1Hex { signature: Signature::any(1, Volatility::Immutable) }),
        ScalarUDF::from(JsonString { signature: Signature::any(1, Volatility::Immutable) }),
    ]
}
