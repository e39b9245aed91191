//! How nri-align reaches the API server: a kubeconfig file (client certificates, bearer tokens,
//! token files, as kubectl reads them) or the pod's service account (in-cluster). The client
//! talks to the NodeResourceTopology resource by its path, never through discovery (an
//! extension API server such as the test one serves no `/apis` root).

use std::path::{Path, PathBuf};
use std::time::Duration;

use kube::config::{KubeConfigOptions, Kubeconfig};

/// Where a pod's service account credentials are mounted.
pub const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// Why no client could be made.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The kubeconfig could not be read or has no usable context.
    #[error("kubeconfig {path}: {source}")]
    Kubeconfig {
        /// File.
        path: PathBuf,
        /// What kube said.
        source: kube::config::KubeconfigError,
    },
    /// The in-cluster credentials are incomplete.
    #[error("in-cluster API access: {0}")]
    InCluster(String),
    /// The TLS or HTTP client could not be built (bad certificate or key).
    #[error("building the API client: {0}")]
    Build(#[source] kube::Error),
}

/// The API access nri-align was given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApiAccess {
    /// A kubeconfig file (`--kubeconfig`), its current context unless one is named.
    Kubeconfig {
        /// The file.
        path: PathBuf,
        /// Context to use instead of the current one.
        context: Option<String>,
    },
    /// The service account of the pod nri-align runs in.
    InCluster {
        /// `https://HOST:PORT` from `KUBERNETES_SERVICE_HOST` / `KUBERNETES_SERVICE_PORT`.
        server: String,
        /// Directory holding `token`, `ca.crt` (and `namespace`).
        dir: PathBuf,
    },
}

/// Timeouts of every request: an API server that stops answering must fail a publish attempt
/// (and move it to backoff) rather than hold it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// TCP + TLS connect.
    pub connect: Duration,
    /// Sending the request and reading the response, each without progress (kube restarts it
    /// with every byte).
    pub request: Duration,
    /// From sending a request to the end of its answer, however it trickles in
    /// ([`crate::nrt::bounded`]).
    pub total: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            connect: Duration::from_secs(5),
            request: Duration::from_secs(15),
            total: Duration::from_secs(30),
        }
    }
}

impl ApiAccess {
    /// The access to use: the kubeconfig when one is given, else the service account when the
    /// process runs in a pod (the service environment variables are set and the token is
    /// mounted), else none: publishing is off.
    pub fn detect(kubeconfig: Option<&Path>) -> Option<ApiAccess> {
        Self::detect_with(
            kubeconfig,
            |k| std::env::var(k).ok(),
            Path::new(SERVICE_ACCOUNT_DIR),
        )
    }

    /// [`ApiAccess::detect`] with the environment and the service account directory given.
    pub fn detect_with(
        kubeconfig: Option<&Path>,
        env: impl Fn(&str) -> Option<String>,
        sa_dir: &Path,
    ) -> Option<ApiAccess> {
        if let Some(path) = kubeconfig {
            return Some(ApiAccess::Kubeconfig {
                path: path.to_path_buf(),
                context: None,
            });
        }
        let host = env("KUBERNETES_SERVICE_HOST").filter(|h| !h.is_empty())?;
        let port = env("KUBERNETES_SERVICE_PORT").filter(|p| !p.is_empty())?;
        if !sa_dir.join("token").is_file() {
            return None;
        }
        // An IPv6 service address needs brackets in a URL.
        let host = if host.contains(':') && !host.starts_with('[') {
            format!("[{host}]")
        } else {
            host
        };
        Some(ApiAccess::InCluster {
            server: format!("https://{host}:{port}"),
            dir: sa_dir.to_path_buf(),
        })
    }

    /// One line for the log: which server and how.
    pub fn describe(&self) -> String {
        match self {
            ApiAccess::Kubeconfig { path, context } => match context {
                Some(c) => format!("kubeconfig {} (context {c})", path.display()),
                None => format!("kubeconfig {}", path.display()),
            },
            ApiAccess::InCluster { server, dir } => {
                format!("service account {} at {server}", dir.display())
            }
        }
    }

    /// The kube configuration: server, CA, credentials, timeouts.
    pub async fn config(&self, timeouts: Timeouts) -> Result<kube::Config, ClientError> {
        let (kubeconfig, context, origin) = match self {
            ApiAccess::Kubeconfig { path, context } => {
                let kc = Kubeconfig::read_from(path).map_err(|source| ClientError::Kubeconfig {
                    path: path.clone(),
                    source,
                })?;
                (kc, context.clone(), path.clone())
            }
            ApiAccess::InCluster { server, dir } => {
                (in_cluster_kubeconfig(server, dir)?, None, dir.clone())
            }
        };
        let options = KubeConfigOptions {
            context,
            ..Default::default()
        };
        let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &options)
            .await
            .map_err(|source| ClientError::Kubeconfig {
                path: origin,
                source,
            })?;
        config.connect_timeout = Some(timeouts.connect);
        config.read_timeout = Some(timeouts.request);
        config.write_timeout = Some(timeouts.request);
        // Count the read timeout from the request, not from when a pooled connection idled.
        config.reset_reader_on_write = true;
        Ok(config)
    }

    /// A client for this access, every answer bounded in size and time.
    pub async fn client(&self, timeouts: Timeouts) -> Result<kube::Client, ClientError> {
        let config = self.config(timeouts).await?;
        bounded_client(config, timeouts)
    }
}

/// A client for `config` whose answers are bounded ([`crate::nrt::bounded`]): at most
/// [`MAX_RESPONSE_BYTES`](crate::nrt::bounded::MAX_RESPONSE_BYTES), complete within
/// `timeouts.total`.
pub fn bounded_client(
    config: kube::Config,
    timeouts: Timeouts,
) -> Result<kube::Client, ClientError> {
    let limits = crate::nrt::bounded::ResponseLimits {
        max_bytes: crate::nrt::bounded::MAX_RESPONSE_BYTES,
        total: timeouts.total,
    };
    crate::nrt::bounded::client(config, limits).map_err(ClientError::Build)
}

/// The service account as a kubeconfig: the CA file and the token file by path, so kube
/// re-reads a rotated token (projected tokens expire within the hour).
fn in_cluster_kubeconfig(server: &str, dir: &Path) -> Result<Kubeconfig, ClientError> {
    let token = dir.join("token");
    let ca = dir.join("ca.crt");
    for f in [&token, &ca] {
        if !f.is_file() {
            return Err(ClientError::InCluster(format!(
                "{} is missing",
                f.display()
            )));
        }
    }
    let path_str = |p: &Path| {
        p.to_str()
            .map(str::to_string)
            .ok_or_else(|| ClientError::InCluster(format!("{} is not UTF-8", p.display())))
    };
    let doc = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "in-cluster",
                      "cluster": {"server": server, "certificate-authority": path_str(&ca)?}}],
        "users": [{"name": "service-account", "user": {"tokenFile": path_str(&token)?}}],
        "contexts": [{"name": "in-cluster",
                      "context": {"cluster": "in-cluster", "user": "service-account"}}],
        "current-context": "in-cluster",
    });
    Kubeconfig::from_yaml(&doc.to_string()).map_err(|e| ClientError::InCluster(e.to_string()))
}

#[cfg(test)]
#[path = "client_tests.rs"]
mod tests;
