//! Flink's built-in functions that DataFusion lacks, rewritten on the parsed statement into
//! DataFusion expressions of the same meaning (Flink's function reference):
//!
//! | Flink | becomes |
//! |---|---|
//! | `MOD(a, b)` | `a % b` |
//! | `YEAR(t)`, `QUARTER`, `MONTH`, `WEEK`, `DAYOFYEAR`, `DAYOFMONTH`, `HOUR`, `MINUTE`, `SECOND` | `CAST(date_part('...', t) AS BIGINT)` |
//! | `DAYOFWEEK(t)` (1 is Sunday) | `CAST(date_part('dow', t) AS BIGINT) + 1` |
//! | `FLOOR(t TO HOUR)`, `CEIL(t TO DAY)`... | `date_trunc`, and one unit more unless already on it |
//! | `TIMESTAMPADD(HOUR, n, t)`, `TIMESTAMPDIFF(MINUTE, t1, t2)` | `t + CAST(concat(n, ' hour') AS INTERVAL)`, whole units between epochs (months for MONTH, QUARTER, YEAR) |
//! | `UNIX_TIMESTAMP([s[, format]])`, `TO_TIMESTAMP_LTZ(n, 0 or 3)` | epoch seconds of now or of `s`; `to_timestamp_seconds` / `_millis` |
//! | `LOCALTIMESTAMP`, `LOCALTIME` | `now()`, `current_time()` (in Flink's dialect as `CURRENT_TIMESTAMP` below) |
//! | `SPLIT_INDEX(s, sep, i)` (0-based; NULL out of range) | the `i + 1`th element of `string_to_array(s, sep)` |
//! | `REGEXP_EXTRACT(s, r[, i])` (group `i`, 1 by default, 0 the whole match) | an element of `regexp_match` |
//! | `REGEXP(s, r)`, `LOCATE(sub, s[, from])`, `ELT(i, a, ...)` | `regexp_like`, `strpos`, `CASE` |
//! | `TO_BASE64(s)`, `FROM_BASE64(s)` | `encode`/`decode` base64 (padded, as Java's) |
//! | `PARSE_URL(url, 'HOST' / 'PATH' / 'QUERY' / ..., [key])` | `regexp_match` of the part (RFC 3986's form) |
//! | `DATE_FORMAT(t, 'yyyy-MM-dd HH:mm')` (Java's pattern letters) | `to_char(t, '%Y-%m-%d %H:%M')` |
//! | `IF(c, a, b)`, `IS_ALPHA(s)`, `IS_DIGIT(s)`, `IS_DECIMAL(s)` | `CASE`, Unicode-class `regexp_like`, `TRY_CAST` (NULL is false) |
//! | `CEILING`, `SIGN`, `E()`, `TRUNCATE(x, d)`, `RAND_INTEGER(n)`, `ELEMENT(a)` | `ceil`, `signum`, `exp(1)`, `trunc`, `floor(random() * n)`, the single element |
//! | `SHA1(s)` (weir's `sha1`, `flink_udfs.rs`), `SHA2(s, bits)` | the hex of `digest(s, 'sha<bits>')` |
//! | `STR_TO_MAP(s[, pair delimiter, key-value delimiter])`, `MAP_UNION(m, ...)` | weir's `str_to_map`, `map_union` (`flink_udfs.rs`) |
//! | `JSON_STRING(v)`, `JSON_OBJECT(k VALUE v, ... [NULL/ABSENT ON NULL])`, `JSON_ARRAY(v, ...)` | `json_string` (weir's) of each value, joined |
//! | `JSON_OBJECTAGG(k VALUE v)`, `JSON_ARRAYAGG(v)` | `string_agg` of `json_string` members |
//! | `HEX`, `BIN`, `URL_ENCODE`, `URL_DECODE`, `CONVERT_TZ` | weir's functions of those names (`flink_udfs.rs`) |
//! | `LISTAGG(s[, sep])`, `VARIANCE(x)`, `PERCENTILE(x, p)` | `string_agg` (`,` by default), `var_samp`, `percentile_cont` |
//! | `STARTSWITH`, `ENDSWITH`, `REGEXP_SUBSTR`, `REGEXP_EXTRACT_ALL` (weir's UDF), `SPLIT(s, d)` | `starts_with`, `ends_with`, `regexp_match`, `regexp_extract_all`, `string_to_array` (`''` splits every character) |
//! | `JSON_QUOTE`, `JSON_UNQUOTE`, `TYPEOF`, `UNHEX`, `MAP_FROM_ARRAYS` | `json_string`, `json_as_text` of a quoted text, `arrow_typeof`, `decode(.., 'hex')`, `map` |
//! | `MAP[k1, v1, ...]` (a value) | `make_map(k1, v1, ...)`, via [`map_constructors`] |
//! | `PRINTF(format, ...)` (Java's format) | weir's `printf` (`flink_udfs.rs`); a literal format checked when planned |
//! | `(s1, e1) OVERLAPS (s2, e2)` (an end may be an interval after its start) | `least`/`greatest` of each period compared |
//! | `s IS [NOT] JSON [VALUE / SCALAR / ARRAY / OBJECT]` | `[NOT] is_json(s, 'KIND')` (`flink_udfs.rs`), via [`is_json_predicates`] |
//! | `JSON_VALUE`, `JSON_QUERY`, `JSON_EXISTS` with their clauses | see `json_functions.rs` |
//! | `TUMBLE_START(...)`, `HOP_START`, `SESSION_START` (legacy group windows) | `tumble(...)`, `hop`, `session`: the window start GROUP BY has |
//! | `TUMBLE_ROWTIME(...)`, `HOP_ROWTIME`, `SESSION_ROWTIME` | `tumble_end(...) - INTERVAL '1' MILLISECOND` (a time attribute) |
//!
//! Where DataFusion has a function of the same name that means something else, the Flink
//! meaning applies in Flink's dialect only (`sql.dialect = 'flink'`): `LOG(x)` (Flink's is the
//! natural logarithm, DataFusion's base 10), `SHA224`..`SHA512` (Flink's give hex text,
//! DataFusion's bytes), `FROM_UNIXTIME(n[, format])` (Flink's gives text), `TO_DATE(s, format)` and
//! `TO_TIMESTAMP(s[, format])` (Flink's formats are Java's; its timestamps milliseconds),
//! `ARRAY_PREPEND(array, e)` (DataFusion's takes the element first), `CURRENT_TIMESTAMP`,
//! `NOW()`, `LOCALTIMESTAMP`, `CURRENT_DATE`, `CURRENT_TIME`, `LOCALTIME` (Flink evaluates them
//! for each record; DataFusion's are the planning time: `current_row_timestamp()`, cast), `ENCODE(s, 'UTF-8')` /
//! `DECODE(b, 'UTF-8')` (a charset: casts; DataFusion's take base64 or hex). Refused by name:
//! `COLLECT` (no multiset), `RAND(seed)` and a seeded `RAND_INTEGER`, other charsets.
//!
//! (`TUMBLE(...)` in GROUP BY and `TUMBLE_END(...)` are weir's own window functions already;
//! `window_functions.rs`.)
//!
//! The rewrite builds each replacement as SQL text around its arguments' text and parses it,
//! so the arguments are written once and the result reads like what a user would write. A
//! DataFusion function whose name Flink's dialect rewrites is written quoted (`"to_date"(...)`),
//! and a quoted name is never rewritten: the statement's text, stored and planned again on a
//! resume, gives the same plan.

