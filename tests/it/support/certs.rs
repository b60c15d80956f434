//! Certificates the TLS tests make for the servers they start: a CA of their own, a server
//! certificate it signs for `127.0.0.1` and `localhost`, a client certificate it signs, and a
//! second CA that signed nothing (a client trusting only it must refuse the server).
//!
//! Written as PEM files into a directory of the test's, as a platform team's files would be.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

/// The PEM files of one test's certificates.
#[derive(Debug, Clone)]
pub struct Certs {
    /// The CA that signed the server's and the client's certificates.
    pub ca: PathBuf,
    /// The server's certificate (for `127.0.0.1` and `localhost`) and its key.
    pub server_cert: PathBuf,
    pub server_key: PathBuf,
    /// A client certificate signed by the CA, and its key.
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
    /// A CA that signed nothing here.
    pub other_ca: PathBuf,
}

impl Certs {
    /// Makes the certificates and writes them under `dir` (created when missing).
    ///
    /// # Panics
    ///
    /// When a certificate cannot be made or a file written.
    pub fn make(dir: &Path) -> Certs {
        std::fs::create_dir_all(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        let write = |name: &str, pem: String| {
            let path = dir.join(name);
            std::fs::write(&path, pem).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            // PostgreSQL refuses a key file others can read.
            #[cfg(unix)]
            {
                use std::os::unix::fs::PermissionsExt;
                let _ = std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600));
            }
            path
        };
        let (ca_pem, issuer) = ca("llm-failover test CA");
        let (other_pem, _) = ca("a CA nobody here trusts");
        let (server_pem, server_key) = leaf(
            &issuer,
            "127.0.0.1",
            vec!["127.0.0.1".into(), "localhost".into()],
            ExtendedKeyUsagePurpose::ServerAuth,
        );
        let (client_pem, client_key) = leaf(
            &issuer,
            "llm-failover test client",
            vec!["client.test".into()],
            ExtendedKeyUsagePurpose::ClientAuth,
        );
        Certs {
            ca: write("ca.pem", ca_pem),
            server_cert: write("server.pem", server_pem),
            server_key: write("server.key", server_key),
            client_cert: write("client.pem", client_pem),
            client_key: write("client.key", client_key),
            other_ca: write("other-ca.pem", other_pem),
        }
    }
}

fn ca(name: &str) -> (String, Issuer<'static, KeyPair>) {
    let key = KeyPair::generate().expect("a CA key");
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA parameters");
    params.distinguished_name.push(DnType::CommonName, name);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let cert = params.self_signed(&key).expect("a self-signed CA");
    (cert.pem(), Issuer::new(params, key))
}

fn leaf(
    issuer: &Issuer<'static, KeyPair>,
    name: &str,
    names: Vec<String>,
    usage: ExtendedKeyUsagePurpose,
) -> (String, String) {
    let key = KeyPair::generate().expect("a key");
    let mut params = CertificateParams::new(names).expect("certificate parameters");
    params.distinguished_name.push(DnType::CommonName, name);
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![usage];
    let cert = params
        .signed_by(&key, issuer)
        .expect("a signed certificate");
    (cert.pem(), key.serialize_pem())
}

#[test]
fn the_certificates_are_written_as_pem() {
    let dir = std::env::temp_dir().join(format!("llm-failover-certs-{}", std::process::id()));
    let c = Certs::make(&dir);
    for p in [&c.ca, &c.server_cert, &c.client_cert, &c.other_ca] {
        let text = std::fs::read_to_string(p).unwrap();
        assert!(
            text.starts_with("-----BEGIN CERTIFICATE-----"),
            "{}",
            p.display()
        );
    }
    let key = std::fs::read_to_string(&c.server_key).unwrap();
    assert!(key.starts_with("-----BEGIN PRIVATE KEY-----"), "{key}");
    let _ = std::fs::remove_dir_all(&dir);
}
