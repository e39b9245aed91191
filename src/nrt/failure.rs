//! A failed publishing attempt: the reason (the failures metric's label) and the message, from
//! the API server's answer. One answer is told apart: the NodeResourceTopology resource itself
//! missing (the CRD not installed), which no retry soon fixes.

/// The reason of a create answered 404: the resource type is not served, i.e. the CRD is not
/// installed (the collection of a served cluster-scoped type always exists).
pub(super) const CRD_MISSING: &str = "crd-missing";

/// The CRD's name, for messages.
pub(super) const CRD_NAME: &str = "noderesourcetopologies.topology.node.k8s.io";

/// A failed attempt: the metric label and the message.
#[derive(Debug)]
pub(super) struct Failure {
    pub(super) reason: &'static str,
    pub(super) message: String,
}

impl From<kube::Error> for Failure {
    fn from(e: kube::Error) -> Self {
        let reason = match &e {
            kube::Error::Api(s) => match s.code {
                401 => "unauthorized",
                403 => "forbidden",
                404 => "not-found",
                409 => "conflict",
                400 | 422 => "invalid",
                429 | 500..=599 => "server",
                _ => "other",
            },
            kube::Error::HyperError(_) | kube::Error::Service(_) => "unreachable",
            kube::Error::Auth(_) => "unauthorized",
            _ => "other",
        };
        let hint = match reason {
            "not-found" => " (is the NodeResourceTopology CRD installed?)",
            "forbidden" => {
                " (does the service account's ClusterRole allow noderesourcetopologies?)"
            }
            _ => "",
        };
        Failure {
            reason,
            message: format!("{e}{hint}"),
        }
    }
}

impl Failure {
    /// The answer to creating the object was a 404: the CRD is missing.
    pub(super) fn crd_missing(e: &kube::Error) -> Self {
        Failure {
            reason: CRD_MISSING,
            message: format!(
                "CRD not installed: the API server does not serve {CRD_NAME} ({e}); install it \
                 (packaging/kubernetes/components/nrt-crd) or turn nrt.publish off"
            ),
        }
    }
}

#[cfg(test)]
#[path = "failure_tests.rs"]
mod tests;
