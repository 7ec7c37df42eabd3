//! Flink's metadata columns, `name type METADATA [FROM 'key'] [VIRTUAL]` in a CREATE TABLE's
//! column list: columns a connector fills from what carries the records rather than from their
//! values (Kafka's record timestamp, partition, offset, topic, headers). sqlparser has no such
//! column, so the `METADATA ...` words are taken out of the tokens (the column stays, with its
//! type) and handed back as a clause of its table: the option `metadata_columns`, `name=key,
//! ...` (the key is the column's name without FROM), and the VIRTUAL ones, which an INSERT does
//! not write, in the option `virtual_columns`; their names read by the session's rule for names
//! when the table is created. The connector checks the keys (`weir_connectors::kafka`).

use datafusion::sql::sqlparser::tokenizer::{Token, TokenWithSpan};

use crate::error::Result;
use crate::flink_types::{ElementKind, column_list};
use crate::time_clauses::{ClauseKind, TimeClause};
use crate::window_table_functions::{is_word, skip_space, syntax};

/// The option that carries a table's metadata columns.
pub const OPTION: &str = "metadata_columns";

/// The option naming the columns an INSERT does not write (Flink's VIRTUAL metadata columns).
pub const VIRTUAL_OPTION: &str = "virtual_columns";

/// One metadata column: its name as written, the key it reads, and whether it is VIRTUAL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetadataColumn {
    pub name: String,
    pub key: String,
    pub virtual_: bool,
}

/// `tokens` without the `METADATA ...` words, and each CREATE TABLE's metadata columns as a
/// clause at the position of the end of its column list.
pub fn extract(tokens: Vec<TokenWithSpan>) -> Result<(Vec<TokenWithSpan>, Vec<TimeClause>)> {
    let mut keep = vec![true; tokens.len()];
    let mut clauses = Vec::new();
    for i in 0..tokens.len() {
        if !is_word(tokens.get(i), "CREATE") {
            continue;
        }
        let Some(elements) = column_list(&tokens, i) else { continue };
        let mut columns = Vec::new();
        for element in &elements {
            let ElementKind::Column { type_start } = element.kind else { continue };
            let Some(at) = (type_start..element.end).find(|&j| is_word(tokens.get(j), "METADATA")) else { continue };
            let name = tokens[element.start].token.to_string();
            let mut j = skip_space(&tokens, at + 1);
            let mut key = None;
            if is_word(tokens.get(j), "FROM") {
                j = skip_space(&tokens, j + 1);
                match tokens.get(j).map(|t| &t.token) {
                    Some(Token::SingleQuotedString(text)) => key = Some(text.clone()),
                    _ => {
                        return Err(syntax(
                            "METADATA FROM takes a quoted key, as in METADATA FROM 'timestamp'",
                            tokens[j.min(tokens.len() - 1)].span,
                        ));
                    }
                }
                j = skip_space(&tokens, j + 1);
            }
            let virtual_ = is_word(tokens.get(j), "VIRTUAL");
            if virtual_ {
                j = skip_space(&tokens, j + 1);
            }
            if j != element.end {
                return Err(syntax(
                    "expected the end of the column after METADATA [FROM 'key'] [VIRTUAL]",
                    tokens[j].span,
                ));
            }
            keep[at..element.end].iter_mut().for_each(|k| *k = false);
            let key = key.unwrap_or_else(|| crate::identifiers::written_ident(&name).value);
            columns.push(MetadataColumn { name, key, virtual_ });
        }
        if let (false, Some(last)) = (columns.is_empty(), elements.last()) {
            let start = tokens[last.end].span.start;
            let kind = ClauseKind::Metadata { columns };
            clauses.push(TimeClause { kind, line: start.line, col: start.column });
        }
    }
    let kept = tokens.into_iter().zip(keep).filter_map(|(token, keep)| keep.then_some(token)).collect();
    Ok((kept, clauses))
}

#[cfg(test)]
mod tests {
    use datafusion::sql::sqlparser::dialect::GenericDialect;
    use datafusion::sql::sqlparser::tokenizer::Tokenizer;

    use super::*;

    #[test]
    fn metadata_words_are_taken_out_and_the_columns_kept() {
        let sql = "CREATE TABLE t (id BIGINT, ts TIMESTAMP_LTZ(3) METADATA FROM 'timestamp', `partition` INT METADATA VIRTUAL, off BIGINT METADATA FROM 'offset' VIRTUAL) WITH (k = 'v')";
        let tokens = Tokenizer::new(&GenericDialect {}, sql).tokenize_with_location().unwrap();
        let (kept, clauses) = extract(tokens).unwrap();
        let text: String = kept.iter().map(|t| t.token.to_string()).collect();
        assert_eq!(
            text,
            "CREATE TABLE t (id BIGINT, ts TIMESTAMP_LTZ(3) , `partition` INT , off BIGINT ) WITH (k = 'v')"
        );
        let columns = [("ts", "timestamp", false), ("`partition`", "partition", true), ("off", "offset", true)];
        let columns = columns
            .iter()
            .map(|(n, k, v)| MetadataColumn { name: n.to_string(), key: k.to_string(), virtual_: *v })
            .collect();
        assert_eq!(clauses[0].kind, ClauseKind::Metadata { columns });
        let bad = "CREATE TABLE t (ts TIMESTAMP METADATA FROM timestamp)";
        let error = extract(Tokenizer::new(&GenericDialect {}, bad).tokenize_with_location().unwrap()).unwrap_err();
        assert!(error.to_string().contains("METADATA FROM takes a quoted key"), "{error}");
    }
}
