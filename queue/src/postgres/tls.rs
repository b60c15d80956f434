//! TLS to PostgreSQL as libpq's `sslmode` says, on rustls with ring: which certificates a
//! connection accepts, read once from the connection string's options, and the connector
//! tokio-postgres opens connections with.
//!
//! | `sslmode` | TLS | the server's certificate |
//! | --- | --- | --- |
//! | `disable` | never | — |
//! | `prefer` (default) | when the server offers it, else plain | not checked (the chain is, when `sslrootcert` is given) |
//! | `require` | always: a server without TLS is refused | not checked (the chain is, when `sslrootcert` is given) |
//! | `verify-ca` | always | its chain, up to a CA of `sslrootcert` |
//! | `verify-full` | always | its chain, and that it is for the host connected to |
//!
//! As in libpq: `sslrootcert=system` is the platform's trusted CAs and asks for `verify-full`
//! (the default then; a weaker mode is refused); a given CA file makes `prefer` and `require`
//! check the chain. Unlike libpq, no file is read that the string does not name
//! (`~/.postgresql/root.crt` is not), so `verify-ca` and `verify-full` need `sslrootcert`. A
//! TLS handshake that fails is an error, never a reason to go on in plain text. A unix socket
//! has no TLS (PostgreSQL serves none there): `prefer` goes on without it, the others refuse.

use std::io;
use std::path::Path;
use std::sync::Arc;

use futures_util::future::{Either, Ready, ready};
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::ServerCertVerifier;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, InvalidDnsNameError, PrivateKeyDer};
use rustls::{CertificateError, ClientConfig, RootCertStore};
use tokio_postgres::Socket;
use tokio_postgres::tls::{MakeTlsConnect, TlsConnect};
use tokio_postgres_rustls::MakeRustlsConnect;

use super::conninfo::TlsOptions;
use super::verify::{AnyCertificate, ChainOnly};
use llm_failover_core::{Error, ErrorKind, Result};

/// libpq's `sslmode`, less `allow` (plain first, TLS only when the server demands it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum SslMode {
    Disable,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl SslMode {
    const ALL: [SslMode; 5] = [
        SslMode::Disable,
        SslMode::Prefer,
        SslMode::Require,
        SslMode::VerifyCa,
        SslMode::VerifyFull,
    ];

    pub(super) fn as_str(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
    }

    /// What tokio-postgres is told: whether to ask for TLS and whether to go on without it.
    pub(super) fn for_tokio_postgres(self) -> tokio_postgres::config::SslMode {
        use tokio_postgres::config::SslMode as Tp;
        match self {
            SslMode::Disable => Tp::Disable,
            SslMode::Prefer => Tp::Prefer,
            SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => Tp::Require,
        }
    }
}

/// The trusted CAs `sslrootcert` names.
enum Roots {
    File(String),
    System,
}

/// The connection string's TLS settings, read and checked: the mode and the connector.
///
/// # Errors
///
/// `Config`, naming the option, when a value is not one libpq takes, the options contradict
/// each other, or a file they name cannot be read or holds no usable certificate or key.
pub(super) fn settings(options: TlsOptions) -> Result<(SslMode, Connector)> {
    let roots = options.sslrootcert.map(|r| match r.as_str() {
        "system" => Roots::System,
        _ => Roots::File(r),
    });
    let mode = match options.sslmode.as_deref() {
        None if matches!(roots, Some(Roots::System)) => SslMode::VerifyFull,
        None => SslMode::Prefer,
        Some(value) => parse_mode(value)?,
    };
    if matches!(roots, Some(Roots::System)) && mode != SslMode::VerifyFull {
        return Err(config(format!(
            "sslmode={} may not be used with sslrootcert=system (the platform's CAs vouch for \
             any host they signed for): use sslmode=verify-full",
            mode.as_str()
        )));
    }
    if matches!(mode, SslMode::VerifyCa | SslMode::VerifyFull) && roots.is_none() {
        return Err(config(format!(
            "sslmode={} checks the server's certificate, and no CA to check it against is \
             named: give sslrootcert=PATH (a PEM file of CA certificates) or sslrootcert=system",
            mode.as_str()
        )));
    }
    let client = match (options.sslcert, options.sslkey) {
        (Some(cert), Some(key)) => Some((cert, key)),
        (None, None) => None,
        _ => {
            return Err(config(
                "sslcert and sslkey go together: the client certificate and its private key"
                    .to_owned(),
            ));
        }
    };
    if mode == SslMode::Disable {
        return Ok((mode, Connector(None)));
    }
    let tls = client_config(mode, roots.as_ref(), client.as_ref())?;
    Ok((mode, Connector(Some(MakeRustlsConnect::new(tls)))))
}

