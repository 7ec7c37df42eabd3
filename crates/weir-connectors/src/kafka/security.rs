//! How the recovery client reaches a secured broker: the same `kafka.*` security properties the
//! user gave librdkafka (`security.protocol`, `sasl.*`, `ssl.*`), read here so that the protocol
//! client (FindCoordinator, DescribeTransactions, EndTxn, InitProducerId) connects to the very
//! listener, with the very credentials, that the table's producers use.
//!
//! TLS is rustls; the SASL exchanges (PLAIN, SCRAM-SHA-256/512) are in [`super::sasl`].

use std::fmt;
use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};

use crate::{Error, Result};

/// A SASL mechanism the recovery client speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SaslMechanism {
    Plain,
    ScramSha256,
    ScramSha512,
}

impl SaslMechanism {
    /// The mechanism's name as Kafka and librdkafka spell it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Plain => "PLAIN",
            Self::ScramSha256 => "SCRAM-SHA-256",
            Self::ScramSha512 => "SCRAM-SHA-512",
        }
    }
}

/// SASL credentials. The password never appears in `Debug` output.
#[derive(Clone, PartialEq, Eq)]
pub struct SaslSettings {
    pub mechanism: SaslMechanism,
    pub username: String,
    pub password: String,
}

impl fmt::Debug for SaslSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SaslSettings")
            .field("mechanism", &self.mechanism)
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .finish()
    }
}

/// TLS settings, as librdkafka's `ssl.*` properties give them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsSettings {
    /// `ssl.ca.location`: a PEM file of the certificates to trust; the system's store if unset.
    pub ca_location: Option<String>,
    /// `ssl.certificate.location` and `ssl.key.location`: a client certificate (mutual TLS).
    pub client_certificate: Option<(String, String)>,
    /// `ssl.endpoint.identification.algorithm`: `https` (librdkafka's default) checks that the
    /// certificate names the broker's host; `none` trusts any name the chain vouches for.
    pub verify_hostname: bool,
}

/// How to connect to a broker: `security.protocol` and what it needs.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ClientSecurity {
    pub tls: Option<TlsSettings>,
    pub sasl: Option<SaslSettings>,
}

impl ClientSecurity {
    /// Reads librdkafka's security properties (names without the `kafka.` prefix). Errors name
    /// the property; properties librdkafka takes but this client cannot honour are refused
    /// here rather than ignored, so recovery never connects with less than the producers do.
    pub fn from_properties(properties: &[(String, String)]) -> Result<Self> {
        let get = |key: &str| properties.iter().rev().find(|(k, _)| k == key).map(|(_, v)| v.as_str());
        let protocol = get("security.protocol").unwrap_or("plaintext").to_ascii_lowercase();
        let (tls, sasl) = match protocol.as_str() {
            "plaintext" => (false, false),
            "ssl" => (true, false),
            "sasl_plaintext" => (false, true),
            "sasl_ssl" => (true, true),
            other => {
                return Err(Error::Security(format!(
                    "kafka.security.protocol '{other}' is not one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL"
                )));
            }
        };
        let tls = tls.then(|| tls_settings(&get)).transpose()?;
        let sasl = sasl.then(|| sasl_settings(&get)).transpose()?;
        Ok(Self { tls, sasl })
    }

    /// The rustls configuration for `tls`: reads the CA and client certificate files.
    pub(crate) fn tls_config(tls: &TlsSettings) -> Result<Arc<ClientConfig>> {
        // ring rather than aws-lc-rs: no cmake build of a second C crypto library. rustls
        // deprecates it for lacking post-quantum key exchange, which Kafka's Java brokers do not
        // offer by default either.
        #[allow(deprecated)]
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = RootCertStore::empty();
        match &tls.ca_location {
            Some(path) => {
                let certificates = read_certificates(path)?;
                if certificates.is_empty() {
                    return Err(Error::Security(format!("kafka.ssl.ca.location '{path}' holds no PEM certificate")));
                }
                for certificate in certificates {
                    roots
                        .add(certificate)
                        .map_err(|e| Error::Security(format!("kafka.ssl.ca.location '{path}': {e}")))?;
                }
            }
            None => {
                let native = rustls_native_certs::load_native_certs();
                if let Some(error) = native.errors.first().filter(|_| native.certs.is_empty()) {
                    return Err(Error::Security(format!(
                        "the system's CA certificates (set kafka.ssl.ca.location instead): {error}"
                    )));
                }
                roots.add_parsable_certificates(native.certs);
            }
        }
        let roots = Arc::new(roots);
        let builder = ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| Error::Security(format!("TLS: {e}")))?;
        let builder = if tls.verify_hostname {
            builder.with_root_certificates(roots)
        } else {
            let verifier = WebPkiServerVerifier::builder_with_provider(roots, provider)
                .build()
                .map_err(|e| Error::Security(format!("TLS: {e}")))?;
            builder.dangerous().with_custom_certificate_verifier(Arc::new(AnyHostName(verifier)))
        };
        let config = match &tls.client_certificate {
            None => builder.with_no_client_auth(),
            Some((certificate, key)) => {
                let chain = read_certificates(certificate)?;
                let key = read_private_key(key)?;
                builder
                    .with_client_auth_cert(chain, key)
                    .map_err(|e| Error::Security(format!("kafka.ssl.key.location: {e}")))?
            }
        };
        Ok(Arc::new(config))
    }
}

