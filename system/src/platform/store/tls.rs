//! TLS to PostgreSQL: the libpq parameters `sslmode` and `sslrootcert` in a `--database`
//! URL, and the TLS negotiation itself (PostgreSQL's SSLRequest, then rustls with ring, as
//! the tunnel's TLS); `tokio-postgres` then speaks the protocol over the TLS stream.
//!
//! - `sslrootcert=FILE` (PEM: the CA that signed the server's certificate) turns TLS on. The
//!   server's certificate is then always verified — its chain against that CA and its name
//!   against the URL's host — whatever `sslmode` says: `require`, `verify-ca` and
//!   `verify-full` all mean verify-full here (stricter than libpq's `require`, which does
//!   not verify), and no `sslmode` means `require`. `sslmode=prefer` allows a server without
//!   TLS. `sslmode=disable` turns TLS off, and so does no `sslrootcert` with no `sslmode` or
//!   `prefer` (orrery never uses TLS it cannot verify).
//! - `sslmode=require`, `verify-ca` or `verify-full` without `sslrootcert` is refused at
//!   start: orrery does not send a password over a connection it has not verified.

use std::io;
use std::sync::Arc;

use rustls_pki_types::ServerName;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_rustls::rustls;

use crate::env::BoxStream;

/// What a URL asks of TLS, once the parameters `tokio-postgres` does not know are taken out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Wanted {
    /// The URL for `tokio-postgres`: without `sslrootcert`, and `sslmode=disable` (orrery
    /// negotiates TLS itself, before).
    pub url: String,
    /// The CA file, when TLS is on.
    pub root_cert: Option<String>,
    /// Whether a server without TLS is refused (`sslmode` other than `prefer`).
    pub required: bool,
}

/// Takes `sslmode` and `sslrootcert` out of `url` (the URL form's query, or the key=value
/// form's words) and says what they ask for; `Err` names what is wrong.
pub fn wanted(url: &str) -> Result<Wanted, String> {
    let (head, params, url_form) = match url.split_once("://") {
        Some(_) => match url.split_once('?') {
            Some((head, query)) => (head.to_string(), split(query, '&'), true),
            None => (url.to_string(), Vec::new(), true),
        },
        None => (String::new(), split(url, ' '), false),
    };
    let mut mode = None;
    let mut root_cert = None;
    let mut kept = Vec::new();
    for (key, value) in params {
        match key.as_str() {
            "sslmode" => mode = Some(value),
            "sslrootcert" => root_cert = Some(value),
            _ => kept.push(format!("{key}={value}")),
        }
    }
    let mode = mode.as_deref().unwrap_or(if root_cert.is_some() {
        "require"
    } else {
        "disable"
    });
    let (tls, required) = match mode {
        "disable" => (false, false),
        "prefer" => (root_cert.is_some(), false),
        "require" | "verify-ca" | "verify-full" => (true, true),
        other => {
            return Err(format!(
                "sslmode={other}: want disable, prefer, require, verify-ca or verify-full"
            ))
        }
    };
    if tls && root_cert.is_none() {
        return Err(format!(
            "sslmode={mode} needs sslrootcert=FILE (the CA of the server's certificate): orrery verifies the server before it sends a password"
        ));
    }
    // TLS is negotiated before tokio-postgres sees the stream.
    kept.push("sslmode=disable".to_string());
    let url = if url_form {
        format!("{head}?{}", kept.join("&"))
    } else {
        kept.join(" ")
    };
    Ok(Wanted {
        url,
        root_cert: root_cert.filter(|_| tls),
        required,
    })
}

fn split(text: &str, by: char) -> Vec<(String, String)> {
    text.split(by)
        .filter(|part| !part.is_empty())
        .map(|part| match part.split_once('=') {
            Some((key, value)) => (key.trim().to_string(), value.trim().to_string()),
            None => (part.trim().to_string(), String::new()),
        })
        .collect()
}

/// PostgreSQL's SSLRequest: length 8, code 80877103.
const SSL_REQUEST: [u8; 8] = [0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f];

/// Connects TLS with rustls, verifying the server as `name`.
pub struct Rustls {
    config: Arc<rustls::ClientConfig>,
    name: ServerName<'static>,
}

impl Rustls {
    /// Trusting the roots in `roots_pem`, for a server whose certificate names `host`.
    pub fn new(roots_pem: &[u8], host: &str) -> Result<Rustls, String> {
        let config = crate::tunnel::tls::client_config(roots_pem).map_err(|e| e.to_string())?;
        let name = ServerName::try_from(host.to_string())
            .map_err(|e| format!("host {host:?} cannot be verified: {e}"))?;
        Ok(Rustls { config, name })
    }

    /// Asks the server on `stream` for TLS (PostgreSQL's SSLRequest, as libpq does) and
    /// runs the handshake: the stream to speak the protocol on, in TLS; or the plain
    /// stream back when the server has no TLS and it is not `required`. `tokio-postgres`
    /// then runs over it as over TCP.
    pub async fn negotiate(self, mut stream: BoxStream, required: bool) -> io::Result<BoxStream> {
        stream.write_all(&SSL_REQUEST).await?;
        stream.flush().await?;
        let mut answer = [0u8; 1];
        stream.read_exact(&mut answer).await?;
        match answer[0] {
            b'S' => {
                let connector = tokio_rustls::TlsConnector::from(self.config);
                let tls = connector.connect(self.name, stream).await?;
                Ok(Box::new(tls))
            }
            b'N' if !required => Ok(stream),
            b'N' => Err(io::Error::other(
                "the server does not offer TLS, and the URL requires it (sslmode)",
            )),
            other => Err(io::Error::other(format!(
                "the server answered the TLS request with {other:#04x}, not S or N"
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_root_certificate_turns_tls_on_and_is_taken_out_of_the_url() {
        let w = wanted("postgres://u:p@db:5432/x?sslrootcert=/ca.pem&application_name=o").unwrap();
        assert_eq!(
            w.url,
            "postgres://u:p@db:5432/x?application_name=o&sslmode=disable"
        );
        assert_eq!(w.root_cert.as_deref(), Some("/ca.pem"));
        assert!(w.required);
        let w = wanted("host=db user=u sslmode=verify-full sslrootcert=/ca.pem").unwrap();
        assert_eq!(w.url, "host=db user=u sslmode=disable");
        assert!(w.required);
        let w = wanted("postgres://u@db/x?sslmode=prefer&sslrootcert=/ca.pem").unwrap();
        assert!(!w.required);
        assert_eq!(w.root_cert.as_deref(), Some("/ca.pem"));
    }

    #[test]
    fn without_a_root_certificate_tls_is_off_or_refused() {
        let w = wanted("postgres://u@db/x").unwrap();
        assert_eq!(
            (w.url.as_str(), w.root_cert),
            ("postgres://u@db/x?sslmode=disable", None)
        );
        let w = wanted("postgres://u@db/x?sslmode=prefer").unwrap();
        assert_eq!(w.root_cert, None);
        let w = wanted("postgres://u@db/x?sslmode=disable&sslrootcert=/ca.pem").unwrap();
        assert_eq!(w.root_cert, None, "disable wins");
        let refused = wanted("postgres://u@db/x?sslmode=require").unwrap_err();
        assert!(refused.contains("needs sslrootcert"), "{refused}");
        let refused = wanted("postgres://u@db/x?sslmode=allow").unwrap_err();
        assert!(refused.contains("sslmode=allow"), "{refused}");
    }
}