use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{
    BinaryOperator, CeilFloorKind, DateTimeField, Expr, FunctionArg, FunctionArgExpr, FunctionArgOperator,
    FunctionArgumentClause, FunctionArguments, JsonNullClause, Statement, Value, ValueWithSpan, VisitMut,
    visit_expressions_mut,
};
use datafusion::sql::sqlparser::dialect::GenericDialect;
use datafusion::sql::sqlparser::parser::Parser;
use datafusion::sql::sqlparser::tokenizer::{Token, TokenWithSpan};

use crate::error::{Error, Result};
use crate::flink_types::{space, word};
use crate::identifiers::Dialect;
use crate::window_table_functions::{is_word, skip_space};

/// Rewrites every call of one of Flink's functions in `statement`, read in `dialect`; a
/// select list item so rewritten keeps the name it was written as.
pub fn rewrite(statement: &mut Statement, dialect: Dialect) -> Result<()> {
    crate::field_names::keep_written_names(statement, &|expr| {
        let mut copy = expr.clone();
        rewrite_all(&mut copy, dialect)?;
        Ok(copy != *expr)
    })?;
    rewrite_all(statement, dialect)
}

/// Rewrites every call of one of Flink's functions in `node`.
fn rewrite_all<V: VisitMut>(node: &mut V, dialect: Dialect) -> Result<()> {
    let flow = visit_expressions_mut(node, |expr| match replacement(expr, dialect) {
        Ok(Some(new)) => {
            *expr = new;
            ControlFlow::Continue(())
        }
        Ok(None) => ControlFlow::Continue(()),
        Err(error) => ControlFlow::Break(error),
    });
    match flow {
        ControlFlow::Break(error) => Err(error),
        ControlFlow::Continue(()) => Ok(()),
    }
}

/// The text of a string literal argument, if it is one.
fn literal(arg: Option<&FunctionArg>) -> Option<String> {
    match arg {
        Some(FunctionArg::Unnamed(FunctionArgExpr::Expr(Expr::Value(ValueWithSpan {
            value: Value::SingleQuotedString(text),
            ..
        })))) => Some(text.clone()),
        _ => None,
    }
}

