//! Flink's windowing table functions:
//!
//! ```sql
//! SELECT window_start, window_end, count(*)
//! FROM TABLE(TUMBLE(TABLE bids, DESCRIPTOR(ts), INTERVAL '10' SECOND))
//! GROUP BY window_start, window_end
//! ```
//!
//! `TUMBLE(TABLE t, DESCRIPTOR(ts), size)`, `HOP(TABLE t, DESCRIPTOR(ts), slide, size)` and
//! `CUMULATE(TABLE t, DESCRIPTOR(ts), step, size)`, each with an optional offset last,
//! positional or with Flink's names (`DATA =>`, `TIMECOL =>`, `SIZE =>`, `SLIDE =>`, `STEP =>`,
//! `OFFSET =>`), give every row of `t` once per window that
//! holds it, with three more columns: `window_start`, `window_end` and `window_time` (the end
//! less a millisecond). sqlparser cannot parse `TABLE t` as an argument, so the call is
//! rewritten in the token stream, before parsing, into the derived table it stands for, built
//! of ordinary functions (`window_functions.rs`):
//!
//! - TUMBLE: `(SELECT *, tumble(descriptor(ts), size) AS window_start, ... + size AS window_end,
//!   ... FROM t)`;
//! - HOP: the same over `unnest(hop_starts(descriptor(ts), slide, size)) AS window_start`;
//! - CUMULATE: `tumble(descriptor(ts), size) AS window_start` and
//!   `unnest(cumulate_ends(descriptor(ts), step, size)) AS window_end`.
//!
//! The planner knows these expressions as time attributes (a window start, or end, complete once
//! the watermark passes it), so GROUP BY window_start, window_end is a window aggregate, a
//! ROW_NUMBER() partitioned by them a top-N per window, and a join on them a window join, as in
//! Flink; and the same SQL runs as a batch query in DataFusion. Tokens copied from the call keep
//! their positions and the new ones take the call's, so errors still point into the text as
//! written. An OFFSET (named, or after the sizes) is passed to the window functions. SESSION is
//! refused with the form weir supports.

use datafusion::sql::sqlparser::dialect::GenericDialect;
use datafusion::sql::sqlparser::keywords::Keyword;
use datafusion::sql::sqlparser::tokenizer::{Span, Token, TokenWithSpan, Tokenizer};

use crate::error::{Error, Result};

/// The windowing table functions weir rewrites, and the arguments each takes after the data
/// and the time column.
const FUNCTIONS: [(&str, [&str; 2]); 3] =
    [("TUMBLE", ["SIZE", ""]), ("HOP", ["SLIDE", "SIZE"]), ("CUMULATE", ["STEP", "SIZE"])];

pub(crate) fn syntax(message: impl Into<String>, span: Span) -> Error {
    Error::Syntax { message: message.into(), line: span.start.line, column: span.start.column }
}

/// The tokens of `sql`, with every windowing table function call rewritten.
pub fn tokens(sql: &str) -> Result<Vec<TokenWithSpan>> {
    let dialect = GenericDialect {};
    let tokens = Tokenizer::new(&dialect, sql).tokenize_with_location().map_err(|e| Error::Syntax {
        message: e.message.clone(),
        line: e.location.line,
        column: e.location.column,
    })?;
    let mut out = Vec::with_capacity(tokens.len());
    let mut i = 0;
    while i < tokens.len() {
        match call_at(&tokens, i)? {
            Some((call, next)) => {
                call.expand(&mut out)?;
                i = next;
            }
            None => {
                out.push(tokens[i].clone());
                i += 1;
            }
        }
    }
    Ok(out)
}

/// The index of the first token at or after `i` that is not whitespace.
pub(crate) fn skip_space(tokens: &[TokenWithSpan], mut i: usize) -> usize {
    while tokens.get(i).is_some_and(|t| matches!(t.token, Token::Whitespace(_))) {
        i += 1;
    }
    i
}

pub(crate) fn is_word(token: Option<&TokenWithSpan>, word: &str) -> bool {
    matches!(token, Some(TokenWithSpan { token: Token::Word(w), .. }) if w.quote_style.is_none() && w.value.eq_ignore_ascii_case(word))
}

fn is(token: Option<&TokenWithSpan>, expected: &Token) -> bool {
    token.is_some_and(|t| &t.token == expected)
}

