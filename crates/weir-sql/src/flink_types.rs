//! Flink's spellings of SQL types, rewritten on the tokens to the ones sqlparser and DataFusion
//! know, so that a Flink table declaration runs as written:
//!
//! | Flink | becomes |
//! |---|---|
//! | `ROW<a INT, b STRING>`, `ROW(a INT, b STRING)` | `STRUCT<a INT, b STRING>` |
//! | `TIMESTAMP_LTZ(3)`, `TIMESTAMP(3) WITH LOCAL TIME ZONE` | `TIMESTAMP(3) WITH TIME ZONE` |
//! | `BYTES`, `BINARY(n)`, `VARBINARY(n)` | `BYTEA` |
//! | `MAP<K, V>` | `MAP(K, V)` (a column's type: the session makes it Arrow's map) |
//!
//! (An instant is a timestamp in UTC here, as every timestamp of weir's: with no session time
//! zone DataFusion types `WITH TIME ZONE` as a plain timestamp. `STRING`, `ARRAY<T>`, backtick
//! identifiers and quoted option keys need nothing.) Only
//! types are rewritten: the type of each column of a `CREATE TABLE` column list, and the target
//! type of `CAST` / `TRY_CAST`, so a column named `bytes` or a `ROW(a, b)` value constructor is
//! left alone.

use std::collections::HashSet;

use datafusion::sql::sqlparser::tokenizer::{Span, Token, TokenWithSpan, Whitespace, Word};

use crate::error::Result;
use crate::window_table_functions::{is_word, skip_space, syntax};

/// The column-list elements that are not columns.
const CONSTRAINTS: [&str; 9] =
    ["WATERMARK", "PRIMARY", "CONSTRAINT", "UNIQUE", "FOREIGN", "CHECK", "PERIOD", "LIKE", "INDEX"];

/// `tokens` with Flink's type spellings rewritten (see the module's doc).
pub fn rewrite(mut tokens: Vec<TokenWithSpan>) -> Result<Vec<TokenWithSpan>> {
    quote_keyword_columns(&mut tokens);
    let starts = type_starts(&tokens);
    if starts.is_empty() {
        return Ok(tokens);
    }
    let mut out = Vec::with_capacity(tokens.len());
    let mut i = 0;
    // Splitting a `>>` inside a type adds a token: the starts after it move by one.
    let mut inserted = 0;
    while i < tokens.len() {
        if i >= inserted && starts.contains(&(i - inserted)) {
            let before = tokens.len();
            i = data_type(&mut tokens, i, &mut out)?;
            inserted += tokens.len() - before;
        } else {
            out.push(tokens[i].clone());
            i += 1;
        }
    }
    Ok(out)
}

/// Words Flink takes as column names that sqlparser reads as the start of a constraint
/// (`key BIGINT` is a column to Flink, `KEY (...)` an index to sqlparser).
const KEYWORD_COLUMNS: [&str; 1] = ["KEY"];

/// Quotes a column named one of [`KEYWORD_COLUMNS`] (lowercase, as an unquoted name reads).
fn quote_keyword_columns(tokens: &mut [TokenWithSpan]) {
    for i in 0..tokens.len() {
        if !is_word(tokens.get(i), "CREATE") {
            continue;
        }
        for element in column_list(tokens, i).unwrap_or_default() {
            let ElementKind::Column { .. } = element.kind else { continue };
            if let Token::Word(word) = &mut tokens[element.start].token
                && word.quote_style.is_none()
                && KEYWORD_COLUMNS.iter().any(|k| word.value.eq_ignore_ascii_case(k))
            {
                word.value = word.value.to_lowercase();
                word.quote_style = Some('"');
                word.keyword = datafusion::sql::sqlparser::keywords::Keyword::NoKeyword;
            }
        }
    }
}