fn parse_mode(value: &str) -> Result<SslMode> {
    if let Some(mode) = SslMode::ALL.into_iter().find(|m| m.as_str() == value) {
        return Ok(mode);
    }
    let why = if value == "allow" {
        "sslmode=allow (plain text first) is not supported: use prefer, or disable".to_owned()
    } else {
        // A value that reads as a word is shown; anything else might be a misplaced secret.
        let word =
            value.len() <= 20 && value.chars().all(|c| c.is_ascii_alphanumeric() || c == '-');
        let shown = if word {
            format!(" {value:?}")
        } else {
            String::new()
        };
        format!("sslmode{shown} is not one of disable, prefer, require, verify-ca, verify-full")
    };
    Err(config(why))
}

fn config(why: String) -> Error {
    Error::new(
        ErrorKind::Config,
        format!("jobs database connection string: {why}"),
    )
}

/// The rustls configuration for `mode` (not `Disable`), on ring.
fn client_config(
    mode: SslMode,
    roots: Option<&Roots>,
    client: Option<&(String, String)>,
) -> Result<ClientConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| config(format!("TLS: {e}")))?;
    let verifier: Arc<dyn ServerCertVerifier> = match roots {
        None => Arc::new(AnyCertificate(provider)),
        Some(roots) => {
            let webpki = WebPkiServerVerifier::builder_with_provider(root_store(roots)?, provider)
                .build()
                .map_err(|e| config(format!("sslrootcert: {e}")))?;
            match mode {
                SslMode::VerifyFull => webpki,
                _ => Arc::new(ChainOnly(webpki)),
            }
        }
    };
    let builder = builder
        .dangerous()
        .with_custom_certificate_verifier(verifier);
    let mut tls = match client {
        None => builder.with_no_client_auth(),
        Some((cert, key)) => builder
            .with_client_auth_cert(client_chain(cert)?, client_key(key)?)
            .map_err(|e| config(format!("sslcert={cert} and sslkey={key}: {e}")))?,
    };
    // What libpq sends (PostgreSQL 17 demands it of a direct TLS connection).
    tls.alpn_protocols = vec![b"postgresql".to_vec()];
    Ok(tls)
}

/// The CAs `roots` names, as a trust store.
fn root_store(roots: &Roots) -> Result<Arc<RootCertStore>> {
    let mut store = RootCertStore::empty();
    match roots {
        Roots::File(path) => {
            for cert in certificates("sslrootcert", path)? {
                store.add(cert).map_err(|e| {
                    config(format!(
                        "sslrootcert={path}: a certificate rustls cannot trust: {e}"
                    ))
                })?;
            }
        }
        Roots::System => {
            let found = rustls_native_certs::load_native_certs();
            let (added, _) = store.add_parsable_certificates(found.certs);
            if added == 0 {
                let why = found
                    .errors
                    .first()
                    .map(|e| format!(" ({e})"))
                    .unwrap_or_default();
                return Err(config(format!(
                    "sslrootcert=system: the platform has no trusted CA certificate{why}"
                )));
            }
        }
    }
    Ok(Arc::new(store))
}

fn client_chain(path: &str) -> Result<Vec<CertificateDer<'static>>> {
    certificates("sslcert", path)
}

/// The PEM certificates of the file `option` names: a `Config` error naming the option when
/// it cannot be read or holds none.
fn certificates(option: &str, path: &str) -> Result<Vec<CertificateDer<'static>>> {
    let pem = read(option, path)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| {
            config(format!(
                "{option}={path}: not a PEM file of certificates: {e}"
            ))
        })?;
    if certs.is_empty() {
        return Err(config(format!(
            "{option}={path}: holds no PEM certificate (-----BEGIN CERTIFICATE-----)"
        )));
    }
    Ok(certs)
}

/// The private key of the file `sslkey` names. What is wrong with it is said without quoting
/// the file: it is a secret.
fn client_key(path: &str) -> Result<PrivateKeyDer<'static>> {
    let pem = read("sslkey", path)?;
    PrivateKeyDer::from_pem_slice(&pem).map_err(|_| {
        config(format!(
            "sslkey={path}: holds no private key rustls reads (PEM, unencrypted: PKCS#8, \
             PKCS#1 or SEC1)"
        ))
    })
}

fn read(option: &str, path: &str) -> Result<Vec<u8>> {
    std::fs::read(Path::new(path))
        .map_err(|e| config(format!("{option}={path}: cannot read it: {e}")).with_source(e))
}