/// One argument: its tokens, without the surrounding whitespace, and its name if it has one.
struct Argument {
    name: Option<String>,
    tokens: Vec<TokenWithSpan>,
    span: Span,
}

/// A call `TABLE(<FUNCTION>(...))` read from the token stream.
struct Call {
    function: &'static str,
    /// Where `TABLE` stands: the new tokens' position.
    span: Span,
    /// The data table's name tokens, the time column's `DESCRIPTOR(...)`, and the intervals.
    table: Vec<TokenWithSpan>,
    descriptor: Vec<TokenWithSpan>,
    intervals: Vec<Vec<TokenWithSpan>>,
    /// Flink's window offset, passed on as the window functions' last argument.
    offset: Option<Vec<TokenWithSpan>>,
}

/// The call starting at token `i`, if a windowing table function starts there, and the index of
/// the token after it.
fn call_at(tokens: &[TokenWithSpan], i: usize) -> Result<Option<(Call, usize)>> {
    let table = &tokens[i];
    let open = skip_space(tokens, i + 1);
    let name = skip_space(tokens, open + 1);
    if !matches!(&table.token, Token::Word(w) if w.keyword == Keyword::TABLE) || !is(tokens.get(open), &Token::LParen) {
        return Ok(None);
    }
    let Some(TokenWithSpan { token: Token::Word(word), span }) = tokens.get(name) else { return Ok(None) };
    let upper = word.value.to_ascii_uppercase();
    if word.quote_style.is_some() || !is(tokens.get(skip_space(tokens, name + 1)), &Token::LParen) {
        return Ok(None);
    }
    if upper == "SESSION" {
        return Err(syntax(
            "the SESSION window table function is not supported yet: write GROUP BY session(ts, INTERVAL '...'), keys, with session_end(ts, INTERVAL '...') for the window end",
            *span,
        ));
    }
    let Some((function, names)) = FUNCTIONS.iter().find(|(f, _)| *f == upper) else { return Ok(None) };
    let (arguments, close) = arguments(tokens, skip_space(tokens, name + 1))?;
    let end = skip_space(tokens, close + 1);
    if !is(tokens.get(end), &Token::RParen) {
        let at = tokens.get(end).map_or(*span, |t| t.span);
        return Err(syntax(format!("expected ) to close TABLE({function}(...))"), at));
    }
    let call = Call::read(function, table.span, *span, arguments, names)?;
    Ok(Some((call, end + 1)))
}

/// The arguments of the call whose `(` is at `open`, split at top-level commas, and the index of
/// its `)`.
fn arguments(tokens: &[TokenWithSpan], open: usize) -> Result<(Vec<Argument>, usize)> {
    let mut arguments = Vec::new();
    let mut current: Vec<TokenWithSpan> = Vec::new();
    let mut depth = 0usize;
    let mut finish = |current: &mut Vec<TokenWithSpan>, at: Span| -> Result<()> {
        let taken: Vec<TokenWithSpan> =
            std::mem::take(current).into_iter().filter(|t| !matches!(t.token, Token::Whitespace(_))).collect();
        let Some(first) = taken.first() else { return Err(syntax("an argument is missing", at)) };
        let span = first.span;
        let named =
            matches!(&first.token, Token::Word(w) if w.quote_style.is_none()) && is(taken.get(1), &Token::RArrow);
        let (name, tokens) = match (named, &first.token) {
            (true, Token::Word(w)) => (Some(w.value.to_ascii_uppercase()), taken[2..].to_vec()),
            _ => (None, taken),
        };
        arguments.push(Argument { name, tokens, span });
        Ok(())
    };
    for (i, token) in tokens.iter().enumerate().skip(open + 1) {
        match &token.token {
            Token::LParen => depth += 1,
            Token::RParen if depth == 0 => {
                finish(&mut current, token.span)?;
                return Ok((arguments, i));
            }
            Token::RParen => depth -= 1,
            Token::Comma if depth == 0 => {
                finish(&mut current, token.span)?;
                continue;
            }
            _ => {}
        }
        current.push(token.clone());
    }
    Err(syntax("the window table function's ( is never closed", tokens[open].span))
}

