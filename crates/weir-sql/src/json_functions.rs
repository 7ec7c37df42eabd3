//! Flink's JSON query functions with their clauses, as Flink's function reference has them:
//!
//! - `JSON_VALUE(j, path [RETURNING type] [{NULL | ERROR | DEFAULT expr} ON EMPTY]
//!   [{NULL | ERROR | DEFAULT expr} ON ERROR])`: the scalar at the path, as text or the type;
//! - `JSON_QUERY(j, path [{WITHOUT | WITH [CONDITIONAL | UNCONDITIONAL]} [ARRAY] WRAPPER]
//!   [{NULL | EMPTY ARRAY | EMPTY OBJECT | ERROR} ON EMPTY] [... ON ERROR])`: the JSON value at the
//!   path, written compactly (a scalar only when wrapped in an array);
//! - `JSON_EXISTS(j, path [{TRUE | FALSE | UNKNOWN | ERROR} ON ERROR])`.
//!
//! A path is `lax` (the default: no value there is *empty*) or `strict` (no value there is an
//! *error*); text that is not JSON, and for JSON_VALUE a value that is not a scalar, is an
//! error too. Each defaults to NULL (FALSE for JSON_EXISTS); `ERROR` fails the query with a
//! message naming the function and path.
//!
//! sqlparser reads none of the clauses but RETURNING, so [`clauses_as_arguments`] spells each
//! on the tokens as a marker argument, `weir_json_clause('ON EMPTY', 'DEFAULT', expr)`, with
//! RETURNING moved last where sqlparser reads it; [`call`] then writes the call as an
//! expression of datafusion-functions-json (`json_get_json`, `json_as_text`, `json_contains`)
//! and weir's `is_json` and `json_compact`.

use datafusion::sql::sqlparser::ast::{Expr, FunctionArg, FunctionArgExpr, FunctionArguments, Value, ValueWithSpan};
use datafusion::sql::sqlparser::tokenizer::{Span, Token, TokenWithSpan};

use crate::error::{Error, Result};
use crate::flink_types::{space, word};
use crate::window_table_functions::{is_word, skip_space, syntax};

/// The marker function a clause is spelled as.
const CLAUSE: &str = "weir_json_clause";

const FUNCTIONS: [&str; 3] = ["JSON_VALUE", "JSON_QUERY", "JSON_EXISTS"];

/// The words a clause starts with (RETURNING's type ends at one).
const CLAUSE_STARTS: [&str; 10] =
    ["RETURNING", "WITH", "WITHOUT", "NULL", "ERROR", "DEFAULT", "EMPTY", "TRUE", "FALSE", "UNKNOWN"];

/// `tokens` with each clause of a JSON query function after its path as a marker argument
/// (see the module's doc).
pub fn clauses_as_arguments(tokens: Vec<TokenWithSpan>) -> Result<Vec<TokenWithSpan>> {
    let mut out = Vec::with_capacity(tokens.len());
    let mut i = 0;
    while i < tokens.len() {
        let open = skip_space(&tokens, i + 1);
        let call = FUNCTIONS.iter().any(|f| is_word(tokens.get(i), f))
            && tokens.get(open).is_some_and(|t| t.token == Token::LParen);
        let Some((path_end, close)) = call.then(|| path_and_close(&tokens, open)).flatten() else {
            out.push(tokens[i].clone());
            i += 1;
            continue;
        };
        let region = &tokens[path_end..close];
        if region.iter().all(|t| matches!(t.token, Token::Whitespace(_))) {
            out.push(tokens[i].clone());
            i += 1;
            continue;
        }
        let name = tokens[i].span;
        out.extend(tokens[i..=open].iter().cloned());
        out.extend(clauses_as_arguments(tokens[open + 1..path_end].to_vec())?);
        let (clauses, returning) = read_clauses(region, tokens[close].span)?;
        let at_name = |token: Token| TokenWithSpan { token, span: name };
        for clause in clauses {
            out.extend([at_name(Token::Comma), space(name), word(CLAUSE, name), at_name(Token::LParen)]);
            let texts = [clause.kind, clause.behaviour.as_str()];
            for (k, text) in texts.iter().enumerate() {
                if k > 0 {
                    out.push(at_name(Token::Comma));
                }
                out.push(at_name(Token::SingleQuotedString(text.to_string())));
            }
            if !clause.default.is_empty() {
                out.push(at_name(Token::Comma));
                out.extend(clauses_as_arguments(clause.default)?);
            }
            out.push(at_name(Token::RParen));
        }
        if !returning.is_empty() {
            out.push(space(name));
            out.extend(returning);
        }
        out.push(tokens[close].clone());
        i = close + 1;
    }
    Ok(out)
}