/// A string as an SQL literal.
fn quoted(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

/// The marker function Flink's `IS JSON` predicate is parsed through (see [`is_json_predicates`]).
const JSON_KIND: &str = "weir_json_kind";

/// `x IS [NOT] JSON [VALUE | SCALAR | ARRAY | OBJECT]`, which sqlparser does not read, spelled
/// as a predicate it does read with the same precedence: `x IS [NOT] DISTINCT FROM
/// weir_json_kind('KIND')` (IS JSON is IS NOT DISTINCT, IS NOT JSON is IS DISTINCT), which
/// [`rewrite`] then makes `is_json(x, 'KIND')` (`flink_udfs.rs`).
pub fn is_json_predicates(tokens: Vec<TokenWithSpan>) -> Vec<TokenWithSpan> {
    let mut out = Vec::with_capacity(tokens.len());
    let mut i = 0;
    while i < tokens.len() {
        if !is_word(tokens.get(i), "IS") {
            out.push(tokens[i].clone());
            i += 1;
            continue;
        }
        let mut j = skip_space(&tokens, i + 1);
        let negated = is_word(tokens.get(j), "NOT");
        if negated {
            j = skip_space(&tokens, j + 1);
        }
        if !is_word(tokens.get(j), "JSON") {
            out.push(tokens[i].clone());
            i += 1;
            continue;
        }
        let span = tokens[i].span;
        let mut end = j + 1;
        let mut kind = "VALUE".to_string();
        let after = skip_space(&tokens, end);
        if let Some(found) = ["VALUE", "SCALAR", "ARRAY", "OBJECT"].iter().find(|k| is_word(tokens.get(after), k)) {
            kind = found.to_string();
            end = after + 1;
        }
        let words: &[&str] = if negated { &["IS", "DISTINCT", "FROM"] } else { &["IS", "NOT", "DISTINCT", "FROM"] };
        for w in words {
            out.extend([word(w, span), space(span)]);
        }
        out.push(word(JSON_KIND, span));
        out.push(TokenWithSpan { token: Token::LParen, span });
        out.push(TokenWithSpan { token: Token::SingleQuotedString(kind), span });
        out.push(TokenWithSpan { token: Token::RParen, span });
        i = end;
    }
    out
}

/// Flink's map value constructor `MAP[k1, v1, k2, v2, ...]`, which sqlparser reads as a
/// subscript, spelled as DataFusion's `make_map(k1, v1, ...)`. A subscript never has a comma
/// between its brackets, so `map['k']` of a column named map is left alone.
pub fn map_constructors(mut tokens: Vec<TokenWithSpan>) -> Vec<TokenWithSpan> {
    let mut i = 0;
    while i < tokens.len() {
        let open = skip_space(&tokens, i + 1);
        if !is_word(tokens.get(i), "MAP") || tokens.get(open).map(|t| &t.token) != Some(&Token::LBracket) {
            i += 1;
            continue;
        }
        let (mut depth, mut comma, mut close) = (0i64, false, None);
        for (j, token) in tokens.iter().enumerate().skip(open) {
            match token.token {
                Token::LBracket | Token::LParen | Token::LBrace => depth += 1,
                Token::RBracket if depth == 1 => {
                    close = Some(j);
                    break;
                }
                Token::RBracket | Token::RParen | Token::RBrace => depth -= 1,
                Token::Comma if depth == 1 => comma = true,
                _ => {}
            }
        }
        if let (Some(close), true) = (close, comma) {
            let span = tokens[i].span;
            tokens[i] = word("make_map", span);
            tokens[open].token = Token::LParen;
            tokens[close].token = Token::RParen;
        }
        i += 1;
    }
    tokens
}

/// The kind of an `IS JSON` marker, if `expr` is one.
fn json_kind(expr: &Expr) -> Option<String> {
    let Expr::Function(function) = expr else { return None };
    if function.name.to_string() != JSON_KIND {
        return None;
    }
    let FunctionArguments::List(list) = &function.args else { return None };
    literal(list.args.first())
}

/// The DataFusion expression for `expr` if it is one of Flink's functions.
fn replacement(expr: &Expr, dialect: Dialect) -> Result<Option<Expr>> {
    let sql = match expr {
        Expr::Function(function) => {
            // Only an unquoted, unqualified name is Flink's.
            let [part] = function.name.0.as_slice() else { return Ok(None) };
            let Some(ident) = part.as_ident().filter(|i| i.quote_style.is_none()) else { return Ok(None) };
            let upper = ident.value.to_ascii_uppercase();
            let FunctionArguments::List(list) = &function.args else {
                // SQL's niladic functions: sqlparser reads them as calls without arguments.
                let flink = dialect == Dialect::Flink;
                return match (upper.as_str(), &function.args) {
                    // In a stream Flink evaluates the time for each record.
                    ("CURRENT_TIMESTAMP" | "LOCALTIMESTAMP", FunctionArguments::None) if flink => {
                        parse(&upper, PER_ROW_NOW).map(Some)
                    }
                    ("CURRENT_DATE", FunctionArguments::None) if flink => {
                        parse(&upper, &format!("CAST({PER_ROW_NOW} AS DATE)")).map(Some)
                    }
                    ("CURRENT_TIME" | "LOCALTIME", FunctionArguments::None) if flink => {
                        parse(&upper, &format!("CAST({PER_ROW_NOW} AS TIME)")).map(Some)
                    }
                    ("LOCALTIMESTAMP", FunctionArguments::None) => parse("LOCALTIMESTAMP", "now()").map(Some),
                    ("LOCALTIME", FunctionArguments::None) => parse("LOCALTIME", "current_time()").map(Some),
                    _ => Ok(None),
                };
            };
            let returning = list.clauses.iter().find_map(|c| match c {
                FunctionArgumentClause::JsonReturningClause(r) => Some(r.data_type.to_string()),
                _ => None,
            });
            let absent_on_null = list.clauses.iter().find_map(|c| match c {
                FunctionArgumentClause::JsonNullClause(clause) => Some(*clause == JsonNullClause::AbsentOnNull),
                _ => None,
            });
            if let Some(sql) = json_builder(&upper, &list.args, absent_on_null)? {
                return parse(&upper, &sql).map(Some);
            }
            match call(&upper, &list.args, returning, dialect)? {
                Some(sql) => sql,
                None => return Ok(None),
            }
        }
        Expr::BinaryOp { left, op: BinaryOperator::Overlaps, right } => overlaps(left, right)?,
        Expr::IsNotDistinctFrom(value, marker) if json_kind(marker).is_some() => {
            format!("is_json({value}, '{}')", json_kind(marker).unwrap_or_default())
        }
        Expr::IsDistinctFrom(value, marker) if json_kind(marker).is_some() => {
            format!("NOT is_json({value}, '{}')", json_kind(marker).unwrap_or_default())
        }
        Expr::Floor { expr, field: CeilFloorKind::DateTimeField(unit) } if *unit != DateTimeField::NoDateTime => {
            format!("date_trunc('{}', {expr})", unit.to_string().to_lowercase())
        }
        Expr::Ceil { expr, field: CeilFloorKind::DateTimeField(unit) } if *unit != DateTimeField::NoDateTime => {
            let unit = unit.to_string().to_lowercase();
            format!(
                "CASE WHEN date_trunc('{unit}', {expr}) = {expr} THEN {expr} ELSE date_trunc('{unit}', {expr}) + INTERVAL '1' {unit} END"
            )
        }
        _ => return Ok(None),
    };
    parse("a Flink function", &sql).map(Some)
}

/// `(s1, e1) OVERLAPS (s2, e2)`, each end a time or an interval after its start: whether the
/// two periods, each ordered start to end, share a moment (Flink's, after Calcite's).
fn overlaps(left: &Expr, right: &Expr) -> Result<String> {
    let period = |side: &Expr| -> Result<(String, String)> {
        let Expr::Tuple(ends) = side else {
            return plan_error("OVERLAPS compares two periods, as in (start, end) OVERLAPS (start, end)");
        };
        let [start, end] = ends.as_slice() else {
            return plan_error("an OVERLAPS period is (start, end) or (start, interval)");
        };
        let end = match end {
            Expr::Interval(_) => format!("({start}) + {end}"),
            _ => format!("({end})"),
        };
        let start = format!("({start})");
        Ok((format!("least({start}, {end})"), format!("greatest({start}, {end})")))
    };
    let ((s1, e1), (s2, e2)) = (period(left)?, period(right)?);
    Ok(format!("({s1} <= {e2} AND {s2} <= {e1})"))
}

/// The time now, evaluated for each batch (`proctime_function.rs`).
const PER_ROW_NOW: &str = "current_row_timestamp()";

/// UNIX_TIMESTAMP(): the epoch seconds of now.
const UNIX_NOW: &str = "CAST(date_part('epoch', now()) AS BIGINT)";

fn parse(name: &str, sql: &str) -> Result<Expr> {
    Parser::new(&GenericDialect {})
        .try_with_sql(sql)
        .and_then(|mut parser| parser.parse_expr())
        .map_err(|e| Error::Plan(format!("{name}: {e}")))
}

/// The DataFusion SQL for Flink's function `name` called with `list`, if it is one.
fn call(name: &str, list: &[FunctionArg], returning: Option<String>, dialect: Dialect) -> Result<Option<String>> {
    let args: Vec<String> = list
        .iter()
        .filter_map(|arg| match arg {
            FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) => Some(format!("({e})")),
            _ => None,
        })
        .collect();
    if args.len() != list.len() {
        return Ok(None);
    }
    let flink = dialect == Dialect::Flink;
    let date_part = |part: &str| match args.as_slice() {
        [t] => Ok(format!("CAST(date_part('{part}', {t}) AS BIGINT)")),
        _ => arity(name, "one timestamp"),
    };
    // A Java date format argument, as chrono's.
    let format_at = |index: usize| match literal(list.get(index)) {
        Some(format) => Ok(chrono_format(&format)),
        None => {
            plan_error(&format!("{name} takes a quoted format such as 'yyyy-MM-dd HH:mm:ss' as argument {}", index + 1))
        }
    };
    let sql = match name {
        "MOD" => match args.as_slice() {
            [a, b] => format!("{a} % {b}"),
            _ => return arity(name, "two numbers"),
        },
        "YEAR" | "QUARTER" | "MONTH" | "WEEK" | "HOUR" | "MINUTE" | "SECOND" => date_part(&name.to_lowercase())?,
        "DAYOFYEAR" => date_part("doy")?,
        "DAYOFMONTH" => date_part("day")?,
        "DAYOFWEEK" => format!("{} + 1", date_part("dow")?),
        "TIMESTAMPADD" => match (list.first().map(ToString::to_string), args.as_slice()) {
            (Some(unit), [_, n, t]) => {
                let (count, unit) = interval_unit(&unit)?;
                format!("{t} + CAST(concat({n} * {count}, ' {unit}') AS INTERVAL)")
            }
            _ => return arity(name, "a unit (SECOND .. YEAR), a count and a timestamp"),
        },
        "TIMESTAMPDIFF" => match (list.first().map(ToString::to_string), args.as_slice()) {
            (Some(unit), [_, from, to]) => timestamp_diff(&unit, from, to)?,
            _ => return arity(name, "a unit (SECOND .. YEAR) and two timestamps"),
        },
        "UNIX_TIMESTAMP" => match args.as_slice() {
            [] => UNIX_NOW.to_string(),
            [s] => format!("CAST(date_part('epoch', \"to_timestamp\"({s})) AS BIGINT)"),
            [s, _] => format!("CAST(date_part('epoch', {}) AS BIGINT)", parse_time(s, &format_at(1)?)),
            _ => return arity(name, "nothing, a timestamp text, or a text and its format"),
        },
        "TO_TIMESTAMP_LTZ" => match (args.as_slice(), list.get(1).map(ToString::to_string).as_deref()) {
            ([n, _], Some("3")) => format!("to_timestamp_millis({n})"),
            ([n, _], Some("0")) => format!("to_timestamp_seconds({n})"),
            _ => return arity(name, "epoch seconds and 0, or epoch milliseconds and 3"),
        },
        "FROM_UNIXTIME" if flink => match args.as_slice() {
            [n] => format!("to_char(to_timestamp_seconds({n}), '%Y-%m-%d %H:%M:%S')"),
            [n, _] => format!("to_char(to_timestamp_seconds({n}), {})", quoted(&format_at(1)?)),
            _ => return arity(name, "epoch seconds and an optional format"),
        },
        "TO_DATE" if flink && args.len() == 2 => format!("\"to_date\"({}, {})", args[0], quoted(&format_at(1)?)),
        "TO_TIMESTAMP" if flink => match args.as_slice() {
            [s] => format!("to_timestamp_millis({s})"),
            [s, _] => parse_time(s, &format_at(1)?),
            _ => return arity(name, "a timestamp text and an optional format"),
        },
        "LOG" if flink && args.len() == 1 => format!("ln({})", args[0]),
        "SHA224" | "SHA256" | "SHA384" | "SHA512" if flink => match args.as_slice() {
            [s] => format!("encode(digest({s}, '{}'), 'hex')", name.to_lowercase()),
            _ => return arity(name, "one text"),
        },
        "SHA2" => match (args.as_slice(), list.get(1).map(ToString::to_string).as_deref()) {
            ([s, _], Some(bits @ ("224" | "256" | "384" | "512"))) => {
                format!("encode(digest({s}, 'sha{bits}'), 'hex')")
            }
            ([s, _], Some("0")) => format!("encode(digest({s}, 'sha256'), 'hex')"),
            _ => return arity(name, "a text and a number of bits (224, 256, 384 or 512)"),
        },
        "SPLIT_INDEX" => match args.as_slice() {
            [s, separator, index] => format!(
                "CASE WHEN {index} < 0 THEN NULL ELSE array_element(string_to_array({s}, {separator}), {index} + 1) END"
            ),
            _ => return arity(name, "a string, a separator and a 0-based index"),
        },
        "REGEXP_EXTRACT" => {
            let (s, regex, index) = match args.as_slice() {
                [s, regex] => (s, regex, "1".to_string()),
                [s, regex, index] => (s, regex, index.clone()),
                _ => return arity(name, "a string, a regular expression and an optional group index"),
            };
            format!(
                "CASE WHEN {index} = 0 THEN array_element(regexp_match({s}, concat('(', {regex}, ')')), 1) \
                 ELSE array_element(regexp_match({s}, {regex}), {index}) END"
            )
        }
        "REGEXP" => match args.as_slice() {
            [s, regex] => format!("regexp_like({s}, {regex})"),
            _ => return arity(name, "a string and a regular expression"),
        },
        "LOCATE" => match args.as_slice() {
            [sub, s] => format!("strpos({s}, {sub})"),
            [sub, s, from] => format!(
                "CASE WHEN strpos(substr({s}, {from}), {sub}) = 0 THEN 0 ELSE strpos(substr({s}, {from}), {sub}) + {from} - 1 END"
            ),
            _ => return arity(name, "a string to find, a string and an optional start"),
        },
        "ELT" => match args.split_first() {
            Some((index, values)) if !values.is_empty() => {
                let whens: String =
                    values.iter().enumerate().map(|(i, v)| format!(" WHEN {} THEN {v}", i + 1)).collect();
                format!("CASE {index}{whens} END")
            }
            _ => return arity(name, "an index and one or more values"),
        },
        "TO_BASE64" => match args.as_slice() {
            [s] => {
                format!("rpad(encode({s}, 'base64'), CAST((length(encode({s}, 'base64')) + 3) / 4 * 4 AS INT), '=')")
            }
            _ => return arity(name, "one text"),
        },
        "FROM_BASE64" => match args.as_slice() {
            [s] => format!("CAST(decode(rtrim({s}, '='), 'base64') AS VARCHAR)"),
            _ => return arity(name, "one text"),
        },
        "PARSE_URL" => parse_url(&args, list)?,
        "DATE_FORMAT" => match args.first() {
            Some(t) if args.len() == 2 => format!("to_char(CAST({t} AS TIMESTAMP), {})", quoted(&format_at(1)?)),
            _ => return arity(name, "a timestamp and a quoted format such as 'yyyy-MM-dd HH:mm'"),
        },
        "IF" => match args.as_slice() {
            [condition, then, otherwise] => format!("CASE WHEN {condition} THEN {then} ELSE {otherwise} END"),
            _ => return arity(name, "a condition and two values"),
        },
        "IS_ALPHA" | "IS_DIGIT" => match args.as_slice() {
            [s] => {
                let class = if name == "IS_ALPHA" { "\\p{L}" } else { "\\p{Nd}" };
                format!("COALESCE(regexp_like({s}, '^{class}+$'), false)")
            }
            _ => return arity(name, "one text"),
        },
        "IS_DECIMAL" => match args.as_slice() {
            [s] => {
                format!("COALESCE(TRY_CAST({s} AS DOUBLE) IS NOT NULL AND NOT isnan(TRY_CAST({s} AS DOUBLE)), false)")
            }
            _ => return arity(name, "one text"),
        },
        "CEILING" => format!("ceil({})", args.join(", ")),
        "SIGN" => format!("signum({})", args.join(", ")),
        "E" if args.is_empty() => "exp(1)".to_string(),
        "TRUNCATE" => format!("trunc({})", args.join(", ")),
        "LISTAGG" => match args.as_slice() {
            [s] => format!("string_agg({s}, ',')"),
            [s, separator] => format!("string_agg({s}, {separator})"),
            _ => return arity(name, "a text and an optional separator"),
        },
        "VARIANCE" => match args.as_slice() {
            [x] => format!("var_samp({x})"),
            _ => return arity(name, "one number"),
        },
        "PERCENTILE" => match args.as_slice() {
            [x, p] => format!("percentile_cont({x}, {p})"),
            _ => return arity(name, "a number and one percentage (an array of percentages is not supported)"),
        },
        "COLLECT" => {
            return plan_error(
                "COLLECT (a MULTISET) is not supported: weir has no multiset type; ARRAY_AGG collects the values into an array",
            );
        }
        "STARTSWITH" => match args.as_slice() {
            [s, prefix] => format!("starts_with({s}, {prefix})"),
            _ => return arity(name, "a text and a prefix"),
        },
        "ENDSWITH" => match args.as_slice() {
            [s, suffix] => format!("ends_with({s}, {suffix})"),
            _ => return arity(name, "a text and a suffix"),
        },
        "REGEXP_SUBSTR" => match args.as_slice() {
            [s, regex] => format!("array_element(regexp_match({s}, concat('(', {regex}, ')')), 1)"),
            _ => return arity(name, "a string and a regular expression"),
        },
        "REGEXP_EXTRACT_ALL" => match args.as_slice() {
            [s, regex] => format!("regexp_extract_all({s}, {regex}, 1)"),
            [s, regex, index] => format!("regexp_extract_all({s}, {regex}, {index})"),
            _ => return arity(name, "a string, a regular expression and an optional group index"),
        },
        "SPLIT" => match args.as_slice() {
            [s, delimiter] => format!(
                "CASE WHEN {delimiter} IS NULL THEN NULL WHEN {delimiter} = '' THEN string_to_array({s}, NULL) ELSE string_to_array({s}, {delimiter}) END"
            ),
            _ => return arity(name, "a string and a delimiter"),
        },
        "JSON_QUOTE" => match args.as_slice() {
            [s] => format!("json_string(CAST({s} AS VARCHAR))"),
            _ => return arity(name, "one text"),
        },
        "JSON_UNQUOTE" => match args.as_slice() {
            [s] => format!("CASE WHEN {s} LIKE '\"%\"' THEN json_as_text({s}) ELSE {s} END"),
            _ => return arity(name, "one text"),
        },
        "TYPEOF" => match args.as_slice() {
            [x] => format!("arrow_typeof({x})"),
            _ => return arity(name, "one value"),
        },
        "UNHEX" => match args.as_slice() {
            [s] => format!("decode({s}, 'hex')"),
            _ => return arity(name, "one text of hex digits"),
        },
        "MAP_FROM_ARRAYS" => match args.as_slice() {
            [keys, values] => format!("map({keys}, {values})"),
            _ => return arity(name, "an array of keys and an array of values"),
        },
        "ARRAY_PREPEND" if flink => match args.as_slice() {
            [array, element] => format!("\"array_prepend\"({element}, {array})"),
            _ => return arity(name, "an array and an element"),
        },
        "ENCODE" | "DECODE" if flink && args.len() == 2 => {
            let charset = literal(list.get(1)).unwrap_or_default();
            match charset.to_ascii_uppercase().as_str() {
                // DataFusion's encodings, which the rewrites themselves write.
                "BASE64" | "BASE64PAD" | "HEX" => return Ok(None),
                "UTF-8" | "UTF8" if name == "ENCODE" => format!("CAST({} AS BYTEA)", args[0]),
                "UTF-8" | "UTF8" => format!("CAST({} AS VARCHAR)", args[0]),
                _ => {
                    return plan_error(&format!(
                        "{name}: charset '{charset}' is not supported: weir's text is UTF-8 ('UTF-8' is)"
                    ));
                }
            }
        }
        "NOW" if flink && args.is_empty() => PER_ROW_NOW.to_string(),
        "PRINTF" => {
            if let Some(format) = literal(list.first()) {
                crate::flink_udfs::printf_format(&format).map_err(|e| Error::Plan(format!("PRINTF: {e}")))?;
            }
            return Ok(None);
        }
        "RAND" if !args.is_empty() => {
            return plan_error("RAND(seed) is not supported: weir's random numbers take no seed; use RAND()");
        }
        "RAND_INTEGER" => match args.as_slice() {
            [n] => format!("CAST(floor(random() * {n}) AS INT)"),
            _ => return arity(name, "a bound (a seed is not supported)"),
        },
        "ELEMENT" => match args.as_slice() {
            [a] => format!("CASE WHEN cardinality({a}) = 1 THEN {a}[1] END"),
            _ => return arity(name, "one array"),
        },
        "JSON_VALUE" | "JSON_QUERY" | "JSON_EXISTS" => crate::json_functions::call(name, list, returning)?,
        "TUMBLE_START" | "HOP_START" | "SESSION_START" => {
            format!("{}({})", name.trim_end_matches("_START").to_lowercase(), args.join(", "))
        }
        "TUMBLE_ROWTIME" | "HOP_ROWTIME" | "SESSION_ROWTIME" => {
            let window = name.trim_end_matches("_ROWTIME").to_lowercase();
            format!("{window}_end({}) - INTERVAL '1' MILLISECOND", args.join(", "))
        }
        "TUMBLE_PROCTIME" | "HOP_PROCTIME" | "SESSION_PROCTIME" => {
            let window = name.trim_end_matches("_PROCTIME");
            return plan_error(&format!(
                "{name} is not supported: a window's processing time has no meaning in weir, whose windows close on the watermark; use {window}_END or {window}_ROWTIME"
            ));
        }
        _ => return Ok(None),
    };
    Ok(Some(sql))
}