impl Call {
    fn read(
        function: &'static str,
        span: Span,
        name_span: Span,
        arguments: Vec<Argument>,
        names: &[&str; 2],
    ) -> Result<Call> {
        let names: Vec<&str> =
            ["DATA", "TIMECOL"].into_iter().chain(names.iter().copied().filter(|n| !n.is_empty())).collect();
        let usage = format!(
            "{function}(TABLE t, DESCRIPTOR(time column){} [, <offset>])",
            names[2..].iter().map(|n| format!(", <{}>", n.to_lowercase())).collect::<String>()
        );
        // The named arguments, then an optional OFFSET.
        let mut slots: Vec<Option<Argument>> = (0..=names.len()).map(|_| None).collect();
        for (position, argument) in arguments.into_iter().enumerate() {
            let slot = match &argument.name {
                Some(name) if name == "OFFSET" => names.len(),
                Some(name) => match names.iter().position(|n| n == name) {
                    Some(slot) => slot,
                    None => {
                        return Err(syntax(
                            format!("{function} has no argument {name}: it takes {}", names.join(", ")),
                            argument.span,
                        ));
                    }
                },
                None if position <= names.len() => position,
                None => return Err(syntax(format!("too many arguments: {usage}"), argument.span)),
            };
            if slots[slot].is_some() {
                return Err(syntax(format!("{} is given twice", names.get(slot).unwrap_or(&"OFFSET")), argument.span));
            }
            slots[slot] = Some(argument);
        }
        let offset = slots.pop().flatten().map(|argument| argument.tokens);
        let mut slots = slots.into_iter().zip(&names);
        let mut next = || match slots.next() {
            Some((Some(argument), _)) => Ok(argument),
            Some((None, name)) => Err(syntax(format!("{name} is missing: {usage}"), name_span)),
            None => Err(syntax(format!("an argument is missing: {usage}"), name_span)),
        };
        let data = next()?;
        if !is_word(data.tokens.first(), "TABLE") || data.tokens.len() < 2 {
            return Err(syntax(format!("the data of {function} is written TABLE <name>: {usage}"), data.span));
        }
        let descriptor = next()?;
        if !is_word(descriptor.tokens.first(), "DESCRIPTOR") {
            return Err(syntax(
                format!("the time column of {function} is written DESCRIPTOR(<column>): {usage}"),
                descriptor.span,
            ));
        }
        let mut intervals = Vec::new();
        for _ in 2..names.len() {
            intervals.push(next()?.tokens);
        }
        Ok(Call { function, span, table: data.tokens[1..].to_vec(), descriptor: descriptor.tokens, intervals, offset })
    }

    /// Appends the derived table the call stands for.
    fn expand(&self, out: &mut Vec<TokenWithSpan>) -> Result<()> {
        let mut parts: Vec<Part> = Vec::new();
        let (t, d) = (Part::Tokens(&self.table), Part::Tokens(&self.descriptor));
        let interval = |i: usize| Part::Tokens(&self.intervals[i]);
        use Part::Text;
        // ", <offset>" before a window function's closing parenthesis, when there is one.
        let (comma, offset) = match &self.offset {
            Some(tokens) => (Text(", "), Part::Tokens(tokens)),
            None => (Text(""), Part::Tokens(&[])),
        };
        // `unnest(<function>(<time>, <first interval>, <size>[, <offset>]))`: a row per window.
        let window_list = |function: &'static str| {
            [
                Text("unnest("),
                Text(function),
                Text("("),
                d,
                Text(", "),
                interval(0),
                Text(", "),
                interval(1),
                comma,
                offset,
                Text("))"),
            ]
        };
        match self.function {
            "TUMBLE" => {
                let start = [Text("tumble("), d, Text(", "), interval(0), comma, offset, Text(")")];
                parts.push(Text("(SELECT *, "));
                parts.extend(start);
                parts.extend([Text(" AS window_start, ")]);
                parts.extend(start);
                parts.extend([Text(" + ("), interval(0), Text(") AS window_end, ")]);
                parts.extend(start);
                parts.extend([Text(" + ("), interval(0), Text(") - INTERVAL '1' MILLISECOND AS window_time FROM "), t]);
                parts.push(Text(")"));
            }
            "HOP" => {
                parts.extend([
                    Text("(SELECT *, window_start + ("),
                    interval(1),
                    Text(") AS window_end, window_start + ("),
                    interval(1),
                    Text(") - INTERVAL '1' MILLISECOND AS window_time FROM (SELECT *, "),
                ]);
                parts.extend(window_list("hop_starts"));
                parts.extend([Text(" AS window_start FROM "), t, Text("))")]);
            }
            _ => {
                parts.extend([
                    Text("(SELECT *, window_end - INTERVAL '1' MILLISECOND AS window_time FROM (SELECT *, tumble("),
                    d,
                    Text(", "),
                    interval(1),
                    comma,
                    offset,
                    Text(") AS window_start, "),
                ]);
                parts.extend(window_list("cumulate_ends"));
                parts.extend([Text(" AS window_end FROM "), t, Text("))")]);
            }
        }
        for part in parts {
            match part {
                Part::Tokens(tokens) => out.extend(tokens.iter().cloned()),
                Part::Text(text) => {
                    let dialect = GenericDialect {};
                    let tokens = Tokenizer::new(&dialect, text)
                        .tokenize()
                        .map_err(|e| syntax(format!("rewriting {}: {e}", self.function), self.span))?;
                    out.extend(tokens.into_iter().map(|token| TokenWithSpan { token, span: self.span }));
                }
            }
        }
        Ok(())
    }
}

