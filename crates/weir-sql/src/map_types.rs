//! `MAP(K, V)` in a column's type, at any depth (`MAP(STRING, BIGINT)`,
//! `ARRAY<MAP(STRING, STRING)>`, `STRUCT<m MAP(STRING, INT)>`). DataFusion plans a table's
//! column types but has no SQL map type, so a map goes through its planning as a struct of two
//! fields with names no one declares, and is made Arrow's map (keys never NULL) afterwards. A
//! `CAST(x AS MAP<K, V>)` becomes `arrow_cast(x, 'Map(...)')`, naming the Arrow type so planned.

use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, Field, Fields};
use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{
    ArrayElemTypeDef, CastKind, DataType as SqlType, Expr, Function, FunctionArg, FunctionArgExpr,
    FunctionArgumentList, FunctionArguments, Ident, ObjectName, Statement, StructBracketKind, StructField, Value,
    visit_expressions, visit_expressions_mut,
};

/// The field names of the struct a map stands in for while DataFusion plans it.
const KEY: &str = "weir_map_key";
const VALUE: &str = "weir_map_value";

/// Replaces every `MAP(K, V)` in `data_type` by its stand-in struct; true if there was one.
pub fn stand_in_for_maps(data_type: &mut SqlType) -> bool {
    match data_type {
        SqlType::Map(key, value) => {
            let mut key = std::mem::replace(key.as_mut(), SqlType::Text);
            let mut value = std::mem::replace(value.as_mut(), SqlType::Text);
            stand_in_for_maps(&mut key);
            stand_in_for_maps(&mut value);
            let field = |name: &str, field_type| StructField {
                field_name: Some(Ident::with_quote('"', name)),
                field_type,
                options: None,
            };
            *data_type = SqlType::Struct(vec![field(KEY, key), field(VALUE, value)], StructBracketKind::AngleBrackets);
            true
        }
        SqlType::Struct(fields, _) => {
            fields.iter_mut().fold(false, |found, field| stand_in_for_maps(&mut field.field_type) | found)
        }
        SqlType::Array(
            ArrayElemTypeDef::AngleBracket(element)
            | ArrayElemTypeDef::SquareBracket(element, _)
            | ArrayElemTypeDef::Parenthesis(element),
        ) => stand_in_for_maps(element),
        _ => false,
    }
}

/// Whether `data_type` has a map in it.
fn has_map(data_type: &SqlType) -> bool {
    stand_in_for_maps(&mut data_type.clone())
}

/// The target types of `statement`'s casts to a type with a map in it.
pub fn map_cast_targets(statement: &Statement) -> Vec<SqlType> {
    let mut targets: Vec<SqlType> = Vec::new();
    let _ = visit_expressions(statement, |expr| {
        if let Expr::Cast { data_type, .. } = expr
            && has_map(data_type)
            && !targets.contains(data_type)
        {
            targets.push(data_type.clone());
        }
        ControlFlow::<()>::Continue(())
    });
    targets
}

/// Rewrites each cast of `statement` to one of the `planned` types as `arrow_cast(x, 'type')`
/// (`arrow_try_cast` for `TRY_CAST`), naming the Arrow type it was planned as.
pub fn cast_to_planned_maps(statement: &mut Statement, planned: &[(SqlType, DataType)]) {
    let _ = visit_expressions_mut(statement, |expr| {
        if let Expr::Cast { kind, expr: value, data_type, .. } = expr
            && let Some((_, arrow)) = planned.iter().find(|(sql, _)| sql == data_type)
        {
            let function = if *kind == CastKind::TryCast { "arrow_try_cast" } else { "arrow_cast" };
            let arg = |e: Expr| FunctionArg::Unnamed(FunctionArgExpr::Expr(e));
            let name = Expr::value(Value::SingleQuotedString(arrow.to_string()));
            let args = vec![arg(std::mem::replace(value.as_mut(), Expr::value(Value::Null))), arg(name)];
            *expr = Expr::Function(Function {
                name: ObjectName::from(vec![Ident::new(function)]),
                uses_odbc_syntax: false,
                parameters: FunctionArguments::None,
                args: FunctionArguments::List(FunctionArgumentList {
                    duplicate_treatment: None,
                    args,
                    clauses: vec![],
                }),
                filter: None,
                null_treatment: None,
                over: None,
                within_group: vec![],
            });
        }
        ControlFlow::<()>::Continue(())
    });
}