/// JSON_OBJECT and JSON_ARRAY (their keys and values as JSON text by `json_string`, joined,
/// marked `json_built` so that one nests in another as JSON rather than as a string;
/// NULL values written as `null` or left out, by the NULL ON NULL / ABSENT ON NULL clause,
/// Flink's defaults NULL for objects and ABSENT for arrays), and JSON_STRING.
fn json_builder(name: &str, list: &[FunctionArg], absent_on_null: Option<bool>) -> Result<Option<String>> {
    let value = |v: &Expr, absent: bool| match absent {
        true => json_value(v),
        false => format!("coalesce({}, 'null')", json_value(v)),
    };
    let sql = match name {
        "JSON_STRING" => match list {
            [FunctionArg::Unnamed(FunctionArgExpr::Expr(v))] => format!("json_string({v})"),
            _ => return arity(name, "one value"),
        },
        "JSON_OBJECTAGG" | "JSON_ARRAYAGG" => return json_aggregate(name, list, absent_on_null).map(Some),
        "JSON_OBJECT" => {
            let absent = absent_on_null.unwrap_or(false);
            let mut pairs = Vec::new();
            for arg in list {
                let Some((key, v)) = key_value(arg) else {
                    return arity(name, "pairs of a key and a value, as in JSON_OBJECT('k' VALUE v)");
                };
                pairs.push(json_member(&key, v, absent));
            }
            format!(
                "json_built(concat('{{', concat_ws(',', {}), '}}'))",
                if pairs.is_empty() { "NULL".into() } else { pairs.join(", ") }
            )
        }
        "JSON_ARRAY" => {
            let absent = absent_on_null.unwrap_or(true);
            let mut values = Vec::new();
            for arg in list {
                let FunctionArg::Unnamed(FunctionArgExpr::Expr(v)) = arg else { return arity(name, "values") };
                values.push(value(v, absent));
            }
            format!(
                "json_built(concat('[', concat_ws(',', {}), ']'))",
                if values.is_empty() { "NULL".into() } else { values.join(", ") }
            )
        }
        _ => return Ok(None),
    };
    Ok(Some(sql))
}

