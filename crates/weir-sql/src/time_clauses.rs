//! Flink's time clauses inside CREATE TABLE: `WATERMARK FOR ts AS ts - INTERVAL '5' SECOND`
//! (event time) and the computed column `pt AS PROCTIME()` (processing time). sqlparser has
//! neither, so they are taken out of the text before parsing: blanked with spaces (so every
//! line and column the parser reports stays right) and handed back with their positions, to
//! become the table's `event_time` and `watermark_delay` options, or its `proctime` option.

use std::time::Duration;

use datafusion::sql::sqlparser::ast::Ident;

use crate::error::{Error, Result};
use crate::identifiers::written_ident;
use weir_connectors::options::parse_duration;

/// One clause: what it says, and where it started (1-based line and column).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimeClause {
    pub kind: ClauseKind,
    pub line: u64,
    pub col: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClauseKind {
    /// `WATERMARK FOR column AS column - INTERVAL ...`: the event time and its delay (the
    /// column as written: the session's rule for names reads it).
    Watermark { column: Ident, delay: Duration },
    /// `column AS PROCTIME()`: a processing-time column.
    ProcessingTime { column: Ident },
    /// A table's computed columns, `expression AS name, ...` (`computed_columns`).
    Computed { columns: String },
    /// A table's metadata columns (`metadata_columns.rs`).
    Metadata { columns: Vec<crate::metadata_columns::MetadataColumn> },
}

fn position(sql: &str, offset: usize) -> (u64, u64) {
    let before = &sql[..offset];
    let line = before.matches('\n').count() as u64 + 1;
    let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) as u64 + 1;
    (line, col)
}

fn clause_error(sql: &str, offset: usize, message: String) -> Error {
    let (line, column) = position(sql, offset);
    Error::Syntax { message, line, column }
}

/// Byte offsets of the text that is SQL code: not inside a string, a quoted identifier (double
/// quotes or Flink's backticks) or a comment.
fn code_positions(sql: &str) -> Vec<bool> {
    let bytes = sql.as_bytes();
    let mut code = vec![true; bytes.len()];
    let mut i = 0;
    while i < bytes.len() {
        let skip_to = match bytes[i] {
            quote @ (b'\'' | b'"' | b'`') => {
                bytes[i + 1..].iter().position(|b| *b == quote).map_or(bytes.len(), |p| i + p + 2)
            }
            b'-' if bytes.get(i + 1) == Some(&b'-') => {
                bytes[i..].iter().position(|b| *b == b'\n').map_or(bytes.len(), |p| i + p)
            }
            b'/' if bytes.get(i + 1) == Some(&b'*') => sql[i + 2..].find("*/").map_or(bytes.len(), |p| i + 2 + p + 2),
            _ => {
                i += 1;
                continue;
            }
        };
        for flag in &mut code[i..skip_to.min(bytes.len())] {
            *flag = false;
        }
        i = skip_to;
    }
    code
}

/// Finds "WATERMARK FOR" (any case, whole words, in code) at or after `from`.
fn find_clause(upper: &str, code: &[bool], from: usize) -> Option<usize> {
    let mut start = from;
    while let Some(found) = upper[start..].find("WATERMARK") {
        let at = start + found;
        let before_ok = at == 0 || !upper.as_bytes()[at - 1].is_ascii_alphanumeric();
        let rest = &upper[at + "WATERMARK".len()..];
        let after = rest.trim_start();
        if code[at] && before_ok && rest.len() > after.len() && after.starts_with("FOR") {
            return Some(at);
        }
        start = at + 1;
    }
    None
}

/// Parses "WATERMARK FOR col AS col [- INTERVAL 'n' [unit]]".
fn parse_clause(text: &str) -> std::result::Result<(Ident, Duration), String> {
    let expected = "expected WATERMARK FOR column AS column - INTERVAL 'n' UNIT";
    let words: Vec<&str> = text.split_whitespace().collect();
    let [watermark, for_, column, as_, rest @ ..] = words.as_slice() else { return Err(expected.to_string()) };
    if !watermark.eq_ignore_ascii_case("WATERMARK")
        || !for_.eq_ignore_ascii_case("FOR")
        || !as_.eq_ignore_ascii_case("AS")
    {
        return Err(expected.to_string());
    }
    let column = written_ident(column);
    let written = &column.value;
    let rest = rest.join(" ");
    let same = [written.clone(), format!("\"{written}\""), format!("`{written}`")];
    let Some(rest) = same.iter().find_map(|name| rest.strip_prefix(name.as_str())) else {
        return Err(format!("the watermark of '{written}' must be '{written}' minus an interval ({expected})"));
    };
    let rest = rest.trim();
    if rest.is_empty() {
        return Ok((column, Duration::ZERO));
    }
    let Some(interval) = rest.strip_prefix('-').map(str::trim) else { return Err(expected.to_string()) };
    let Some(interval) = interval.get(..8).filter(|k| k.eq_ignore_ascii_case("INTERVAL")).map(|_| interval[8..].trim())
    else {
        return Err(expected.to_string());
    };
    let Some((amount, unit)) = interval.strip_prefix('\'').and_then(|s| s.split_once('\'')) else {
        return Err(expected.to_string());
    };
    let delay =
        parse_duration(&format!("{} {}", amount.trim(), unit.trim())).map_err(|e| format!("{e} ({expected})"))?;
    Ok((column, delay))
}

