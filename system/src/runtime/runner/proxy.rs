//! The agent's `proxy` agent tasks (venona agent.go L340-438, `runner-research.md` §1.4,
//! §1.8, §4 row 16): the platform asks the agent to send an HTTP request inside the
//! customer's network; the agent sends it with `hashicorp/go-retryablehttp` (v0.7.8: 3
//! retries, 30 s a try, waits of 1 s doubling to 30 s or the answer's `Retry-After`; it
//! retries transport errors, 429 and 5xx but 501, and gives up with an error after the
//! last) and reports the result as the task's status.
//!
//! **faithful** takes any answer the library returns as success — a 401, 404 or 409 from
//! the target is reported `Success` (agent.go L425-437) — and reports every error
//! `isRetriable: true` ("TODO", L250-254); a spec it cannot parse or of an unknown type is
//! never reported (L367-373). **hardened** maps the answer: 2xx is `Success`, any other
//! answer the library did not retry is a non-retriable `Error` naming the status, a
//! give-up a retriable one, a bad spec a non-retriable one; its retry waits are jittered.

use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, StatusCode, Uri};
use http_body_util::{BodyExt, Full};

use crate::core::runner::{Outcome, ProxyError, ProxyRequest};
use crate::core::Variant;
use crate::env::SharedEnv;

/// `defaultProxyRequestRetries` (agent.go L79): tries after the first.
pub const RETRIES: u32 = 3;
/// `defaultProxyRequestTimeout` (agent.go L78): `HTTPClient.Timeout`, per try.
pub const TRY_TIMEOUT: Duration = Duration::from_secs(30);
/// retryablehttp's `defaultRetryWaitMin` and `defaultRetryWaitMax`.
const WAIT_MIN: Duration = Duration::from_secs(1);
const WAIT_MAX: Duration = Duration::from_secs(30);
/// How much of a refused answer's body a hardened status reason quotes.
const REASON_BODY: usize = 200;

/// What sending a proxy request came to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Proxied {
    /// The last answer's status, if one came.
    pub status: Option<StatusCode>,
    /// Tries made.
    pub attempts: u32,
    /// The library's error when it gave up (transport errors, or still 429/5xx after the
    /// last try); `None` when it returned an answer.
    pub error: Option<String>,
    /// The last answer's body (lossy UTF-8, at most [`REASON_BODY`] bytes).
    pub body: String,
}

/// Sends `request` as retryablehttp would with the agent's `http` client.
pub async fn send(
    env: &SharedEnv,
    http: &crate::env::http::Client<Full<Bytes>>,
    request: &ProxyRequest,
    variant: Variant,
) -> Proxied {
    let mut proxied = Proxied {
        status: None,
        attempts: 0,
        error: None,
        body: String::new(),
    };
    let (Ok(method), Ok(uri)) = (
        Method::from_bytes(request.method.as_bytes()),
        request.url.parse::<Uri>(),
    ) else {
        // `retryablehttp.NewRequest` fails before any try; nothing is retried.
        proxied.error = Some(format!(
            "failed creating new request: {} {:?} is not a method and URL",
            request.method, request.url
        ));
        return proxied;
    };
    loop {
        proxied.attempts += 1;
        let made = Request::builder()
            .method(method.clone())
            .uri(uri.clone())
            .header("x-req-type", "workflow-request")
            .header("x-access-token", &request.token)
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(request.body.clone())));
        let made = match made {
            Ok(made) => made,
            Err(e) => {
                proxied.error = Some(format!("failed creating new request: {e}"));
                return proxied;
            }
        };
        let exchange = async {
            let response = http.request(made).await.map_err(|e| e.to_string())?;
            let status = response.status();
            let retry_after = response
                .headers()
                .get(http::header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<u64>().ok());
            let body = response
                .into_body()
                .collect()
                .await
                .map_err(|e| e.to_string())?
                .to_bytes();
            Ok::<_, String>((status, retry_after, body))
        };
        let answer = tokio::select! {
            biased;
            answer = exchange => answer,
            () = env.sleep(TRY_TIMEOUT) => Err(format!(
                "context deadline exceeded (Client.Timeout exceeded while awaiting headers, {}s)",
                TRY_TIMEOUT.as_secs()
            )),
        };
        let (retry, retry_after) = match &answer {
            Err(e) => {
                proxied.status = None;
                proxied.body.clear();
                proxied.error = Some(e.clone());
                (true, None)
            }
            Ok((status, retry_after, body)) => {
                proxied.status = Some(*status);
                proxied.body = excerpt(body);
                proxied.error = None;
                (retried(*status), *retry_after)
            }
        };
        if !retry {
            return proxied;
        }
        if proxied.attempts > RETRIES {
            let tries = proxied.attempts;
            proxied.error = Some(match (&proxied.error, proxied.status) {
                (Some(e), _) => format!(
                    "{} {} giving up after {tries} attempt(s): {e}",
                    request.method, request.url
                ),
                (None, Some(status)) => format!(
                    "{} {} giving up after {tries} attempt(s): unexpected HTTP status {status}",
                    request.method, request.url
                ),
                (None, None) => format!(
                    "{} {} giving up after {tries} attempt(s)",
                    request.method, request.url
                ),
            });
            return proxied;
        }
        env.sleep(wait(
            env,
            proxied.attempts - 1,
            proxied.status,
            retry_after,
            variant,
        ))
        .await;
    }
}