/// The key (as SQL text) and value of a `key VALUE value` argument (a quoted key is read as a
/// name by sqlparser).
fn key_value(arg: &FunctionArg) -> Option<(String, &Expr)> {
    match arg {
        FunctionArg::ExprNamed { name, arg: FunctionArgExpr::Expr(v), operator: FunctionArgOperator::Value } => {
            Some((name.to_string(), v))
        }
        FunctionArg::Named { name, arg: FunctionArgExpr::Expr(v), operator: FunctionArgOperator::Value } => {
            Some((quoted(&name.value), v))
        }
        _ => None,
    }
}

/// A value as JSON text: the text of another JSON construction (marked `json_built`) as it is,
/// so constructions nest as in Flink; any other value by `json_string`.
fn json_value(value: &Expr) -> String {
    match value {
        Expr::Function(f) if f.name.to_string() == "json_built" => format!("({value})"),
        _ => format!("json_string(({value}))"),
    }
}

/// One `"key":value` member of a JSON object (NULL when the value is and NULLs are absent).
fn json_member(key: &str, value: &Expr, absent: bool) -> String {
    let pair = format!("concat(json_string(CAST(({key}) AS VARCHAR)), ':', coalesce({}, 'null'))", json_value(value));
    match absent {
        true => format!("CASE WHEN ({value}) IS NULL THEN NULL ELSE {pair} END"),
        false => pair,
    }
}

