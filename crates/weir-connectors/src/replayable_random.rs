//! Random values that are a function of a seed and a row number alone, so a replay after a
//! restore (or an upgrade) produces the same rows: the Nexmark and datagen generators draw
//! each row's values from a generator seeded by (seed, row).

use std::fmt::Write;

use datafusion::arrow::array::StringBuilder;

/// SplitMix64: tiny, fast, and (unlike library generators, which may change between versions)
/// fixed forever, so a replay after an upgrade still produces the same events.
pub(crate) struct Random(u64);

impl Random {
    pub(crate) fn for_row(seed: u64, n: u64) -> Self {
        let mut random = Random(seed ^ n.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        random.next();
        random
    }

    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Moves past `draws` draws without making them (the state only counts up).
    pub(crate) fn skip(&mut self, draws: u64) {
        self.0 = self.0.wrapping_add(draws.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    }

    /// Moves past [`Self::write_padding`]'s draws: its length is drawn, its letters skipped.
    pub(crate) fn skip_padding(&mut self, base: usize, spread: u64) {
        let len = base as u64 + self.below(spread);
        self.skip(len);
    }

    pub(crate) fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next() % n }
    }

    pub(crate) fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Letters padding an event toward its average size: `base` plus up to `spread` more.
    pub(crate) fn write_padding(&mut self, out: &mut StringBuilder, base: usize, spread: u64) -> std::fmt::Result {
        let len = base + self.below(spread) as usize;
        self.write_letters(out, len)
    }

    /// Writes `len` lowercase letters into the value `out` is building (one draw each).
    pub(crate) fn write_letters(&mut self, out: &mut impl Write, len: usize) -> std::fmt::Result {
        let mut chunk = [0u8; 64];
        let mut left = len;
        while left > 0 {
            let n = left.min(chunk.len());
            for byte in &mut chunk[..n] {
                *byte = b'a' + self.below(26) as u8;
            }
            out.write_str(std::str::from_utf8(&chunk[..n]).map_err(|_| std::fmt::Error)?)?;
            left -= n;
        }
        Ok(())
    }

    pub(crate) fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len() as u64) as usize]
    }

    /// Heavy-tailed prices: about 10^(6u) * 100.
    pub(crate) fn price(&mut self) -> i64 {
        (10f64.powf(self.unit() * 6.0) * 100.0).round() as i64
    }
}
