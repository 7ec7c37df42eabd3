//! How the ranking functions number a partition's rows in their order: `ROW_NUMBER()` counts
//! rows, `RANK()` gives tied rows the number of the first of them (and skips after a tie),
//! `DENSE_RANK()` gives tied rows one number and the next row the next number.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Numbering {
    RowNumber,
    Rank,
    DenseRank,
}

impl Numbering {
    /// The (position, number) of a row, from the previous row's in the same partition (`None`
    /// for the first) and whether it ties with that row in ORDER BY.
    pub fn next(self, previous: Option<(u64, u64)>, tie: bool) -> (u64, u64) {
        let Some((position, number)) = previous else { return (1, 1) };
        let number = match self {
            Numbering::RowNumber => position + 1,
            Numbering::Rank if tie => number,
            Numbering::Rank => position + 1,
            Numbering::DenseRank if tie => number,
            Numbering::DenseRank => number + 1,
        };
        (position + 1, number)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ties_share_a_number() {
        let ties = [false, true, false, true, true, false];
        for (numbering, expected) in [
            (Numbering::RowNumber, [1, 2, 3, 4, 5, 6]),
            (Numbering::Rank, [1, 1, 3, 3, 3, 6]),
            (Numbering::DenseRank, [1, 1, 2, 2, 2, 3]),
        ] {
            let mut previous = None;
            let numbers: Vec<u64> = ties
                .iter()
                .enumerate()
                .map(|(i, tie)| {
                    let next = numbering.next(previous.filter(|_| i > 0), *tie);
                    previous = Some(next);
                    next.1
                })
                .collect();
            assert_eq!(numbers, expected, "{numbering:?}");
        }
    }
}
