//! Which fields of struct columns the queries of a pipeline read, for the sources that can skip
//! making the others (Nexmark's generator: its text fields are most of its work, and most
//! queries read a few numbers of one kind of event).
//!
//! Read from the logical plans, and on the safe side: a struct column is read whole wherever
//! an expression names it other than as `get_field(column, 'name')` (compared, grouped on,
//! passed to a function, output) and wherever it is among a query's output columns (written to
//! its sink as it is). Struct columns are told apart by name alone, so two tables' columns of
//! one name share what is read of them: a field may be kept that no one reads, never the other
//! way.

use datafusion::arrow::datatypes::DataType;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::common::{Column, DFSchema, ExprSchema, ScalarValue};
use datafusion::logical_expr::{Expr, LogicalPlan};
use weir_connectors::read_fields::ReadFields;

/// What `queries` read of struct columns; everything if a plan cannot be walked.
pub(crate) fn struct_fields_read<'a>(queries: impl IntoIterator<Item = &'a LogicalPlan>) -> ReadFields {
    let mut read = ReadFields::none();
    for plan in queries {
        for field in plan.schema().fields().iter().filter(|f| matches!(f.data_type(), DataType::Struct(_))) {
            read.read_whole(field.name());
        }
        let walked = plan.apply_with_subqueries(|node| {
            let inputs: Vec<&DFSchema> = node.inputs().iter().map(|input| input.schema().as_ref()).collect();
            node.apply_expressions(|expr| {
                note(expr, &inputs, &mut read);
                Ok(TreeNodeRecursion::Continue)
            })
        });
        if walked.is_err() {
            return ReadFields::everything();
        }
    }
    read
}

/// Adds what `expr` (over columns of `inputs`) reads.
fn note(expr: &Expr, inputs: &[&DFSchema], read: &mut ReadFields) {
    // The closure never fails: the walk cannot either.
    let _ = expr.apply(|e| {
        if let Some((column, field)) = named_field(e) {
            read.read_field(column, field);
            return Ok(TreeNodeRecursion::Jump);
        }
        match e {
            Expr::Column(column) if !of_other_type(column, inputs) => read.read_whole(&column.name),
            Expr::OuterReferenceColumn(_, column) => read.read_whole(&column.name),
            _ => {}
        }
        Ok(TreeNodeRecursion::Continue)
    });
}

/// Whether `column` is found among `inputs`' columns and is not a struct (a column of the
/// same name as a struct one: a view's `auction` id, beside the table's `auction` events).
fn of_other_type(column: &Column, inputs: &[&DFSchema]) -> bool {
    let found = inputs.iter().find_map(|schema| schema.field_from_column(column).ok());
    found.is_some_and(|field| !matches!(field.data_type(), DataType::Struct(_)))
}

/// `get_field(column, 'field')`: (column, field).
fn named_field(expr: &Expr) -> Option<(&str, &str)> {
    let Expr::ScalarFunction(call) = expr else { return None };
    if call.name() != "get_field" {
        return None;
    }
    match call.args.as_slice() {
        [Expr::Column(column), Expr::Literal(ScalarValue::Utf8(Some(field)), _)] => Some((&column.name, field)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::datasource::MemTable;
    use datafusion::prelude::SessionContext;
    use weir_connectors::nexmark::nexmark_schema;

    use super::*;

    /// What `sql` reads of a table of Nexmark's columns (and a view of its bids), as DataFusion
    /// optimises its plan.
    async fn read_by(sql: &str) -> ReadFields {
        let context = SessionContext::new();
        let table = MemTable::try_new(nexmark_schema(), vec![vec![]]).unwrap();
        context.register_table("nexmark", Arc::new(table)).unwrap();
        let view = "CREATE VIEW bid AS SELECT bid.auction AS auction, bid.price AS price, date_time FROM nexmark WHERE event_type = 2";
        context.sql(view).await.unwrap();
        let plan = context.sql(sql).await.unwrap().into_optimized_plan().unwrap();
        struct_fields_read([&plan])
    }

    #[tokio::test]
    async fn fields_named_are_read_and_a_struct_used_whole_is_read_whole() {
        let exact = |a: &str, b: &str| a == b;
        let read = read_by(
            "SELECT b.auction, max(b.price) FROM bid b JOIN nexmark n ON b.auction = n.auction.id GROUP BY b.auction",
        )
        .await;
        assert!(read.reads("bid", "price", exact) && read.reads("bid", "auction", exact));
        assert!(read.reads("auction", "id", exact));
        assert!(!read.reads("bid", "extra", exact) && !read.reads("auction", "extra", exact));
        assert!(!read.reads("person", "name", exact), "no person field is named");
        let read = read_by("SELECT * FROM nexmark").await;
        assert!(read.reads("bid", "extra", exact) && read.reads("person", "extra", exact), "output whole");
        let read = read_by("SELECT bid.price FROM nexmark WHERE bid IS NOT NULL AND auction.id > 3").await;
        assert!(read.reads("bid", "extra", exact), "compared whole");
        assert!(!read.reads("auction", "extra", exact));
        let read =
            read_by("SELECT count(*) FROM nexmark WHERE event_type IN (SELECT auction.category FROM nexmark)").await;
        assert!(read.reads("auction", "category", exact), "a subquery's");
        assert!(!read.reads("auction", "extra", exact));
    }
}
