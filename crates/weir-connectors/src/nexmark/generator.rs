//! Deterministic Nexmark events as Arrow batches.
//!
//! Strings are written straight into the column builders and a kind's columns get their nulls
//! (the rows of other kinds) a run at a time: the generator is the source of every Nexmark
//! benchmark, and its allocations and per-column null appends were a fifth of its cost.

use std::fmt::Write;
use std::sync::Arc;

use datafusion::arrow::array::{
    ArrayBuilder, ArrayRef, Int32Array, Int64Builder, StringBuilder, StructArray, TimestampMillisecondBuilder,
};
use datafusion::arrow::buffer::NullBuffer;
use datafusion::arrow::datatypes::{DataType, Field, Fields, Schema, SchemaRef, TimeUnit};
use datafusion::arrow::error::ArrowError;
use datafusion::arrow::record_batch::RecordBatch;

use crate::generated_source::{Pacing, RowGenerator};
use crate::replayable_random::Random;

pub(crate) const PERSON_PROPORTION: u64 = 1;
pub(crate) const AUCTION_PROPORTION: u64 = 3;
pub(crate) const GROUP: u64 = 50;
const FIRST_ID: i64 = 1000;
const HOT_AUCTION_RATIO: u64 = 2;
const HOT_SELLER_RATIO: u64 = 4;
const HOT_BIDDER_RATIO: u64 = 4;
const IN_FLIGHT_AUCTIONS: u64 = 100;
const ACTIVE_PEOPLE: u64 = 1000;
const HOT_CHANNELS: [&str; 4] = ["Google", "Facebook", "Baidu", "Apple"];
/// The URL of a bid on each hot channel: its lowercased name and its index.
const HOT_URLS: [&str; 4] = [
    "https://www.nexmark.com/google/item.htm?query=1&channel_id=0",
    "https://www.nexmark.com/facebook/item.htm?query=1&channel_id=1",
    "https://www.nexmark.com/baidu/item.htm?query=1&channel_id=2",
    "https://www.nexmark.com/apple/item.htm?query=1&channel_id=3",
];
const FIRST_NAMES: [&str; 11] =
    ["Peter", "Paul", "Luke", "John", "Saul", "Vicky", "Kate", "Julie", "Sarah", "Deiter", "Walter"];
const LAST_NAMES: [&str; 9] = ["Shultz", "Abrams", "Spencer", "White", "Bartels", "Walton", "Smith", "Jones", "Noris"];
const CITIES: [&str; 10] =
    ["Phoenix", "Los Angeles", "San Francisco", "Boise", "Portland", "Bend", "Redmond", "Seattle", "Kent", "Cheyenne"];
const STATES: [&str; 6] = ["AZ", "CA", "ID", "OR", "WA", "WY"];

/// The kinds, as the `event_type` column holds them (the Flink suite's numbering).
pub const PERSON: i32 = 0;
pub const AUCTION: i32 = 1;
pub const BID: i32 = 2;

/// What the generator produces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NexmarkConfig {
    pub seed: u64,
    /// Events per second of event time (the spacing of `date_time`), and of wall-clock time
    /// unless `as_fast_as_possible`.
    pub rate: u64,
    pub as_fast_as_possible: bool,
    /// Stop after this many events (all splits together); `None`: never.
    pub events: Option<u64>,
    /// Event time of event 0, milliseconds since the epoch.
    pub base_time_ms: i64,
    /// The event space is cut into this many splits (event n belongs to split n mod splits);
    /// subtasks share the splits, so a restore may change the parallelism up to this.
    pub splits: u32,
    /// Events per batch at most. A paced table's batches hold at most a twentieth of a
    /// second's events anyway; this bounds a table read as fast as possible, where larger
    /// batches share each batch's fixed costs (routing, a join's and an aggregate's lookups of
    /// the keys a batch repeats) among more rows: DataFusion's default batch size.
    pub batch_size: usize,
}

impl Default for NexmarkConfig {
    fn default() -> Self {
        Self {
            seed: 0,
            rate: 10_000,
            as_fast_as_possible: false,
            events: None,
            base_time_ms: 1_700_000_000_000,
            splits: 8,
            batch_size: 8192,
        }
    }
}