/// For a call whose `(` is at `open`: where its path (the quoted second argument) ends, and
/// its `)`.
fn path_and_close(tokens: &[TokenWithSpan], open: usize) -> Option<(usize, usize)> {
    let (mut depth, mut commas, mut path_end) = (0i64, 0, None);
    for (j, token) in tokens.iter().enumerate().skip(open) {
        match &token.token {
            Token::LParen | Token::LBracket => depth += 1,
            Token::RParen | Token::RBracket => {
                depth -= 1;
                if depth == 0 {
                    return path_end.map(|end| (end, j));
                }
            }
            Token::Comma if depth == 1 => commas += 1,
            Token::SingleQuotedString(_) if depth == 1 && commas == 1 && path_end.is_none() => path_end = Some(j + 1),
            _ => {}
        }
    }
    None
}

/// One clause: `kind` is `WRAPPER`, `ON EMPTY` or `ON ERROR`; `behaviour` what it says
/// (`CONDITIONAL`, `NULL`, `EMPTY ARRAY`, `DEFAULT`, ...); `default` DEFAULT's expression.
struct Clause {
    kind: &'static str,
    behaviour: String,
    default: Vec<TokenWithSpan>,
}

/// The clauses in `region` (the tokens between a path and the call's `)`, at `close`) and the
/// RETURNING clause's tokens.
fn read_clauses(region: &[TokenWithSpan], close: Span) -> Result<(Vec<Clause>, Vec<TokenWithSpan>)> {
    let (mut clauses, mut returning) = (Vec::new(), Vec::new());
    let at = |k: usize| region.get(skip_space(region, k));
    let span = |k: usize| at(k).map_or(close, |t| t.span);
    let is = |k: usize, w: &str| is_word(at(k), w);
    let next = |k: usize| skip_space(region, k) + 1;
    let expect = |k: usize, w: &str, what: &str| -> Result<usize> {
        match is(k, w) {
            true => Ok(next(k)),
            false => Err(syntax(format!("expected {w} in {what}"), span(k))),
        }
    };
    // `ON EMPTY` / `ON ERROR` at k: the clause kind and what follows.
    let on = |k: usize| -> Result<(&'static str, usize)> {
        let k = expect(k, "ON", "an ON EMPTY or ON ERROR clause")?;
        for kind in ["EMPTY", "ERROR"] {
            if is(k, kind) {
                return Ok((if kind == "EMPTY" { "ON EMPTY" } else { "ON ERROR" }, next(k)));
            }
        }
        Err(syntax("expected EMPTY or ERROR after ON", span(k)))
    };
    let mut k = skip_space(region, 0);
    while k < region.len() {
        let word_at = |w: &str| is(k, w);
        if word_at("RETURNING") {
            let mut depth = 0i64;
            let mut end = k + 1;
            while end < region.len() {
                match region[end].token {
                    Token::LParen | Token::Lt => depth += 1,
                    Token::RParen | Token::Gt => depth -= 1,
                    _ => {}
                }
                if depth == 0 && CLAUSE_STARTS.iter().skip(1).any(|w| is_word(region.get(end), w)) {
                    break;
                }
                end += 1;
            }
            returning = region[k..end].to_vec();
            k = end;
        } else if word_at("WITHOUT") || word_at("WITH") {
            let mut j = next(k);
            let behaviour = match (word_at("WITHOUT"), is(j, "CONDITIONAL"), is(j, "UNCONDITIONAL")) {
                (true, ..) => "WITHOUT",
                (false, true, _) => "CONDITIONAL",
                _ => "UNCONDITIONAL",
            };
            if is(j, "CONDITIONAL") || is(j, "UNCONDITIONAL") {
                j = next(j);
            }
            if is(j, "ARRAY") {
                j = next(j);
            }
            k = expect(j, "WRAPPER", "a WRAPPER clause")?;
            clauses.push(Clause { kind: "WRAPPER", behaviour: behaviour.into(), default: Vec::new() });
        } else if word_at("DEFAULT") {
            // The expression runs to an ON EMPTY / ON ERROR outside its brackets.
            let (mut depth, mut end) = (0i64, k + 1);
            while end < region.len() {
                match region[end].token {
                    Token::LParen | Token::LBracket => depth += 1,
                    Token::RParen | Token::RBracket => depth -= 1,
                    _ => {}
                }
                let follows = |w: &str| is_word(region.get(skip_space(region, end + 1)), w);
                if depth == 0 && is_word(region.get(end), "ON") && (follows("EMPTY") || follows("ERROR")) {
                    break;
                }
                end += 1;
            }
            let default = region[k + 1..end].to_vec();
            if default.iter().all(|t| matches!(t.token, Token::Whitespace(_))) {
                return Err(syntax("expected an expression after DEFAULT", span(k + 1)));
            }
            let (kind, after) = on(end)?;
            clauses.push(Clause { kind, behaviour: "DEFAULT".into(), default });
            k = after;
        } else if word_at("EMPTY") {
            let j = next(k);
            let behaviour = match (is(j, "ARRAY"), is(j, "OBJECT")) {
                (true, _) => "EMPTY ARRAY",
                (_, true) => "EMPTY OBJECT",
                _ => return Err(syntax("expected ARRAY or OBJECT after EMPTY", span(j))),
            };
            let (kind, after) = on(next(j))?;
            clauses.push(Clause { kind, behaviour: behaviour.into(), default: Vec::new() });
            k = after;
        } else if let Some(behaviour) = ["NULL", "ERROR", "TRUE", "FALSE", "UNKNOWN"].into_iter().find(|w| word_at(w)) {
            let (kind, after) = on(next(k))?;
            clauses.push(Clause { kind, behaviour: behaviour.into(), default: Vec::new() });
            k = after;
        } else {
            return Err(syntax(
                "expected RETURNING, a WRAPPER clause or an ON EMPTY / ON ERROR clause after the JSON path",
                span(k),
            ));
        }
        k = skip_space(region, k);
    }
    Ok((clauses, returning))
}

