//! TLS configuration shared by tailtrim's server and proxy.
//!
//! * [`ServerTlsOptions`]: memcached's `-Z` options (`-o ssl_chain_cert=…,ssl_key=…,
//!   ssl_ca_cert=…,ssl_verify_mode=N,ssl_min_version=N,…`) as one struct, parsed from the
//!   `-o` items ([`ServerTlsOptions::apply_extended`]) or deserialised from a TOML `[tls]`
//!   section; [`ServerTlsOptions::build`] makes a rustls [`ServerConfig`] from the PEM files.
//! * [`ClientTlsOptions`]: the other side of a connection (CA bundle, optional client
//!   certificate and key, the server name to verify); [`ClientTlsOptions::build`] makes a
//!   rustls [`ClientConfig`].
//! * [`ReloadableServerConfig`] / [`ReloadableClientConfig`]: the built config behind an
//!   [`arc_swap::ArcSwap`]. A new connection takes [`ReloadableServerConfig::current`];
//!   [`ReloadableServerConfig::reload`] (memcached's `refresh_certs`, SIGHUP) reads the files
//!   again and swaps the config in only if it builds, so a failed reload keeps the old
//!   certificates and existing connections keep theirs either way.
//!
//! Only rustls with the `ring` provider is used: TLS 1.2 and 1.3, no OpenSSL. The error
//! texts of [`TlsError`] follow memcached's (`Error loading the certificate chain: …`).

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use arc_swap::ArcSwap;
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::CryptoProvider;
use rustls::server::{NoServerSessionStorage, ServerSessionMemoryCache, WebPkiClientVerifier};
use rustls::{RootCertStore, SupportedProtocolVersion};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use serde::Deserialize;

pub use rustls::{ClientConfig, ClientConnection, ServerConfig, ServerConnection};

/// Sessions kept for resumption when `ssl_session_cache` is on.
const SESSION_CACHE_ENTRIES: usize = 1024;

