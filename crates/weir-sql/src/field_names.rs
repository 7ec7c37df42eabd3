//! A struct field selected without an alias is named after the field, as Flink names it:
//! `SELECT bid.auction FROM nexmark` gives a column `auction` (DataFusion would name it
//! `nexmark.bid[auction]`), so Flink's views over Nexmark (`SELECT bid.auction, bid.price, ...
//! FROM datagen`) give the columns its queries read. Done on the parsed statement: every
//! select list item that is a dotted name (`a.b`, `a.b.c`) gets its last part as alias, unless
//! another item of the same list ends in the same name (Flink would number them; DataFusion's
//! own names keep them apart). A table-qualified column (`t.c`) is named `c` by DataFusion
//! anyway.

use datafusion::sql::sqlparser::ast::{Expr, Query, SelectItem, SetExpr, Statement, TableFactor};

/// Names the struct fields selected in `statement` (a query, an INSERT's or a view's).
pub fn name_fields(statement: &mut Statement) {
    match statement {
        Statement::Query(query) => in_query(query),
        Statement::Insert(insert) => {
            if let Some(source) = &mut insert.source {
                in_query(source);
            }
        }
        Statement::CreateView(view) => in_query(&mut view.query),
        _ => {}
    }
}

fn in_query(query: &mut Query) {
    if let Some(with) = &mut query.with {
        for table in &mut with.cte_tables {
            in_query(&mut table.query);
        }
    }
    in_set_expr(&mut query.body);
}

fn in_set_expr(body: &mut SetExpr) {
    match body {
        SetExpr::Select(select) => {
            let last = |item: &SelectItem| match item {
                SelectItem::UnnamedExpr(Expr::CompoundIdentifier(parts)) if parts.len() >= 2 => {
                    parts.last().map(|p| p.value.clone())
                }
                _ => None,
            };
            let names: Vec<Option<String>> = select.projection.iter().map(last).collect();
            let unique = |name: &String| names.iter().flatten().filter(|n| *n == name).count() == 1;
            for (item, name) in select.projection.iter_mut().zip(&names) {
                let (SelectItem::UnnamedExpr(expr @ Expr::CompoundIdentifier(_)), Some(name)) = (&mut *item, name)
                else {
                    continue;
                };
                if !unique(name) {
                    continue;
                }
                let Expr::CompoundIdentifier(parts) = &*expr else { continue };
                let alias = parts[parts.len() - 1].clone();
                *item = SelectItem::ExprWithAlias { expr: expr.clone(), alias };
            }
            for table in &mut select.from {
                in_table(&mut table.relation);
                for join in &mut table.joins {
                    in_table(&mut join.relation);
                }
            }
        }
        SetExpr::Query(query) => in_query(query),
        SetExpr::SetOperation { left, right, .. } => {
            in_set_expr(left);
            in_set_expr(right);
        }
        _ => {}
    }
}

fn in_table(table: &mut TableFactor) {
    match table {
        TableFactor::Derived { subquery, .. } => in_query(subquery),
        TableFactor::NestedJoin { table_with_joins, .. } => {
            in_table(&mut table_with_joins.relation);
            for join in &mut table_with_joins.joins {
                in_table(&mut join.relation);
            }
        }
        _ => {}
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