fn tls_settings<'a>(get: &impl Fn(&str) -> Option<&'a str>) -> Result<TlsSettings> {
    if get("ssl.key.password").is_some() {
        return Err(Error::Security(
            "kafka.ssl.key.password: encrypted private keys are not supported; give an unencrypted PEM key".into(),
        ));
    }
    if get("ssl.keystore.location").is_some() || get("ssl.ca.pem").is_some() || get("ssl.certificate.pem").is_some() {
        return Err(Error::Security("give TLS material as PEM files: kafka.ssl.ca.location, kafka.ssl.certificate.location and kafka.ssl.key.location".into()));
    }
    let client_certificate = match (get("ssl.certificate.location"), get("ssl.key.location")) {
        (Some(certificate), Some(key)) => Some((certificate.to_string(), key.to_string())),
        (None, None) => None,
        _ => {
            return Err(Error::Security(
                "kafka.ssl.certificate.location and kafka.ssl.key.location go together".into(),
            ));
        }
    };
    let verify_hostname = match get("ssl.endpoint.identification.algorithm").map(str::to_ascii_lowercase).as_deref() {
        None | Some("https") => true,
        Some("none") => false,
        Some(other) => {
            return Err(Error::Security(format!(
                "kafka.ssl.endpoint.identification.algorithm '{other}' is not 'https' or 'none'"
            )));
        }
    };
    Ok(TlsSettings { ca_location: get("ssl.ca.location").map(str::to_string), client_certificate, verify_hostname })
}

fn sasl_settings<'a>(get: &impl Fn(&str) -> Option<&'a str>) -> Result<SaslSettings> {
    // librdkafka takes both spellings; `sasl.mechanisms` is its original one.
    let mechanism = get("sasl.mechanism").or_else(|| get("sasl.mechanisms")).unwrap_or("GSSAPI");
    let mechanism = match mechanism.to_ascii_uppercase().as_str() {
        "PLAIN" => SaslMechanism::Plain,
        "SCRAM-SHA-256" => SaslMechanism::ScramSha256,
        "SCRAM-SHA-512" => SaslMechanism::ScramSha512,
        other => {
            return Err(Error::Security(format!(
                "kafka.sasl.mechanism '{other}' is not supported by exactly-once recovery (PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512)"
            )));
        }
    };
    let (Some(username), Some(password)) = (get("sasl.username"), get("sasl.password")) else {
        return Err(Error::Security(format!(
            "SASL {} needs kafka.sasl.username and kafka.sasl.password",
            mechanism.name()
        )));
    };
    Ok(SaslSettings { mechanism, username: username.to_string(), password: password.to_string() })
}

fn read_certificates(path: &str) -> Result<Vec<CertificateDer<'static>>> {
    CertificateDer::pem_file_iter(path)
        .and_then(|certificates| certificates.collect::<std::result::Result<Vec<_>, _>>())
        .map_err(|e| Error::Security(format!("reading '{path}': {e}")))
}

fn read_private_key(path: &str) -> Result<PrivateKeyDer<'static>> {
    PrivateKeyDer::from_pem_file(path).map_err(|e| Error::Security(format!("kafka.ssl.key.location '{path}': {e}")))
}

/// `ssl.endpoint.identification.algorithm = none`: the chain must lead to a trusted CA, but the
/// certificate need not name the host (librdkafka's behaviour with that setting).
#[derive(Debug)]
struct AnyHostName(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for AnyHostName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self.0.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now) {
            Err(rustls::Error::InvalidCertificate(rustls::CertificateError::NotValidForName))
            | Err(rustls::Error::InvalidCertificate(rustls::CertificateError::NotValidForNameContext { .. })) => {
                Ok(ServerCertVerified::assertion())
            }
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn props(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn plaintext_by_default() {
        assert_eq!(ClientSecurity::from_properties(&[]).unwrap(), ClientSecurity::default());
    }

    #[test]
    fn sasl_ssl_reads_both_halves() {
        let security = ClientSecurity::from_properties(&props(&[
            ("security.protocol", "SASL_SSL"),
            ("sasl.mechanisms", "scram-sha-512"),
            ("sasl.username", "u"),
            ("sasl.password", "p"),
            ("ssl.ca.location", "/ca.pem"),
            ("ssl.endpoint.identification.algorithm", "none"),
        ]))
        .unwrap();
        let sasl = security.sasl.unwrap();
        assert_eq!((sasl.mechanism, sasl.username.as_str()), (SaslMechanism::ScramSha512, "u"));
        assert!(!format!("{sasl:?}").contains("\"p\""), "the password is redacted");
        let tls = security.tls.unwrap();
        assert_eq!((tls.ca_location.as_deref(), tls.verify_hostname), (Some("/ca.pem"), false));
    }

    #[test]
    fn what_recovery_cannot_honour_is_refused_by_name() {
        let error = |pairs: &[(&str, &str)]| ClientSecurity::from_properties(&props(pairs)).unwrap_err().to_string();
        assert!(error(&[("security.protocol", "ssl_plain")]).contains("PLAINTEXT, SSL"));
        assert!(error(&[("security.protocol", "SASL_PLAINTEXT")]).contains("'GSSAPI' is not supported"));
        assert!(
            error(&[("security.protocol", "SASL_PLAINTEXT"), ("sasl.mechanism", "PLAIN")])
                .contains("kafka.sasl.username")
        );
        assert!(error(&[("security.protocol", "SSL"), ("ssl.key.location", "k.pem")]).contains("go together"));
        assert!(error(&[("security.protocol", "SSL"), ("ssl.keystore.location", "k.p12")]).contains("PEM files"));
    }

    #[test]
    fn a_missing_ca_file_is_named() {
        let tls = TlsSettings {
            ca_location: Some("/nonexistent/ca.pem".into()),
            client_certificate: None,
            verify_hostname: true,
        };
        assert!(ClientSecurity::tls_config(&tls).unwrap_err().to_string().contains("/nonexistent/ca.pem"));
    }
}