/// The kind of event n.
pub fn event_kind(n: u64) -> i32 {
    match n % GROUP {
        r if r < PERSON_PROPORTION => PERSON,
        r if r < PERSON_PROPORTION + AUCTION_PROPORTION => AUCTION,
        _ => BID,
    }
}

fn person_fields() -> Fields {
    Fields::from(vec![
        Field::new("id", DataType::Int64, true),
        Field::new("name", DataType::Utf8, true),
        Field::new("email_address", DataType::Utf8, true),
        Field::new("credit_card", DataType::Utf8, true),
        Field::new("city", DataType::Utf8, true),
        Field::new("state", DataType::Utf8, true),
        Field::new("date_time", timestamp(), true),
        Field::new("extra", DataType::Utf8, true),
    ])
}

fn auction_fields() -> Fields {
    Fields::from(vec![
        Field::new("id", DataType::Int64, true),
        Field::new("item_name", DataType::Utf8, true),
        Field::new("description", DataType::Utf8, true),
        Field::new("initial_bid", DataType::Int64, true),
        Field::new("reserve", DataType::Int64, true),
        Field::new("date_time", timestamp(), true),
        Field::new("expires", timestamp(), true),
        Field::new("seller", DataType::Int64, true),
        Field::new("category", DataType::Int64, true),
        Field::new("extra", DataType::Utf8, true),
    ])
}

fn bid_fields() -> Fields {
    Fields::from(vec![
        Field::new("auction", DataType::Int64, true),
        Field::new("bidder", DataType::Int64, true),
        Field::new("price", DataType::Int64, true),
        Field::new("channel", DataType::Utf8, true),
        Field::new("url", DataType::Utf8, true),
        Field::new("date_time", timestamp(), true),
        Field::new("extra", DataType::Utf8, true),
    ])
}

fn timestamp() -> DataType {
    DataType::Timestamp(TimeUnit::Millisecond, None)
}

/// The Flink suite's one-table layout: the kind, one nullable struct per kind, and the event
/// time of every event as a top-level column to put a watermark on.
pub fn nexmark_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("event_type", DataType::Int32, false),
        Field::new("person", DataType::Struct(person_fields()), true),
        Field::new("auction", DataType::Struct(auction_fields()), true),
        Field::new("bid", DataType::Struct(bid_fields()), true),
        Field::new("date_time", timestamp(), false),
    ]))
}

/// Makes events and batches of events.
#[derive(Debug, Clone)]
pub struct NexmarkGenerator {
    config: NexmarkConfig,
    unread: UnreadText,
}

/// The random text fields no query of the pipeline reads: written empty, their letters not
/// drawn but skipped over, so every other field of the event is the same as when they are
/// written (each event's draws come in a fixed order from its own generator). Letters are most
/// of the generator's work, and most queries read none of the padding (`extra`), descriptions
/// or item names.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UnreadText {
    pub person_email: bool,
    pub person_extra: bool,
    pub auction_item_name: bool,
    pub auction_description: bool,
    pub auction_extra: bool,
    pub bid_url: bool,
    pub bid_extra: bool,
}

impl UnreadText {
    /// The fields `reads(column, field)` says nobody reads.
    pub fn unless(reads: impl Fn(&str, &str) -> bool) -> Self {
        Self {
            person_email: !reads("person", "email_address"),
            person_extra: !reads("person", "extra"),
            auction_item_name: !reads("auction", "item_name"),
            auction_description: !reads("auction", "description"),
            auction_extra: !reads("auction", "extra"),
            bid_url: !reads("bid", "url"),
            bid_extra: !reads("bid", "extra"),
        }
    }
}

/// Persons before event n (event n itself excluded).
fn persons_before(n: u64) -> u64 {
    (n / GROUP) * PERSON_PROPORTION + (n % GROUP).min(PERSON_PROPORTION)
}

fn auctions_before(n: u64) -> u64 {
    (n / GROUP) * AUCTION_PROPORTION + (n % GROUP).saturating_sub(PERSON_PROPORTION).min(AUCTION_PROPORTION)
}