/// Errors building or parsing a TLS configuration.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// The certificate chain file could not be read or holds no certificate.
    #[error("Error loading the certificate chain: {path} : {reason}")]
    ChainCert {
        /// The file named by `ssl_chain_cert`.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The private key file could not be read or holds no key.
    #[error("Error loading the key: {path} : {reason}")]
    Key {
        /// The file named by `ssl_key` (or the chain file).
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The key does not belong to the certificate, or rustls refused the pair.
    #[error("Error validating the certificate: {0}")]
    Validate(String),
    /// The CA file could not be read or holds no certificate.
    #[error("Error loading the CA certificate: {path} : {reason}")]
    CaCert {
        /// The file named by `ssl_ca_cert`.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// `ssl_verify_mode` outside 0–3.
    #[error("Invalid ssl_verify_mode. Use help to see valid options.")]
    InvalidVerifyMode,
    /// `ssl_min_version` outside 0–3 / tlsv1.0–tlsv1.3.
    #[error("Invalid ssl_min_version. Use help to see valid options.")]
    InvalidMinVersion,
    /// An `-o` TLS option with no value (`ssl_key` alone).
    #[error("Missing {0} argument")]
    MissingArgument(&'static str),
    /// An `-o` TLS option whose value is not a number where one is needed.
    #[error("could not parse argument to {0}")]
    Unparsable(&'static str),
    /// `ssl_keyformat` other than 1 (PEM) or 2 (DER).
    #[error("ssl_keyformat {0} is not supported: 1 (PEM) and 2 (DER) are")]
    KeyFormat(u32),
    /// Client verification asked for without a CA to verify against.
    #[error(
        "ssl_verify_mode {0} needs ssl_ca_cert: no client certificate can be verified without a CA"
    )]
    VerifyNeedsCa(u8),
    /// TLS is enabled but no certificate chain was named.
    #[error("TLS is enabled but ssl_chain_cert is not set")]
    NoChainCert,
    /// A client configuration names no CA bundle.
    #[error("a TLS client needs a CA certificate file to verify the server")]
    NoClientCa,
    /// Only one of a client certificate and its key was given.
    #[error("a client certificate needs both the certificate chain and its key")]
    ClientCertIncomplete,
    /// The server name to verify is not a DNS name or an IP address.
    #[error("invalid TLS server name: {0}")]
    ServerName(String),
    /// rustls refused the configuration.
    #[error("TLS configuration refused: {0}")]
    Rustls(#[from] rustls::Error),
}

/// memcached's `ssl_verify_mode`: whether a client must present a certificate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum VerifyMode {
    /// 0: no client certificate is asked for.
    #[default]
    None,
    /// 1: a client certificate is asked for; one that is sent must verify, none is fine.
    Request,
    /// 2: a client certificate is required and must verify.
    Require,
    /// 3: as 2 (OpenSSL's "once" only matters on renegotiation, which rustls never does).
    Once,
}

impl VerifyMode {
    /// The mode numbered as memcached numbers it (0–3).
    pub fn from_number(number: u8) -> Result<VerifyMode, TlsError> {
        match number {
            0 => Ok(VerifyMode::None),
            1 => Ok(VerifyMode::Request),
            2 => Ok(VerifyMode::Require),
            3 => Ok(VerifyMode::Once),
            _ => Err(TlsError::InvalidVerifyMode),
        }
    }

    /// memcached's number for the mode (`stats settings` shows it).
    pub fn number(self) -> u8 {
        match self {
            VerifyMode::None => 0,
            VerifyMode::Request => 1,
            VerifyMode::Require => 2,
            VerifyMode::Once => 3,
        }
    }

    /// A client certificate is asked for.
    pub fn asks_for_client_cert(self) -> bool {
        self != VerifyMode::None
    }

    /// A client without a certificate is refused.
    pub fn requires_client_cert(self) -> bool {
        matches!(self, VerifyMode::Require | VerifyMode::Once)
    }
}

/// memcached's `ssl_min_version`. rustls speaks TLS 1.2 and 1.3 only, so 1.0 and 1.1 act
/// as 1.2 ([`MinVersion::is_below_supported`] lets a caller warn).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MinVersion {
    /// 0: tlsv1.0 (acts as 1.2).
    Tls10,
    /// 1: tlsv1.1 (acts as 1.2).
    Tls11,
    /// 2: tlsv1.2, memcached's default.
    #[default]
    Tls12,
    /// 3: tlsv1.3.
    Tls13,
}

impl MinVersion {
    /// Parses memcached's number (0–3) or the name (`tlsv1.2`, `tlsv1.3`, …).
    pub fn parse(text: &str) -> Result<MinVersion, TlsError> {
        match text.trim().to_ascii_lowercase().as_str() {
            "0" | "tlsv1.0" | "tlsv1" => Ok(MinVersion::Tls10),
            "1" | "tlsv1.1" => Ok(MinVersion::Tls11),
            "2" | "tlsv1.2" => Ok(MinVersion::Tls12),
            "3" | "tlsv1.3" => Ok(MinVersion::Tls13),
            _ => Err(TlsError::InvalidMinVersion),
        }
    }

    /// memcached's name for the version (`stats settings`' `ssl_min_version`).
    pub fn name(self) -> &'static str {
        match self {
            MinVersion::Tls10 => "tlsv1.0",
            MinVersion::Tls11 => "tlsv1.1",
            MinVersion::Tls12 => "tlsv1.2",
            MinVersion::Tls13 => "tlsv1.3",
        }
    }

    /// True for versions rustls does not speak (they act as TLS 1.2).
    pub fn is_below_supported(self) -> bool {
        matches!(self, MinVersion::Tls10 | MinVersion::Tls11)
    }

    fn protocol_versions(self) -> &'static [&'static SupportedProtocolVersion] {
        static BOTH: [&SupportedProtocolVersion; 2] =
            [&rustls::version::TLS13, &rustls::version::TLS12];
        static ONLY_13: [&SupportedProtocolVersion; 1] = [&rustls::version::TLS13];
        match self {
            MinVersion::Tls13 => &ONLY_13,
            _ => &BOTH,
        }
    }
}

