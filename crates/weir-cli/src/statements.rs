//! Where typed or scripted text ends a statement: at a `;` outside quotes ('...', "...",
//! `...`), comments (`--` to the end of the line, `/* ... */`, nested as in Postgres) and
//! nothing else; and, for the prompt, what a statement left open is waiting for.

/// What an unfinished statement is inside of, for the continuation prompt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Open {
    /// Between tokens (at paren depth 0).
    Nothing,
    /// Inside a quoted string or identifier opened with this character.
    Quote(char),
    /// Inside a `/* */` comment.
    Comment,
    /// Inside parentheses.
    Paren,
}

/// `text` cut into statements: the complete ones (each without its `;`, trimmed, empty ones
/// dropped), the unfinished rest, and what the rest is inside of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Split {
    pub complete: Vec<String>,
    pub rest: String,
    pub open: Open,
}

/// Cuts `text` at every `;` that ends a statement.
pub fn split(text: &str) -> Split {
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    let mut complete = Vec::new();
    let mut start = 0;
    let mut quote: Option<char> = None;
    let mut comment_depth = 0usize;
    let mut line_comment = false;
    let mut parens = 0usize;
    let mut i = 0;
    while i < chars.len() {
        let (at, c) = chars[i];
        let next = chars.get(i + 1).map(|(_, c)| *c);
        if line_comment {
            line_comment = c != '\n';
        } else if comment_depth > 0 {
            if c == '*' && next == Some('/') {
                comment_depth -= 1;
                i += 1;
            } else if c == '/' && next == Some('*') {
                comment_depth += 1;
                i += 1;
            }
        } else if let Some(q) = quote {
            if c == q {
                // A doubled quote is the quote itself, inside.
                if next == Some(q) {
                    i += 1;
                } else {
                    quote = None;
                }
            }
        } else {
            match c {
                '\'' | '"' | '`' => quote = Some(c),
                '-' if next == Some('-') => line_comment = true,
                '/' if next == Some('*') => {
                    comment_depth = 1;
                    i += 1;
                }
                '(' => parens += 1,
                ')' => parens = parens.saturating_sub(1),
                ';' => {
                    let statement = text[start..at].trim();
                    if !statement.is_empty() && !only_comments(statement) {
                        complete.push(statement.to_string());
                    }
                    start = at + 1;
                    parens = 0;
                }
                _ => {}
            }
        }
        i += 1;
    }
    let open = match (quote, comment_depth, parens) {
        (Some(q), _, _) => Open::Quote(q),
        (None, 1.., _) => Open::Comment,
        (None, 0, 1..) => Open::Paren,
        _ => Open::Nothing,
    };
    Split { complete, rest: text[start..].to_string(), open }
}

/// Whether `text` (complete in itself) holds comments and whitespace only.
pub fn only_comments(text: &str) -> bool {
    let mut rest = text.trim_start();
    loop {
        if let Some(after) = rest.strip_prefix("--") {
            rest = after.split_once('\n').map_or("", |(_, tail)| tail).trim_start();
        } else if let Some(after) = rest.strip_prefix("/*") {
            match after.find("*/") {
                Some(end) => rest = after[end + 2..].trim_start(),
                None => return true,
            }
        } else {
            return rest.is_empty();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_semicolon_inside_quotes_or_comments_ends_nothing() {
        let text = "SELECT 'a;b', \"c;d\", `e;f` -- g;h\n/* i; /* j; */ k; */ FROM t; SELECT 2;";
        let split = split(text);
        assert_eq!(
            split.complete,
            vec!["SELECT 'a;b', \"c;d\", `e;f` -- g;h\n/* i; /* j; */ k; */ FROM t", "SELECT 2"]
        );
        assert_eq!((split.rest.as_str(), split.open), ("", Open::Nothing));
    }

    #[test]
    fn what_a_statement_is_waiting_for() {
        assert_eq!(split("SELECT 'it''s;").open, Open::Quote('\''));
        assert_eq!(split("SELECT \"x").open, Open::Quote('"'));
        assert_eq!(split("SELECT /* ;").open, Open::Comment);
        assert_eq!(split("CREATE TABLE t (a INT,").open, Open::Paren);
        let split = split("SELECT 1; SELECT\n 2");
        assert_eq!(split.complete, vec!["SELECT 1"]);
        assert_eq!((split.rest.as_str(), split.open), (" SELECT\n 2", Open::Nothing));
    }

    #[test]
    fn empty_statements_and_lone_comments_are_dropped() {
        assert!(split(" ; -- only a comment\n; /* c */ ;").complete.is_empty());
        assert!(only_comments("-- a\n  /* b */ "));
        assert!(!only_comments("-- a\nSELECT 1"));
    }
}
