//! Flink's functions that need code of their own rather than an expression of DataFusion's
//! (`flink_functions.rs` rewrites the others): `sha1(text)`, the SHA-1 digest as 40 hex digits
//! (DataFusion has the SHA-2 family and MD5); `json_string(value)`, a value of any type as JSON
//! text (Flink's `JSON_STRING`, and what `JSON_OBJECT` / `JSON_ARRAY` are built of);
//! `str_to_map(text [, pair delimiter, key-value delimiter])`, Flink's `STR_TO_MAP`: text split
//! into pairs (default `,`) and each pair into key and value (default `=`, the value NULL when a
//! pair has none), both delimiters regular expressions as in Flink, a later pair's value
//! winning for a key given twice; `is_json(text, kind)`, Flink's `IS JSON` predicate;
//! `regexp_extract_all(text, regex, group)`; `printf(format, ...)`, Flink's `PRINTF`;
//! `map_union(map, ...)`, Flink's `MAP_UNION`; `weir_raise_error(message)`, a query's failure;
//! `json_built(text)`, a JSON construction's text
//! marked for nesting; and the text functions of [`TEXT_FUNCTIONS`] (`hex`, `bin`,
//! `url_encode`, `url_decode`, `convert_tz`, `json_compact`, `json_unique_keys`). NULL in, NULL out.

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayData, ArrayRef, BinaryArray, BooleanArray, Int64Array, ListBuilder, MapArray, MapBuilder,
    MapFieldNames, MutableArrayData, StringArray, StringBuilder, StructArray,
};
use datafusion::arrow::buffer::{NullBuffer, OffsetBuffer};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, TimeUnit};
use datafusion::arrow::datatypes::{Field, Fields, Schema};
use datafusion::arrow::json::writer::LineDelimited;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::{DataFusionError, ScalarValue, exec_err};
use datafusion::logical_expr::type_coercion::binary::type_union_resolution;
use datafusion::logical_expr::{ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility};
use regex::Regex;
use sha1::{Digest, Sha1};

#[derive(Debug, PartialEq, Eq, Hash)]
struct StrToMap {
    signature: Signature,
}

impl StrToMap {
    fn map_type() -> DataType {
        let entries =
            Fields::from(vec![Field::new("key", DataType::Utf8, false), Field::new("value", DataType::Utf8, true)]);
        DataType::Map(Arc::new(Field::new("entries", DataType::Struct(entries), false)), false)
    }
}