impl<'de> Deserialize<'de> for MinVersion {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum NumberOrName {
            Number(u8),
            Name(String),
        }
        let text = match NumberOrName::deserialize(deserializer)? {
            NumberOrName::Number(number) => number.to_string(),
            NumberOrName::Name(name) => name,
        };
        MinVersion::parse(&text).map_err(serde::de::Error::custom)
    }
}

impl<'de> Deserialize<'de> for VerifyMode {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        VerifyMode::from_number(u8::deserialize(deserializer)?).map_err(serde::de::Error::custom)
    }
}

/// memcached's server TLS options, one field per `ssl_*` option (the TOML `[tls]`
/// section has the same names without the `ssl_` prefix).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerTlsOptions {
    /// `-Z`: TLS on every TCP listener not prefixed `notls:`. Default off.
    pub enabled: bool,
    /// `ssl_chain_cert`: the server's certificate chain, PEM, leaf first.
    pub chain_cert: Option<PathBuf>,
    /// `ssl_key`: the private key; unset: the key is read from the chain file.
    pub key: Option<PathBuf>,
    /// `ssl_keyformat`: 1 PEM (default), 2 DER.
    pub keyformat: u32,
    /// `ssl_ca_cert`: PEM bundle of the CAs client certificates are verified against.
    pub ca_cert: Option<PathBuf>,
    /// `ssl_verify_mode`: 0 none (default), 1 request, 2 require, 3 once.
    pub verify_mode: VerifyMode,
    /// `ssl_min_version`: 0–3 or tlsv1.0–tlsv1.3; default tlsv1.2.
    pub min_version: MinVersion,
    /// `ssl_ciphers`: accepted and shown, not applied (rustls picks its own safe suites).
    pub ciphers: Option<String>,
    /// `ssl_wbuf_size` in KiB (default 16): the most plaintext a connection hands to
    /// TLS at once; the encrypted output buffered per connection stays near this.
    pub wbuf_size_kib: u32,
    /// `ssl_session_cache`: keep sessions for resumption (default off).
    pub session_cache: bool,
    /// `ssl_kernel_tls`: accepted and shown, not applied (no kernel offload).
    pub kernel_tls: bool,
}

impl Default for ServerTlsOptions {
    fn default() -> Self {
        ServerTlsOptions {
            enabled: false,
            chain_cert: None,
            key: None,
            keyformat: 1,
            ca_cert: None,
            verify_mode: VerifyMode::None,
            min_version: MinVersion::Tls12,
            ciphers: None,
            wbuf_size_kib: 16,
            session_cache: false,
            kernel_tls: false,
        }
    }
}

/// What [`ServerTlsOptions::apply_extended`] made of an `-o` item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Applied {
    /// Not a TLS option: the caller handles it.
    NotTls,
    /// Taken.
    Taken,
    /// Taken, but it has no effect here: the text says why (the caller warns).
    TakenWithWarning(String),
}

fn required<'a>(name: &'static str, value: Option<&'a str>) -> Result<&'a str, TlsError> {
    match value {
        Some(value) if !value.is_empty() => Ok(value),
        _ => Err(TlsError::MissingArgument(name)),
    }
}

fn number<T: std::str::FromStr>(name: &'static str, value: Option<&str>) -> Result<T, TlsError> {
    required(name, value)?
        .trim()
        .parse()
        .map_err(|_| TlsError::Unparsable(name))
}