/// A piece of the rewritten call: new text, or tokens of the original.
#[derive(Clone, Copy)]
enum Part<'a> {
    Text(&'static str),
    Tokens(&'a [TokenWithSpan]),
}

#[cfg(test)]
mod tests {
    use datafusion::sql::sqlparser::parser::Parser;

    use super::*;

    fn rewritten(sql: &str) -> String {
        let tokens = tokens(sql).unwrap();
        let statements = Parser::new(&GenericDialect {}).with_tokens_with_locations(tokens).parse_statements().unwrap();
        statements.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")
    }

    fn error(sql: &str) -> (String, u64, u64) {
        match tokens(sql) {
            Err(Error::Syntax { message, line, column }) => (message, line, column),
            other => panic!("{sql}: {:?}", other.map(|t| t.len())),
        }
    }

    #[test]
    fn each_function_becomes_its_derived_table() {
        assert_eq!(
            rewritten("SELECT window_start FROM TABLE(TUMBLE(TABLE bids, DESCRIPTOR(ts), INTERVAL '10' SECOND)) AS w"),
            "SELECT window_start FROM (SELECT *, tumble(DESCRIPTOR(ts), INTERVAL '10' SECOND) AS window_start, \
             tumble(DESCRIPTOR(ts), INTERVAL '10' SECOND) + (INTERVAL '10' SECOND) AS window_end, \
             tumble(DESCRIPTOR(ts), INTERVAL '10' SECOND) + (INTERVAL '10' SECOND) - INTERVAL '1' MILLISECOND AS window_time \
             FROM bids) AS w"
        );
        assert_eq!(
            rewritten(
                "SELECT * FROM TABLE(hop(TABLE s.bids, DESCRIPTOR(ts), INTERVAL '1' SECOND, INTERVAL '3' SECOND))"
            ),
            "SELECT * FROM (SELECT *, window_start + (INTERVAL '3' SECOND) AS window_end, \
             window_start + (INTERVAL '3' SECOND) - INTERVAL '1' MILLISECOND AS window_time \
             FROM (SELECT *, unnest(hop_starts(DESCRIPTOR(ts), INTERVAL '1' SECOND, INTERVAL '3' SECOND)) AS window_start FROM s.bids))"
        );
        // Named arguments, in any order.
        assert_eq!(
            rewritten(
                "SELECT * FROM TABLE(CUMULATE(SIZE => INTERVAL '1' MINUTE, DATA => TABLE bids, STEP => INTERVAL '10' SECOND, TIMECOL => DESCRIPTOR(ts)))"
            ),
            "SELECT * FROM (SELECT *, window_end - INTERVAL '1' MILLISECOND AS window_time \
             FROM (SELECT *, tumble(DESCRIPTOR(ts), INTERVAL '1' MINUTE) AS window_start, \
             unnest(cumulate_ends(DESCRIPTOR(ts), INTERVAL '10' SECOND, INTERVAL '1' MINUTE)) AS window_end FROM bids))"
        );
    }

    /// Flink's OFFSET, named or after the sizes, is every window function's last argument.
    #[test]
    fn an_offset_goes_to_the_window_functions() {
        assert_eq!(
            rewritten("SELECT * FROM TABLE(TUMBLE(TABLE t, DESCRIPTOR(ts), INTERVAL '1' DAY, INTERVAL '-8' HOUR))"),
            "SELECT * FROM (SELECT *, tumble(DESCRIPTOR(ts), INTERVAL '1' DAY, INTERVAL '-8' HOUR) AS window_start, \
             tumble(DESCRIPTOR(ts), INTERVAL '1' DAY, INTERVAL '-8' HOUR) + (INTERVAL '1' DAY) AS window_end, \
             tumble(DESCRIPTOR(ts), INTERVAL '1' DAY, INTERVAL '-8' HOUR) + (INTERVAL '1' DAY) - INTERVAL '1' MILLISECOND AS window_time \
             FROM t)"
        );
        let hop = rewritten(
            "SELECT * FROM TABLE(HOP(TABLE t, DESCRIPTOR(ts), INTERVAL '1' HOUR, INTERVAL '2' HOUR, OFFSET => INTERVAL '5' MINUTE))",
        );
        assert!(
            hop.contains("hop_starts(DESCRIPTOR(ts), INTERVAL '1' HOUR, INTERVAL '2' HOUR, INTERVAL '5' MINUTE)"),
            "{hop}"
        );
        let cumulate = rewritten(
            "SELECT * FROM TABLE(CUMULATE(TABLE t, DESCRIPTOR(ts), INTERVAL '1' HOUR, INTERVAL '1' DAY, INTERVAL '1' HOUR))",
        );
        assert!(
            cumulate.contains("tumble(DESCRIPTOR(ts), INTERVAL '1' DAY, INTERVAL '1' HOUR) AS window_start"),
            "{cumulate}"
        );
        assert!(
            cumulate.contains("cumulate_ends(DESCRIPTOR(ts), INTERVAL '1' HOUR, INTERVAL '1' DAY, INTERVAL '1' HOUR)"),
            "{cumulate}"
        );
    }

    #[test]
    fn other_text_is_left_alone() {
        let sql = "SELECT tumble(ts, INTERVAL '1' SECOND), 'TABLE(TUMBLE(' FROM t GROUP BY 1";
        let plain = Tokenizer::new(&GenericDialect {}, sql).tokenize_with_location().unwrap();
        assert_eq!(tokens(sql).unwrap(), plain);
    }

    #[test]
    fn mistakes_say_what_is_wrong_and_where() {
        let (message, line, column) = error("SELECT *\nFROM TABLE(TUMBLE(bids, DESCRIPTOR(ts), INTERVAL '1' SECOND))");
        assert!(message.contains("written TABLE <name>"), "{message}");
        assert_eq!((line, column), (2, 19));
        let (message, _, column) = error("SELECT * FROM TABLE(HOP(TABLE bids, DESCRIPTOR(ts), INTERVAL '1' SECOND))");
        assert!(
            message.contains("SIZE is missing: HOP(TABLE t, DESCRIPTOR(time column), <slide>, <size> [, <offset>])"),
            "{message}"
        );
        assert_eq!(column, 21);
        let (message, _, _) = error(
            "SELECT * FROM TABLE(TUMBLE(TABLE bids, DESCRIPTOR(ts), INTERVAL '1' SECOND, INTERVAL '1' SECOND, INTERVAL '1' SECOND))",
        );
        assert!(message.contains("too many arguments"), "{message}");
        let (message, _, _) = error(
            "SELECT * FROM TABLE(TUMBLE(TABLE bids, DESCRIPTOR(ts), SIZE => INTERVAL '1' SECOND, SIZE => INTERVAL '2' SECOND))",
        );
        assert!(message.contains("SIZE is given twice"), "{message}");
        let (message, _, _) = error("SELECT * FROM TABLE(TUMBLE(TABLE bids, ts, INTERVAL '1' SECOND))");
        assert!(message.contains("DESCRIPTOR(<column>)"), "{message}");
        let (message, _, column) =
            error("SELECT * FROM TABLE(SESSION(TABLE bids PARTITION BY id, DESCRIPTOR(ts), INTERVAL '1' SECOND))");
        assert!(message.contains("GROUP BY session(ts"), "{message}");
        assert_eq!(column, 21);
    }
}