/// Where a type starts: after each column name of a CREATE TABLE's column list, and after the
/// AS of a CAST. (Indices in `tokens`; a rewrite never moves the tokens before it.)
fn type_starts(tokens: &[TokenWithSpan]) -> HashSet<usize> {
    let mut starts = HashSet::new();
    for i in 0..tokens.len() {
        if is_word(tokens.get(i), "CAST") || is_word(tokens.get(i), "TRY_CAST") {
            starts.extend(cast_type(tokens, i));
        }
        if is_word(tokens.get(i), "CREATE") {
            starts.extend(column_types(tokens, i));
        }
    }
    starts
}

/// The start of the target type of the CAST at `i`.
fn cast_type(tokens: &[TokenWithSpan], i: usize) -> Option<usize> {
    let open = skip_space(tokens, i + 1);
    if tokens.get(open)?.token != Token::LParen {
        return None;
    }
    let mut depth = 0usize;
    for j in open..tokens.len() {
        match &tokens[j].token {
            Token::LParen => depth += 1,
            Token::RParen if depth <= 1 => return None,
            Token::RParen => depth -= 1,
            _ if depth == 1 && is_word(tokens.get(j), "AS") => return Some(skip_space(tokens, j + 1)),
            _ => {}
        }
    }
    None
}

/// The starts of the column types of the CREATE TABLE at `i`.
fn column_types(tokens: &[TokenWithSpan], i: usize) -> Vec<usize> {
    let elements = column_list(tokens, i).unwrap_or_default();
    elements
        .into_iter()
        .filter_map(|element| match element.kind {
            ElementKind::Column { type_start } => Some(type_start),
            _ => None,
        })
        .collect()
}

/// One element of a CREATE TABLE's column list.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Element {
    /// Its first token, and the `,` or `)` after it.
    pub start: usize,
    pub end: usize,
    pub kind: ElementKind,
}

#[derive(Debug, Clone, Copy)]
pub(crate) enum ElementKind {
    /// `name type ...`, the type starting at `type_start`.
    Column { type_start: usize },
    /// `name AS expression`, the expression starting at `expression`.
    Computed { expression: usize },
    /// WATERMARK, PRIMARY KEY and other constraints.
    Constraint,
}

/// The elements of the column list of the CREATE TABLE at `i`; `None` if it is not one or has
/// no column list.
pub(crate) fn column_list(tokens: &[TokenWithSpan], i: usize) -> Option<Vec<Element>> {
    let mut j = skip_space(tokens, i + 1);
    for word in ["OR", "REPLACE", "TEMPORARY", "TEMP"] {
        if is_word(tokens.get(j), word) {
            j = skip_space(tokens, j + 1);
        }
    }
    if !is_word(tokens.get(j), "TABLE") {
        return None;
    }
    j = skip_space(tokens, j + 1);
    for word in ["IF", "NOT", "EXISTS"] {
        if is_word(tokens.get(j), word) {
            j = skip_space(tokens, j + 1);
        }
    }
    // The table's name: words joined by dots.
    while matches!(tokens.get(j).map(|t| &t.token), Some(Token::Word(_) | Token::Period)) {
        j = skip_space(tokens, j + 1);
    }
    if tokens.get(j).map(|t| &t.token) != Some(&Token::LParen) {
        return None;
    }
    let mut elements = Vec::new();
    loop {
        let start = skip_space(tokens, j + 1);
        let name_word = match tokens.get(start).map(|t| &t.token) {
            Some(Token::Word(word)) => word,
            _ => return Some(elements),
        };
        let after_name = skip_space(tokens, start + 1);
        let constraint =
            name_word.quote_style.is_none() && CONSTRAINTS.iter().any(|c| name_word.value.eq_ignore_ascii_case(c));
        let kind = if constraint {
            ElementKind::Constraint
        } else if is_word(tokens.get(after_name), "AS") {
            ElementKind::Computed { expression: skip_space(tokens, after_name + 1) }
        } else if matches!(tokens.get(after_name).map(|t| &t.token), Some(Token::Word(_))) {
            ElementKind::Column { type_start: after_name }
        } else {
            ElementKind::Constraint
        };
        // A column's type may hold commas inside <...>; an expression may hold < and >.
        let end = element_end(tokens, start, matches!(kind, ElementKind::Column { .. }))?;
        elements.push(Element { start, end, kind });
        if tokens[end].token == Token::RParen {
            return Some(elements);
        }
        j = end;
    }
}