/// Finds "<column> AS PROCTIME()" (any case, in code) at or after `from`: the column's start,
/// its name, and the end of the clause.
fn find_proctime(sql: &str, upper: &str, code: &[bool], from: usize) -> Option<(usize, Ident, usize)> {
    let mut search = from;
    while let Some(found) = upper[search..].find("PROCTIME") {
        let at = search + found;
        search = at + 1;
        if !code[at] || (at > 0 && upper.as_bytes()[at - 1].is_ascii_alphanumeric()) {
            continue;
        }
        // "PROCTIME ( )"
        let rest = &upper[at + "PROCTIME".len()..];
        let Some(inner) = rest.trim_start().strip_prefix('(') else { continue };
        let Some(after) = inner.trim_start().strip_prefix(')') else { continue };
        let end = sql.len() - after.len();
        // "<column> AS " before it.
        let before = sql[..at].trim_end();
        let Some(name_part) = before
            .len()
            .checked_sub(2)
            .filter(|&i| before.get(i..).is_some_and(|w| w.eq_ignore_ascii_case("AS")))
            .map(|i| &before[..i])
            .filter(|n| n.ends_with(char::is_whitespace))
        else {
            continue;
        };
        let name_part = name_part.trim_end();
        let name_start = match ['"', '`'].into_iter().find_map(|q| Some((q, name_part.strip_suffix(q)?))) {
            Some((quote, quoted)) => quoted.rfind(quote)?,
            None => name_part
                .char_indices()
                .rev()
                .find(|(_, c)| !(c.is_alphanumeric() || *c == '_'))
                .map_or(0, |(i, c)| i + c.len_utf8()),
        };
        let column = written_ident(&name_part[name_start..]);
        if !column.value.is_empty() {
            return Some((name_start, column, end));
        }
    }
    None
}

/// The end of a WATERMARK FOR clause starting at `start`: the next ',' or ')' outside
/// parentheses and quotes.
fn watermark_end(sql: &str, start: usize) -> usize {
    let (mut depth, mut quoted) = (0i32, false);
    for (i, c) in sql[start..].char_indices() {
        match c {
            '\'' => quoted = !quoted,
            '(' if !quoted => depth += 1,
            ')' if !quoted && depth == 0 => return start + i,
            ')' if !quoted => depth -= 1,
            ',' if !quoted && depth == 0 => return start + i,
            _ => {}
        }
    }
    sql.len()
}

/// Blanks `start..end` of `text` with the comma that separates it from the column before it
/// (or, first in the list, from the one after it).
fn blank(text: &mut String, sql: &str, start: usize, end: usize) {
    let before = sql[..start].trim_end().len().checked_sub(1).filter(|&i| sql.as_bytes()[i] == b',');
    let after = sql[end..].find(|c: char| !c.is_whitespace()).map(|i| end + i).filter(|&i| sql.as_bytes()[i] == b',');
    let (from, to) = match (before, after) {
        (Some(comma), _) => (comma, end),
        (None, Some(comma)) => (start, comma + 1),
        (None, None) => (start, end),
    };
    let spaces: String = sql[from..to].chars().map(|c| if c == '\n' { '\n' } else { ' ' }).collect();
    text.replace_range(from..to, &spaces);
}