/// What a query does where the path finds nothing (`empty`) or fails (`error`).
#[derive(Clone)]
enum Behaviour {
    /// A value (SQL), NULL included.
    Gives(String),
    /// The query fails.
    Fails,
}

/// The DataFusion SQL of Flink's JSON query function `name` (upper case) called with `list`
/// (after [`clauses_as_arguments`]), `returning` its RETURNING type.
pub fn call(name: &str, list: &[FunctionArg], returning: Option<String>) -> Result<String> {
    let plan = |message: String| Error::Plan(format!("{name}: {message}"));
    let expression = |arg: &FunctionArg| match arg {
        FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) => Some(e.clone()),
        _ => None,
    };
    let (Some(json), Some(path)) = (list.first().and_then(expression), list.get(1).and_then(expression)) else {
        return Err(plan("takes a JSON text and a quoted path such as '$.a.b'".into()));
    };
    let Expr::Value(ValueWithSpan { value: Value::SingleQuotedString(path), .. }) = path else {
        return Err(plan("takes a quoted path such as '$.a.b' as its second argument".into()));
    };
    let (strict, keys) = path_keys(&path).map_err(plan)?;
    let keys: String = keys.iter().map(|k| format!(", {k}")).collect();
    let json = format!("({json})");
    let fails = |what: &str| {
        let message = format!("{name}: {what} at path '{path}'").replace('\'', "''");
        format!("weir_raise_error('{message}')")
    };
    let mut empty = None;
    let mut error = None;
    let mut wrapper = "WITHOUT".to_string();
    for arg in &list[2..] {
        let (kind, behaviour, default) = clause(arg).ok_or_else(|| plan("takes a JSON text and a path".into()))?;
        let exists = name == "JSON_EXISTS";
        let value = match (name, behaviour.as_str(), default) {
            (_, "NULL", _) if !exists && kind != "WRAPPER" => Behaviour::Gives("NULL".into()),
            (_, "ERROR", _) if !exists || kind == "ON ERROR" => Behaviour::Fails,
            ("JSON_VALUE", "DEFAULT", Some(default)) => Behaviour::Gives(match &returning {
                Some(data_type) => format!("CAST(({default}) AS {data_type})"),
                None => format!("CAST(({default}) AS STRING)"),
            }),
            ("JSON_QUERY", "EMPTY ARRAY", _) => Behaviour::Gives("'[]'".into()),
            ("JSON_QUERY", "EMPTY OBJECT", _) => Behaviour::Gives("'{}'".into()),
            ("JSON_QUERY", behaviour, _) if kind == "WRAPPER" => {
                wrapper = behaviour.to_string();
                continue;
            }
            ("JSON_EXISTS", "TRUE" | "FALSE", _) if kind == "ON ERROR" => Behaviour::Gives(behaviour.clone()),
            ("JSON_EXISTS", "UNKNOWN", _) if kind == "ON ERROR" => Behaviour::Gives("CAST(NULL AS BOOLEAN)".into()),
            _ => {
                let what = if kind == "WRAPPER" { "a WRAPPER clause".into() } else { format!("{behaviour} {kind}") };
                return Err(plan(format!("{what} is not one of its clauses")));
            }
        };
        let slot = if kind == "ON EMPTY" { &mut empty } else { &mut error };
        if slot.replace(value).is_some() {
            return Err(plan(format!("{kind} is given twice")));
        }
    }
    let null = if name == "JSON_EXISTS" { "false" } else { "NULL" };
    let when = |behaviour: &Option<Behaviour>, what: &str| match behaviour {
        None => null.to_string(),
        Some(Behaviour::Gives(value)) => value.clone(),
        Some(Behaviour::Fails) => fails(what),
    };
    let on_error = |what: &str| when(&error, what);
    // Nothing at a strict path is an error; at a lax one, empty.
    let missing = if strict { on_error("no value") } else { when(&empty, "no value") };
    let not_json = on_error("not JSON");
    let raw = format!("json_get_json({json}{keys})");
    Ok(match name {
        "JSON_VALUE" => {
            let text = format!("json_as_text({json}{keys})");
            let value = match &returning {
                Some(data_type) => format!("CAST({text} AS {data_type})"),
                None => text,
            };
            let not_scalar = on_error("not a scalar");
            format!(
                "CASE WHEN {json} IS NULL THEN NULL WHEN NOT is_json({json}, 'VALUE') THEN {not_json} \
                 WHEN {raw} IS NULL THEN {missing} WHEN is_json({raw}, 'SCALAR') THEN {value} ELSE {not_scalar} END"
            )
        }
        "JSON_QUERY" => {
            if returning.as_deref().is_some_and(|t| !["STRING", "TEXT", "VARCHAR"].contains(&t)) {
                return Err(plan("RETURNING other than STRING is not supported".into()));
            }
            let text = format!("json_compact({raw})");
            let wrapped = match wrapper.as_str() {
                "UNCONDITIONAL" => format!("'[' || {text} || ']'"),
                "CONDITIONAL" => {
                    format!("CASE WHEN is_json({text}, 'ARRAY') THEN {text} ELSE '[' || {text} || ']' END")
                }
                _ => format!("CASE WHEN is_json({text}, 'SCALAR') THEN {} ELSE {text} END", on_error("a scalar")),
            };
            format!(
                "CASE WHEN {json} IS NULL THEN NULL WHEN NOT is_json({json}, 'VALUE') THEN {not_json} \
                 WHEN {raw} IS NULL THEN {missing} ELSE {wrapped} END"
            )
        }
        _ => {
            if returning.is_some() {
                return Err(plan("gives a BOOLEAN: RETURNING is not one of its clauses".into()));
            }
            let missing = if strict { format!("WHEN {json} IS NOT NULL THEN {missing} ") } else { String::new() };
            format!(
                "CASE WHEN {json} IS NOT NULL AND NOT is_json({json}, 'VALUE') THEN {not_json} \
                 WHEN COALESCE(json_contains({json}{keys}), false) THEN true {missing}ELSE false END"
            )
        }
    })
}