/// What a failed TLS handshake or a refusal to speak TLS means, for the message of the
/// connection's error; `None` when `e` is neither.
pub(super) fn hint(e: &tokio_postgres::Error) -> Option<&'static str> {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(e);
    while let Some(c) = cause {
        let rustls = c.downcast_ref::<rustls::Error>().or_else(|| {
            c.downcast_ref::<io::Error>()
                .and_then(|io| io.get_ref())
                .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        });
        if let Some(e) = rustls {
            return Some(rustls_hint(e));
        }
        let text = c.to_string();
        if text.contains("server does not support TLS") {
            return Some(
                " (the sslmode asks for TLS and the server offers none there, and TLS is \
                 never given up for plain text: sslmode=prefer or disable if plain text is \
                 meant)",
            );
        }
        if text.contains("no hostname provided") {
            return Some(" (TLS needs a host name to check the certificate against: give host)");
        }
        cause = c.source();
    }
    None
}

pub(super) fn rustls_hint(e: &rustls::Error) -> &'static str {
    match e {
        rustls::Error::InvalidCertificate(
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
        ) => {
            " (the server's certificate is not for the host connected to: sslmode=verify-full \
             checks the name, verify-ca only the chain)"
        }
        rustls::Error::InvalidCertificate(
            CertificateError::Expired
            | CertificateError::ExpiredContext { .. }
            | CertificateError::NotValidYet
            | CertificateError::NotValidYetContext { .. },
        ) => " (the server's certificate has expired, or is not valid yet)",
        rustls::Error::InvalidCertificate(_) => {
            " (the server's certificate is not signed by a CA that sslrootcert names)"
        }
        rustls::Error::AlertReceived(_) => {
            " (the server ended the TLS handshake: does it take this client's certificate \
             (sslcert), or demand one?)"
        }
        _ => " (the TLS handshake failed)",
    }
}

type Rustls = <MakeRustlsConnect as MakeTlsConnect<Socket>>::TlsConnect;
type RustlsStream = <MakeRustlsConnect as MakeTlsConnect<Socket>>::Stream;

/// The connector tokio-postgres opens connections with: rustls, or none for `disable`. A
/// connection without a host name (a unix socket) gets one that cannot do TLS, which
/// tokio-postgres reaches only when the server offers TLS there (PostgreSQL does not).
#[derive(Clone)]
pub(super) struct Connector(Option<MakeRustlsConnect>);

impl std::fmt::Debug for Connector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The configuration holds the client's private key: whether there is TLS, no more.
        f.debug_tuple("Connector")
            .field(&if self.0.is_some() { "rustls" } else { "none" })
            .finish()
    }
}

impl MakeTlsConnect<Socket> for Connector {
    type Stream = RustlsStream;
    type TlsConnect = HostConnect;
    type Error = InvalidDnsNameError;

    fn make_tls_connect(&mut self, host: &str) -> Result<HostConnect, InvalidDnsNameError> {
        match &mut self.0 {
            Some(rustls) if !host.is_empty() => {
                MakeTlsConnect::<Socket>::make_tls_connect(rustls, host).map(Some)
            }
            _ => Ok(None),
        }
        .map(HostConnect)
    }
}

/// One connection's TLS: rustls for its host, or none.
pub(super) struct HostConnect(Option<Rustls>);

impl TlsConnect<Socket> for HostConnect {
    type Stream = RustlsStream;
    type Error = io::Error;
    type Future = Either<<Rustls as TlsConnect<Socket>>::Future, Ready<io::Result<RustlsStream>>>;