/// JSON_OBJECTAGG(k VALUE v) and JSON_ARRAYAGG(v): the group's members or elements joined by
/// `string_agg` (which skips NULLs: an absent member), with Flink's defaults NULL ON NULL for
/// objects and ABSENT ON NULL for arrays; a key given twice in a group fails the query, as in
/// Flink (`json_unique_keys`).
fn json_aggregate(name: &str, list: &[FunctionArg], absent_on_null: Option<bool>) -> Result<String> {
    match (name, list) {
        ("JSON_ARRAYAGG", [FunctionArg::Unnamed(FunctionArgExpr::Expr(v))]) => {
            let element = match absent_on_null.unwrap_or(true) {
                true => json_value(v),
                false => format!("coalesce({}, 'null')", json_value(v)),
            };
            Ok(format!("json_built(concat('[', string_agg({element}, ','), ']'))"))
        }
        ("JSON_ARRAYAGG", _) => arity(name, "one value"),
        (_, [arg]) => {
            let Some((key, v)) = key_value(arg) else {
                return arity(name, "a key and a value, as in JSON_OBJECTAGG(k VALUE v)");
            };
            let member = json_member(&key, v, absent_on_null.unwrap_or(false));
            Ok(format!("json_built(json_unique_keys(concat('{{', string_agg({member}, ','), '}}')))"))
        }
        _ => arity(name, "a key and a value, as in JSON_OBJECTAGG(k VALUE v)"),
    }
}