impl ServerTlsOptions {
    /// Applies one `-o` item (`name` and its `value` after `=`, if any) when it is one of
    /// memcached's `ssl_*` options. Errors carry memcached's texts.
    pub fn apply_extended(&mut self, name: &str, value: Option<&str>) -> Result<Applied, TlsError> {
        match name {
            "ssl_chain_cert" => {
                self.chain_cert = Some(PathBuf::from(required("ssl_chain_cert", value)?));
            }
            "ssl_key" => self.key = Some(PathBuf::from(required("ssl_key", value)?)),
            "ssl_ca_cert" => self.ca_cert = Some(PathBuf::from(required("ssl_ca_cert", value)?)),
            "ssl_verify_mode" => {
                let mode: i64 = number("ssl_verify_mode", value)?;
                let mode = u8::try_from(mode).map_err(|_| TlsError::InvalidVerifyMode)?;
                self.verify_mode = VerifyMode::from_number(mode)?;
            }
            "ssl_min_version" => {
                let text = required("ssl_min_version", value)?;
                self.min_version = MinVersion::parse(text)?;
                if self.min_version.is_below_supported() {
                    return Ok(Applied::TakenWithWarning(format!(
                        "ssl_min_version {}: TLS 1.0 and 1.1 are not supported, TLS 1.2 is the minimum",
                        self.min_version.name()
                    )));
                }
            }
            "ssl_keyformat" => {
                let format: u32 = number("ssl_keyformat", value)?;
                if !matches!(format, 1 | 2) {
                    return Err(TlsError::KeyFormat(format));
                }
                self.keyformat = format;
            }
            "ssl_ciphers" => {
                self.ciphers = Some(required("ssl_ciphers", value)?.to_string());
                return Ok(Applied::TakenWithWarning(
                    "ssl_ciphers is ignored: rustls uses its own list of safe cipher suites"
                        .to_string(),
                ));
            }
            "ssl_wbuf_size" => self.wbuf_size_kib = number("ssl_wbuf_size", value)?,
            "ssl_session_cache" => self.session_cache = true,
            "no_ssl_session_cache" => self.session_cache = false,
            "ssl_kernel_tls" => {
                self.kernel_tls = true;
                return Ok(Applied::TakenWithWarning(
                    "ssl_kernel_tls is ignored: encryption stays in the server process".to_string(),
                ));
            }
            "no_ssl_kernel_tls" => self.kernel_tls = false,
            _ => return Ok(Applied::NotTls),
        }
        Ok(Applied::Taken)
    }

    /// Plaintext handed to TLS per connection at once, in bytes (`ssl_wbuf_size`).
    pub fn write_buffer_bytes(&self) -> usize {
        (self.wbuf_size_kib.max(1) as usize) * 1024
    }

    /// Reads the files and builds the rustls server configuration. Checked in memcached's
    /// order: chain, key, key against certificate, CA.
    pub fn build(&self) -> Result<ServerConfig, TlsError> {
        let chain_path = self.chain_cert.as_ref().ok_or(TlsError::NoChainCert)?;
        let chain = load_chain(chain_path).map_err(|reason| TlsError::ChainCert {
            path: chain_path.clone(),
            reason,
        })?;
        let key_path = self.key.as_ref().unwrap_or(chain_path);
        let key = load_key(key_path, self.keyformat).map_err(|reason| TlsError::Key {
            path: key_path.clone(),
            reason,
        })?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ServerConfig::builder_with_provider(Arc::clone(&provider))
            .with_protocol_versions(self.min_version.protocol_versions())?;
        let verifier = match (&self.ca_cert, self.verify_mode) {
            (_, VerifyMode::None) => WebPkiClientVerifier::no_client_auth(),
            (None, mode) => return Err(TlsError::VerifyNeedsCa(mode.number())),
            (Some(ca_path), mode) => {
                let roots = load_roots(ca_path).map_err(|reason| TlsError::CaCert {
                    path: ca_path.clone(),
                    reason,
                })?;
                let verifier = WebPkiClientVerifier::builder_with_provider(
                    Arc::new(roots),
                    Arc::clone(&provider),
                );
                let verifier = if mode.requires_client_cert() {
                    verifier
                } else {
                    verifier.allow_unauthenticated()
                };
                verifier.build().map_err(|error| TlsError::CaCert {
                    path: ca_path.clone(),
                    reason: error.to_string(),
                })?
            }
        };
        let mut config = builder
            .with_client_cert_verifier(verifier)
            .with_single_cert(chain, key)
            .map_err(|error| TlsError::Validate(error.to_string()))?;
        if self.session_cache {
            config.session_storage = ServerSessionMemoryCache::new(SESSION_CACHE_ENTRIES);
        } else {
            config.session_storage = Arc::new(NoServerSessionStorage {});
            config.send_tls13_tickets = 0;
        }
        Ok(config)
    }
}