/// The `,` or `)` that ends the column-list element starting at `i`.
fn element_end(tokens: &[TokenWithSpan], i: usize, angles: bool) -> Option<usize> {
    let mut depth = 0i64;
    for (j, token) in tokens.iter().enumerate().skip(i) {
        match &token.token {
            Token::LParen => depth += 1,
            Token::Lt if angles => depth += 1,
            Token::Gt if angles => depth -= 1,
            Token::ShiftRight if angles => depth -= 2,
            Token::RParen if depth == 0 => return Some(j),
            Token::RParen => depth -= 1,
            Token::Comma if depth == 0 => return Some(j),
            _ => {}
        }
    }
    None
}

/// Copies the type at `i` into `out`, rewritten; returns the index after it.
fn data_type(tokens: &mut Vec<TokenWithSpan>, i: usize, out: &mut Vec<TokenWithSpan>) -> Result<usize> {
    let span = tokens[i].span;
    let after = skip_space(tokens, i + 1);
    let bracket = tokens.get(after).map(|t| t.token.clone());
    if is_word(tokens.get(i), "ROW") || is_word(tokens.get(i), "STRUCT") {
        if matches!(bracket, Some(Token::Lt | Token::LParen)) {
            return row(tokens, i, after, out);
        }
    } else if is_word(tokens.get(i), "ARRAY") && bracket == Some(Token::Lt) {
        out.extend(tokens[i..=after].iter().cloned());
        let mut j = next_copying(tokens, after + 1, out);
        j = data_type(tokens, j, out)?;
        j = next_copying(tokens, j, out);
        return close_angle(tokens, j, out);
    } else if is_word(tokens.get(i), "MAP") && bracket == Some(Token::Lt) {
        return map(tokens, i, after, out);
    } else if is_word(tokens.get(i), "TIMESTAMP_LTZ") {
        out.push(word("TIMESTAMP", span));
        let j = precision(tokens, i + 1, out);
        out.extend([space(span), word("WITH", span), space(span), word("TIME", span), space(span), word("ZONE", span)]);
        return Ok(j);
    } else if ["BYTES", "BINARY", "VARBINARY"].iter().any(|w| is_word(tokens.get(i), w)) {
        out.push(word("BYTEA", span));
        return Ok(skip_precision(tokens, i + 1));
    } else if is_word(tokens.get(i), "TIMESTAMP") || is_word(tokens.get(i), "TIME") {
        out.push(tokens[i].clone());
        let j = precision(tokens, i + 1, out);
        // WITH [LOCAL] TIME ZONE or WITHOUT TIME ZONE; LOCAL (Flink's instant) dropped.
        let with = skip_space(tokens, j);
        if !is_word(tokens.get(with), "WITH") && !is_word(tokens.get(with), "WITHOUT") {
            return Ok(j);
        }
        out.extend(tokens[j..=with].iter().cloned());
        let mut k = with;
        for expected in ["LOCAL", "TIME", "ZONE"] {
            let after = skip_space(tokens, k + 1);
            if is_word(tokens.get(after), expected) {
                if expected != "LOCAL" {
                    out.extend(tokens[k + 1..=after].iter().cloned());
                }
                k = after;
            }
        }
        return Ok(k + 1);
    }
    out.push(tokens[i].clone());
    Ok(precision(tokens, i + 1, out))
}

