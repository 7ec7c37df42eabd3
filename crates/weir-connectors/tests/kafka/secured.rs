//! Recovery against a secured cluster: the protocol client reaches the broker's SASL_PLAINTEXT
//! (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512), SSL and SASL_SSL listeners with the same `kafka.*`
//! properties librdkafka is given, and commits a transaction a librdkafka producer left open
//! there. Wrong credentials and an untrusted certificate fail at once, naming the cause.

use std::time::{Duration, Instant};

use rdkafka::config::ClientConfig;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use weir_connectors::Error;
use weir_connectors::kafka::security::ClientSecurity;
use weir_connectors::kafka::test_broker::{SecuredListeners, TestBroker};
use weir_connectors::kafka::{
    EndTxnOutcome, PendingTransaction, TransactionResult, TransactionState, TransactionsClient,
};

const TIMEOUT: Duration = Duration::from_secs(30);

fn broker() -> &'static TestBroker {
    TestBroker::get().unwrap_or_else(|e| panic!("no Kafka broker for tests: {e}"))
}

fn secured() -> SecuredListeners {
    broker().secured().unwrap_or_else(|e| panic!("the test broker's secured listeners: {e}"))
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

fn client(listeners: &SecuredListeners, protocol: &str, properties: &[(String, String)]) -> TransactionsClient {
    let security = ClientSecurity::from_properties(properties).unwrap();
    TransactionsClient::new(listeners.bootstrap(protocol))
        .with_security(security)
        .with_retry_for(Duration::from_secs(5))
}

/// A librdkafka producer over the secured listener leaves a transaction of 20 records open and
/// goes away; weir's client, over the same listener, finds it and commits it.
fn pending_transaction_is_committed_over(protocol: &str, mechanism: &str) {
    let rt = runtime();
    let listeners = secured();
    let properties = listeners.properties(protocol, mechanism);
    let topic = rt.block_on(broker().create_topic("secured", 2)).unwrap();
    let transactional_id = TestBroker::unique_name(&format!("secured-{protocol}-{mechanism}"));

    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", listeners.bootstrap(protocol)).set("transactional.id", &transactional_id);
    for (key, value) in &properties {
        config.set(key, value);
    }
    let producer: BaseProducer = config.create().unwrap();
    producer.init_transactions(TIMEOUT).unwrap_or_else(|e| panic!("librdkafka over {protocol}: {e}"));
    producer.begin_transaction().unwrap();
    for i in 0..20 {
        let payload = format!("{protocol}-{i}");
        producer.send(BaseRecord::<(), _>::to(&topic).payload(&payload).partition(i % 2)).unwrap();
    }
    producer.flush(TIMEOUT).unwrap();

    let client = client(&listeners, protocol, &properties);
    let description = rt.block_on(client.describe(&transactional_id)).unwrap().unwrap();
    assert_eq!(description.state, TransactionState::Ongoing, "over {protocol} {mechanism}");
    drop(producer);
    let pending = PendingTransaction {
        transactional_id: transactional_id.clone(),
        producer_id: description.producer_id,
        producer_epoch: description.producer_epoch,
    };
    let outcome = rt.block_on(client.end_transaction(&pending, TransactionResult::Commit)).unwrap();
    assert_eq!(outcome, EndTxnOutcome::Completed);

    let deadline = Instant::now() + TIMEOUT;
    loop {
        let committed = broker().read_to_end(&topic, "read_committed").unwrap();
        if committed.len() == 20 {
            break;
        }
        assert!(Instant::now() < deadline, "{topic}: {} committed records, not 20", committed.len());
        std::thread::sleep(Duration::from_millis(100));
    }
    // And the pool's fencing (InitProducerId) works there too.
    rt.block_on(client.fence(&transactional_id, 60_000)).unwrap();
}

#[test]
fn recovery_commits_over_sasl_plaintext_with_plain() {
    pending_transaction_is_committed_over("SASL_PLAINTEXT", "PLAIN");
}

#[test]
fn recovery_commits_over_sasl_plaintext_with_scram_sha_256() {
    pending_transaction_is_committed_over("SASL_PLAINTEXT", "SCRAM-SHA-256");
}

#[test]
fn recovery_commits_over_sasl_plaintext_with_scram_sha_512() {
    pending_transaction_is_committed_over("SASL_PLAINTEXT", "SCRAM-SHA-512");
}

#[test]
fn recovery_commits_over_ssl() {
    pending_transaction_is_committed_over("SSL", "");
}

#[test]
fn recovery_commits_over_sasl_ssl_with_scram_sha_512() {
    pending_transaction_is_committed_over("SASL_SSL", "SCRAM-SHA-512");
}

#[test]
fn a_wrong_password_fails_at_once_naming_authentication() {
    let rt = runtime();
    let listeners = secured();
    for mechanism in ["PLAIN", "SCRAM-SHA-256"] {
        let mut properties = listeners.properties("SASL_PLAINTEXT", mechanism);
        properties.push(("sasl.password".into(), "not-the-password".into()));
        let started = Instant::now();
        let error = rt.block_on(client(&listeners, "SASL_PLAINTEXT", &properties).describe("any")).unwrap_err();
        assert!(matches!(error, Error::Authentication { .. }), "{mechanism}: {error}");
        assert!(started.elapsed() < Duration::from_secs(5), "{mechanism}: not retried ({:?})", started.elapsed());
    }
}

#[test]
fn an_untrusted_certificate_fails_naming_tls() {
    let rt = runtime();
    let listeners = secured();
    // The system's CA store does not hold the test CA.
    let properties = vec![("security.protocol".to_string(), "SSL".to_string())];
    let error = rt.block_on(client(&listeners, "SSL", &properties).describe("any")).unwrap_err();
    assert!(matches!(error, Error::Tls { .. }), "{error}");
    assert!(error.to_string().contains("certificate"), "{error}");
}

#[test]
fn plaintext_against_a_sasl_listener_is_not_mistaken_for_success() {
    let rt = runtime();
    let listeners = secured();
    let client = TransactionsClient::new(&listeners.sasl_plaintext).with_retry_for(Duration::from_secs(2));
    assert!(rt.block_on(client.describe("any")).is_err());
}

/// Recovery, every pre-commit and every close ask the coordinator: a client keeps its
/// connection to each broker (the TLS handshake and the SCRAM exchange done once, the TLS
/// configuration read once) and remembers each id's coordinator, rather than connecting to a
/// bootstrap broker and then to the coordinator for every request.
#[test]
fn a_client_keeps_its_connection_across_requests() {
    let rt = runtime();
    let listeners = secured();
    let properties = listeners.properties("SASL_SSL", "SCRAM-SHA-512");
    let client = client(&listeners, "SASL_SSL", &properties);
    let ids: Vec<String> = (0..5).map(|i| TestBroker::unique_name(&format!("reuse-{i}"))).collect();
    let started = Instant::now();
    for _ in 0..10 {
        for id in &ids {
            assert!(rt.block_on(client.describe(id)).unwrap().is_none());
        }
    }
    eprintln!("50 DescribeTransactions over SASL_SSL with SCRAM-SHA-512: {:?}", started.elapsed());
    assert_eq!(client.connections_opened(), 1, "one broker, one connection");
}