    fn connect(self, stream: Socket) -> Self::Future {
        match self.0 {
            Some(rustls) => Either::Left(rustls.connect(stream)),
            None => Either::Right(ready(Err(io::Error::other(
                "no TLS here: sslmode=disable, or no host name to check the certificate against",
            )))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::postgres::verify::tests::pki;

    fn options(mode: Option<&str>, root: Option<&str>) -> TlsOptions {
        TlsOptions {
            sslmode: mode.map(str::to_owned),
            sslrootcert: root.map(str::to_owned),
            ..TlsOptions::default()
        }
    }

    /// A directory of its own for a test's files, removed on drop.
    struct Dir(std::path::PathBuf);

    impl Dir {
        fn new(name: &str) -> Dir {
            let dir = std::env::temp_dir().join(format!("queue-tls-{name}-{}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            Dir(dir)
        }

        fn file(&self, name: &str, text: &str) -> String {
            let path = self.0.join(name);
            std::fs::write(&path, text).unwrap();
            path.to_str().unwrap().to_owned()
        }
    }

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn modes_and_roots_combine_as_in_libpq() {
        let dir = Dir::new("modes");
        let ca = dir.file("ca.pem", &pki().ca_pem);
        let ca = ca.as_str();
        // (sslmode, sslrootcert) → the mode, or words of the Config error.
        type Case<'a> = (Option<&'a str>, Option<&'a str>, Result<SslMode, &'a str>);
        let cases: [Case<'_>; 12] = [
            (None, None, Ok(SslMode::Prefer)),
            (Some("disable"), None, Ok(SslMode::Disable)),
            (Some("prefer"), Some(ca), Ok(SslMode::Prefer)),
            (Some("require"), None, Ok(SslMode::Require)),
            (Some("require"), Some(ca), Ok(SslMode::Require)),
            (Some("verify-ca"), Some(ca), Ok(SslMode::VerifyCa)),
            (Some("verify-full"), Some(ca), Ok(SslMode::VerifyFull)),
            (Some("verify-full"), None, Err("give sslrootcert")),
            (Some("verify-ca"), None, Err("give sslrootcert")),
            (
                Some("require"),
                Some("system"),
                Err("use sslmode=verify-full"),
            ),
            (Some("allow"), None, Err("sslmode=allow")),
            (
                Some("REQUIRE"),
                None,
                Err("sslmode \"REQUIRE\" is not one of"),
            ),
        ];
        for (mode, root, expected) in cases {
            let got = settings(options(mode, root)).map(|(m, _)| m);
            match (got, expected) {
                (Ok(got), Ok(want)) => assert_eq!(got, want, "{mode:?} {root:?}"),
                (Err(e), Err(words)) => {
                    assert_eq!(e.kind(), ErrorKind::Config);
                    assert!(e.to_string().contains(words), "{mode:?} {root:?}: {e}");
                }
                (got, _) => panic!("{mode:?} {root:?}: {got:?}"),
            }
        }
        // A value that does not read as a word is not shown.
        let err = settings(options(Some("s3cret pw"), None)).unwrap_err();
        assert!(!err.to_string().contains("s3cret"), "{err}");
    }

    #[test]
    fn a_file_that_cannot_serve_is_a_config_error_naming_its_option() {
        let pki = pki();
        let dir = Dir::new("files");
        let ca = dir.file("ca.pem", &pki.ca_pem);
        let cert = dir.file("client.pem", &pki.server_pem);
        let key = dir.file("client.key", &pki.server_key_pem);
        let other_key = dir.file(
            "other.key",
            &rcgen::KeyPair::generate().unwrap().serialize_pem(),
        );
        let empty = dir.file("empty.pem", "");
        let text = dir.file("text.pem", "not a certificate\n");
        let missing = dir.0.join("missing.pem").to_str().unwrap().to_owned();
        let tls = |root: &str, cert: Option<&str>, key: Option<&str>| {
            settings(TlsOptions {
                sslmode: Some("verify-full".to_owned()),
                sslrootcert: Some(root.to_owned()),
                sslcert: cert.map(str::to_owned),
                sslkey: key.map(str::to_owned),
            })
            .map(|_| ())
        };
        assert!(tls(&ca, None, None).is_ok());
        assert!(tls(&ca, Some(&cert), Some(&key)).is_ok());
        // (sslrootcert, sslcert, sslkey) → words of the error.
        let cases: [(&str, Option<&str>, Option<&str>, &str); 8] = [
            (&missing, None, None, "sslrootcert=/"),
            (&empty, None, None, "holds no PEM certificate"),
            (&text, None, None, "holds no PEM certificate"),
            (&ca, Some(&cert), None, "sslcert and sslkey go together"),
            (&ca, None, Some(&key), "sslcert and sslkey go together"),
            (&ca, Some(&missing), Some(&key), "sslcert=/"),
            (&ca, Some(&cert), Some(&ca), "holds no private key"),
            (&ca, Some(&cert), Some(&other_key), "sslcert="),
        ];
        for (root, cert, key, words) in cases {
            let err = tls(root, cert, key).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Config, "{err}");
            let message = err.to_string();
            assert!(message.contains(words), "{message}");
            assert!(!message.contains("PRIVATE KEY"), "{message}");
        }
        // The key's text never: an unreadable key is named, not quoted.
        let broken = dir.file("broken.key", "-----BEGIN PRIVATE KEY-----\nc2VjcmV0\n");
        let err = tls(&ca, Some(&cert), Some(&broken)).unwrap_err();
        assert!(!err.to_string().contains("c2VjcmV0"), "{err}");
    }
}