/// `ROW<name type, ...>` or `ROW(name type, ...)` at `i` (its bracket at `open`), as
/// `STRUCT<...>`. A field may carry Flink's description string, which is dropped.
fn row(tokens: &mut Vec<TokenWithSpan>, i: usize, open: usize, out: &mut Vec<TokenWithSpan>) -> Result<usize> {
    let parenthesised = tokens[open].token == Token::LParen;
    out.push(word("STRUCT", tokens[i].span));
    out.push(TokenWithSpan { token: Token::Lt, span: tokens[open].span });
    let mut j = open + 1;
    loop {
        j = next_copying(tokens, j, out);
        match tokens.get(j).map(|t| &t.token) {
            Some(Token::Word(_)) => out.push(tokens[j].clone()),
            _ => return Err(syntax("expected a field name in ROW<...>", span_at(tokens, j))),
        }
        j = next_copying(tokens, j + 1, out);
        j = data_type(tokens, j, out)?;
        j = next_copying(tokens, j, out);
        if matches!(tokens.get(j).map(|t| &t.token), Some(Token::SingleQuotedString(_))) {
            j = skip_space(tokens, j + 1);
        }
        match tokens.get(j).map(|t| &t.token) {
            Some(Token::Comma) => {
                out.push(tokens[j].clone());
                j += 1;
            }
            Some(Token::RParen) if parenthesised => {
                out.push(TokenWithSpan { token: Token::Gt, span: tokens[j].span });
                return Ok(j + 1);
            }
            _ if !parenthesised => return close_angle(tokens, j, out),
            _ => return Err(syntax("expected ',' or ')' in ROW(...)", span_at(tokens, j))),
        }
    }
}

/// `MAP<K, V>` at `i` (its `<` at `open`), as `MAP(K, V)`, the spelling sqlparser reads.
fn map(tokens: &mut Vec<TokenWithSpan>, i: usize, open: usize, out: &mut Vec<TokenWithSpan>) -> Result<usize> {
    out.push(tokens[i].clone());
    out.push(TokenWithSpan { token: Token::LParen, span: tokens[open].span });
    let mut j = next_copying(tokens, open + 1, out);
    j = data_type(tokens, j, out)?;
    j = next_copying(tokens, j, out);
    if tokens.get(j).map(|t| &t.token) != Some(&Token::Comma) {
        return Err(syntax("expected ',' between the key and value types of MAP<K, V>", span_at(tokens, j)));
    }
    out.push(tokens[j].clone());
    j = next_copying(tokens, j + 1, out);
    j = data_type(tokens, j, out)?;
    j = next_copying(tokens, j, out);
    let mut closing = Vec::new();
    let after = close_angle(tokens, j, &mut closing)?;
    out.push(TokenWithSpan { token: Token::RParen, span: tokens[j].span });
    Ok(after)
}

/// The `>` closing a type at `j`: a `>>` closes this type and leaves one `>` for the outer one.
fn close_angle(tokens: &mut Vec<TokenWithSpan>, j: usize, out: &mut Vec<TokenWithSpan>) -> Result<usize> {
    match tokens.get(j).map(|t| &t.token) {
        Some(Token::Gt) => {
            out.push(tokens[j].clone());
            Ok(j + 1)
        }
        Some(Token::ShiftRight) => {
            let span = tokens[j].span;
            tokens[j] = TokenWithSpan { token: Token::Gt, span };
            tokens.insert(j + 1, TokenWithSpan { token: Token::Gt, span });
            out.push(tokens[j].clone());
            Ok(j + 1)
        }
        _ => Err(syntax("expected '>' closing the type", span_at(tokens, j))),
    }
}

/// Copies a `(n)` or `(p, s)` right after a type name, if there is one.
fn precision(tokens: &[TokenWithSpan], i: usize, out: &mut Vec<TokenWithSpan>) -> usize {
    let end = skip_precision(tokens, i);
    out.extend(tokens[i..end].iter().cloned());
    end
}

fn skip_precision(tokens: &[TokenWithSpan], i: usize) -> usize {
    let open = skip_space(tokens, i);
    if tokens.get(open).map(|t| &t.token) != Some(&Token::LParen) {
        return i;
    }
    tokens[open..].iter().position(|t| t.token == Token::RParen).map_or(i, |close| open + close + 1)
}