impl RowGenerator for NexmarkGenerator {
    fn name(&self) -> &'static str {
        "nexmark"
    }

    fn pacing(&self) -> Pacing {
        let config = &self.config;
        Pacing {
            rate: config.rate,
            as_fast_as_possible: config.as_fast_as_possible,
            rows: config.events,
            splits: config.splits,
            batch_size: config.batch_size,
        }
    }

    fn batch(&self, rows: &[u64]) -> Result<RecordBatch, ArrowError> {
        NexmarkGenerator::batch(self, rows)
    }

    fn row_time_ms(&self, n: u64) -> Option<i64> {
        Some(self.event_time_ms(n))
    }
}

impl NexmarkGenerator {
    pub fn new(config: NexmarkConfig) -> Self {
        Self { config, unread: UnreadText::default() }
    }

    /// The same events with the text fields `unread` written empty.
    pub fn with_unread(self, unread: UnreadText) -> Self {
        Self { unread, ..self }
    }

    pub fn config(&self) -> &NexmarkConfig {
        &self.config
    }

    /// Event time of event n.
    pub fn event_time_ms(&self, n: u64) -> i64 {
        let rate = self.config.rate.max(1);
        self.config.base_time_ms + (u128::from(n) * 1000 / u128::from(rate)) as i64
    }

    /// A person id for event n to refer to: a hot one, or one of the recent people.
    fn person_ref(random: &mut Random, n: u64, hot_ratio: u64) -> i64 {
        let people = persons_before(n).max(1);
        let offset = if random.below(hot_ratio) > 0 {
            (people - 1) / hot_ratio * hot_ratio
        } else {
            people - 1 - random.below(people.min(ACTIVE_PEOPLE))
        };
        FIRST_ID + offset.min(people - 1) as i64
    }

    /// The events `numbers` as one batch, in that order.
    pub fn batch(&self, numbers: &[u64]) -> Result<RecordBatch, ArrowError> {
        let mut kinds = Vec::with_capacity(numbers.len());
        let mut times = TimestampMillisecondBuilder::with_capacity(numbers.len());
        // Columns sized for the batch up front: growing them by doubling copied each one over
        // again (a twentieth of the generator's time).
        let of_kind = |kind: i32| numbers.iter().filter(|n| event_kind(**n) == kind).count();
        let mut person = PersonColumns::with_capacity(numbers.len(), of_kind(PERSON));
        let mut auction = AuctionColumns::with_capacity(numbers.len(), of_kind(AUCTION));
        let mut bid = BidColumns::with_capacity(numbers.len(), of_kind(BID));
        for &n in numbers {
            let kind = event_kind(n);
            let time = self.event_time_ms(n);
            let mut random = Random::for_row(self.config.seed, n);
            kinds.push(kind);
            times.append_value(time);
            let unread = &self.unread;
            let written = match kind {
                PERSON => person.push(n, time, &mut random, unread),
                AUCTION => auction.push(n, time, &mut random, unread),
                _ => bid.push(n, time, &mut random, unread),
            };
            written.map_err(|_| ArrowError::ComputeError(format!("writing Nexmark event {n}")))?;
            for (columns_kind, valid) in
                [(PERSON, &mut person.valid), (AUCTION, &mut auction.valid), (BID, &mut bid.valid)]
            {
                if columns_kind != kind {
                    valid.push(false);
                }
            }
        }
        let columns: Vec<ArrayRef> = vec![
            Arc::new(Int32Array::from(kinds)),
            Arc::new(person.finish()?),
            Arc::new(auction.finish()?),
            Arc::new(bid.finish()?),
            Arc::new(times.finish()),
        ];
        RecordBatch::try_new(nexmark_schema(), columns)
    }
}

/// Builds a nullable struct column: where the row is of another kind, the struct and its
/// children are null (so `auction.seller` of a bid is NULL, not a placeholder value).
fn struct_array(fields: Fields, children: Vec<ArrayRef>, valid: Vec<bool>) -> Result<StructArray, ArrowError> {
    StructArray::try_new(fields, children, Some(NullBuffer::from(valid)))
}

