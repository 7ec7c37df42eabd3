//! Flink's computed columns, `name AS expression` in a CREATE TABLE's column list. sqlparser
//! has no such column, so each is taken out of the tokens and given back as a clause of its
//! table: the option `computed_columns`, `expression AS name, ...` (a select list, in the
//! columns' order). The table computes them right after its source reads a batch, before any
//! watermark, so an event time may be one of them (Flink's Nexmark DDL computes its `dateTime`).
//! (`name AS PROCTIME()` is a processing-time column instead, taken out before: `time_clauses`.)

use datafusion::sql::sqlparser::tokenizer::TokenWithSpan;

use crate::flink_types::{ElementKind, column_list};
use crate::time_clauses::{ClauseKind, TimeClause};
use crate::window_table_functions::{is_word, skip_space};

/// The option that carries a table's computed columns.
pub const OPTION: &str = "computed_columns";

/// `tokens` without computed columns, and each CREATE TABLE's computed columns as a clause at
/// the position of the end of its column list.
pub fn extract(tokens: Vec<TokenWithSpan>) -> (Vec<TokenWithSpan>, Vec<TimeClause>) {
    let mut keep = vec![true; tokens.len()];
    let mut clauses = Vec::new();
    for i in 0..tokens.len() {
        if !is_word(tokens.get(i), "CREATE") {
            continue;
        }
        let Some(elements) = column_list(&tokens, i) else { continue };
        let mut columns = Vec::new();
        for (index, element) in elements.iter().enumerate() {
            let ElementKind::Computed { expression } = element.kind else { continue };
            let text: String = tokens[expression..element.end].iter().map(|t| t.token.to_string()).collect();
            columns.push(format!("{} AS {}", text.trim(), tokens[element.start].token));
            // With the comma before it, or the first one with the comma after it.
            let (from, to) = match index {
                0 if elements.len() > 1 => (element.start, skip_space(&tokens, element.end + 1)),
                0 => (element.start, element.end),
                _ => (elements[index - 1].end, element.end),
            };
            keep[from..to].iter_mut().for_each(|k| *k = false);
        }
        if let (false, Some(last)) = (columns.is_empty(), elements.last()) {
            // Inside the statement (sqlparser's span of a CREATE TABLE starts after CREATE).
            let start = tokens[last.end].span.start;
            let kind = ClauseKind::Computed { columns: columns.join(", ") };
            clauses.push(TimeClause { kind, line: start.line, col: start.column });
        }
    }
    let kept = tokens.into_iter().zip(keep).filter_map(|(token, keep)| keep.then_some(token)).collect();
    (kept, clauses)
}

#[cfg(test)]
mod tests {
    use datafusion::sql::sqlparser::dialect::GenericDialect;
    use datafusion::sql::sqlparser::tokenizer::Tokenizer;

    use super::*;

    #[test]
    fn computed_columns_are_taken_out_with_their_commas_in_order() {
        let sql = "CREATE TABLE t (a BIGINT, b AS a + 1, c VARCHAR, `d` AS CASE WHEN a > 0 THEN 'x' ELSE c END) WITH (k = 'v')";
        let tokens = Tokenizer::new(&GenericDialect {}, sql).tokenize_with_location().unwrap();
        let (kept, clauses) = extract(tokens);
        let text: String = kept.iter().map(|t| t.token.to_string()).collect();
        assert_eq!(text, "CREATE TABLE t (a BIGINT, c VARCHAR) WITH (k = 'v')");
        let columns = "a + 1 AS b, CASE WHEN a > 0 THEN 'x' ELSE c END AS `d`";
        assert_eq!(
            clauses,
            vec![TimeClause { kind: ClauseKind::Computed { columns: columns.into() }, line: 1, col: 92 }]
        );
        let first = "CREATE TABLE t (b AS 1, a BIGINT)";
        let (kept, _) = extract(Tokenizer::new(&GenericDialect {}, first).tokenize_with_location().unwrap());
        assert_eq!(kept.iter().map(|t| t.token.to_string()).collect::<String>(), "CREATE TABLE t (a BIGINT)");
    }
}