/// A marker argument's kind, behaviour and DEFAULT expression.
fn clause(arg: &FunctionArg) -> Option<(String, String, Option<Expr>)> {
    let FunctionArg::Unnamed(FunctionArgExpr::Expr(Expr::Function(function))) = arg else { return None };
    if function.name.to_string() != CLAUSE {
        return None;
    }
    let FunctionArguments::List(list) = &function.args else { return None };
    let text = |arg: Option<&FunctionArg>| match arg {
        Some(FunctionArg::Unnamed(FunctionArgExpr::Expr(Expr::Value(ValueWithSpan {
            value: Value::SingleQuotedString(text),
            ..
        })))) => Some(text.clone()),
        _ => None,
    };
    let default = match list.args.get(2) {
        Some(FunctionArg::Unnamed(FunctionArgExpr::Expr(e))) => Some(e.clone()),
        _ => None,
    };
    Some((text(list.args.first())?, text(list.args.get(1))?, default))
}

/// A JSON path (`[lax | strict] $.a.b[0]`, `$['a']`): whether it is strict, and its keys and
/// indices as the literal arguments of datafusion-functions-json (`'a', 'b', 0`).
fn path_keys(path: &str) -> std::result::Result<(bool, Vec<String>), String> {
    let unsupported =
        || format!("path '{path}' is not supported: weir reads paths of keys and indices, such as '$.a.b[0]'");
    let trimmed = path.trim();
    let mode = |prefix: &str| {
        trimmed
            .get(..prefix.len())
            .filter(|p| p.eq_ignore_ascii_case(prefix))
            .and_then(|_| trimmed[prefix.len()..].strip_prefix(char::is_whitespace))
    };
    let (strict, rest) = match (mode("strict"), mode("lax")) {
        (Some(rest), _) => (true, rest),
        (_, Some(rest)) => (false, rest),
        _ => (false, trimmed),
    };
    let rest = rest.trim().strip_prefix('$').ok_or_else(unsupported)?;
    let chars: Vec<char> = rest.chars().collect();
    let mut keys = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '.' if chars.get(i + 1) == Some(&'[') => i += 1,
            '.' => {
                let end = chars[i + 1..].iter().position(|c| *c == '.' || *c == '[').map_or(chars.len(), |p| i + 1 + p);
                let key: String = chars[i + 1..end].iter().collect();
                if key.is_empty() || key == "*" {
                    return Err(unsupported());
                }
                keys.push(quoted(&key));
                i = end;
            }
            '[' => {
                let end = chars[i..].iter().position(|c| *c == ']').map(|p| i + p).ok_or_else(unsupported)?;
                let inner: String = chars[i + 1..end].iter().collect();
                let inner = inner.trim();
                let key = ['\'', '"'].iter().find_map(|q| inner.strip_prefix(*q).and_then(|k| k.strip_suffix(*q)));
                if let Ok(index) = inner.parse::<u64>() {
                    keys.push(index.to_string());
                } else if let Some(key) = key {
                    keys.push(quoted(key));
                } else {
                    return Err(unsupported());
                }
                i = end + 1;
            }
            _ => return Err(unsupported()),
        }
    }
    Ok((strict, keys))
}

