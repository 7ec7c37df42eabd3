//! Flink's built-in functions that DataFusion lacks, rewritten on the parsed statement into
//! DataFusion expressions of the same meaning (Flink's function reference):
//!
//! | Flink | becomes |
//! |---|---|
//! | `MOD(a, b)` | `a % b` |
//! | `YEAR(t)`, `QUARTER`, `MONTH`, `WEEK`, `DAYOFYEAR`, `DAYOFMONTH`, `HOUR`, `MINUTE`, `SECOND` | `CAST(date_part('...', t) AS BIGINT)` |
//! | `DAYOFWEEK(t)` (1 is Sunday) | `CAST(date_part('dow', t) AS BIGINT) + 1` |
//! | `SPLIT_INDEX(s, sep, i)` (0-based; NULL out of range) | the `i + 1`th element of `string_to_array(s, sep)` |
//! | `REGEXP_EXTRACT(s, r[, i])` (group `i`, 1 by default, 0 the whole match) | an element of `regexp_match` |
//! | `DATE_FORMAT(t, 'yyyy-MM-dd HH:mm')` (Java's pattern letters) | `to_char(t, '%Y-%m-%d %H:%M')` |
//! | `TUMBLE_START(...)`, `HOP_START`, `SESSION_START` (legacy group windows) | `tumble(...)`, `hop`, `session`: the window start GROUP BY has |
//! | `TUMBLE_ROWTIME(...)`, `HOP_ROWTIME`, `SESSION_ROWTIME` | `tumble_end(...) - INTERVAL '1' MILLISECOND` (a time attribute) |
//!
//! (`TUMBLE(...)` in GROUP BY and `TUMBLE_END(...)` are weir's own window functions already;
//! `window_functions.rs`.)
//!
//! The rewrite builds each replacement as SQL text around its arguments' text and parses it,
//! so the arguments are written once and the result reads like what a user would write.

use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{
    Expr, FunctionArg, FunctionArgExpr, FunctionArguments, Statement, Value, ValueWithSpan, visit_expressions_mut,
};
use datafusion::sql::sqlparser::dialect::GenericDialect;
use datafusion::sql::sqlparser::parser::Parser;

use crate::error::{Error, Result};

/// Rewrites every call of one of Flink's functions in `statement`.
pub fn rewrite(statement: &mut Statement) -> Result<()> {
    let flow = visit_expressions_mut(statement, |expr| match replacement(expr) {
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

/// The DataFusion expression for `expr` if it calls one of Flink's functions.
fn replacement(expr: &Expr) -> Result<Option<Expr>> {
    let Expr::Function(function) = expr else { return Ok(None) };
    let name = function.name.to_string().to_ascii_uppercase();
    let FunctionArguments::List(list) = &function.args else { return Ok(None) };
    let args: Vec<String> = list
        .args
        .iter()
        .filter_map(|arg| match arg {
            FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) => Some(format!("({e})")),
            _ => None,
        })
        .collect();
    if args.len() != list.args.len() {
        return Ok(None);
    }
    let date_part = |part: &str| match args.as_slice() {
        [t] => Ok(format!("CAST(date_part('{part}', {t}) AS BIGINT)")),
        _ => arity(&name, "one timestamp"),
    };
    let sql = match name.as_str() {
        "MOD" => match args.as_slice() {
            [a, b] => format!("{a} % {b}"),
            _ => return arity(&name, "two numbers"),
        },
        "YEAR" | "QUARTER" | "MONTH" | "WEEK" | "HOUR" | "MINUTE" | "SECOND" => date_part(&name.to_lowercase())?,
        "DAYOFYEAR" => date_part("doy")?,
        "DAYOFMONTH" => date_part("day")?,
        "DAYOFWEEK" => format!("{} + 1", date_part("dow")?),
        "SPLIT_INDEX" => match args.as_slice() {
            [s, separator, index] => format!(
                "CASE WHEN {index} < 0 THEN NULL ELSE array_element(string_to_array({s}, {separator}), {index} + 1) END"
            ),
            _ => return arity(&name, "a string, a separator and a 0-based index"),
        },
        "REGEXP_EXTRACT" => {
            let (s, regex, index) = match args.as_slice() {
                [s, regex] => (s, regex, "1".to_string()),
                [s, regex, index] => (s, regex, index.clone()),
                _ => return arity(&name, "a string, a regular expression and an optional group index"),
            };
            format!(
                "CASE WHEN {index} = 0 THEN array_element(regexp_match({s}, concat('(', {regex}, ')')), 1) \
                 ELSE array_element(regexp_match({s}, {regex}), {index}) END"
            )
        }
        "DATE_FORMAT" => {
            let format = match list.args.get(1) {
                Some(FunctionArg::Unnamed(FunctionArgExpr::Expr(Expr::Value(ValueWithSpan {
                    value: Value::SingleQuotedString(format),
                    ..
                })))) => format.clone(),
                _ => return plan_error("DATE_FORMAT takes a timestamp and a quoted format such as 'yyyy-MM-dd HH:mm'"),
            };
            let Some(t) = args.first() else { return arity(&name, "a timestamp and a format") };
            format!("to_char(CAST({t} AS TIMESTAMP), '{}')", chrono_format(&format).replace('\'', "''"))
        }
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
    let parsed = Parser::new(&GenericDialect {})
        .try_with_sql(&sql)
        .and_then(|mut parser| parser.parse_expr())
        .map_err(|e| Error::Plan(format!("{name}: {e}")))?;
    Ok(Some(parsed))
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

    fn rewritten(sql: &str) -> String {
        let mut statement = Parser::parse_sql(&GenericDialect {}, sql).unwrap().remove(0);
        rewrite(&mut statement).unwrap();
        statement.to_string()
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
}
