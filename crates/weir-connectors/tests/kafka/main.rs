//! Kafka tests against the real broker of tests/kafka/broker.sh (one test binary: each links
//! the whole crate).

mod broker_script;
mod transactions;