impl ScalarUDFImpl for StrToMap {
    fn name(&self) -> &str {
        "str_to_map"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> datafusion::error::Result<DataType> {
        Ok(Self::map_type())
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> datafusion::error::Result<ColumnarValue> {
        let rows = args.number_rows;
        let texts = args
            .args
            .iter()
            .map(|arg| {
                let text = cast(&arg.to_array(rows)?, &DataType::Utf8)?;
                Ok(text.as_any().downcast_ref::<StringArray>().cloned())
            })
            .collect::<datafusion::error::Result<Vec<_>>>()?;
        let (text, pairs, key_value) = match texts.as_slice() {
            [Some(text)] => (text, None, None),
            [Some(text), Some(pairs), Some(key_value)] => (text, Some(pairs), Some(key_value)),
            _ => return exec_err!("str_to_map(text [, pair delimiter, key-value delimiter]) takes one or three texts"),
        };
        // Delimiters are mostly constant: each distinct one is compiled once.
        let mut compiled: HashMap<String, Regex> = HashMap::new();
        let mut regex = |delimiter: &str| -> datafusion::error::Result<Regex> {
            if let Some(regex) = compiled.get(delimiter) {
                return Ok(regex.clone());
            }
            let regex = Regex::new(delimiter)
                .map_err(|e| DataFusionError::Execution(format!("str_to_map: delimiter '{delimiter}': {e}")))?;
            compiled.insert(delimiter.to_string(), regex.clone());
            Ok(regex)
        };
        let names = MapFieldNames { entry: "entries".into(), key: "key".into(), value: "value".into() };
        let mut map = MapBuilder::new(Some(names), StringBuilder::new(), StringBuilder::new());
        for row in 0..rows {
            let delimiter = |given: Option<&StringArray>, default: &'static str| match given {
                None => Some(default.to_string()),
                Some(given) => given.is_valid(row).then(|| given.value(row).to_string()),
            };
            let (Some(pairs), Some(key_value)) = (delimiter(pairs, ","), delimiter(key_value, "=")) else {
                map.append(false)?;
                continue;
            };
            if text.is_null(row) {
                map.append(false)?;
                continue;
            }
            let (pairs, key_value) = (regex(&pairs)?, regex(&key_value)?);
            let mut entries: Vec<(&str, Option<&str>)> = Vec::new();
            for pair in pairs.split(text.value(row)) {
                let mut parts = key_value.splitn(pair, 2);
                let key = parts.next().unwrap_or_default();
                let value = parts.next();
                match entries.iter_mut().find(|(k, _)| *k == key) {
                    Some(entry) => entry.1 = value,
                    None => entries.push((key, value)),
                }
            }
            for (key, value) in entries {
                map.keys().append_value(key);
                map.values().append_option(value);
            }
            map.append(true)?;
        }
        Ok(ColumnarValue::Array(Arc::new(map.finish())))
    }
}

/// `printf(format, value, ...)`: Flink's `PRINTF`, Java's `String.format` for the conversions
/// `%s %S %d %x %X %o %f %e %E %b %c %n %%`, with an argument index (`%2$s`), the flags `-`
/// (left), `0` (zero padding), `+`, ` ` and `,` (grouping), a width and a precision. A row
/// whose value does not fit its conversion is NULL; a format with a conversion it lacks is
/// refused when the query is planned (`PRINTF`'s format is checked by `printf_format`).
#[derive(Debug, PartialEq, Eq, Hash)]
struct Printf {
    signature: Signature,
}

impl ScalarUDFImpl for Printf {
    fn name(&self) -> &str {
        "printf"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> datafusion::error::Result<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> datafusion::error::Result<ColumnarValue> {
        let rows = args.number_rows;
        let Some((format, values)) = args.args.split_first() else { return exec_err!("printf takes a format") };
        let format = texts(&format.to_array(rows)?)?;
        let values = values.iter().map(|v| v.to_array(rows)).collect::<datafusion::error::Result<Vec<_>>>()?;
        // The format is mostly a literal: it is parsed again only when it changes.
        let mut parsed: Option<(&str, Option<Vec<FormatPiece>>)> = None;
        let mut out = Vec::with_capacity(rows);
        for row in 0..rows {
            if format.is_null(row) {
                out.push(None);
                continue;
            }
            let text = format.value(row);
            if parsed.as_ref().is_none_or(|(last, _)| *last != text) {
                parsed = Some((text, printf_format(text).ok()));
            }
            out.push(parsed.as_ref().and_then(|(_, pieces)| printf_row(pieces.as_deref()?, &values, row)));
        }
        Ok(ColumnarValue::Array(Arc::new(StringArray::from(out))))
    }
}

/// One conversion of a Java format: `%[index$ | <][flags][width][.precision]conversion`.
pub(crate) struct Conversion {
    index: Option<usize>,
    flags: String,
    width: usize,
    precision: Option<usize>,
    kind: char,
    /// `%t` / `%T`'s date or time conversion (`Y`, `m`, `d`, `H`, `F`, `T`, ...).
    time: Option<char>,
}

/// A piece of a Java format: literal text (`Ok`), or a conversion.
type FormatPiece = std::result::Result<String, Conversion>;

/// The pieces of a Java format. `Err`: what is not supported.
pub(crate) fn printf_format(format: &str) -> std::result::Result<Vec<FormatPiece>, String> {
    let mut pieces = Vec::new();
    let mut chars = format.chars().peekable();
    let mut text = String::new();
    while let Some(c) = chars.next() {
        if c != '%' {
            text.push(c);
            continue;
        }
        let mut spec = String::new();
        let kind = loop {
            match chars.next() {
                Some(c) if c.is_ascii_alphabetic() || c == '%' => break c,
                Some(c) => spec.push(c),
                None => return Err(format!("the format ends inside '%{spec}'")),
            }
        };
        match kind {
            '%' => text.push('%'),
            'n' => text.push('\n'),
            's' | 'S' | 'd' | 'x' | 'X' | 'o' | 'f' | 'e' | 'E' | 'b' | 'B' | 'c' | 't' | 'T' => {
                let time = match kind {
                    't' | 'T' => match chars.next() {
                        Some(c) if time_format(c).is_some() => Some(c),
                        Some(c) => return Err(format!("the date/time conversion '%{kind}{c}' is not supported")),
                        None => return Err(format!("the format ends inside '%{spec}{kind}'")),
                    },
                    _ => None,
                };
                // `%<...`: the argument of the conversion before (index 0).
                let (index, rest) = match (spec.strip_prefix('<'), spec.split_once('$')) {
                    (Some(rest), _) => (Some(0), rest),
                    (None, Some((index, rest))) => {
                        let index = index.parse::<usize>().ok().filter(|i| *i > 0);
                        (Some(index.ok_or_else(|| format!("'%{spec}{kind}'"))?), rest)
                    }
                    (None, None) => (None, spec.as_str()),
                };
                let flags: String = rest.chars().take_while(|c| "-0+ ,#(".contains(*c)).collect();
                let rest = &rest[flags.len()..];
                let (width, precision) = match rest.split_once('.') {
                    Some((width, precision)) => (width, Some(precision)),
                    None => (rest, None),
                };
                let bad = || format!("'%{spec}{kind}'");
                let width = if width.is_empty() { 0 } else { width.parse().map_err(|_| bad())? };
                let precision = precision.map(|p| p.parse().map_err(|_| bad())).transpose()?;
                pieces.push(Ok(std::mem::take(&mut text)));
                pieces.push(Err(Conversion { index, flags, width, precision, kind, time }));
            }
            other => {
                return Err(format!("the conversion '%{other}' is not supported (s, d, x, o, f, e, b, c, t, n, %)"));
            }
        }
    }
    pieces.push(Ok(text));
    Ok(pieces)
}

/// One row's formatted text; `None` where a value does not fit its conversion.
fn printf_row(pieces: &[FormatPiece], values: &[ArrayRef], row: usize) -> Option<String> {
    let mut out = String::new();
    let (mut next, mut last) = (0, None);
    for piece in pieces {
        let conversion = match piece {
            Ok(text) => {
                out.push_str(text);
                continue;
            }
            Err(conversion) => conversion,
        };
        let index = match conversion.index {
            Some(0) => last?,
            Some(index) => index - 1,
            None => {
                next += 1;
                next - 1
            }
        };
        last = Some(index);
        let value = values.get(index)?;
        let scalar = ScalarValue::try_from_array(value, row).ok()?;
        out.push_str(&convert(conversion, &scalar)?);
    }
    Some(out)
}

/// chrono's format of Java's date/time conversion `%t<c>` (timestamps are UTC); the few
/// computed instead (`s`, `Q`, `C`, `p`) have one too, to mark them supported.
fn time_format(c: char) -> Option<&'static str> {
    Some(match c {
        'H' => "%H",
        'I' => "%I",
        'k' => "%-H",
        'l' => "%-I",
        'M' => "%M",
        'S' => "%S",
        'L' => "%3f",
        'N' => "%9f",
        'p' => "%p",
        'Z' => "UTC",
        'z' => "+0000",
        's' | 'Q' | 'C' => "",
        'B' => "%B",
        'b' | 'h' => "%b",
        'A' => "%A",
        'a' => "%a",
        'Y' => "%Y",
        'y' => "%y",
        'j' => "%j",
        'm' => "%m",
        'd' => "%d",
        'e' => "%-d",
        'R' => "%H:%M",
        'T' => "%H:%M:%S",
        'r' => "%I:%M:%S %p",
        'D' => "%m/%d/%y",
        'F' => "%Y-%m-%d",
        'c' => "%a %b %d %H:%M:%S UTC %Y",
        _ => return None,
    })
}

/// One value in its conversion, padded to the width.
fn convert(conversion: &Conversion, value: &ScalarValue) -> Option<String> {
    let flags = &conversion.flags;
    let integer =
        || value.cast_to(&DataType::Int64).ok().and_then(|v| if let ScalarValue::Int64(n) = v { n } else { None });
    let float =
        || value.cast_to(&DataType::Float64).ok().and_then(|v| if let ScalarValue::Float64(n) = v { n } else { None });
    let signed = |digits: String, negative: bool| match (negative, flags.contains('+'), flags.contains(' ')) {
        (true, _, _) => format!("-{digits}"),
        (false, true, _) => format!("+{digits}"),
        (false, false, true) => format!(" {digits}"),
        _ => digits,
    };
    let grouped = |digits: &str| match flags.contains(',') {
        true => {
            let (whole, fraction) = digits.split_once('.').map_or((digits, None), |(w, f)| (w, Some(f)));
            let mut out: Vec<char> = Vec::new();
            for (i, c) in whole.chars().rev().enumerate() {
                if i > 0 && i % 3 == 0 {
                    out.push(',');
                }
                out.push(c);
            }
            let whole: String = out.into_iter().rev().collect();
            fraction.map_or(whole.clone(), |f| format!("{whole}.{f}"))
        }
        false => digits.to_string(),
    };
    let (text, numeric) = match conversion.kind {
        's' | 'S' => {
            let text =
                if value.is_null() { "null".to_string() } else { value.cast_to(&DataType::Utf8).ok()?.to_string() };
            let text = match conversion.precision {
                Some(p) => text.chars().take(p).collect(),
                None => text,
            };
            (if conversion.kind == 'S' { text.to_uppercase() } else { text }, false)
        }
        'b' | 'B' => {
            let truth = match value {
                ScalarValue::Boolean(b) => b.unwrap_or(false),
                other => !other.is_null(),
            };
            let text = truth.to_string();
            (if conversion.kind == 'B' { text.to_uppercase() } else { text }, false)
        }
        'c' => match value.cast_to(&DataType::Utf8).ok()? {
            ScalarValue::Utf8(Some(text)) if text.chars().count() == 1 => (text, false),
            _ => match integer().and_then(|n| char::from_u32(u32::try_from(n).ok()?)) {
                Some(c) => (c.to_string(), false),
                None => return value.is_null().then(|| "null".to_string()),
            },
        },
        _ if value.is_null() => ("null".to_string(), false),
        't' | 'T' => {
            let millis = match value.cast_to(&DataType::Timestamp(TimeUnit::Millisecond, None)).ok()? {
                ScalarValue::TimestampMillisecond(Some(ms), _) => ms,
                _ => return None,
            };
            let time = chrono::DateTime::from_timestamp_millis(millis)?.naive_utc();
            use chrono::Datelike;
            let text = match conversion.time? {
                's' => millis.div_euclid(1000).to_string(),
                'Q' => millis.to_string(),
                'C' => format!("{:02}", time.year().div_euclid(100)),
                'p' => time.format("%p").to_string().to_lowercase(),
                other => time.format(time_format(other)?).to_string(),
            };
            (if conversion.kind == 'T' { text.to_uppercase() } else { text }, false)
        }
        'd' => {
            let n = integer()?;
            (signed(grouped(&n.unsigned_abs().to_string()), n < 0), true)
        }
        'x' => (format!("{:x}", integer()? as u64), true),
        'X' => (format!("{:X}", integer()? as u64), true),
        'o' => (format!("{:o}", integer()? as u64), true),
        'f' => {
            let x = float()?;
            let digits = format!("{:.*}", conversion.precision.unwrap_or(6), x.abs());
            (signed(grouped(&digits), x.is_sign_negative() && x != 0.0), true)
        }
        'e' | 'E' => {
            let x = float()?;
            let text = format!("{:.*e}", conversion.precision.unwrap_or(6), x.abs());
            // Java writes the exponent with a sign and two digits at least: 1.5e+00.
            let (mantissa, exponent) = text.split_once('e')?;
            let exponent: i32 = exponent.parse().ok()?;
            let text = format!("{mantissa}e{}{:02}", if exponent < 0 { '-' } else { '+' }, exponent.abs());
            let text = signed(text, x.is_sign_negative() && x != 0.0);
            (if conversion.kind == 'E' { text.to_uppercase() } else { text }, true)
        }
        _ => return None,
    };
    let width = conversion.width;
    let length = text.chars().count();
    if length >= width {
        return Some(text);
    }
    let fill = width - length;
    Some(if flags.contains('-') {
        format!("{text}{}", " ".repeat(fill))
    } else if flags.contains('0') && numeric {
        let sign = text.chars().next().filter(|c| "+- ".contains(*c));
        let digits = if sign.is_some() { &text[1..] } else { &text[..] };
        format!("{}{}{digits}", sign.map(String::from).unwrap_or_default(), "0".repeat(fill))
    } else {
        format!("{}{text}", " ".repeat(fill))
    })
}

/// `regexp_extract_all(text, regex, group)`: Flink's `REGEXP_EXTRACT_ALL`, group `group` (0 the
/// whole match) of every match of the regular expression, as an array (NULL elements for a
/// group a match leaves out).
#[derive(Debug, PartialEq, Eq, Hash)]
struct RegexpExtractAll {
    signature: Signature,
}

impl ScalarUDFImpl for RegexpExtractAll {
    fn name(&self) -> &str {
        "regexp_extract_all"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> datafusion::error::Result<DataType> {
        Ok(DataType::List(Arc::new(Field::new_list_field(DataType::Utf8, true))))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> datafusion::error::Result<ColumnarValue> {
        let [text, regex, group] = args.args.as_slice() else {
            return exec_err!("regexp_extract_all(text, regex, group) takes three arguments");
        };
        let rows = args.number_rows;
        let (text, regex) = (texts(&text.to_array(rows)?)?, texts(&regex.to_array(rows)?)?);
        let group = cast(&group.to_array(rows)?, &DataType::Int64)?;
        let Some(group) = group.as_any().downcast_ref::<Int64Array>() else {
            return exec_err!("regexp_extract_all: the group did not cast to BIGINT");
        };
        let mut compiled: HashMap<String, Regex> = HashMap::new();
        let mut list = ListBuilder::new(StringBuilder::new());
        for row in 0..rows {
            if text.is_null(row) || regex.is_null(row) || group.is_null(row) {
                list.append(false);
                continue;
            }
            let pattern = regex.value(row);
            if !compiled.contains_key(pattern) {
                let parsed = Regex::new(pattern)
                    .map_err(|e| DataFusionError::Execution(format!("REGEXP_EXTRACT_ALL: '{pattern}': {e}")))?;
                compiled.insert(pattern.to_string(), parsed);
            }
            let Some(parsed) = compiled.get(pattern) else { return exec_err!("regexp_extract_all: lost '{pattern}'") };
            let index = usize::try_from(group.value(row)).ok().filter(|&g| g < parsed.captures_len());
            let Some(index) = index else {
                return exec_err!("REGEXP_EXTRACT_ALL: '{pattern}' has no group {}", group.value(row));
            };
            for captures in parsed.captures_iter(text.value(row)) {
                list.values().append_option(captures.get(index).map(|m| m.as_str()));
            }
            list.append(true);
        }
        Ok(ColumnarValue::Array(Arc::new(list.finish())))
    }
}

/// `map_union(map, ...)`: Flink's `MAP_UNION`, the maps' entries in one map, a later map's
/// value winning for a key that several have (in the place the key first took); NULL if any
/// map is NULL.
#[derive(Debug, PartialEq, Eq, Hash)]
struct MapUnion {
    signature: Signature,
}

impl ScalarUDFImpl for MapUnion {
    fn name(&self) -> &str {
        "map_union"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, args: &[DataType]) -> datafusion::error::Result<DataType> {
        match args.first() {
            Some(first) => Ok(first.clone()),
            None => datafusion::common::plan_err!("MAP_UNION takes one map or more"),
        }
    }

    /// The maps' common type, as Flink's (`MAP<STRING, INT>` and `MAP<STRING, BIGINT>` make
    /// `MAP<STRING, BIGINT>`).
    fn coerce_types(&self, args: &[DataType]) -> datafusion::error::Result<Vec<DataType>> {
        match type_union_resolution(args) {
            Some(common @ DataType::Map(..)) => Ok(vec![common; args.len()]),
            _ => {
                let types: Vec<String> = args.iter().map(|t| t.to_string()).collect();
                datafusion::common::plan_err!("MAP_UNION takes maps of one type, not ({})", types.join(", "))
            }
        }
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> datafusion::error::Result<ColumnarValue> {
        let rows = args.number_rows;
        let arrays = args.args.iter().map(|a| a.to_array(rows)).collect::<datafusion::error::Result<Vec<_>>>()?;
        let maps: Vec<&MapArray> = arrays.iter().filter_map(|a| a.as_any().downcast_ref::<MapArray>()).collect();
        let (Some(first), true) = (maps.first(), maps.len() == arrays.len()) else {
            return exec_err!("map_union takes maps");
        };
        let entries: Vec<ArrayData> = maps.iter().map(|m| m.entries().to_data()).collect();
        let mut out = MutableArrayData::new(entries.iter().collect(), false, 0);
        let (mut offsets, mut valid) = (vec![0i32], Vec::with_capacity(rows));
        let mut length = 0i32;
        for row in 0..rows {
            if maps.iter().any(|m| m.is_null(row)) {
                offsets.push(length);
                valid.push(false);
                continue;
            }
            // Each key's place and the (map, entry) its value comes from.
            let mut picked: Vec<(ScalarValue, usize, usize)> = Vec::new();
            for (index, map) in maps.iter().enumerate() {
                let (start, end) = (map.value_offsets()[row] as usize, map.value_offsets()[row + 1] as usize);
                for entry in start..end {
                    let key = ScalarValue::try_from_array(map.keys(), entry)?;
                    match picked.iter_mut().find(|(k, _, _)| *k == key) {
                        Some(place) => (place.1, place.2) = (index, entry),
                        None => picked.push((key, index, entry)),
                    }
                }
            }
            for &(_, index, entry) in &picked {
                out.try_extend(index, entry, entry + 1)?;
            }
            length += i32::try_from(picked.len()).map_err(|e| DataFusionError::Execution(e.to_string()))?;
            offsets.push(length);
            valid.push(true);
        }
        let DataType::Map(field, sorted) = first.data_type() else { return exec_err!("map_union takes maps") };
        let entries = StructArray::from(out.freeze());
        let offsets = OffsetBuffer::new(offsets.into());
        let map = MapArray::try_new(field.clone(), offsets, entries, Some(NullBuffer::from(valid)), *sorted)?;
        Ok(ColumnarValue::Array(Arc::new(map)))
    }
}

/// `weir_raise_error(message)`: fails the query with `message` if a row reaches it (an
/// `ERROR ON EMPTY` / `ON ERROR` clause of Flink's JSON functions). Volatile, so that it is
/// never evaluated ahead of time, when the query is planned; its NULL type takes any other.
#[derive(Debug, PartialEq, Eq, Hash)]
struct RaiseError {
    signature: Signature,
}

impl ScalarUDFImpl for RaiseError {
    fn name(&self) -> &str {
        "weir_raise_error"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> datafusion::error::Result<DataType> {
        Ok(DataType::Null)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> datafusion::error::Result<ColumnarValue> {
        let message = match args.args.first() {
            Some(ColumnarValue::Scalar(ScalarValue::Utf8(Some(message)))) => message.clone(),
            _ => "the query raised an error".to_string(),
        };
        match args.number_rows {
            0 => Ok(ColumnarValue::Scalar(ScalarValue::Null)),
            _ => exec_err!("{message}"),
        }
    }
}

/// `is_json(text, kind)`: Flink's `IS JSON [VALUE | SCALAR | ARRAY | OBJECT]`, whether the
/// text is JSON of that kind (a scalar: not an array nor an object); NULL is not JSON.
#[derive(Debug, PartialEq, Eq, Hash)]
struct IsJson {
    signature: Signature,
}

impl ScalarUDFImpl for IsJson {
    fn name(&self) -> &str {
        "is_json"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> datafusion::error::Result<DataType> {
        Ok(DataType::Boolean)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> datafusion::error::Result<ColumnarValue> {
        let [text, kind] = args.args.as_slice() else { return exec_err!("is_json(text, kind) takes two texts") };
        let (text, kind) = (texts(&text.to_array(args.number_rows)?)?, texts(&kind.to_array(args.number_rows)?)?);
        let mut out = Vec::with_capacity(text.len());
        for row in 0..text.len() {
            let value =
                text.is_valid(row).then(|| serde_json::from_str::<serde_json::Value>(text.value(row)).ok()).flatten();
            let wanted = if kind.is_valid(row) { kind.value(row) } else { "VALUE" };
            out.push(match (value, wanted) {
                (None, _) => false,
                (Some(_), "VALUE") => true,
                (Some(v), "SCALAR") => !v.is_array() && !v.is_object(),
                (Some(v), "ARRAY") => v.is_array(),
                (Some(v), "OBJECT") => v.is_object(),
                (Some(_), other) => return exec_err!("IS JSON {other}: expected VALUE, SCALAR, ARRAY or OBJECT"),
            });
        }
        Ok(ColumnarValue::Array(Arc::new(BooleanArray::from(out))))
    }
}

/// What a text function does to its argument columns.
type TextOf = fn(&[ArrayRef]) -> datafusion::error::Result<StringArray>;

/// A function of text made by a plain Rust function over the argument columns.
#[derive(Debug)]
struct TextFunction {
    name: &'static str,
    signature: Signature,
    apply: TextOf,
}

impl PartialEq for TextFunction {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
    }
}

impl Eq for TextFunction {}

impl std::hash::Hash for TextFunction {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.name.hash(state);
    }
}

impl ScalarUDFImpl for TextFunction {
    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> datafusion::error::Result<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> datafusion::error::Result<ColumnarValue> {
        let columns =
            args.args.iter().map(|a| a.to_array(args.number_rows)).collect::<datafusion::error::Result<Vec<_>>>()?;
        Ok(ColumnarValue::Array(Arc::new((self.apply)(&columns)?)))
    }
}

/// Flink's text functions weir computes itself: (name, arguments, what it does).
const TEXT_FUNCTIONS: [(&str, usize, TextOf); 10] = [
    ("sha1", 1, sha1),
    ("json_string", 1, json_string),
    ("json_built", 1, json_built),
    ("hex", 1, hex),
    ("bin", 1, bin),
    ("url_encode", 1, url_encode),
    ("url_decode", 1, url_decode),
    ("convert_tz", 3, convert_tz),
    ("json_compact", 1, json_compact),
    ("json_unique_keys", 1, json_unique_keys),
];

/// Each row's text of `column` cast to text.
fn texts(column: &ArrayRef) -> datafusion::error::Result<StringArray> {
    let text = cast(column, &DataType::Utf8)?;
    match text.as_any().downcast_ref::<StringArray>() {
        Some(text) => Ok(text.clone()),
        None => exec_err!("the argument did not cast to text"),
    }
}

/// `sha1(text)`: the SHA-1 digest as 40 hex digits.
fn sha1(args: &[ArrayRef]) -> datafusion::error::Result<StringArray> {
    let [text] = args else { return exec_err!("sha1(text) takes one text") };
    let hex = |t: &str| Sha1::digest(t.as_bytes()).iter().map(|b| format!("{b:02x}")).collect::<String>();
    Ok(texts(text)?.iter().map(|t| t.map(hex)).collect())
}

/// `json_string(value)`: arrow-json writes each value as the field `v` of an object,
/// `{"v":<value>}` (`{}` for NULL): the value's text is what is between.
fn json_string(args: &[ArrayRef]) -> datafusion::error::Result<StringArray> {
    let [values] = args else { return exec_err!("json_string(value) takes one value") };
    let schema = Arc::new(Schema::new(vec![Field::new("v", values.data_type().clone(), true)]));
    let batch = RecordBatch::try_new(schema, vec![values.clone()])?;
    let mut lines = Vec::new();
    {
        let mut writer = datafusion::arrow::json::WriterBuilder::new().build::<_, LineDelimited>(&mut lines);
        writer.write(&batch)?;
        writer.finish()?;
    }
    let text = String::from_utf8_lossy(&lines);
    Ok(text.lines().map(|line| line.strip_prefix("{\"v\":").and_then(|rest| rest.strip_suffix('}'))).collect())
}

/// `json_built(text)`: its text, unchanged. It marks a JSON text made by one of Flink's JSON
/// construction functions, which another embeds as JSON, not as a string
/// (`flink_functions.rs`).
fn json_built(args: &[ArrayRef]) -> datafusion::error::Result<StringArray> {
    let [text] = args else { return exec_err!("json_built(text) takes one text") };
    texts(text)
}

/// `json_compact(json)`: JSON text without the whitespace between its tokens, as Flink's
/// JSON_QUERY writes the value it finds (`{"b": 1}` is `{"b":1}`); strings are kept as they are.
fn json_compact(args: &[ArrayRef]) -> datafusion::error::Result<StringArray> {
    let [value] = args else { return exec_err!("json_compact takes one text") };
    let compact = |text: &str| {
        let (mut out, mut in_string, mut escaped) = (String::with_capacity(text.len()), false, false);
        for c in text.chars() {
            match (in_string, escaped, c) {
                (true, true, _) => escaped = false,
                (true, false, '\\') => escaped = true,
                (_, false, '"') => in_string = !in_string,
                (false, _, ' ' | '\t' | '\n' | '\r') => continue,
                _ => {}
            }
            out.push(c);
        }
        out
    };
    Ok(texts(value)?.iter().map(|t| t.map(compact)).collect())
}

/// `json_unique_keys(object)`: the JSON object's text as it is, failing the query if a key
/// is in it twice (JSON_OBJECTAGG's group gave a key twice: Flink's fails too).
fn json_unique_keys(args: &[ArrayRef]) -> datafusion::error::Result<StringArray> {
    let [object] = args else { return exec_err!("json_unique_keys takes one text") };
    let objects = texts(object)?;
    for text in objects.iter().flatten() {
        let mut reader = serde_json::Deserializer::from_str(text);
        let repeated = serde::Deserializer::deserialize_map(&mut reader, RepeatedKey)
            .map_err(|e| DataFusionError::Execution(format!("JSON_OBJECTAGG built '{text}': {e}")))?;
        if let Some(key) = repeated {
            return exec_err!("JSON_OBJECTAGG: the key '{key}' is given twice in one group");
        }
    }
    Ok(objects)
}

/// A JSON object's first key given twice, if any.
struct RepeatedKey;

impl<'de> serde::de::Visitor<'de> for RepeatedKey {
    type Value = Option<String>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> std::result::Result<Self::Value, A::Error> {
        // Read to the end (serde_json checks what follows the object).
        let (mut seen, mut repeated) = (std::collections::HashSet::new(), None);
        while let Some(key) = map.next_key::<String>()? {
            map.next_value::<serde::de::IgnoredAny>()?;
            if !seen.insert(key.clone()) && repeated.is_none() {
                repeated = Some(key);
            }
        }
        Ok(repeated)
    }
}

/// `HEX(n)`: an integer's hex digits (a negative one's 64-bit two's complement, as Java's
/// `Long.toHexString`); `HEX(s)`: the hex of the text's or bytes' bytes. Upper case.
fn hex(args: &[ArrayRef]) -> datafusion::error::Result<StringArray> {
    let [value] = args else { return exec_err!("HEX takes one value") };
    let bytes_hex = |bytes: &[u8]| bytes.iter().map(|b| format!("{b:02X}")).collect::<String>();
    if value.data_type().is_integer() {
        let numbers = cast(value, &DataType::Int64)?;
        let numbers = numbers.as_any().downcast_ref::<Int64Array>().cloned();
        let Some(numbers) = numbers else { return exec_err!("HEX: the number did not cast to BIGINT") };
        return Ok(numbers.iter().map(|n| n.map(|n| format!("{:X}", n as u64))).collect());
    }
    if let Some(bytes) = value.as_any().downcast_ref::<BinaryArray>() {
        return Ok(bytes.iter().map(|b| b.map(bytes_hex)).collect());
    }
    Ok(texts(value)?.iter().map(|t| t.map(|t| bytes_hex(t.as_bytes()))).collect())
}

/// `BIN(n)`: an integer's binary digits (a negative one's 64-bit two's complement, as Java's
/// `Long.toBinaryString`).
fn bin(args: &[ArrayRef]) -> datafusion::error::Result<StringArray> {
    let [value] = args else { return exec_err!("BIN takes one integer") };
    let numbers = cast(value, &DataType::Int64)?;
    let Some(numbers) = numbers.as_any().downcast_ref::<Int64Array>() else {
        return exec_err!("BIN: the argument did not cast to BIGINT");
    };
    Ok(numbers.iter().map(|n| n.map(|n| format!("{:b}", n as u64))).collect())
}

/// `URL_ENCODE(s)` as Java's `URLEncoder` with UTF-8: letters, digits and `.-*_` kept, a space
/// `+`, every other byte `%XX`.
fn url_encode(args: &[ArrayRef]) -> datafusion::error::Result<StringArray> {
    let [value] = args else { return exec_err!("URL_ENCODE takes one text") };
    let encode = |text: &str| {
        let mut out = String::with_capacity(text.len());
        for byte in text.bytes() {
            match byte {
                b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'.' | b'-' | b'*' | b'_' => out.push(byte as char),
                b' ' => out.push('+'),
                _ => out.push_str(&format!("%{byte:02X}")),
            }
        }
        out
    };
    Ok(texts(value)?.iter().map(|t| t.map(encode)).collect())
}

/// `URL_DECODE(s)` as Java's `URLDecoder` with UTF-8: `+` a space, `%XX` a byte; NULL where
/// the text does not decode (a bad escape, or bytes that are not UTF-8), as Flink's.
fn url_decode(args: &[ArrayRef]) -> datafusion::error::Result<StringArray> {
    let [value] = args else { return exec_err!("URL_DECODE takes one text") };
    let decode = |text: &str| -> Option<String> {
        let mut bytes = Vec::with_capacity(text.len());
        let mut input = text.bytes();
        while let Some(byte) = input.next() {
            match byte {
                b'+' => bytes.push(b' '),
                b'%' => {
                    let digits = [input.next()?, input.next()?];
                    bytes.push(u8::from_str_radix(std::str::from_utf8(&digits).ok()?, 16).ok()?);
                }
                _ => bytes.push(byte),
            }
        }
        String::from_utf8(bytes).ok()
    };
    Ok(texts(value)?.iter().map(|t| t.and_then(decode)).collect())
}

/// `CONVERT_TZ(s, from, to)`: the local time `s` ('yyyy-MM-dd HH:mm:ss') of zone `from` as the
/// local time of zone `to`, in the same format (zones as IANA names or fixed offsets such as
/// 'GMT+08:00'). A time `from` skips (a DST gap), a text that does not parse or a zone that is
/// none gives NULL (Java, under Flink's, reads an unknown zone as GMT without a word).
fn convert_tz(args: &[ArrayRef]) -> datafusion::error::Result<StringArray> {
    let [value, from, to] = args else { return exec_err!("CONVERT_TZ takes a time and two zones") };
    let (value, from, to) = (texts(value)?, texts(from)?, texts(to)?);
    let mut out = Vec::with_capacity(value.len());
    for row in 0..value.len() {
        let (true, true, true) = (value.is_valid(row), from.is_valid(row), to.is_valid(row)) else {
            out.push(None);
            continue;
        };
        let (Some(from), Some(to)) = (time_zone(from.value(row)), time_zone(to.value(row))) else {
            out.push(None);
            continue;
        };
        let local = chrono::NaiveDateTime::parse_from_str(value.value(row).trim(), "%Y-%m-%d %H:%M:%S").ok();
        let converted = local.and_then(|local| from.instant(local)).map(|utc| to.local(utc));
        out.push(converted.map(|t| t.format("%Y-%m-%d %H:%M:%S").to_string()));
    }
    Ok(StringArray::from(out))
}

/// A time zone as Flink names them: an IANA name, or a fixed offset from UTC or GMT.
enum Zone {
    Named(chrono_tz::Tz),
    Fixed(chrono::FixedOffset),
}

impl Zone {
    fn instant(&self, local: chrono::NaiveDateTime) -> Option<chrono::DateTime<chrono::Utc>> {
        use chrono::TimeZone;
        match self {
            Zone::Named(tz) => tz.from_local_datetime(&local).earliest().map(|t| t.to_utc()),
            Zone::Fixed(offset) => offset.from_local_datetime(&local).single().map(|t| t.to_utc()),
        }
    }

    fn local(&self, utc: chrono::DateTime<chrono::Utc>) -> chrono::NaiveDateTime {
        match self {
            Zone::Named(tz) => utc.with_timezone(tz).naive_local(),
            Zone::Fixed(offset) => utc.with_timezone(offset).naive_local(),
        }
    }
}

fn time_zone(name: &str) -> Option<Zone> {
    if let Ok(tz) = name.parse::<chrono_tz::Tz>() {
        return Some(Zone::Named(tz));
    }
    // GMT+08:00, UTC-5, +01:30
    let offset = name.trim_start_matches("GMT").trim_start_matches("UTC");
    let (sign, digits) = match offset.strip_prefix('+') {
        Some(rest) => (1, rest),
        None => (-1, offset.strip_prefix('-').unwrap_or("")),
    };
    let (hours, minutes) = digits.split_once(':').unwrap_or((digits, "0"));
    let seconds = match (hours.parse::<i32>(), minutes.parse::<i32>()) {
        (Ok(h), Ok(m)) if !digits.is_empty() => Some(sign * (h * 3600 + m * 60)),
        _ => None,
    };
    seconds.and_then(chrono::FixedOffset::east_opt).map(Zone::Fixed)
}

/// The functions to register with a DataFusion context.
pub fn flink_udfs() -> Vec<ScalarUDF> {
    [
        ScalarUDF::from(StrToMap { signature: Signature::variadic_any(Volatility::Immutable) }),
        ScalarUDF::from(IsJson { signature: Signature::any(2, Volatility::Immutable) }),
        ScalarUDF::from(Printf { signature: Signature::variadic_any(Volatility::Immutable) }),
        ScalarUDF::from(RegexpExtractAll { signature: Signature::any(3, Volatility::Immutable) }),
        ScalarUDF::from(MapUnion { signature: Signature::user_defined(Volatility::Immutable) }),
        ScalarUDF::from(RaiseError { signature: Signature::exact(vec![DataType::Utf8], Volatility::Volatile) }),
    ]
    .into_iter()
    .chain(TEXT_FUNCTIONS.iter().map(|&(name, arity, apply)| {
        ScalarUDF::from(TextFunction { name, signature: Signature::any(arity, Volatility::Immutable), apply })
    }))
    .collect()
}