fn read_file(path: &Path) -> Result<Vec<u8>, String> {
    fs::read(path).map_err(|error| io_reason(&error))
}

fn io_reason(error: &io::Error) -> String {
    match error.kind() {
        io::ErrorKind::NotFound => "No such file or directory".to_string(),
        io::ErrorKind::PermissionDenied => "Permission denied".to_string(),
        _ => error.to_string(),
    }
}

fn load_chain(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let bytes = read_file(path)?;
    let chain = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| format!("not PEM: {error}"))?;
    if chain.is_empty() {
        return Err("no certificate in the file".to_string());
    }
    Ok(chain)
}

fn load_key(path: &Path, keyformat: u32) -> Result<PrivateKeyDer<'static>, String> {
    let bytes = read_file(path)?;
    if keyformat == 2 {
        return PrivateKeyDer::try_from(bytes).map_err(|error| format!("not a DER key: {error}"));
    }
    PrivateKeyDer::from_pem_slice(&bytes).map_err(|error| match error {
        rustls_pki_types::pem::Error::NoItemsFound => "no private key in the file".to_string(),
        other => format!("not a PEM key: {other}"),
    })
}

fn load_roots(path: &Path) -> Result<RootCertStore, String> {
    let bytes = read_file(path)?;
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&bytes) {
        let cert = cert.map_err(|error| format!("not PEM: {error}"))?;
        roots
            .add(cert)
            .map_err(|error| format!("unusable certificate: {error}"))?;
    }
    if roots.is_empty() {
        return Err("no certificate in the file".to_string());
    }
    Ok(roots)
}

/// The client side of a TLS connection (e.g. the proxy toward a `memcached -Z` backend):
/// the server is verified against `ca_cert` and `server_name`; a client certificate is
/// sent when `cert` and `key` are both set.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClientTlsOptions {
    /// PEM bundle of the CAs the server's certificate must chain to (required).
    pub ca_cert: Option<PathBuf>,
    /// The client's certificate chain, PEM (for servers with `ssl_verify_mode` ≥ 1).
    pub cert: Option<PathBuf>,
    /// The client certificate's private key, PEM.
    pub key: Option<PathBuf>,
    /// The name the server's certificate must carry (DNS name or IP address); unset: the
    /// caller uses the host it connects to.
    pub server_name: Option<String>,
}

impl ClientTlsOptions {
    /// Reads the files and builds the rustls client configuration.
    pub fn build(&self) -> Result<ClientConfig, TlsError> {
        let ca_path = self.ca_cert.as_ref().ok_or(TlsError::NoClientCa)?;
        let roots = load_roots(ca_path).map_err(|reason| TlsError::CaCert {
            path: ca_path.clone(),
            reason,
        })?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let verifier =
            WebPkiServerVerifier::builder_with_provider(Arc::new(roots), Arc::clone(&provider))
                .build()
                .map_err(|error| TlsError::CaCert {
                    path: ca_path.clone(),
                    reason: error.to_string(),
                })?;
        let builder = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_webpki_verifier(verifier);
        match (&self.cert, &self.key) {
            (None, None) => Ok(builder.with_no_client_auth()),
            (Some(cert_path), Some(key_path)) => {
                let chain = load_chain(cert_path).map_err(|reason| TlsError::ChainCert {
                    path: cert_path.clone(),
                    reason,
                })?;
                let key = load_key(key_path, 1).map_err(|reason| TlsError::Key {
                    path: key_path.clone(),
                    reason,
                })?;
                builder
                    .with_client_auth_cert(chain, key)
                    .map_err(|error| TlsError::Validate(error.to_string()))
            }
            _ => Err(TlsError::ClientCertIncomplete),
        }
    }