/// retryablehttp's `baseRetryPolicy` for an answer: 429, and 0 or 5xx but 501.
fn retried(status: StatusCode) -> bool {
    status == StatusCode::TOO_MANY_REQUESTS
        || (status.as_u16() >= 500 && status != StatusCode::NOT_IMPLEMENTED)
}

/// `DefaultBackoff`: the answer's `Retry-After` seconds for 429 and 503, else 1 s doubling
/// per try, at most 30 s. hardened draws the wait in its upper half.
fn wait(
    env: &SharedEnv,
    try_index: u32,
    status: Option<StatusCode>,
    retry_after: Option<u64>,
    variant: Variant,
) -> Duration {
    let asked = matches!(
        status,
        Some(StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE)
    );
    if let (true, Some(seconds)) = (asked, retry_after) {
        return Duration::from_secs(seconds);
    }
    let wait = WAIT_MIN
        .saturating_mul(1u32 << try_index.min(5))
        .min(WAIT_MAX);
    match variant {
        Variant::Faithful => wait,
        Variant::Hardened => env.random_between(wait / 2, wait),
    }
}

fn excerpt(body: &Bytes) -> String {
    let text = String::from_utf8_lossy(&body[..body.len().min(REASON_BODY)]);
    text.trim().to_string()
}

/// The status a proxy task is reported with: `(outcome, isRetriable, reason)`, or `None`
/// when faithful reports nothing.
pub fn classify(
    result: &Result<Proxied, ProxyError>,
    variant: Variant,
) -> Option<(Outcome, bool, Option<String>)> {
    let hardened = variant == Variant::Hardened;
    match result {
        Err(error) if !hardened && error.unreported() => None,
        // faithful: every error is retriable.
        Err(error) => Some((Outcome::Error, !hardened, Some(error.to_string()))),
        Ok(Proxied {
            error: Some(error), ..
        }) => Some((Outcome::Error, true, Some(error.clone()))),
        Ok(_) if !hardened => Some((Outcome::Success, false, None)),
        Ok(Proxied {
            status: Some(status),
            ..
        }) if status.is_success() => Some((Outcome::Success, false, None)),
        Ok(Proxied { status, body, .. }) => Some((
            Outcome::Error,
            false,
            Some(format!(
                "the target answered {}{}",
                status.map(|s| s.to_string()).unwrap_or_default(),
                if body.is_empty() {
                    String::new()
                } else {
                    format!(": {body}")
                }
            )),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answered(code: u16, body: &str) -> Result<Proxied, ProxyError> {
        Ok(Proxied {
            status: Some(StatusCode::from_u16(code).unwrap()),
            attempts: 1,
            error: None,
            body: body.into(),
        })
    }

    #[test]
    fn faithful_takes_any_answer_as_success_and_every_error_as_retriable() {
        let f = Variant::Faithful;
        for code in [200, 201, 401, 404, 409, 501] {
            assert_eq!(
                classify(&answered(code, "x"), f),
                Some((Outcome::Success, false, None)),
                "{code}"
            );
        }
        let gave_up = Ok(Proxied {
            status: Some(StatusCode::SERVICE_UNAVAILABLE),
            attempts: 4,
            error: Some("giving up".into()),
            body: String::new(),
        });
        assert_eq!(
            classify(&gave_up, f),
            Some((Outcome::Error, true, Some("giving up".into())))
        );
        assert!(classify(&Err(ProxyError::NoUrl), f).unwrap().1);
        assert_eq!(classify(&Err(ProxyError::Spec), f), None);
    }

    #[test]
    fn hardened_maps_the_answer_to_the_status() {
        let h = Variant::Hardened;
        assert_eq!(
            classify(&answered(201, ""), h),
            Some((Outcome::Success, false, None))
        );
        let (outcome, retriable, reason) = classify(&answered(409, "stale"), h).unwrap();
        assert_eq!((outcome, retriable), (Outcome::Error, false));
        assert_eq!(reason.unwrap(), "the target answered 409 Conflict: stale");
        assert_eq!(
            classify(&Err(ProxyError::Spec), h).unwrap(),
            (
                Outcome::Error,
                false,
                Some("Failed to parse agent task spec".into())
            )
        );
    }

    #[test]
    fn the_library_retries_429_and_5xx_but_501() {
        assert!(retried(StatusCode::TOO_MANY_REQUESTS));
        assert!(retried(StatusCode::BAD_GATEWAY));
        assert!(!retried(StatusCode::NOT_IMPLEMENTED));
        assert!(!retried(StatusCode::CONFLICT));
        assert!(!retried(StatusCode::OK));
    }
}
