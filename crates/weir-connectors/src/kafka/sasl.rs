//! SASL authentication of a recovery connection: SaslHandshake names the mechanism, then
//! SaslAuthenticate carries its messages (KIP-152). PLAIN sends the credentials in one message
//! (RFC 4616); SCRAM-SHA-256/512 proves the password in two round trips without sending it, and
//! checks the broker's proof that it knows the stored key (RFC 5802, RFC 7677).

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use bytes::Bytes;
use hmac::{Hmac, KeyInit, Mac};
use kafka_protocol::ResponseError;
use kafka_protocol::messages::{SaslAuthenticateRequest, SaslHandshakeRequest};
use kafka_protocol::protocol::StrBytes;
use rand::Rng;
use sha2::{Digest, Sha256, Sha512};

use super::security::{SaslMechanism, SaslSettings};
use super::wire::Connection;
use crate::error::Result;

/// SaslHandshake v1: authentication bytes then travel in SaslAuthenticate requests.
const SASL_HANDSHAKE_VERSION: i16 = 1;
/// SaslAuthenticate v2: the flexible version librdkafka sends.
const SASL_AUTHENTICATE_VERSION: i16 = 2;
/// Kafka's SCRAM credentials use at least 4096 iterations; fewer means a broken or hostile peer.
const MIN_SCRAM_ITERATIONS: u32 = 4096;

/// Authenticates `connection` with `settings`; a refusal is [`Error::Authentication`].
pub(crate) async fn authenticate(connection: &mut Connection, settings: &SaslSettings) -> Result<()> {
    let mechanism = settings.mechanism.name();
    let handshake = SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str(mechanism));
    let response = connection.send(&handshake, SASL_HANDSHAKE_VERSION).await?;
    if let Some(code) = ResponseError::try_from_code(response.error_code) {
        let offered: Vec<&str> = response.mechanisms.iter().map(|m| m.as_str()).collect();
        return Err(connection.authentication_error(format!(
            "SASL mechanism {mechanism} refused ({code}); the listener offers {}",
            offered.join(", ")
        )));
    }
    match settings.mechanism {
        SaslMechanism::Plain => {
            let message = format!("\0{}\0{}", settings.username, settings.password);
            exchange(connection, message.into_bytes()).await?;
        }
        SaslMechanism::ScramSha256 | SaslMechanism::ScramSha512 => {
            let scram = Scram::new(settings, random_nonce());
            let server_first = exchange(connection, scram.client_first().into_bytes()).await?;
            let (client_final, expected_signature) =
                scram.client_final(&server_first).map_err(|m| connection.authentication_error(m))?;
            let server_final = exchange(connection, client_final.into_bytes()).await?;
            Scram::check_server_final(&server_final, &expected_signature)
                .map_err(|m| connection.authentication_error(m))?;
        }
    }
    Ok(())
}

/// One SaslAuthenticate round trip: our bytes out, the broker's back.
async fn exchange(connection: &mut Connection, auth_bytes: Vec<u8>) -> Result<Vec<u8>> {
    let request = SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from(auth_bytes));
    let response = connection.send(&request, SASL_AUTHENTICATE_VERSION).await?;
    if let Some(code) = ResponseError::try_from_code(response.error_code) {
        let detail = response.error_message.as_ref().map_or("", |m| m.as_str());
        return Err(connection.authentication_error(format!("{code}: {detail}")));
    }
    Ok(response.auth_bytes.to_vec())
}

/// 24 random bytes, base64: printable, and without ',' as SCRAM requires.
fn random_nonce() -> String {
    let bytes: [u8; 24] = rand::rng().random();
    BASE64.encode(bytes)
}

/// The client side of one SCRAM exchange.
struct Scram<'a> {
    settings: &'a SaslSettings,
    client_nonce: String,
}

impl<'a> Scram<'a> {
    fn new(settings: &'a SaslSettings, client_nonce: String) -> Self {
        Self { settings, client_nonce }
    }

    /// `n=<user>,r=<nonce>`: the client-first message without its GS2 header.
    fn client_first_bare(&self) -> String {
        // RFC 5802 5.1: ',' and '=' in a user name are escaped.
        let user = self.settings.username.replace('=', "=3D").replace(',', "=2C");
        format!("n={user},r={}", self.client_nonce)
    }

    fn client_first(&self) -> String {
        format!("n,,{}", self.client_first_bare())
    }

    /// The client-final message for the broker's `server_first`, and the server signature the
    /// broker's final message must carry.
    fn client_final(&self, server_first: &[u8]) -> Result<(String, Vec<u8>), String> {
        let server_first =
            std::str::from_utf8(server_first).map_err(|_| "SCRAM server-first message is not UTF-8".to_string())?;
        let attribute = |name: char| {
            server_first
                .split(',')
                .find_map(|part| part.strip_prefix(name).and_then(|rest| rest.strip_prefix('=')))
                .ok_or_else(|| format!("SCRAM server-first message '{server_first}' has no '{name}='"))
        };
        let nonce = attribute('r')?;
        if !nonce.starts_with(&self.client_nonce) || nonce.len() == self.client_nonce.len() {
            return Err("SCRAM server nonce does not extend the client's".to_string());
        }
        let salt = BASE64.decode(attribute('s')?).map_err(|e| format!("SCRAM salt: {e}"))?;
        let iterations: u32 = attribute('i')?.parse().map_err(|e| format!("SCRAM iteration count: {e}"))?;
        if iterations < MIN_SCRAM_ITERATIONS {
            return Err(format!("SCRAM iteration count {iterations} is below {MIN_SCRAM_ITERATIONS}"));
        }
        let algorithm = self.settings.mechanism;
        let salted_password = salted_password(algorithm, self.settings.password.as_bytes(), &salt, iterations);
        let client_key = hmac(algorithm, &salted_password, b"Client Key");
        let stored_key = hash(algorithm, &client_key);
        // "biws" is base64("n,,"): the GS2 header of the client-first message, no channel binding.
        let without_proof = format!("c=biws,r={nonce}");
        let auth_message = format!("{},{server_first},{without_proof}", self.client_first_bare());
        let client_signature = hmac(algorithm, &stored_key, auth_message.as_bytes());
        let proof: Vec<u8> = client_key.iter().zip(&client_signature).map(|(k, s)| k ^ s).collect();
        let server_key = hmac(algorithm, &salted_password, b"Server Key");
        let server_signature = hmac(algorithm, &server_key, auth_message.as_bytes());
        Ok((format!("{without_proof},p={}", BASE64.encode(proof)), server_signature))
    }