/// Blanks every WATERMARK FOR and PROCTIME() clause and returns the clauses.
pub fn extract(sql: &str) -> Result<(String, Vec<TimeClause>)> {
    let upper = sql.to_ascii_uppercase();
    let code = code_positions(sql);
    let mut text = sql.to_string();
    let mut clauses = Vec::new();
    let mut from = 0;
    while let Some(start) = find_clause(&upper, &code, from) {
        let end = watermark_end(sql, start);
        let (column, delay) = parse_clause(&sql[start..end]).map_err(|m| clause_error(sql, start, m))?;
        let (line, col) = position(sql, start);
        clauses.push(TimeClause { kind: ClauseKind::Watermark { column, delay }, line, col });
        blank(&mut text, sql, start, end);
        from = end;
    }
    let mut from = 0;
    while let Some((start, column, end)) = find_proctime(sql, &upper, &code, from) {
        let (line, col) = position(sql, start);
        clauses.push(TimeClause { kind: ClauseKind::ProcessingTime { column }, line, col });
        blank(&mut text, sql, start, end);
        from = end;
    }
    Ok((text, clauses))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clause_is_blanked_keeping_positions_and_read() {
        let sql = "CREATE TABLE t (\n  ts TIMESTAMP,\n  WATERMARK FOR ts AS ts - INTERVAL '5' SECOND\n) WITH (connector = 'blackhole')";
        let (text, clauses) = extract(sql).unwrap();
        assert_eq!(text.len(), sql.len());
        assert!(!text.contains("WATERMARK") && !text.contains("TIMESTAMP,"), "{text}");
        let kind = ClauseKind::Watermark { column: Ident::new("ts"), delay: Duration::from_secs(5) };
        assert_eq!(clauses, vec![TimeClause { kind, line: 3, col: 3 }]);
        let (_, plain) =
            extract("CREATE TABLE t (ts TIMESTAMP, watermark for ts as ts) WITH (connector = 'blackhole')").unwrap();
        assert_eq!(plain[0].kind, ClauseKind::Watermark { column: Ident::new("ts"), delay: Duration::ZERO });
        let (_, other) = extract("CREATE TABLE t (ts TIMESTAMP, WATERMARK FOR ts AS ts - INTERVAL '200 ms')").unwrap();
        assert_eq!(
            other[0].kind,
            ClauseKind::Watermark { column: Ident::new("ts"), delay: Duration::from_millis(200) }
        );
        let (_, quoted) =
            extract("CREATE TABLE t (`dateTime` TIMESTAMP, WATERMARK FOR `dateTime` AS `dateTime`)").unwrap();
        let kind = ClauseKind::Watermark { column: Ident::with_quote('`', "dateTime"), delay: Duration::ZERO };
        assert_eq!(quoted[0].kind, kind);
    }

    #[test]
    fn a_proctime_column_is_blanked_with_its_comma_wherever_it_stands() {
        for (sql, blanked, col) in [
            ("CREATE TABLE t (a BIGINT, pt AS PROCTIME())", "CREATE TABLE t (a BIGINT                  )", 27),
            ("CREATE TABLE t (pt AS proctime ( ), a BIGINT)", "CREATE TABLE t (                    a BIGINT)", 17),
            ("CREATE TABLE t (\"p t\" AS PROCTIME())", "CREATE TABLE t (                   )", 17),
            ("CREATE TABLE t (`p t` AS PROCTIME())", "CREATE TABLE t (                   )", 17),
        ] {
            let (text, clauses) = extract(sql).unwrap();
            assert_eq!(text, blanked);
            assert_eq!(text.len(), sql.len(), "positions kept");
            let column = match sql.find("p t") {
                Some(at) => Ident::with_quote(sql.as_bytes()[at - 1] as char, "p t"),
                None => Ident::new("pt"),
            };
            assert_eq!(clauses[0].kind, ClauseKind::ProcessingTime { column });
            assert_eq!((clauses[0].line, clauses[0].col), (1, col));
        }
        assert_eq!(extract("SELECT proctime FROM t").unwrap().1, vec![]);
        assert_eq!(extract("SELECT 'x AS PROCTIME()' FROM t").unwrap().1, vec![]);
    }

    #[test]
    fn a_malformed_clause_is_a_syntax_error_at_its_position() {
        let error =
            extract("CREATE TABLE t (ts TIMESTAMP,\n WATERMARK FOR ts AS other - INTERVAL '5' SECOND)").unwrap_err();
        assert_eq!(
            error.to_string(),
            "SQL syntax error at line 2, column 2: the watermark of 'ts' must be 'ts' minus an interval (expected WATERMARK FOR column AS column - INTERVAL 'n' UNIT)"
        );
        assert!(extract("CREATE TABLE t (ts TIMESTAMP, WATERMARK FOR ts AS ts - INTERVAL '5' FORTNIGHTS)").is_err());
        // A column named like the keyword, a comment or a string is no clause.
        assert_eq!(extract("SELECT watermarks FROM t").unwrap().1, vec![]);
        let commented = "-- uses WATERMARK FOR ts\nSELECT 'WATERMARK FOR x' /* WATERMARK FOR y */ FROM t";
        assert_eq!(extract(commented).unwrap(), (commented.to_string(), vec![]));
    }
}
