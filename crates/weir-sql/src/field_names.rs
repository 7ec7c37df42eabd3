//! A struct field selected without an alias is named after the field, as Flink names it:
//! `SELECT bid.auction FROM nexmark` gives a column `auction` (DataFusion would name it
//! `nexmark.bid[auction]`), so Flink's views over Nexmark (`SELECT bid.auction, bid.price, ...
//! FROM datagen`) give the columns its queries read. Done on the parsed statement: every
//! select list item that is a dotted name (`a.b`, `a.b.c`) gets its last part as alias, unless
//! another item of the same list ends in the same name (Flink would number them; DataFusion's
//! own names keep them apart). A table-qualified column (`t.c`) is named `c` by DataFusion
//! anyway. Likewise an item that Flink's functions rewrite keeps the name it was written as
//! ([`keep_written_names`]).

use datafusion::sql::sqlparser::ast::{Expr, Ident, Query, SelectItem, SetExpr, Statement, TableFactor};

use crate::error::Result;

/// Names the struct fields selected in `statement` (a query, an INSERT's or a view's).
pub fn name_fields(statement: &mut Statement) {
    let _ = each_select_list(statement, &mut |projection| {
        let last = |item: &SelectItem| match item {
            SelectItem::UnnamedExpr(Expr::CompoundIdentifier(parts)) if parts.len() >= 2 => {
                parts.last().map(|p| p.value.clone())
            }
            _ => None,
        };
        let names: Vec<Option<String>> = projection.iter().map(last).collect();
        let unique = |name: &String| names.iter().flatten().filter(|n| *n == name).count() == 1;
        for (item, name) in projection.iter_mut().zip(&names) {
            let (SelectItem::UnnamedExpr(expr @ Expr::CompoundIdentifier(_)), Some(name)) = (&mut *item, name) else {
                continue;
            };
            if !unique(name) {
                continue;
            }
            let Expr::CompoundIdentifier(parts) = &*expr else { continue };
            let alias = parts[parts.len() - 1].clone();
            *item = SelectItem::ExprWithAlias { expr: expr.clone(), alias };
        }
        Ok(())
    });
}

/// Names each select list item of `statement` that `rewritten` says a rewrite will change
/// after the text it was written as, so that its column keeps the name the user wrote (and two
/// items written differently, `NOW()` and `CURRENT_TIMESTAMP`, do not clash as one expression).
pub fn keep_written_names(statement: &mut Statement, rewritten: &dyn Fn(&Expr) -> Result<bool>) -> Result<()> {
    each_select_list(statement, &mut |projection| {
        for item in projection.iter_mut() {
            if let SelectItem::UnnamedExpr(expr) = item
                && rewritten(expr)?
            {
                let alias = Ident::with_quote('"', expr.to_string());
                *item = SelectItem::ExprWithAlias { expr: expr.clone(), alias };
            }
        }
        Ok(())
    })
}

/// Calls `f` with each select list of `statement` (a query, an INSERT's or a view's), in the
/// FROM clauses' subqueries and the WITH clauses too.
fn each_select_list(statement: &mut Statement, f: SelectList) -> Result<()> {
    match statement {
        Statement::Query(query) => in_query(query, f),
        Statement::Insert(insert) => match &mut insert.source {
            Some(source) => in_query(source, f),
            None => Ok(()),
        },
        Statement::CreateView(view) => in_query(&mut view.query, f),
        _ => Ok(()),
    }
}

type SelectList<'a> = &'a mut dyn FnMut(&mut Vec<SelectItem>) -> Result<()>;

fn in_query(query: &mut Query, f: SelectList) -> Result<()> {
    if let Some(with) = &mut query.with {
        for table in &mut with.cte_tables {
            in_query(&mut table.query, f)?;
        }
    }
    in_set_expr(&mut query.body, f)
}

fn in_set_expr(body: &mut SetExpr, f: SelectList) -> Result<()> {
    match body {
        SetExpr::Select(select) => {
            f(&mut select.projection)?;
            for table in &mut select.from {
                in_table(&mut table.relation, f)?;
                for join in &mut table.joins {
                    in_table(&mut join.relation, f)?;
                }
            }
            Ok(())
        }
        SetExpr::Query(query) => in_query(query, f),
        SetExpr::SetOperation { left, right, .. } => {
            in_set_expr(left, f)?;
            in_set_expr(right, f)
        }
        _ => Ok(()),
    }
}

fn in_table(table: &mut TableFactor, f: SelectList) -> Result<()> {
    match table {
        TableFactor::Derived { subquery, .. } => in_query(subquery, f),
        TableFactor::NestedJoin { table_with_joins, .. } => {
            in_table(&mut table_with_joins.relation, f)?;
            for join in &mut table_with_joins.joins {
                in_table(&mut join.relation, f)?;
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use datafusion::sql::sqlparser::dialect::GenericDialect;
    use datafusion::sql::sqlparser::parser::Parser;

    use super::*;

    fn named(sql: &str) -> String {
        let mut statement = Parser::parse_sql(&GenericDialect {}, sql).unwrap().remove(0);
        name_fields(&mut statement);
        statement.to_string()
    }

    #[test]
    fn a_selected_field_is_named_after_it_unless_two_share_the_name() {
        assert_eq!(
            named("CREATE VIEW bid AS SELECT bid.auction, bid.price AS p, x FROM (SELECT t.s.f FROM t) WHERE 1 = 1"),
            "CREATE VIEW bid AS SELECT bid.auction AS auction, bid.price AS p, x FROM (SELECT t.s.f AS f FROM t) WHERE 1 = 1"
        );
        assert_eq!(
            named("SELECT a.id, b.id, a.v FROM a JOIN b ON a.k = b.k"),
            "SELECT a.id, b.id, a.v AS v FROM a JOIN b ON a.k = b.k"
        );
        assert_eq!(named("INSERT INTO s SELECT bid.url FROM n"), "INSERT INTO s SELECT bid.url AS url FROM n");
    }
}