    /// The broker's `v=<signature>` must be the one only a holder of the server key computes.
    fn check_server_final(server_final: &[u8], expected: &[u8]) -> Result<(), String> {
        let server_final = String::from_utf8_lossy(server_final);
        if let Some(error) = server_final.strip_prefix("e=") {
            return Err(format!("SCRAM: the broker refused: {error}"));
        }
        let signature = server_final
            .strip_prefix("v=")
            .and_then(|v| BASE64.decode(v.split(',').next().unwrap_or_default()).ok())
            .ok_or_else(|| format!("SCRAM server-final message '{server_final}' has no verifier"))?;
        if signature != expected {
            return Err("SCRAM: the broker's signature is wrong (it does not know this user's key)".to_string());
        }
        Ok(())
    }
}

fn salted_password(algorithm: SaslMechanism, password: &[u8], salt: &[u8], iterations: u32) -> Vec<u8> {
    match algorithm {
        SaslMechanism::ScramSha512 => pbkdf2::pbkdf2_hmac_array::<Sha512, 64>(password, salt, iterations).to_vec(),
        _ => pbkdf2::pbkdf2_hmac_array::<Sha256, 32>(password, salt, iterations).to_vec(),
    }
}

fn hmac(algorithm: SaslMechanism, key: &[u8], data: &[u8]) -> Vec<u8> {
    fn run<M: Mac + KeyInit>(key: &[u8], data: &[u8]) -> Vec<u8> {
        // HMAC takes keys of any length: new_from_slice cannot fail for it.
        let mut mac = <M as KeyInit>::new_from_slice(key).unwrap_or_else(|_| unreachable!("HMAC takes any key length"));
        mac.update(data);
        mac.finalize().into_bytes().to_vec()
    }
    match algorithm {
        SaslMechanism::ScramSha512 => run::<Hmac<Sha512>>(key, data),
        _ => run::<Hmac<Sha256>>(key, data),
    }
}

fn hash(algorithm: SaslMechanism, data: &[u8]) -> Vec<u8> {
    match algorithm {
        SaslMechanism::ScramSha512 => Sha512::digest(data).to_vec(),
        _ => Sha256::digest(data).to_vec(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(mechanism: SaslMechanism) -> SaslSettings {
        SaslSettings { mechanism, username: "user".into(), password: "pencil".into() }
    }

    /// RFC 7677, section 3: the SCRAM-SHA-256 example exchange, message by message.
    #[test]
    fn scram_sha_256_matches_rfc_7677() {
        let settings = settings(SaslMechanism::ScramSha256);
        let scram = Scram::new(&settings, "rOprNGfwEbeRWgbNEkqO".into());
        assert_eq!(scram.client_first(), "n,,n=user,r=rOprNGfwEbeRWgbNEkqO");
        let server_first = b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
        let (client_final, signature) = scram.client_final(server_first).unwrap();
        assert_eq!(
            client_final,
            "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
        );
        Scram::check_server_final(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=", &signature).unwrap();
        assert!(Scram::check_server_final(b"v=AAAA", &signature).unwrap_err().contains("signature is wrong"));
        assert!(Scram::check_server_final(b"e=invalid-proof", &signature).unwrap_err().contains("invalid-proof"));
    }

    #[test]
    fn a_server_that_does_not_extend_the_nonce_or_skimps_on_iterations_is_refused() {
        let settings = settings(SaslMechanism::ScramSha512);
        let scram = Scram::new(&settings, "abc".into());
        assert!(scram.client_final(b"r=xyz123,s=QUJD,i=4096").unwrap_err().contains("nonce"));
        assert!(scram.client_final(b"r=abc123,s=QUJD,i=1").unwrap_err().contains("below 4096"));
        assert!(scram.client_final(b"r=abc123,i=4096").unwrap_err().contains("'s='"));
        let (client_final, signature) = scram.client_final(b"r=abc123,s=QUJD,i=4096").unwrap();
        assert!(client_final.starts_with("c=biws,r=abc123,p="));
        assert_eq!(signature.len(), 64, "SHA-512 signatures");
    }

    #[test]
    fn user_names_are_escaped() {
        let settings =
            SaslSettings { mechanism: SaslMechanism::ScramSha256, username: "a=b,c".into(), password: String::new() };
        assert_eq!(Scram::new(&settings, "n".into()).client_first_bare(), "n=a=3Db=2Cc,r=n");
    }
}
