//! `evict_refused_after` in the daemon: the API access is settled before capabilities go (the
//! kubeconfig and its certificates are read then), the task starts in the daemon's runtime.

use std::path::Path;
use std::time::Duration;

use anyhow::Context;

use crate::config::Config;
use crate::evict::{ApiPaths, EvictMetrics, Evictor};
use crate::nrt::client::Timeouts;
use crate::nrt::ApiAccess;

/// What the eviction task needs, read at start.
pub struct EvictPlan {
    client_config: kube::Config,
    window: Duration,
    paths: ApiPaths,
    access: ApiAccess,
}

impl EvictPlan {
    /// `None` when `evict_refused_after` is not set, or (said in the log) when there is no API
    /// access: the same kubeconfig or service account the NodeResourceTopology publisher uses.
    pub fn prepare(
        kubeconfig: Option<&Path>,
        config: &Config,
        stand_in: bool,
    ) -> anyhow::Result<Option<EvictPlan>> {
        let Some(window) = config.evict_refused_after else {
            return Ok(None);
        };
        let Some(access) = ApiAccess::detect(kubeconfig) else {
            tracing::warn!(
                "evict_refused_after is set but nothing is evicted: no --kubeconfig and not in \
                 a pod with a service account"
            );
            return Ok(None);
        };
        let client_config = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
            .block_on(access.config(Timeouts::default()))
            .context("evict_refused_after")?;
        let paths = if stand_in {
            ApiPaths::StandIn
        } else {
            ApiPaths::Upstream
        };
        Ok(Some(EvictPlan {
            client_config,
            window,
            paths,
            access,
        }))
    }

    /// Starts the task (inside the daemon's runtime).
    pub fn start(self, metrics: EvictMetrics) -> anyhow::Result<Evictor> {
        let client = crate::nrt::client::bounded_client(self.client_config, Timeouts::default())
            .context("evict_refused_after")?;
        tracing::info!(
            after = %crate::config::duration::format(self.window),
            api = %self.access.describe(),
            paths = ?self.paths,
            "evicting pods refused without a break for evict_refused_after"
        );
        Ok(Evictor::spawn(client, self.paths, self.window, metrics))
    }
}
