//! Kubernetes names as kube-apiserver checks them (`apimachinery/pkg/util/validation`), for
//! servers that put a name from a request into a URL or a host: anything else is refused
//! before it can change what the URL points at.

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?` without a length limit (one part of a subdomain).
fn label_part(text: &str) -> bool {
    let alnum = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    text.as_bytes().first().is_some_and(alnum)
        && text.as_bytes().last().is_some_and(alnum)
        && text.bytes().all(|b| alnum(&b) || b == b'-')
}

/// A DNS-1123 label (at most 63 characters): what namespace and Service names are.
pub fn dns_label(text: &str) -> bool {
    text.len() <= 63 && label_part(text)
}

/// A DNS-1123 subdomain (at most 253 characters): what most object names are.
pub fn dns_subdomain(text: &str) -> bool {
    text.len() <= 253 && text.split('.').all(label_part)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_and_subdomains_are_what_kubernetes_takes() {
        for good in ["a", "argo-cd", "x1", &"a".repeat(63)] {
            assert!(dns_label(good), "{good}");
        }
        for bad in [
            "",
            "-a",
            "a-",
            "A",
            "a.b",
            "a@b",
            "..",
            "a%2Fb",
            &"a".repeat(64),
        ] {
            assert!(!dns_label(bad), "{bad}");
        }
        for good in ["guestbook.v2-1", "a", &"a".repeat(253)] {
            assert!(dns_subdomain(good), "{good}");
        }
        for bad in ["a..b", ".a", "a.", "..", "a/b", &"a".repeat(254)] {
            assert!(!dns_subdomain(bad), "{bad}");
        }
    }
}