struct PersonColumns {
    /// Whether each row is a person; the nulls of the rows since the last person are appended
    /// to the children when the next one comes.
    valid: Vec<bool>,
    id: Int64Builder,
    name: StringBuilder,
    email: StringBuilder,
    card: StringBuilder,
    city: StringBuilder,
    state: StringBuilder,
    time: TimestampMillisecondBuilder,
    extra: StringBuilder,
}

/// A text column of `rows` rows, `values` of them about `bytes` long (the others null).
fn strings(rows: usize, values: usize, bytes: usize) -> StringBuilder {
    StringBuilder::with_capacity(rows, values * bytes)
}

impl PersonColumns {
    /// For `rows` rows, `persons` of them persons.
    fn with_capacity(rows: usize, persons: usize) -> Self {
        Self {
            valid: Vec::with_capacity(rows),
            id: Int64Builder::with_capacity(rows),
            name: strings(rows, persons, 16),
            email: strings(rows, persons, 16),
            card: strings(rows, persons, 19),
            city: strings(rows, persons, 12),
            state: strings(rows, persons, 2),
            time: TimestampMillisecondBuilder::with_capacity(rows),
            extra: strings(rows, persons, 120),
        }
    }

    /// The children's nulls for the rows of other kinds since the last person.
    fn fill_nulls(&mut self) {
        let nulls = self.valid.len() - self.id.len();
        if nulls == 0 {
            return;
        }
        self.id.append_nulls(nulls);
        for column in
            [&mut self.name, &mut self.email, &mut self.card, &mut self.city, &mut self.state, &mut self.extra]
        {
            column.append_nulls(nulls);
        }
        self.time.append_nulls(nulls);
    }

    fn push(&mut self, n: u64, time: i64, random: &mut Random, unread: &UnreadText) -> std::fmt::Result {
        self.fill_nulls();
        self.valid.push(true);
        self.id.append_value(FIRST_ID + persons_before(n) as i64);
        write!(self.name, "{} {}", random.pick(&FIRST_NAMES), random.pick(&LAST_NAMES))?;
        self.name.append_value("");
        if unread.person_email {
            random.skip(7 + 5);
            self.email.append_value("");
        } else {
            random.write_letters(&mut self.email, 7)?;
            self.email.write_str("@")?;
            random.write_letters(&mut self.email, 5)?;
            self.email.append_value(".com");
        }
        for part in 0..4 {
            let separator = if part == 0 { "" } else { " " };
            write!(self.card, "{separator}{:04}", random.below(10_000))?;
        }
        self.card.append_value("");
        self.city.append_value(random.pick(&CITIES));
        self.state.append_value(random.pick(&STATES));
        self.time.append_value(time);
        match unread.person_extra {
            true => random.skip_padding(100, 40),
            false => random.write_padding(&mut self.extra, 100, 40)?,
        }
        self.extra.append_value("");
        Ok(())
    }

    fn finish(mut self) -> Result<StructArray, ArrowError> {
        self.fill_nulls();
        let children: Vec<ArrayRef> = vec![
            Arc::new(self.id.finish()),
            Arc::new(self.name.finish()),
            Arc::new(self.email.finish()),
            Arc::new(self.card.finish()),
            Arc::new(self.city.finish()),
            Arc::new(self.state.finish()),
            Arc::new(self.time.finish()),
            Arc::new(self.extra.finish()),
        ];
        struct_array(person_fields(), children, self.valid)
    }
}

struct AuctionColumns {
    valid: Vec<bool>,
    id: Int64Builder,
    item: StringBuilder,
    description: StringBuilder,
    initial: Int64Builder,
    reserve: Int64Builder,
    time: TimestampMillisecondBuilder,
    expires: TimestampMillisecondBuilder,
    seller: Int64Builder,
    category: Int64Builder,
    extra: StringBuilder,
}

impl AuctionColumns {
    /// For `rows` rows, `auctions` of them auctions.
    fn with_capacity(rows: usize, auctions: usize) -> Self {
        Self {
            valid: Vec::with_capacity(rows),
            id: Int64Builder::with_capacity(rows),
            item: strings(rows, auctions, 20),
            description: strings(rows, auctions, 100),
            initial: Int64Builder::with_capacity(rows),
            reserve: Int64Builder::with_capacity(rows),
            time: TimestampMillisecondBuilder::with_capacity(rows),
            expires: TimestampMillisecondBuilder::with_capacity(rows),
            seller: Int64Builder::with_capacity(rows),
            category: Int64Builder::with_capacity(rows),
            extra: strings(rows, auctions, 350),
        }
    }

