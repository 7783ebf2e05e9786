//! Secrets at rest: the server's key and AES-256-GCM sealing, and the
//! resolution of a source's, sink's or connection's options into what its
//! connector is handed (connection options merged in, secrets opened).
//!
//! The key comes from `--secret-key-file` (or `WEIR_SECRET_KEY`, 64 hex
//! digits), else from `secret.key` in the data directory, created on first
//! start (mode 0600). The catalog stores only sealed values: a nonce and
//! the ciphertext, bound to the secret's name, and the key's id, so a
//! server started with another key says which key a secret needs instead
//! of failing to decrypt in silence. Plain values exist only in memory,
//! at the moment a connector is checked or opened.

use std::collections::BTreeMap;
use std::path::Path;

use ring::aead::{AES_256_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use ring::rand::{SecureRandom, SystemRandom};
use serde::{Deserialize, Serialize};

use crate::catalog::model::Catalog;
use crate::error::ServerError;

/// The key file's name in the data directory, when no key is given.
const KEY_FILE: &str = "secret.key";

/// A secret's value as the catalog stores it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SealedValue {
    /// Which key sealed it (the key's fingerprint, not the key).
    pub key_id: String,
    /// Hex.
    pub nonce: String,
    /// Hex: the ciphertext and its tag.
    pub ciphertext: String,
}

/// The server's secret key.
pub struct SecretKey {
    key: LessSafeKey,
    id: String,
    rng: SystemRandom,
}

impl std::fmt::Debug for SecretKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SecretKey").field("id", &self.id).finish()
    }
}

impl SecretKey {
    /// The key named by `file` (or `WEIR_SECRET_KEY`), else the data
    /// directory's, created if absent.
    pub fn load(file: Option<&Path>, data_dir: &Path) -> Result<Self, ServerError> {
        let bad = |message: String| ServerError::invalid_param(message);
        let text = match file {
            Some(path) => std::fs::read_to_string(path).map_err(|e| {
                bad(format!(
                    "cannot read the secret key file {}: {e}",
                    path.display()
                ))
            })?,
            None => match std::env::var("WEIR_SECRET_KEY") {
                Ok(text) => text,
                Err(_) => Self::data_dir_key(data_dir)?,
            },
        };
        let bytes = hex_decode(text.trim())
            .filter(|b| b.len() == 32)
            .ok_or_else(|| {
                bad(
                    "a secret key is 64 hex digits (32 bytes), e.g. from `openssl rand -hex 32`"
                        .into(),
                )
            })?;
        Self::from_bytes(&bytes)
    }

    fn data_dir_key(data_dir: &Path) -> Result<String, ServerError> {
        let path = data_dir.join(KEY_FILE);
        match std::fs::read_to_string(&path) {
            Ok(text) => return Ok(text),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(ServerError::internal(format!(
                    "cannot read {}: {e}",
                    path.display()
                )));
            }
        }
        let mut key = [0u8; 32];
        SystemRandom::new()
            .fill(&mut key)
            .map_err(|_| ServerError::internal("no randomness for a secret key"))?;
        let text = hex_encode(&key);
        write_private(&path, text.as_bytes())
            .map_err(|e| ServerError::internal(format!("cannot write {}: {e}", path.display())))?;
        tracing::info!(path = %path.display(), "generated the key that encrypts secrets; keep it with the data directory");
        Ok(text)
    }

    fn from_bytes(bytes: &[u8]) -> Result<Self, ServerError> {
        let key = UnboundKey::new(&AES_256_GCM, bytes)
            .map_err(|_| ServerError::internal("a secret key of the wrong length"))?;
        let digest = ring::digest::digest(&ring::digest::SHA256, bytes);
        Ok(Self {
            key: LessSafeKey::new(key),
            id: hex_encode(&digest.as_ref()[..6]),
            rng: SystemRandom::new(),
        })
    }

    /// Seals `value` for the secret called `name`.
    pub fn seal(&self, name: &str, value: &str) -> Result<SealedValue, ServerError> {
        let mut nonce = [0u8; NONCE_LEN];
        self.rng
            .fill(&mut nonce)
            .map_err(|_| ServerError::internal("no randomness for a nonce"))?;
        let mut data = value.as_bytes().to_vec();
        self.key
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(name.as_bytes()),
                &mut data,
            )
            .map_err(|_| ServerError::internal("sealing a secret failed"))?;
        Ok(SealedValue {
            key_id: self.id.clone(),
            nonce: hex_encode(&nonce),
            ciphertext: hex_encode(&data),
        })
    }

    /// The value of the secret `name`, sealed as `sealed`.
    pub fn open(&self, name: &str, sealed: &SealedValue) -> Result<String, ServerError> {
        if sealed.key_id != self.id {
            return Err(ServerError::Sqlstate {
                code: "28000",
                message: format!(
                    "secret \"{name}\" was encrypted with key {}, and this server's key is {}: start it with the --secret-key-file that encrypted it",
                    sealed.key_id, self.id
                ),
            });
        }
        let broken = || ServerError::internal(format!("secret \"{name}\" does not decrypt"));
        let nonce: [u8; NONCE_LEN] = hex_decode(&sealed.nonce)
            .and_then(|n| n.try_into().ok())
            .ok_or_else(broken)?;
        let mut data = hex_decode(&sealed.ciphertext).ok_or_else(broken)?;
        let plain = self
            .key
            .open_in_place(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(name.as_bytes()),
                &mut data,
            )
            .map_err(|_| broken())?;
        String::from_utf8(plain.to_vec()).map_err(|_| broken())
    }
}

fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    if let Some(dir) = path.parent() {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}

fn hex_encode(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn hex_decode(text: &str) -> Option<Vec<u8>> {
    if text.len() % 2 != 0 {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

/// What a connection of `kind` may be used by, and the options it may hold.
pub fn connection_kind(kind: &str) -> Option<(&'static [&'static str], &'static [&'static str])> {
    Some(match kind {
        "postgres" => (
            &["postgres", "postgres-cdc"],
            &["dsn", "password", "password_env"],
        ),
        "kafka" => (
            &["kafka"],
            &[
                "brokers",
                "security.protocol",
                "sasl.mechanism",
                "sasl.username",
                "sasl.password",
                "ssl.ca.location",
                "ssl.certificate.location",
                "ssl.key.location",
            ],
        ),
        "s3" => (
            &["files"],
            &[
                "s3.endpoint",
                "s3.region",
                "s3.allow_http",
                "s3.access_key_id",
                "s3.secret_access_key",
                "s3.secret_access_key_env",
            ],
        ),
        _ => return None,
    })
}

/// The options a connector is handed for an object whose own options are
/// `options` (with `connection = name` if it names one) and whose
/// `secrets` name a secret per option: the connection's options, then the
/// object's over them, then every secret opened. Also returns which of
/// the handed options are the object's own (what to store).
pub fn resolve(
    catalog: &Catalog,
    key: &SecretKey,
    connector: &str,
    options: &BTreeMap<String, String>,
    secrets: &BTreeMap<String, String>,
) -> Result<BTreeMap<String, String>, ServerError> {
    let mut out = BTreeMap::new();
    let mut secret_names = BTreeMap::new();
    if let Some(name) = options.get("connection") {
        let connection = catalog
            .connections
            .get(name)
            .ok_or_else(|| ServerError::Sqlstate {
                code: "42704",
                message: format!("connection \"{name}\" does not exist"),
            })?;
        let (connectors, _) = connection_kind(&connection.kind).unwrap_or((&[], &[]));
        if !connectors.contains(&connector) {
            return Err(ServerError::invalid_param(format!(
                "connection \"{name}\" connects to {}, which connector {connector} cannot use (it serves: {})",
                connection.kind,
                connectors.join(", ")
            )));
        }
        out.extend(connection.options.clone());
        secret_names.extend(connection.secrets.clone());
    }
    for (k, v) in options {
        if k != "connection" {
            secret_names.remove(k);
            out.insert(k.clone(), v.clone());
        }
    }
    for (option, name) in secrets {
        out.remove(option);
        secret_names.insert(option.clone(), name.clone());
    }
    for (option, name) in secret_names {
        let secret = catalog
            .secrets
            .get(&name)
            .ok_or_else(|| ServerError::Sqlstate {
                code: "42704",
                message: format!("secret \"{name}\" does not exist"),
            })?;
        out.insert(option, key.open(&name, &secret.value)?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sealed_values_open_with_their_key_and_name_only() {
        let key = SecretKey::from_bytes(&[7u8; 32]).unwrap();
        let sealed = key.seal("pg_pass", "hunter2").unwrap();
        assert!(!sealed.ciphertext.contains(&hex_encode(b"hunter2")));
        assert_eq!(key.open("pg_pass", &sealed).unwrap(), "hunter2");
        // Bound to its name: moved under another, it does not open.
        assert!(key.open("other", &sealed).is_err());
        let other = SecretKey::from_bytes(&[8u8; 32]).unwrap();
        let err = other.open("pg_pass", &sealed).unwrap_err().to_string();
        assert!(err.contains(&key.id) && !err.contains("hunter2"), "{err}");
    }

    #[test]
    fn a_data_directory_key_is_created_once_and_kept() {
        let dir = tempfile::tempdir().unwrap();
        let first = SecretKey::load(None, dir.path()).unwrap();
        let again = SecretKey::load(None, dir.path()).unwrap();
        assert_eq!(first.id, again.id);
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir.path().join(KEY_FILE))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        let bad = dir.path().join("bad.key");
        std::fs::write(&bad, "not hex").unwrap();
        assert!(SecretKey::load(Some(&bad), dir.path()).is_err());
    }
}