/// `text` (a Java-formatted time) as a timestamp of milliseconds; a format without time of day
/// is read as a date.
fn parse_time(text: &str, chrono: &str) -> String {
    match ["%H", "%I", "%M", "%S"].iter().any(|spec| chrono.contains(spec)) {
        true => format!("to_timestamp_millis({text}, {})", quoted(chrono)),
        false => format!("CAST(\"to_date\"({text}, {}) AS TIMESTAMP(3))", quoted(chrono)),
    }
}

/// A TIMESTAMPADD unit as (count per unit, interval unit).
fn interval_unit(unit: &str) -> Result<(u32, &'static str)> {
    Ok(match unit.to_ascii_uppercase().as_str() {
        "SECOND" => (1, "second"),
        "MINUTE" => (1, "minute"),
        "HOUR" => (1, "hour"),
        "DAY" => (1, "day"),
        "WEEK" => (7, "day"),
        "MONTH" => (1, "month"),
        "QUARTER" => (3, "month"),
        "YEAR" => (12, "month"),
        other => {
            return plan_error(&format!(
                "'{other}' is not a unit of time: SECOND, MINUTE, HOUR, DAY, WEEK, MONTH, QUARTER or YEAR"
            ));
        }
    })
}

/// TIMESTAMPDIFF: whole units from `from` to `to` (truncated toward zero, as Flink's).
fn timestamp_diff(unit: &str, from: &str, to: &str) -> Result<String> {
    let seconds =
        |per: u64| format!("CAST(trunc((date_part('epoch', {to}) - date_part('epoch', {from})) / {per}) AS INT)");
    // Months between, less one where the later one's day and time of month are not reached.
    let months = |per: u32| {
        let month = |t: &str| format!("(date_part('year', {t}) * 12 + date_part('month', {t}))");
        let rest = |t: &str| format!("(date_part('epoch', {t}) - date_part('epoch', date_trunc('month', {t})))");
        let whole = format!("({} - {})", month(to), month(from));
        format!(
            "CAST(trunc((CASE WHEN {whole} > 0 AND {rest_to} < {rest_from} THEN {whole} - 1 \
             WHEN {whole} < 0 AND {rest_to} > {rest_from} THEN {whole} + 1 ELSE {whole} END) / {per}) AS INT)",
            rest_to = rest(to),
            rest_from = rest(from),
        )
    };
    Ok(match unit.to_ascii_uppercase().as_str() {
        "SECOND" => seconds(1),
        "MINUTE" => seconds(60),
        "HOUR" => seconds(3600),
        "DAY" => seconds(86_400),
        "WEEK" => seconds(604_800),
        "MONTH" => months(1),
        "QUARTER" => months(3),
        "YEAR" => months(12),
        other => {
            return plan_error(&format!(
                "'{other}' is not a unit of time: SECOND, MINUTE, HOUR, DAY, WEEK, MONTH, QUARTER or YEAR"
            ));
        }
    })
}

/// PARSE_URL(url, part[, key]): the part of the URL, each by a regular expression of one group
/// (arrow's `regexp_match` leaves out groups that did not take part, so one expression with a
/// group per part would number them differently URL by URL).
fn parse_url(args: &[String], list: &[FunctionArg]) -> Result<String> {
    let (Some(url), Some(part)) = (args.first(), literal(list.get(1))) else {
        return arity(
            "PARSE_URL",
            "a URL, a quoted part ('HOST', 'PATH', 'QUERY', ...) and for 'QUERY' an optional key",
        );
    };
    let first = |regex: &str| format!("array_element(regexp_match({url}, '{regex}'), 1)");
    Ok(match (part.as_str(), args.get(2)) {
        ("QUERY", Some(key)) => format!("array_element(regexp_match({url}, concat('[?&]', {key}, '=([^&#]*)')), 1)"),
        ("PROTOCOL", _) => first("^([^:/?#]+):"),
        ("USERINFO", _) => first("^[^:/?#]+://([^/?#@]*)@"),
        ("HOST", _) => first("^[^:/?#]+://(?:[^/?#@]*@)?([^/?#:]*)"),
        ("AUTHORITY", _) => first("^[^:/?#]+://([^/?#]*)"),
        ("PATH", _) => first("^(?:[^:/?#]+:)?(?://[^/?#]*)?([^?#]*)"),
        ("FILE", _) => first("^(?:[^:/?#]+:)?(?://[^/?#]*)?([^#]*)"),
        ("QUERY", None) => first("\\?([^#]*)"),
        ("REF", _) => first("#(.*)$"),
        (other, _) => {
            return plan_error(&format!(
                "PARSE_URL: part '{other}' is not one of HOST, PATH, QUERY, REF, PROTOCOL, FILE, AUTHORITY, USERINFO"
            ));
        }
    })
}

fn arity<T>(name: &str, takes: &str) -> Result<T> {
    plan_error(&format!("{name} takes {takes}"))
}

fn plan_error<T>(message: &str) -> Result<T> {
    Err(Error::Plan(message.to_string()))
}