    /// The children's nulls for the rows of other kinds since the last auction.
    fn fill_nulls(&mut self) {
        let nulls = self.valid.len() - self.id.len();
        if nulls == 0 {
            return;
        }
        for column in [&mut self.id, &mut self.initial, &mut self.reserve, &mut self.seller, &mut self.category] {
            column.append_nulls(nulls);
        }
        for column in [&mut self.item, &mut self.description, &mut self.extra] {
            column.append_nulls(nulls);
        }
        self.time.append_nulls(nulls);
        self.expires.append_nulls(nulls);
    }

    fn push(&mut self, n: u64, time: i64, random: &mut Random, unread: &UnreadText) -> std::fmt::Result {
        self.fill_nulls();
        self.valid.push(true);
        self.id.append_value(FIRST_ID + auctions_before(n) as i64);
        match unread.auction_item_name {
            true => random.skip(20),
            false => random.write_letters(&mut self.item, 20)?,
        }
        self.item.append_value("");
        match unread.auction_description {
            true => random.skip(100),
            false => random.write_letters(&mut self.description, 100)?,
        }
        self.description.append_value("");
        let initial = random.price();
        self.initial.append_value(initial);
        self.reserve.append_value(initial + random.price());
        self.time.append_value(time);
        // Open for up to about 20 s of event time: windows of 10 s see auctions close.
        self.expires.append_value(time + 1 + random.below(20_000) as i64);
        self.seller.append_value(NexmarkGenerator::person_ref(random, n, HOT_SELLER_RATIO));
        self.category.append_value(10 + random.below(5) as i64);
        match unread.auction_extra {
            true => random.skip_padding(300, 100),
            false => random.write_padding(&mut self.extra, 300, 100)?,
        }
        self.extra.append_value("");
        Ok(())
    }

    fn finish(mut self) -> Result<StructArray, ArrowError> {
        self.fill_nulls();
        let children: Vec<ArrayRef> = vec![
            Arc::new(self.id.finish()),
            Arc::new(self.item.finish()),
            Arc::new(self.description.finish()),
            Arc::new(self.initial.finish()),
            Arc::new(self.reserve.finish()),
            Arc::new(self.time.finish()),
            Arc::new(self.expires.finish()),
            Arc::new(self.seller.finish()),
            Arc::new(self.category.finish()),
            Arc::new(self.extra.finish()),
        ];
        struct_array(auction_fields(), children, self.valid)
    }
}

struct BidColumns {
    valid: Vec<bool>,
    auction: Int64Builder,
    bidder: Int64Builder,
    price: Int64Builder,
    channel: StringBuilder,
    url: StringBuilder,
    time: TimestampMillisecondBuilder,
    extra: StringBuilder,
}

impl BidColumns {
    /// For `rows` rows, `bids` of them bids.
    fn with_capacity(rows: usize, bids: usize) -> Self {
        Self {
            valid: Vec::with_capacity(rows),
            auction: Int64Builder::with_capacity(rows),
            bidder: Int64Builder::with_capacity(rows),
            price: Int64Builder::with_capacity(rows),
            channel: strings(rows, bids, 8),
            url: strings(rows, bids, 66),
            time: TimestampMillisecondBuilder::with_capacity(rows),
            extra: strings(rows, bids, 30),
        }
    }

    /// The children's nulls for the rows of other kinds since the last bid.
    fn fill_nulls(&mut self) {
        let nulls = self.valid.len() - self.auction.len();
        if nulls == 0 {
            return;
        }
        for column in [&mut self.auction, &mut self.bidder, &mut self.price] {
            column.append_nulls(nulls);
        }
        for column in [&mut self.channel, &mut self.url, &mut self.extra] {
            column.append_nulls(nulls);
        }
        self.time.append_nulls(nulls);
    }