/// `planned` with each stand-in struct made the map it stands in for.
pub fn maps_from_stand_ins(planned: &DataType) -> DataType {
    match planned {
        DataType::Struct(fields) if is_stand_in(fields) => {
            let entries = Fields::from(vec![
                Field::new("key", maps_from_stand_ins(fields[0].data_type()), false),
                Field::new("value", maps_from_stand_ins(fields[1].data_type()), true),
            ]);
            DataType::Map(Arc::new(Field::new("entries", DataType::Struct(entries), false)), false)
        }
        DataType::Struct(fields) => DataType::Struct(fields.iter().map(|f| field_from_stand_ins(f)).collect()),
        DataType::List(element) => DataType::List(Arc::new(field_from_stand_ins(element))),
        DataType::LargeList(element) => DataType::LargeList(Arc::new(field_from_stand_ins(element))),
        DataType::FixedSizeList(element, size) => {
            DataType::FixedSizeList(Arc::new(field_from_stand_ins(element)), *size)
        }
        other => other.clone(),
    }
}

fn field_from_stand_ins(field: &Field) -> Field {
    field.clone().with_data_type(maps_from_stand_ins(field.data_type()))
}

fn is_stand_in(fields: &Fields) -> bool {
    fields.len() == 2 && fields[0].name() == KEY && fields[1].name() == VALUE
}

#[cfg(test)]
mod tests {
    use datafusion::sql::sqlparser::dialect::GenericDialect;
    use datafusion::sql::sqlparser::parser::Parser;

    use super::*;

    fn sql_type(sql: &str) -> SqlType {
        Parser::new(&GenericDialect {}).try_with_sql(sql).and_then(|mut p| p.parse_data_type()).expect(sql)
    }

    #[test]
    fn maps_at_any_depth_get_a_stand_in_and_nothing_else_does() {
        let mut nested = sql_type("ARRAY<STRUCT<m MAP(STRING, MAP(STRING, INT)), n INT>>");
        assert!(stand_in_for_maps(&mut nested));
        assert_eq!(
            nested.to_string(),
            r#"ARRAY<STRUCT<m STRUCT<"weir_map_key" STRING, "weir_map_value" STRUCT<"weir_map_key" STRING, "weir_map_value" INT>>, n INT>>"#
        );
        let mut plain = sql_type("STRUCT<a INT, b ARRAY<STRING>>");
        let before = plain.clone();
        assert!(!stand_in_for_maps(&mut plain));
        assert_eq!(plain, before);
    }

    #[test]
    fn a_stand_in_becomes_a_map_with_keys_never_null() {
        let stand_in = |key, value| {
            DataType::Struct(Fields::from(vec![Field::new(KEY, key, true), Field::new(VALUE, value, true)]))
        };
        let inner = stand_in(DataType::Utf8, DataType::Int32);
        let planned = DataType::new_list(
            DataType::Struct(Fields::from(vec![Field::new("m", stand_in(DataType::Utf8, inner), true)])),
            true,
        );
        let made = maps_from_stand_ins(&planned);
        let DataType::List(element) = &made else { panic!("{made}") };
        let DataType::Struct(fields) = element.data_type() else { panic!("{made}") };
        let DataType::Map(entries, false) = fields[0].data_type() else { panic!("{made}") };
        let DataType::Struct(entries) = entries.data_type() else { panic!("{made}") };
        assert!(!entries[0].is_nullable() && entries[1].is_nullable());
        assert!(matches!(entries[1].data_type(), DataType::Map(..)), "{made}");
    }
}
