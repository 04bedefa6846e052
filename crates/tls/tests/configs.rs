//! The configurations built from generated certificates, exercised by handshakes in
//! memory (a rustls client and server exchanging bytes through buffers).

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
use tailtrim_tls::{
    Applied, ClientConnection, ClientTlsOptions, MinVersion, ReloadableServerConfig,
    ServerConnection, ServerTlsOptions, TlsError, VerifyMode,
};

/// A CA, a server certificate for `localhost`/127.0.0.1 and a client certificate, as
/// PEM files in a temporary directory.
struct Pki {
    dir: tempfile::TempDir,
}

impl Pki {
    fn new() -> Pki {
        let dir = tempfile::tempdir().expect("temp dir");
        let ca_key = KeyPair::generate().expect("ca key");
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("ca params");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca = CertifiedIssuer::self_signed(ca_params, ca_key).expect("ca");
        fs::write(dir.path().join("ca.pem"), ca.pem()).expect("write ca");
        for (name, sans) in [
            (
                "server",
                vec!["localhost".to_string(), "127.0.0.1".to_string()],
            ),
            ("client", vec!["client".to_string()]),
        ] {
            let key = KeyPair::generate().expect("key");
            let cert = CertificateParams::new(sans)
                .expect("params")
                .signed_by(&key, &ca)
                .expect("sign");
            fs::write(dir.path().join(format!("{name}.pem")), cert.pem()).expect("write cert");
            fs::write(dir.path().join(format!("{name}.key")), key.serialize_pem()).expect("key");
        }
        Pki { dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn server_options(&self) -> ServerTlsOptions {
        ServerTlsOptions {
            enabled: true,
            chain_cert: Some(self.path("server.pem")),
            key: Some(self.path("server.key")),
            ..ServerTlsOptions::default()
        }
    }

    fn client_options(&self, with_cert: bool) -> ClientTlsOptions {
        ClientTlsOptions {
            ca_cert: Some(self.path("ca.pem")),
            cert: with_cert.then(|| self.path("client.pem")),
            key: with_cert.then(|| self.path("client.key")),
            server_name: None,
        }
    }
}

/// Runs a handshake in memory; Ok once both sides are done, Err with the side's error.
fn handshake(
    server: &mut ServerConnection,
    client: &mut ClientConnection,
) -> Result<(), rustls::Error> {
    for _ in 0..20 {
        let mut to_server = Vec::new();
        while client.wants_write() {
            client.write_tls(&mut to_server).expect("client write");
        }
        if !to_server.is_empty() {
            server
                .read_tls(&mut to_server.as_slice())
                .expect("server read");
            server.process_new_packets()?;
        }
        let mut to_client = Vec::new();
        while server.wants_write() {
            server.write_tls(&mut to_client).expect("server write");
        }
        if !to_client.is_empty() {
            client
                .read_tls(&mut to_client.as_slice())
                .expect("client read");
            client.process_new_packets()?;
        }
        if !server.is_handshaking() && !client.is_handshaking() && !client.wants_write() {
            return Ok(());
        }
    }
    panic!("handshake did not finish");
}

fn connect(
    server: &ReloadableServerConfig,
    client: &ClientTlsOptions,
) -> Result<(), rustls::Error> {
    let mut server_conn = server.new_connection().expect("server conn");
    let client_config = Arc::new(client.build().expect("client config"));
    let name = client.server_name("localhost").expect("name");
    let mut client_conn = ClientConnection::new(client_config, name).expect("client conn");
    handshake(&mut server_conn, &mut client_conn)
}

#[test]
fn memcached_options_are_parsed_with_memcacheds_errors() {
    let mut options = ServerTlsOptions::default();
    assert_eq!(
        options
            .apply_extended("ssl_chain_cert", Some("a.pem"))
            .unwrap(),
        Applied::Taken
    );
    assert_eq!(options.chain_cert.as_deref(), Some(Path::new("a.pem")));
    options
        .apply_extended("ssl_verify_mode", Some("2"))
        .unwrap();
    assert_eq!(options.verify_mode, VerifyMode::Require);
    options
        .apply_extended("ssl_min_version", Some("3"))
        .unwrap();
    assert_eq!(options.min_version, MinVersion::Tls13);
    options
        .apply_extended("ssl_min_version", Some("tlsv1.2"))
        .unwrap();
    assert_eq!(options.min_version, MinVersion::Tls12);
    assert_eq!(
        options.apply_extended("memory_file", Some("x")).unwrap(),
        Applied::NotTls
    );
    let errors = [
        (
            "ssl_verify_mode",
            Some("5"),
            "Invalid ssl_verify_mode. Use help to see valid options.",
        ),
        (
            "ssl_verify_mode",
            Some("x"),
            "could not parse argument to ssl_verify_mode",
        ),
        (
            "ssl_min_version",
            Some("7"),
            "Invalid ssl_min_version. Use help to see valid options.",
        ),
        ("ssl_key", None, "Missing ssl_key argument"),
        ("ssl_ca_cert", Some(""), "Missing ssl_ca_cert argument"),
    ];
    for (name, value, text) in errors {
        let error = options.apply_extended(name, value).unwrap_err();
        assert_eq!(error.to_string(), text, "{name}={value:?}");
    }
    assert!(matches!(
        options.apply_extended("ssl_min_version", Some("0")),
        Ok(Applied::TakenWithWarning(_))
    ));
}

#[test]
fn the_toml_section_takes_numbers_and_names() {
    #[derive(serde::Deserialize)]
    struct File {
        tls: ServerTlsOptions,
    }
    let file: File = toml::from_str(
        "[tls]\nenabled = true\nchain_cert = \"c.pem\"\nverify_mode = 1\nmin_version = \"tlsv1.3\"\n",
    )
    .expect("toml");
    assert!(file.tls.enabled);
    assert_eq!(file.tls.verify_mode, VerifyMode::Request);
    assert_eq!(file.tls.min_version, MinVersion::Tls13);
    assert_eq!(file.tls.wbuf_size_kib, 16);
    assert!(toml::from_str::<File>("[tls]\nverify_mode = 4\n").is_err());
    assert!(toml::from_str::<File>("[tls]\nbogus = 1\n").is_err());
}

#[test]
fn missing_and_mismatched_files_fail_with_memcacheds_wording() {
    let pki = Pki::new();
    let mut options = pki.server_options();
    options.chain_cert = Some(pki.path("absent.pem"));
    let error = options.build().unwrap_err();
    assert!(
        error
            .to_string()
            .starts_with("Error loading the certificate chain: ")
            && error.to_string().ends_with("No such file or directory"),
        "{error}"
    );
    let mut options = pki.server_options();
    options.key = Some(pki.path("server.pem"));
    assert!(matches!(options.build(), Err(TlsError::Key { .. })));
    let mut options = pki.server_options();
    options.key = Some(pki.path("client.key"));
    assert!(
        matches!(options.build(), Err(TlsError::Validate(_))),
        "key of another cert"
    );
    let mut options = pki.server_options();
    options.verify_mode = VerifyMode::Require;
    assert!(matches!(options.build(), Err(TlsError::VerifyNeedsCa(2))));
    options.ca_cert = Some(pki.path("absent.pem"));
    assert!(matches!(options.build(), Err(TlsError::CaCert { .. })));
}

#[test]
fn verify_modes_decide_whether_a_client_certificate_is_needed() {
    let pki = Pki::new();
    let cases = [
        (VerifyMode::None, false, true),
        (VerifyMode::None, true, true),
        (VerifyMode::Request, false, true),
        (VerifyMode::Request, true, true),
        (VerifyMode::Require, false, false),
        (VerifyMode::Require, true, true),
        (VerifyMode::Once, false, false),
        (VerifyMode::Once, true, true),
    ];
    for (mode, with_cert, accepted) in cases {
        let mut options = pki.server_options();
        options.verify_mode = mode;
        if mode != VerifyMode::None {
            options.ca_cert = Some(pki.path("ca.pem"));
        }
        let server = ReloadableServerConfig::new(options).expect("server config");
        let result = connect(&server, &pki.client_options(with_cert));
        assert_eq!(
            result.is_ok(),
            accepted,
            "{mode:?} with cert {with_cert}: {result:?}"
        );
    }
}

#[test]
fn a_client_verifies_the_servers_name_and_ca() {
    let pki = Pki::new();
    let server = ReloadableServerConfig::new(pki.server_options()).expect("server");
    assert!(connect(&server, &pki.client_options(false)).is_ok());
    let mut wrong_host = pki.client_options(false);
    wrong_host.server_name = Some("elsewhere.example".to_string());
    assert!(
        connect(&server, &wrong_host).is_err(),
        "wrong host accepted"
    );
    let other = Pki::new();
    assert!(
        connect(&server, &other.client_options(false)).is_err(),
        "unknown CA accepted"
    );
}

#[test]
fn reload_swaps_certificates_and_a_failed_reload_keeps_the_old_ones() {
    let pki = Pki::new();
    let server = ReloadableServerConfig::new(pki.server_options()).expect("server");
    let before = server.current();
    // New certificates from another CA, written over the same files.
    let other = Pki::new();
    for name in ["server.pem", "server.key"] {
        fs::copy(other.path(name), pki.path(name)).expect("copy");
    }
    server.reload().expect("reload");
    assert!(!Arc::ptr_eq(&before, &server.current()));
    assert!(connect(&server, &other.client_options(false)).is_ok());
    assert!(connect(&server, &pki.client_options(false)).is_err());
    // A broken file: the reload fails and the certificates in use stay.
    fs::write(pki.path("server.pem"), "not a certificate").expect("write");
    let kept = server.current();
    assert!(server.reload().is_err());
    assert!(Arc::ptr_eq(&kept, &server.current()));
    assert!(connect(&server, &other.client_options(false)).is_ok());
}