    fn push(&mut self, n: u64, time: i64, random: &mut Random, unread: &UnreadText) -> std::fmt::Result {
        self.fill_nulls();
        self.valid.push(true);
        let auctions = auctions_before(n).max(1);
        let auction = if random.below(HOT_AUCTION_RATIO) > 0 {
            (auctions - 1) / HOT_AUCTION_RATIO * HOT_AUCTION_RATIO
        } else {
            auctions - 1 - random.below(auctions.min(IN_FLIGHT_AUCTIONS))
        };
        self.auction.append_value(FIRST_ID + auction as i64);
        self.bidder.append_value(NexmarkGenerator::person_ref(random, n, HOT_BIDDER_RATIO));
        self.price.append_value(random.price());
        if random.below(10) > 0 {
            let index = random.below(HOT_CHANNELS.len() as u64) as usize;
            self.channel.append_value(HOT_CHANNELS[index]);
            self.url.append_value(if unread.bid_url { "" } else { HOT_URLS[index] });
        } else {
            write!(self.channel, "channel-{}", random.below(10_000))?;
            self.channel.append_value("");
            if unread.bid_url {
                random.skip(3 * 5);
                self.url.append_value("");
            } else {
                self.url.write_str("https://www.nexmark.com/")?;
                for _ in 0..3 {
                    random.write_letters(&mut self.url, 5)?;
                    self.url.write_str("/")?;
                }
                self.url.append_value("item.htm?query=1");
            }
        }
        self.time.append_value(time);
        match unread.bid_extra {
            true => random.skip_padding(20, 20),
            false => random.write_padding(&mut self.extra, 20, 20)?,
        }
        self.extra.append_value("");
        Ok(())
    }

    fn finish(mut self) -> Result<StructArray, ArrowError> {
        self.fill_nulls();
        let children: Vec<ArrayRef> = vec![
            Arc::new(self.auction.finish()),
            Arc::new(self.bidder.finish()),
            Arc::new(self.price.finish()),
            Arc::new(self.channel.finish()),
            Arc::new(self.url.finish()),
            Arc::new(self.time.finish()),
            Arc::new(self.extra.finish()),
        ];
        struct_array(bid_fields(), children, self.valid)
    }
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::{Array, AsArray, Int64Array, TimestampMillisecondArray};
    use datafusion::arrow::datatypes::Int64Type;

    use super::*;

    fn generator() -> NexmarkGenerator {
        NexmarkGenerator::new(NexmarkConfig::default())
    }

    #[test]
    fn every_fifty_events_hold_one_person_three_auctions_and_forty_six_bids() {
        let kinds: Vec<i32> = (0..500).map(event_kind).collect();
        assert_eq!(kinds.iter().filter(|k| **k == PERSON).count(), 10);
        assert_eq!(kinds.iter().filter(|k| **k == AUCTION).count(), 30);
        assert_eq!(kinds.iter().filter(|k| **k == BID).count(), 460);
        assert_eq!(&kinds[..5], &[PERSON, AUCTION, AUCTION, AUCTION, BID]);
    }

    #[test]
    fn an_event_depends_on_its_number_and_seed_only() {
        let generator = generator();
        let all = generator.batch(&(0..200).collect::<Vec<_>>()).unwrap();
        let some = generator.batch(&[150, 7, 51]).unwrap();
        for (row, n) in [(0, 150usize), (1, 7), (2, 51)] {
            assert_eq!(some.slice(row, 1), all.slice(n, 1), "event {n}");
        }
        let other_seed = NexmarkGenerator::new(NexmarkConfig { seed: 1, ..NexmarkConfig::default() });
        assert_ne!(other_seed.batch(&[7]).unwrap(), generator.batch(&[7]).unwrap());
    }