/// Java's date pattern (Flink's DATE_FORMAT) as chrono's: `yyyy-MM-dd HH:mm:ss.SSS` is
/// `%Y-%m-%d %H:%M:%S%.3f` without its dot; text in single quotes is literal.
fn chrono_format(java: &str) -> String {
    let chars: Vec<char> = java.chars().collect();
    let mut out = String::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let run = chars[i..].iter().take_while(|&&d| d == c).count();
        if c == '\'' {
            let end = chars[i + 1..].iter().position(|&d| d == '\'').map_or(chars.len(), |p| i + 1 + p);
            out.extend(
                chars[i + 1..end]
                    .iter()
                    .map(|&d| if d == '%' { "%%".to_string() } else { d.to_string() })
                    .collect::<Vec<_>>(),
            );
            i = end + 1;
            continue;
        }
        let spec = match (c, run) {
            ('y', 2) => "%y",
            ('y', _) => "%Y",
            ('M', 1 | 2) => "%m",
            ('M', 3) => "%b",
            ('M', _) => "%B",
            ('d', _) => "%d",
            ('D', _) => "%j",
            ('H', _) => "%H",
            ('h', _) => "%I",
            ('m', _) => "%M",
            ('s', _) => "%S",
            ('S', _) => "%3f",
            ('a', _) => "%p",
            ('E', 1..=3) => "%a",
            ('E', _) => "%A",
            ('%', _) => "%%",
            _ => {
                out.extend(std::iter::repeat_n(c, run));
                i += run;
                continue;
            }
        };
        out.push_str(spec);
        i += run;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `sql`'s expressions rewritten (its select items' names left as they are).
    fn rewritten_in(sql: &str, dialect: Dialect) -> String {
        let mut statement = Parser::parse_sql(&GenericDialect {}, sql).unwrap().remove(0);
        rewrite_all(&mut statement, dialect).unwrap();
        statement.to_string()
    }

    #[test]
    fn a_rewritten_select_item_is_named_as_written() {
        let mut statement =
            Parser::parse_sql(&GenericDialect {}, "SELECT MOD(a, 3), a + 1, NOW() AS n FROM t").unwrap().remove(0);
        rewrite(&mut statement, Dialect::Flink).unwrap();
        assert_eq!(
            statement.to_string(),
            r#"SELECT (a) % (3) AS "MOD(a, 3)", a + 1, current_row_timestamp() AS n FROM t"#
        );
    }

    fn rewritten(sql: &str) -> String {
        rewritten_in(sql, Dialect::Weir)
    }

    #[test]
    fn flink_calls_become_datafusion_expressions() {
        assert_eq!(rewritten("SELECT MOD(a, 3) FROM t"), "SELECT (a) % (3) FROM t");
        assert_eq!(rewritten("SELECT hour(ts) FROM t"), "SELECT CAST(date_part('hour', (ts)) AS BIGINT) FROM t");
        assert_eq!(
            rewritten("SELECT MOD(MOD(a, 5), 3) FROM t"),
            "SELECT ((a) % (5)) % (3) FROM t",
            "inner calls first"
        );
        assert_eq!(
            rewritten(
                "SELECT SESSION_START(ts, INTERVAL '10' SECOND), HOP_ROWTIME(ts, INTERVAL '1' SECOND, INTERVAL '5' SECOND) FROM t"
            ),
            "SELECT session((ts), (INTERVAL '10' SECOND)), hop_end((ts), (INTERVAL '1' SECOND), (INTERVAL '5' SECOND)) - INTERVAL '1' MILLISECOND FROM t"
        );
        assert_eq!(chrono_format("yyyy-MM-dd HH:mm:ss.SSS"), "%Y-%m-%d %H:%M:%S.%3f");
        assert_eq!(chrono_format("HH'h'mm"), "%Hh%M");
    }

    /// Names DataFusion has with another meaning are Flink's in Flink's dialect only, and what
    /// the rewrite writes is not rewritten again when the statement's text is planned again.
    #[test]
    fn clashing_names_are_flinks_in_its_dialect_and_a_rewrite_is_stable() {
        let sql = "SELECT LOG(x), SHA256(s), TO_TIMESTAMP(s, 'yyyyMMdd'), FROM_UNIXTIME(n) FROM t";
        assert_eq!(rewritten(sql), sql, "weir's dialect keeps DataFusion's functions");
        let once = rewritten_in(sql, Dialect::Flink);
        assert!(once.contains("ln((x))") && once.contains("digest((s), 'sha256')"), "{once}");
        assert!(once.contains("\"to_date\"((s), '%Y%m%d')"), "{once}");
        assert_eq!(rewritten_in(&once, Dialect::Flink), once, "stable when planned again");
    }
}

#[cfg(test)]
mod per_row_time_tests {
    use std::time::Duration;

    use crate::Output;

    /// In Flink's dialect the time functions are evaluated as the rows go by, not when the
    /// query is planned: a pipeline started two seconds after it was planned sees the later
    /// time.
    #[tokio::test]
    async fn the_time_functions_are_evaluated_for_each_row_in_flinks_dialect() {
        let mut session = crate::Session::new();
        session
            .execute("SET 'sql.dialect' = 'flink'; CREATE TABLE one WITH ('connector' = 'nexmark', 'events' = '1')")
            .await
            .unwrap();
        let later = chrono::Utc::now().naive_utc() + chrono::Duration::milliseconds(1500);
        let later = later.format("%Y-%m-%d %H:%M:%S%.3f");
        let sql = format!(
            "SELECT CURRENT_TIMESTAMP > TIMESTAMP '{later}' AS a, NOW() > TIMESTAMP '{later}' AS b, LOCALTIMESTAMP > TIMESTAMP '{later}' AS c, CURRENT_DATE >= CAST(TIMESTAMP '{later}' AS DATE) AS d FROM one"
        );
        let Some(Output::Pipeline(planned)) = session.execute(&sql).await.unwrap().pop() else { panic!("no pipeline") };
        tokio::time::sleep(Duration::from_secs(2)).await;
        let preview = planned.preview.clone().unwrap().buffer;
        let dir = tempfile::tempdir().unwrap();
        let store = weir_state::StateStore::local(dir.path()).unwrap();
        weir_engine::start(planned.graph, planned.config, store).unwrap().wait().await.unwrap();
        let rows = crate::slt::final_rows(&preview.batches()).unwrap();
        assert_eq!(rows, [["true", "true", "true", "true"]]);
    }
}
