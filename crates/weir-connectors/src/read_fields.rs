//! Which fields of a table's struct columns a pipeline reads, as far as its plan shows: a
//! generator writes the text fields nobody reads empty instead of drawing them letter by letter
//! (Nexmark's padding, a description, an item name), the way a columnar reader skips columns.

use std::collections::{HashMap, HashSet};

/// The fields read of struct columns, by column name. A column missing from it is not read at
/// all; one read whole (passed on, compared, output as it is) has every field read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadFields {
    /// Nothing known (a table whose computed columns read it, a plan not analysed): every
    /// field of every column is read.
    everything: bool,
    whole: HashSet<String>,
    fields: HashMap<String, HashSet<String>>,
}

impl ReadFields {
    /// Every field of every column.
    pub fn everything() -> Self {
        Self { everything: true, whole: HashSet::new(), fields: HashMap::new() }
    }

    /// Nothing yet: columns and fields are added as the plan is read.
    pub fn none() -> Self {
        Self { everything: false, whole: HashSet::new(), fields: HashMap::new() }
    }

    pub fn read_whole(&mut self, column: &str) {
        self.whole.insert(column.to_string());
    }

    pub fn read_field(&mut self, column: &str, field: &str) {
        self.fields.entry(column.to_string()).or_default().insert(field.to_string());
    }

    /// Whether `field` of `column` may be read; names compare by `same` (a connector's own
    /// rule: Flink's `itemName` is weir's `item_name`).
    pub fn reads(&self, column: &str, field: &str, same: impl Fn(&str, &str) -> bool) -> bool {
        self.everything
            || self.whole.iter().any(|c| same(c, column))
            || self.fields.iter().any(|(c, fields)| same(c, column) && fields.iter().any(|f| same(f, field)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_field_is_read_if_its_column_is_read_whole_or_it_is_named() {
        let exact = |a: &str, b: &str| a == b;
        assert!(ReadFields::everything().reads("bid", "extra", exact));
        let mut read = ReadFields::none();
        assert!(!read.reads("bid", "extra", exact));
        read.read_field("bid", "price");
        read.read_whole("person");
        assert!(read.reads("bid", "price", exact));
        assert!(!read.reads("bid", "extra", exact));
        assert!(!read.reads("auction", "price", exact), "another column's field of that name");
        assert!(read.reads("person", "extra", exact));
        read.read_field("auction", "itemName");
        assert!(read.reads("auction", "item_name", |a: &str, b: &str| {
            a.replace('_', "").eq_ignore_ascii_case(&b.replace('_', ""))
        }));
    }
}