    #[test]
    fn ids_grow_and_references_point_at_people_and_auctions_that_exist() {
        let batch = generator().batch(&(0..5000).collect::<Vec<_>>()).unwrap();
        let person = batch.column(1).as_struct();
        let auction = batch.column(2).as_struct();
        let bid = batch.column(3).as_struct();
        let person_ids = person.column(0).as_primitive::<Int64Type>();
        let person_ids: Vec<i64> =
            (0..batch.num_rows()).filter(|r| person.is_valid(*r)).map(|r| person_ids.value(r)).collect();
        assert_eq!(person_ids, (1000..1100).collect::<Vec<_>>());
        let auction_ids = auction.column(0).as_primitive::<Int64Type>();
        let auction_ids: Vec<i64> =
            (0..batch.num_rows()).filter(|r| auction.is_valid(*r)).map(|r| auction_ids.value(r)).collect();
        assert_eq!(auction_ids, (1000..1300).collect::<Vec<_>>());
        let bid_auctions = bid.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
        let bidders = bid.column(1).as_any().downcast_ref::<Int64Array>().unwrap();
        for row in (0..batch.num_rows()).filter(|r| bid.is_valid(*r)) {
            assert!((1000..1300).contains(&bid_auctions.value(row)));
            assert!((1000..1100).contains(&bidders.value(row)));
        }
        let times = batch.column(4).as_any().downcast_ref::<TimestampMillisecondArray>().unwrap();
        assert_eq!(times.value(4999) - times.value(0), 499, "10,000 events per second of event time");
    }

    /// Text written empty where nobody reads it changes no other value of any event.
    #[test]
    fn unread_text_is_empty_and_every_other_value_the_same() {
        let numbers: Vec<u64> = (0..2000).collect();
        let all = generator().batch(&numbers).unwrap();
        let unread = UnreadText {
            person_email: true,
            person_extra: true,
            auction_item_name: true,
            auction_description: true,
            auction_extra: true,
            bid_url: true,
            bid_extra: true,
        };
        let some = generator().with_unread(unread).batch(&numbers).unwrap();
        let skipped = [(1, 2), (1, 7), (2, 1), (2, 2), (2, 9), (3, 4), (3, 6)];
        for (column, kind) in [(1, "person"), (2, "auction"), (3, "bid")] {
            let (a, b) = (all.column(column).as_struct(), some.column(column).as_struct());
            assert_eq!(a.nulls(), b.nulls());
            for field in 0..a.num_columns() {
                let (x, y) = (a.column(field), b.column(field));
                if skipped.contains(&(column, field)) {
                    let y = y.as_string::<i32>();
                    assert!((0..y.len()).all(|r| y.is_null(r) || y.value(r).is_empty()), "{kind} field {field}");
                    assert!(x.as_string::<i32>().iter().flatten().any(|v| !v.is_empty()));
                } else {
                    assert_eq!(x, y, "{kind} field {field}");
                }
            }
        }
    }

    /// Events are fixed forever (a replay after an upgrade must produce the same ones): a digest
    /// (FNV-1a) of every value of the first 2000 events, pinned.
    #[test]
    fn the_events_never_change() {
        use datafusion::arrow::datatypes::{Int32Type, TimestampMillisecondType};
        let batch = generator().batch(&(0..2000).collect::<Vec<_>>()).unwrap();
        let mut digest = 0xcbf2_9ce4_8422_2325u64;
        let mut feed = |bytes: &[u8]| {
            for byte in bytes {
                digest = (digest ^ u64::from(*byte)).wrapping_mul(0x100_0000_01b3);
            }
        };
        for column in batch.columns() {
            let arrays = match column.as_struct_opt() {
                Some(kind) => kind.columns().to_vec(),
                None => vec![column.clone()],
            };
            for array in arrays {
                for row in 0..array.len() {
                    if array.is_null(row) {
                        feed(b"\0null");
                        continue;
                    }
                    match array.data_type() {
                        DataType::Utf8 => feed(array.as_string::<i32>().value(row).as_bytes()),
                        DataType::Int32 => feed(&array.as_primitive::<Int32Type>().value(row).to_le_bytes()),
                        DataType::Int64 => feed(&array.as_primitive::<Int64Type>().value(row).to_le_bytes()),
                        DataType::Timestamp(..) => {
                            feed(&array.as_primitive::<TimestampMillisecondType>().value(row).to_le_bytes())
                        }
                        other => panic!("no digest for {other}"),
                    }
                }
            }
        }
        assert_eq!(format!("{digest:016x}"), "0741ab20a0078a63");
    }
}
