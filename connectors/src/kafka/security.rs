//! How a kafka source or sink reaches its brokers: TLS (with the broker's
//! certificate checked against the system's or a given authority, and
//! optionally a client certificate) and SASL with a user name and a
//! password kept as a SECRET (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512).
//!
//! The options are checked together at CREATE ([`Security::parse`]), so a
//! password without SASL or a key without its certificate is an error
//! naming the option, not a connection that fails later. They map one to
//! one onto librdkafka's settings ([`Security::apply`]).

use std::collections::BTreeMap;

use rdkafka::ClientConfig;

use super::bad_option;
use crate::ConnectorError;
use crate::spec::OptionSpec;
use crate::spec::OptionType;

/// The options of both kafka connectors (and of `CREATE CONNECTION ... TO
/// kafka`) that say how to reach the brokers.
pub(super) const OPTIONS: [OptionSpec; 7] = [
    OptionSpec::optional(
        "security.protocol",
        OptionType::OneOf(&["plaintext", "ssl", "sasl_plaintext", "sasl_ssl"]),
        "ssl: TLS; sasl_ssl: TLS and a user name and password; sasl_plaintext: a user name and password without TLS",
    )
    .with_default("plaintext"),
    OptionSpec::optional(
        "sasl.mechanism",
        OptionType::OneOf(&["plain", "scram-sha-256", "scram-sha-512"]),
        "sasl_*: how the password is checked",
    )
    .with_default("scram-sha-512"),
    OptionSpec::optional("sasl.username", OptionType::Text, "sasl_*: the user name"),
    OptionSpec::optional(
        "sasl.password",
        OptionType::Text,
        "sasl_*: the password, as SECRET name",
    )
    .secret()
    .tunable(),
    OptionSpec::optional(
        "ssl.ca.location",
        OptionType::Text,
        "ssl and sasl_ssl: a PEM file of the authorities that sign the brokers' certificates (default: the system's)",
    ),
    OptionSpec::optional(
        "ssl.certificate.location",
        OptionType::Text,
        "ssl and sasl_ssl: a PEM client certificate, for brokers that authenticate clients by certificate (with ssl.key.location)",
    ),
    OptionSpec::optional(
        "ssl.key.location",
        OptionType::Text,
        "the PEM private key of ssl.certificate.location",
    ),
];

/// The security settings of one kafka source or sink, checked.
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct Security {
    tls: bool,
    /// Mechanism, user name and password.
    sasl: Option<(String, String, String)>,
    ca: Option<String>,
    /// Certificate and key.
    client: Option<(String, String)>,
}

impl Security {
    /// The settings `options` give, or an error naming the option that
    /// does not fit the others.
    pub(super) fn parse(options: &BTreeMap<String, String>) -> Result<Self, ConnectorError> {
        let get = |name: &str| options.get(name).map(String::as_str);
        let protocol = get("security.protocol").unwrap_or("plaintext");
        let tls = matches!(protocol, "ssl" | "sasl_ssl");
        let wants_sasl = matches!(protocol, "sasl_plaintext" | "sasl_ssl");
        let sasl = if wants_sasl {
            let mechanism = get("sasl.mechanism").unwrap_or("scram-sha-512");
            let user = get("sasl.username").ok_or_else(|| {
                bad_option(
                    "sasl.username",
                    format!("security.protocol = '{protocol}' needs a user name"),
                )
            })?;
            let password = get("sasl.password").ok_or_else(|| {
                bad_option(
                    "sasl.password",
                    format!(
                        "security.protocol = '{protocol}' needs a password: \
                         CREATE SECRET name AS '...', then sasl.password = SECRET name"
                    ),
                )
            })?;
            Some((
                mechanism.to_ascii_uppercase(),
                user.to_string(),
                password.to_string(),
            ))
        } else {
            if let Some(option) = ["sasl.username", "sasl.password"]
                .into_iter()
                .find(|o| options.contains_key(*o))
            {
                return Err(bad_option(
                    option,
                    format!(
                        "is for security.protocol = 'sasl_ssl' or 'sasl_plaintext', not '{protocol}'"
                    ),
                ));
            }
            None
        };
        if !tls
            && let Some(option) = [
                "ssl.ca.location",
                "ssl.certificate.location",
                "ssl.key.location",
            ]
            .into_iter()
            .find(|o| options.contains_key(*o))
        {
            return Err(bad_option(
                option,
                format!("is for security.protocol = 'ssl' or 'sasl_ssl', not '{protocol}'"),
            ));
        }
        let client = match (get("ssl.certificate.location"), get("ssl.key.location")) {
            (Some(cert), Some(key)) => Some((cert.to_string(), key.to_string())),
            (None, None) => None,
            (Some(_), None) => {
                return Err(bad_option(
                    "ssl.key.location",
                    "a client certificate needs its key",
                ));
            }
            (None, Some(_)) => {
                return Err(bad_option(
                    "ssl.certificate.location",
                    "a client key needs its certificate",
                ));
            }
        };
        let ca = get("ssl.ca.location").map(str::to_string);
        for (option, path) in
            [("ssl.ca.location", ca.as_deref())]
                .into_iter()
                .chain(client.iter().flat_map(|(cert, key)| {
                    [
                        ("ssl.certificate.location", Some(cert.as_str())),
                        ("ssl.key.location", Some(key.as_str())),
                    ]
                }))
        {
            if let Some(path) = path
                && let Err(e) = std::fs::metadata(path)
            {
                return Err(bad_option(
                    option,
                    format!("cannot read {path} on the Weir server: {e}"),
                ));
            }
        }
        Ok(Self {
            tls,
            sasl,
            ca,
            client,
        })
    }

    /// Sets librdkafka's settings for these.
    pub(super) fn apply(&self, config: &mut ClientConfig) {
        let protocol = match (self.tls, self.sasl.is_some()) {
            (false, false) => "plaintext",
            (true, false) => "ssl",
            (false, true) => "sasl_plaintext",
            (true, true) => "sasl_ssl",
        };
        config.set("security.protocol", protocol);
        if let Some((mechanism, user, password)) = &self.sasl {
            config
                .set("sasl.mechanism", mechanism)
                .set("sasl.username", user)
                .set("sasl.password", password);
        }
        if let Some(ca) = &self.ca {
            config.set("ssl.ca.location", ca);
        }
        if let Some((cert, key)) = &self.client {
            config
                .set("ssl.certificate.location", cert)
                .set("ssl.key.location", key);
        }
    }
}
