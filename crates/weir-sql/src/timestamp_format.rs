//! `to_char(timestamp, 'format')` (also `date_format`, and what Flink's `DATE_FORMAT` becomes)
//! with the format read once per batch. DataFusion's `to_char` formats through Arrow's display,
//! which hands the format string to chrono for every value, and chrono parses it again each
//! time: in Nexmark q16 (a day and a minute per bid) the parsing was 4% of the query. Here a
//! constant format over a timestamp column without a time zone is parsed once into chrono's
//! items, and each value is written with them; every other call (a time zone, dates, times,
//! durations, a format per row, a format chrono cannot read) is DataFusion's own, so the
//! results and errors are its.

use std::fmt::Write;
use std::sync::Arc;

use chrono::format::{Item, StrftimeItems};
use datafusion::arrow::array::{Array, ArrayRef, AsArray, StringBuilder};
use datafusion::arrow::datatypes::{
    ArrowTimestampType, DataType, TimeUnit, TimestampMicrosecondType, TimestampMillisecondType,
    TimestampNanosecondType, TimestampSecondType,
};
use datafusion::arrow::temporal_conversions::as_datetime;
use datafusion::common::{Result, ScalarValue};
use datafusion::logical_expr::{ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature};

/// `to_char` as weir registers it, in place of DataFusion's.
pub fn to_char() -> ScalarUDF {
    ScalarUDF::new_from_impl(ToChar { datafusion: datafusion::functions::datetime::to_char() })
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct ToChar {
    /// DataFusion's `to_char`, for every call this one does not format itself.
    datafusion: Arc<ScalarUDF>,
}

impl ScalarUDFImpl for ToChar {
    fn name(&self) -> &str {
        self.datafusion.name()
    }

    fn aliases(&self) -> &[String] {
        self.datafusion.aliases()
    }

    fn signature(&self) -> &Signature {
        self.datafusion.signature()
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        self.datafusion.return_type(arg_types)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        if let [ColumnarValue::Array(values), ColumnarValue::Scalar(ScalarValue::Utf8(Some(format)))] =
            args.args.as_slice()
            && let DataType::Timestamp(unit, None) = values.data_type()
            && let Ok(items) = StrftimeItems::new(format).parse()
        {
            let formatted = match unit {
                TimeUnit::Second => formatted::<TimestampSecondType>(values, &items),
                TimeUnit::Millisecond => formatted::<TimestampMillisecondType>(values, &items),
                TimeUnit::Microsecond => formatted::<TimestampMicrosecondType>(values, &items),
                TimeUnit::Nanosecond => formatted::<TimestampNanosecondType>(values, &items),
            };
            if let Some(formatted) = formatted {
                return Ok(ColumnarValue::Array(formatted));
            }
        }
        self.datafusion.invoke_with_args(args)
    }
}

/// Each timestamp of `values` written with `items`; None if one is out of chrono's range or
/// fails to format (DataFusion then says what it says of it). A format without fractions of a
/// second is written once per second of the values and copied for the rows of the same second
/// (rows of a stream mostly come in time order, thousands to a second): chrono's formatting
/// per row was still a tenth of Nexmark q16.
fn formatted<T: ArrowTimestampType>(values: &ArrayRef, items: &[Item<'_>]) -> Option<ArrayRef> {
    let per_second = items.iter().all(whole_seconds);
    let ticks_per_second = match T::UNIT {
        TimeUnit::Second => 1,
        TimeUnit::Millisecond => 1_000,
        TimeUnit::Microsecond => 1_000_000,
        TimeUnit::Nanosecond => 1_000_000_000,
    };
    let values = values.as_primitive::<T>();
    let mut out = StringBuilder::with_capacity(values.len(), values.len() * 16);
    // The second last written, and what it was written as.
    let mut last: Option<i64> = None;
    let mut text = String::new();
    for row in 0..values.len() {
        if values.is_null(row) {
            out.append_null();
            continue;
        }
        let value = values.value(row);
        let second = value.div_euclid(ticks_per_second);
        if !per_second || last != Some(second) {
            let at = as_datetime::<T>(value)?;
            text.clear();
            write!(text, "{}", at.format_with_items(items.iter())).ok()?;
            last = Some(second);
        }
        out.append_value(&text);
    }
    Some(Arc::new(out.finish()))
}

/// Whether `item` writes the same for every instant of a second (no fraction of a second).
fn whole_seconds(item: &Item<'_>) -> bool {
    use chrono::format::{Fixed, Numeric};
    match item {
        Item::Literal(_) | Item::OwnedLiteral(_) | Item::Space(_) | Item::OwnedSpace(_) => true,
        Item::Numeric(numeric, _) => !matches!(numeric, Numeric::Nanosecond),
        Item::Fixed(fixed) => matches!(
            fixed,
            Fixed::ShortMonthName
                | Fixed::LongMonthName
                | Fixed::ShortWeekdayName
                | Fixed::LongWeekdayName
                | Fixed::LowerAmPm
                | Fixed::UpperAmPm
        ),
        Item::Error => false,
    }
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::{StringArray, TimestampMillisecondArray};
    use datafusion::arrow::datatypes::Field;
    use datafusion::config::ConfigOptions;

    use super::*;

    fn call(function: &ScalarUDF, values: ArrayRef, format: &str) -> Result<ArrayRef> {
        let args = vec![ColumnarValue::Array(values.clone()), ColumnarValue::Scalar(ScalarValue::from(format))];
        let arg_fields = vec![
            Arc::new(Field::new("t", values.data_type().clone(), true)),
            Arc::new(Field::new("f", DataType::Utf8, false)),
        ];
        let args = ScalarFunctionArgs {
            args,
            arg_fields,
            number_rows: values.len(),
            return_field: Arc::new(Field::new("out", DataType::Utf8, true)),
            config_options: Arc::new(ConfigOptions::default()),
        };
        function.invoke_with_args(args)?.into_array(values.len())
    }

    #[test]
    fn a_constant_format_gives_what_datafusions_to_char_gives() {
        // Rows of one second (each format is written once a second unless it shows fractions),
        // the next second, and seconds before 1970 (negative values).
        let values: ArrayRef = Arc::new(TimestampMillisecondArray::from(vec![
            Some(1_700_000_000_005),
            None,
            Some(1_700_000_000_999),
            Some(1_700_000_001_000),
            Some(-86_400_123),
            Some(-86_400_999),
            Some(-1),
            Some(0),
        ]));
        let ours = to_char();
        let theirs = datafusion::functions::datetime::to_char();
        for format in ["%Y-%m-%d", "%H:%M", "%Y-%m-%d %H:%M:%S%.3f", "%A %e %B %Y, %I %p", "day %j of %G"] {
            let (a, b) = (call(&ours, values.clone(), format).unwrap(), call(&theirs, values.clone(), format).unwrap());
            assert_eq!(a.as_string::<i32>(), b.as_string::<i32>(), "{format}");
        }
        let a = call(&ours, values.clone(), "%Y-%m-%d").unwrap();
        let days =
            ["2023-11-14", "", "2023-11-14", "2023-11-14", "1969-12-30", "1969-12-30", "1969-12-31", "1970-01-01"];
        let days: Vec<_> = days.into_iter().map(|d| (!d.is_empty()).then_some(d)).collect();
        assert_eq!(a.as_string::<i32>(), &StringArray::from(days));
        let a = call(&ours, values.clone(), "%S%.3f").unwrap();
        let fractions = ["20.005", "", "20.999", "21.000", "59.877", "59.001", "59.999", "00.000"];
        let fractions: Vec<_> = fractions.into_iter().map(|d| (!d.is_empty()).then_some(d)).collect();
        assert_eq!(a.as_string::<i32>(), &StringArray::from(fractions));
        // A format chrono cannot read: DataFusion's answer, whatever it is.
        let (a, b) = (call(&ours, values.clone(), "%Q"), call(&theirs, values, "%Q"));
        assert_eq!(
            a.map_err(|e| e.to_string()).map(|a| a.to_data()),
            b.map_err(|e| e.to_string()).map(|b| b.to_data())
        );
    }
}
