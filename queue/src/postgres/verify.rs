//! The two server-certificate checks rustls lacks: `verify-ca` (webpki's chain, not its
//! name) and no check at all for `prefer` and `require` without a CA (the handshake's
//! signatures still checked). `verify-full` is webpki's own verifier.

use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, verify_tls12_signature, verify_tls13_signature};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, SignatureScheme};

/// `sslmode=verify-ca`, and `prefer` or `require` with a CA file: webpki's check of the
/// chain, without its check of the name. webpki checks the chain (and the certificate's
/// dates and uses) before the name, so a name that does not match means the rest passed.
#[derive(Debug)]
pub(super) struct ChainOnly(pub(super) Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let verified =
            self.0
                .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now);
        match verified {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
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

/// `sslmode=prefer` or `require` without a CA: any certificate is taken (libpq's rule: these
/// modes encrypt, they do not authenticate the server), the handshake's signatures are still
/// checked with the certificate's key.
#[derive(Debug)]
pub(super) struct AnyCertificate(pub(super) Arc<CryptoProvider>);

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use rustls::RootCertStore;

    /// A CA and a certificate it signed for `db.example` (DER, and PEM with its key); a CA
    /// that signed nothing.
    pub(in crate::postgres) struct Pki {
        pub(in crate::postgres) ca: CertificateDer<'static>,
        pub(in crate::postgres) ca_pem: String,
        pub(in crate::postgres) other_ca: CertificateDer<'static>,
        pub(in crate::postgres) server: CertificateDer<'static>,
        pub(in crate::postgres) server_pem: String,
        pub(in crate::postgres) server_key_pem: String,
    }

    pub(in crate::postgres) fn pki() -> Pki {
        use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
        let ca = |name: &str| {
            let key = KeyPair::generate().unwrap();
            let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
            params
                .distinguished_name
                .push(rcgen::DnType::CommonName, name);
            params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
            let cert = params.self_signed(&key).unwrap();
            (cert, Issuer::new(params, key))
        };
        let (ca_cert, issuer) = ca("test CA");
        let (other_ca, _) = ca("other CA");
        let key = KeyPair::generate().unwrap();
        let server = CertificateParams::new(vec!["db.example".to_owned()])
            .unwrap()
            .signed_by(&key, &issuer)
            .unwrap();
        Pki {
            ca: ca_cert.der().clone(),
            ca_pem: ca_cert.pem(),
            other_ca: other_ca.der().clone(),
            server: server.der().clone(),
            server_pem: server.pem(),
            server_key_pem: key.serialize_pem(),
        }
    }

    pub(in crate::postgres) fn webpki(ca: &CertificateDer<'static>) -> Arc<WebPkiServerVerifier> {
        let mut roots = RootCertStore::empty();
        roots.add(ca.clone()).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
            .build()
            .unwrap()
    }

    #[test]
    fn verify_ca_checks_the_chain_and_not_the_name() {
        let pki = pki();
        let now = UnixTime::now();
        let check = |verifier: &dyn ServerCertVerifier, name: &str| {
            let name = ServerName::try_from(name.to_owned()).unwrap();
            verifier.verify_server_cert(&pki.server, &[], &name, &[], now)
        };
        let unknown = |r: Result<ServerCertVerified, rustls::Error>| {
            matches!(
                r,
                Err(rustls::Error::InvalidCertificate(
                    CertificateError::UnknownIssuer
                ))
            )
        };
        let chain_only = ChainOnly(webpki(&pki.ca));
        assert!(check(&chain_only, "db.example").is_ok());
        assert!(check(&chain_only, "other.example").is_ok());
        assert!(check(&chain_only, "127.0.0.1").is_ok());
        assert!(unknown(check(
            &ChainOnly(webpki(&pki.other_ca)),
            "db.example"
        )));
        // verify-full: the same chain, and the name.
        let full = webpki(&pki.ca);
        assert!(check(full.as_ref(), "db.example").is_ok());
        let wrong_name = check(full.as_ref(), "other.example").unwrap_err();
        assert!(
            crate::postgres::tls::rustls_hint(&wrong_name).contains("not for the host"),
            "{wrong_name}"
        );
        let wrong_ca = check(webpki(&pki.other_ca).as_ref(), "db.example");
        assert!(
            crate::postgres::tls::rustls_hint(wrong_ca.as_ref().unwrap_err())
                .contains("not signed by a CA")
        );
        assert!(unknown(wrong_ca));
        // A certificate that is not one is refused by both.
        let garbage = CertificateDer::from(vec![0x30, 0x03, 0x02, 0x01, 0x00]);
        let name = ServerName::try_from("db.example").unwrap();
        assert!(
            chain_only
                .verify_server_cert(&garbage, &[], &name, &[], now)
                .is_err()
        );
    }
}