/// As [`next`], copying the whitespace skipped.
fn next_copying(tokens: &[TokenWithSpan], i: usize, out: &mut Vec<TokenWithSpan>) -> usize {
    let j = skip_space(tokens, i);
    out.extend(tokens[i.min(j)..j].iter().cloned());
    j
}

pub(crate) fn word(value: &str, span: Span) -> TokenWithSpan {
    TokenWithSpan { token: Token::Word(Word { value: value.into(), quote_style: None, keyword: keyword(value) }), span }
}

fn keyword(value: &str) -> datafusion::sql::sqlparser::keywords::Keyword {
    use datafusion::sql::sqlparser::keywords::{ALL_KEYWORDS, ALL_KEYWORDS_INDEX, Keyword};
    ALL_KEYWORDS.binary_search(&value).map_or(Keyword::NoKeyword, |k| ALL_KEYWORDS_INDEX[k])
}

pub(crate) fn space(span: Span) -> TokenWithSpan {
    TokenWithSpan { token: Token::Whitespace(Whitespace::Space), span }
}

fn span_at(tokens: &[TokenWithSpan], i: usize) -> Span {
    tokens.get(i).or(tokens.last()).map_or(Span::empty(), |t| t.span)
}

#[cfg(test)]
mod tests {
    use datafusion::sql::sqlparser::dialect::GenericDialect;
    use datafusion::sql::sqlparser::tokenizer::Tokenizer;

    use super::*;

    fn rewritten(sql: &str) -> String {
        let tokens = Tokenizer::new(&GenericDialect {}, sql).tokenize_with_location().unwrap();
        rewrite(tokens).unwrap().iter().map(|t| t.token.to_string()).collect()
    }

    #[test]
    fn flink_types_become_sqlparsers_in_column_lists_and_casts() {
        assert_eq!(
            rewritten("CREATE TABLE t (a ROW<x BIGINT, y ROW(z TIMESTAMP_LTZ(3), w BYTES)>, bytes BIGINT)"),
            "CREATE TABLE t (a STRUCT<x BIGINT, y STRUCT<z TIMESTAMP(3) WITH TIME ZONE, w BYTEA>>, bytes BIGINT)"
        );
        assert_eq!(
            rewritten("CREATE TEMPORARY TABLE t (a ARRAY<ROW<x INT>>, ts TIMESTAMP(3) WITH LOCAL TIME ZONE)"),
            "CREATE TEMPORARY TABLE t (a ARRAY<STRUCT<x INT>>, ts TIMESTAMP(3) WITH TIME ZONE)"
        );
        assert_eq!(rewritten("SELECT CAST(a AS BYTES), bytes FROM t"), "SELECT CAST(a AS BYTEA), bytes FROM t");
        // Expressions and constraints are left alone.
        let kept =
            "CREATE TABLE t (a INT, b AS ROW(a, 1), WATERMARK FOR ts AS ts - INTERVAL '1' SECOND) WITH ('k' = 'v')";
        assert_eq!(rewritten(kept), kept);
        assert_eq!(rewritten("SELECT ROW(a, b) FROM t"), "SELECT ROW(a, b) FROM t");
    }

    #[test]
    fn a_map_type_is_spelled_as_sqlparser_reads_it() {
        assert_eq!(
            rewritten("CREATE TABLE t (m MAP<STRING, BYTES>, n MAP<STRING, ARRAY<ROW<x INT>>>, o INT)"),
            "CREATE TABLE t (m MAP(STRING, BYTEA), n MAP(STRING, ARRAY<STRUCT<x INT>>), o INT)"
        );
        let sql = "CREATE TABLE t (a INT,\n m MAP<STRING INT>)";
        let tokens = Tokenizer::new(&GenericDialect {}, sql).tokenize_with_location().unwrap();
        let error = rewrite(tokens).unwrap_err().to_string();
        assert!(error.contains("expected ','") && error.contains("line 2, column"), "{error}");
    }
}