    /// The name to verify the server as: `server_name`, else `host`.
    pub fn server_name(&self, host: &str) -> Result<ServerName<'static>, TlsError> {
        let name = self.server_name.as_deref().unwrap_or(host);
        ServerName::try_from(name.to_string()).map_err(|_| TlsError::ServerName(name.to_string()))
    }
}

fn unix_seconds() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|elapsed| elapsed.as_secs())
        .unwrap_or(0)
}

/// A server configuration that can be reloaded from its files while connections run.
pub struct ReloadableServerConfig {
    options: ServerTlsOptions,
    current: ArcSwap<ServerConfig>,
    /// When the certificates were last loaded, in Unix seconds.
    loaded_at: AtomicU64,
}

impl ReloadableServerConfig {
    /// Builds the first configuration (an error here should stop the server, as
    /// memcached exits when it cannot load its certificates).
    pub fn new(options: ServerTlsOptions) -> Result<ReloadableServerConfig, TlsError> {
        let config = options.build()?;
        Ok(ReloadableServerConfig {
            options,
            current: ArcSwap::from_pointee(config),
            loaded_at: AtomicU64::new(unix_seconds()),
        })
    }

    /// The configuration a new connection uses.
    pub fn current(&self) -> Arc<ServerConfig> {
        self.current.load_full()
    }

    /// Reads the files again (`refresh_certs`, SIGHUP). On error the configuration in
    /// use stays; connections already open keep the certificates they started with.
    pub fn reload(&self) -> Result<(), TlsError> {
        let config = self.options.build()?;
        self.current.store(Arc::new(config));
        self.loaded_at.store(unix_seconds(), Ordering::Relaxed);
        Ok(())
    }

    /// Seconds since the certificates were last loaded
    /// (`time_since_server_cert_refresh`).
    pub fn seconds_since_load(&self) -> u64 {
        unix_seconds().saturating_sub(self.loaded_at.load(Ordering::Relaxed))
    }

    /// The options it was built from.
    pub fn options(&self) -> &ServerTlsOptions {
        &self.options
    }

    /// A new server-side TLS connection with the current configuration.
    pub fn new_connection(&self) -> Result<ServerConnection, TlsError> {
        Ok(ServerConnection::new(self.current())?)
    }
}

/// A client configuration that can be reloaded from its files.
pub struct ReloadableClientConfig {
    options: ClientTlsOptions,
    current: ArcSwap<ClientConfig>,
}

impl ReloadableClientConfig {
    /// Builds the first configuration.
    pub fn new(options: ClientTlsOptions) -> Result<ReloadableClientConfig, TlsError> {
        let config = options.build()?;
        Ok(ReloadableClientConfig {
            options,
            current: ArcSwap::from_pointee(config),
        })
    }

    /// The configuration a new connection uses.
    pub fn current(&self) -> Arc<ClientConfig> {
        self.current.load_full()
    }

    /// Reads the files again; on error the configuration in use stays.
    pub fn reload(&self) -> Result<(), TlsError> {
        let config = self.options.build()?;
        self.current.store(Arc::new(config));
        Ok(())
    }

    /// The options it was built from.
    pub fn options(&self) -> &ClientTlsOptions {
        &self.options
    }
}

/// The provider every configuration here uses (rustls with `ring`).
pub fn crypto_provider() -> CryptoProvider {
    rustls::crypto::ring::default_provider()
}
