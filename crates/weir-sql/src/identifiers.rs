//! How an unquoted name is read: lowercased, as Postgres and DataFusion do (weir's default), or
//! kept as written and matched exactly, as Flink does (`itemName` finds a column declared
//! `itemName`, and only it). The session option `sql.identifiers` chooses; `sql.dialect =
//! 'flink'` chooses Flink's rule unless `sql.identifiers` says otherwise. A quoted name
//! (`"x"` or Flink's `` `x` ``) is always kept as written.
//!
//! DataFusion reads names in queries by its own setting (`enable_ident_normalization`), which
//! the session sets from this; weir reads the names it handles itself (tables and views created
//! and dropped, INSERT targets, WATERMARK FOR and PROCTIME() columns, computed and partition
//! columns) through [`IdentifierCase`], so the two always agree.

use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{Expr, Ident, ObjectName, visit_expressions_mut};
use serde::{Deserialize, Serialize};

/// The SQL a session reads (`sql.dialect`): weir's, or Flink's, whose identifier rule it takes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Dialect {
    #[default]
    Weir,
    Flink,
}

impl Dialect {
    pub fn option_value(self) -> &'static str {
        match self {
            Dialect::Weir => "weir",
            Dialect::Flink => "flink",
        }
    }

    /// The identifier rule of the dialect.
    pub fn identifiers(self) -> IdentifierCase {
        match self {
            Dialect::Weir => IdentifierCase::Lowercase,
            Dialect::Flink => IdentifierCase::AsWritten,
        }
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IdentifierCase {
    /// Unquoted names lowercased.
    #[default]
    Lowercase,
    /// Unquoted names kept as written and matched exactly (Flink).
    AsWritten,
}

impl IdentifierCase {
    /// The option value that chooses this rule.
    pub fn option_value(self) -> &'static str {
        match self {
            IdentifierCase::Lowercase => "lowercase",
            IdentifierCase::AsWritten => "as_written",
        }
    }

    /// Whether DataFusion should lowercase unquoted names.
    pub fn lowercases(self) -> bool {
        self == IdentifierCase::Lowercase
    }

    /// The name `ident` stands for.
    pub fn name(self, ident: &Ident) -> String {
        match (ident.quote_style, self) {
            (None, IdentifierCase::Lowercase) => ident.value.to_lowercase(),
            _ => ident.value.clone(),
        }
    }

    /// The name of a table or view (its parts joined with '.').
    pub fn object_name(self, name: &ObjectName) -> String {
        name.0
            .iter()
            .map(|part| match part.as_ident() {
                Some(ident) => self.name(ident),
                None => part.to_string(),
            })
            .collect::<Vec<_>>()
            .join(".")
    }

    /// The name a written identifier stands for: `"x"` and `` `x` `` are `x`, an unquoted one
    /// read by the rule.
    pub fn written(self, text: &str) -> String {
        self.name(&written_ident(text))
    }
}

/// `expr` with its names written so that either rule reads them as `rule` does now: a name
/// that is not all lowercase is quoted. (A table's computed columns are stored so, and planned
/// whatever rule is in force when the table is read.)
pub fn fixed_names(mut expr: Expr, rule: IdentifierCase) -> Expr {
    let fix = |ident: &mut Ident| {
        let name = rule.name(ident);
        *ident = match name == name.to_lowercase() {
            true => Ident::new(name),
            false => Ident::with_quote('"', name),
        };
    };
    let _ = visit_expressions_mut(&mut expr, |e| {
        match e {
            Expr::Identifier(ident) => fix(ident),
            Expr::CompoundIdentifier(idents) => idents.iter_mut().for_each(fix),
            _ => {}
        }
        ControlFlow::<()>::Continue(())
    });
    expr
}

/// A written identifier, its quotes (double or Flink's backticks) taken off.
pub fn written_ident(text: &str) -> Ident {
    for quote in ['"', '`'] {
        if let Some(inner) = text.strip_prefix(quote).and_then(|t| t.strip_suffix(quote)) {
            return Ident::with_quote(quote, inner);
        }
    }
    Ident::new(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unquoted_names_are_lowercased_or_kept_and_quoted_ones_always_kept() {
        let (lower, kept) = (IdentifierCase::Lowercase, IdentifierCase::AsWritten);
        assert_eq!((lower.written("dateTime"), kept.written("dateTime")), ("datetime".into(), "dateTime".into()));
        assert_eq!(
            (lower.written("`dateTime`"), lower.written("\"dateTime\"")),
            ("dateTime".into(), "dateTime".into())
        );
        let name = ObjectName::from(vec![Ident::new("Db"), Ident::with_quote('"', "Bids")]);
        assert_eq!((lower.object_name(&name), kept.object_name(&name)), ("db.Bids".into(), "Db.Bids".into()));
    }

    #[test]
    fn fixed_names_read_the_same_under_either_rule() {
        let expr =
            datafusion::sql::sqlparser::parser::Parser::new(&datafusion::sql::sqlparser::dialect::GenericDialect {})
                .try_with_sql("CAST(bid.dateTime AS TIMESTAMP(3)) + price")
                .unwrap()
                .parse_expr()
                .unwrap();
        let kept = fixed_names(expr.clone(), IdentifierCase::AsWritten);
        assert_eq!(kept.to_string(), "CAST(bid.\"dateTime\" AS TIMESTAMP(3)) + price");
        assert_eq!(
            fixed_names(expr, IdentifierCase::Lowercase).to_string(),
            "CAST(bid.datetime AS TIMESTAMP(3)) + price"
        );
    }
}
