//! Flink SQL weir does not run, refused by name before parsing: sqlparser would stop at them
//! with a bare syntax error ("Expected: (, found: AS"), which does not tell a Flink user what is
//! missing or what to write instead.

use datafusion::sql::sqlparser::tokenizer::{Token, TokenWithSpan};

use crate::error::Result;
use crate::window_table_functions::syntax;

/// Flink constructs, as the words that start them, with why weir refuses each and what to use.
const REFUSED: &[(&[&str], &str)] = &[
    (
        &["CREATE", "FUNCTION"],
        "CREATE FUNCTION is not supported: weir runs no Java user-defined functions; use a built-in function or an expression",
    ),
    (
        &["CREATE", "TEMPORARY", "FUNCTION"],
        "CREATE TEMPORARY FUNCTION is not supported: weir runs no Java user-defined functions; use a built-in function or an expression",
    ),
    (
        &["CREATE", "TEMPORARY", "SYSTEM", "FUNCTION"],
        "CREATE TEMPORARY SYSTEM FUNCTION is not supported: weir runs no Java user-defined functions; use a built-in function or an expression",
    ),
    (
        &["FOR", "SYSTEM_TIME", "AS", "OF"],
        "FOR SYSTEM_TIME AS OF (a temporal or lookup join) is not supported yet: join on the key with a regular join (its state bounded by SET 'table.exec.state.ttl'), or an interval join on event time",
    ),
    (&["MATCH_RECOGNIZE"], "MATCH_RECOGNIZE (pattern matching) is not supported: weir has no pattern operator yet"),
];

/// Fails at the first refused construct in `tokens`.
pub fn check(tokens: &[TokenWithSpan]) -> Result<()> {
    let words: Vec<(Option<String>, &TokenWithSpan)> = tokens
        .iter()
        .filter(|t| !matches!(t.token, Token::Whitespace(_)))
        .map(|t| match &t.token {
            Token::Word(word) if word.quote_style.is_none() => (Some(word.value.to_ascii_uppercase()), t),
            _ => (None, t),
        })
        .collect();
    for start in 0..words.len() {
        for (construct, message) in REFUSED {
            let matches = construct
                .iter()
                .enumerate()
                .all(|(i, word)| words.get(start + i).and_then(|(w, _)| w.as_deref()) == Some(*word));
            if matches {
                return Err(syntax(*message, words[start].1.span));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use datafusion::sql::sqlparser::dialect::GenericDialect;
    use datafusion::sql::sqlparser::tokenizer::Tokenizer;

    use super::*;
    use crate::error::Error;

    fn checked(sql: &str) -> Result<()> {
        check(&Tokenizer::new(&GenericDialect {}, sql).tokenize_with_location().unwrap())
    }

    #[test]
    fn flinks_constructs_weir_lacks_are_named_where_they_are() {
        let Err(Error::Syntax { message, line, column }) =
            checked("SELECT 1;\nCREATE  FUNCTION count_char AS 'com.example.CountChar'")
        else {
            panic!("not refused")
        };
        assert!(message.starts_with("CREATE FUNCTION is not supported"), "{message}");
        assert_eq!((line, column), (2, 1));
        let Err(error) = checked("SELECT * FROM b JOIN s FOR SYSTEM_TIME AS OF b.p_time AS s ON b.k = s.k") else {
            panic!("not refused")
        };
        assert!(error.to_string().contains("column 24: FOR SYSTEM_TIME AS OF"), "{error}");
        assert!(checked("SELECT 'CREATE FUNCTION', \"for\" FROM t").is_ok());
    }
}