/// A string as an SQL literal.
fn quoted(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::window_table_functions::tokens;

    fn spelled(sql: &str) -> String {
        clauses_as_arguments(tokens(sql).unwrap()).unwrap().iter().map(|t| t.token.to_string()).collect()
    }

    #[test]
    fn clauses_become_marker_arguments_and_returning_goes_last() {
        assert_eq!(
            spelled(
                "SELECT JSON_VALUE(j, 'strict $.b' RETURNING DECIMAL(10, 2) DEFAULT f(1, 2) ON EMPTY ERROR ON ERROR)"
            ),
            "SELECT JSON_VALUE(j, 'strict $.b', weir_json_clause('ON EMPTY','DEFAULT', f(1, 2) ), weir_json_clause('ON ERROR','ERROR') RETURNING DECIMAL(10, 2) )"
        );
        assert_eq!(
            spelled("JSON_QUERY(JSON_QUERY(j, '$' WITH ARRAY WRAPPER), '$' EMPTY OBJECT ON EMPTY)"),
            "JSON_QUERY(JSON_QUERY(j, '$', weir_json_clause('WRAPPER','UNCONDITIONAL')), '$', weir_json_clause('ON EMPTY','EMPTY OBJECT'))"
        );
        assert_eq!(spelled("JSON_VALUE(j, '$.a')"), "JSON_VALUE(j, '$.a')");
        let error = clauses_as_arguments(tokens("SELECT JSON_VALUE(j, '$.a' NULL ON NOTHING)").unwrap());
        assert!(matches!(error, Err(Error::Syntax { column: 36, .. })), "{error:?}");
    }

    #[test]
    fn paths_are_keys_and_indices_lax_or_strict() {
        let keys = |path: &str| path_keys(path).map(|(strict, keys)| (strict, keys.join(",")));
        assert_eq!(keys("$.a['b c'][2].d"), Ok((false, "'a','b c',2,'d'".into())));
        assert_eq!(keys("strict $.b"), Ok((true, "'b'".into())));
        assert_eq!(keys("lax $.[\"a.b\"][0]"), Ok((false, "'a.b',0".into())));
        assert_eq!(keys("$"), Ok((false, String::new())));
        assert!(keys("$.a[*]").is_err() && keys("a.b").is_err());
    }
}
