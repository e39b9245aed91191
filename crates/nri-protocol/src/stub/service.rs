//! The ttrpc `Plugin` service of one connection: protocol duties (event mask, chunked
//! Synchronize, StateChange routing) done here, everything else handed to the [`Plugin`]
//! handler.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use ttrpc::asynchronous::TtrpcContext;

use super::handler::{HandlerError, HandlerResult, Plugin};
use super::options::SyncLimits;
use super::{RuntimeHandle, IN_EVENT_HANDLER};
use crate::api::{
    self, ConfigureRequest, ConfigureResponse, Container, Empty, Event, Message, MessageField,
    PodSandbox, StateChangeEvent, SynchronizeRequest, SynchronizeResponse,
};
use crate::services;
use crate::version::RuntimeInfo;

/// The chunks of a Synchronize collected so far, and what they add up to.
#[derive(Default)]
struct SyncBuffer {
    pods: Vec<PodSandbox>,
    containers: Vec<Container>,
    chunks: usize,
    /// Encoded size of `pods` and `containers`.
    bytes: u64,
}

impl SyncBuffer {
    /// Adds one chunk, or says which bound it would break (the buffer is then unchanged).
    fn add(&mut self, req: SynchronizeRequest, limits: &SyncLimits) -> Result<(), String> {
        let chunks = self.chunks + 1;
        let objects =
            self.pods.len() + self.containers.len() + req.pods.len() + req.containers.len();
        let bytes = req
            .pods
            .iter()
            .map(|p| p.compute_size())
            .chain(req.containers.iter().map(|c| c.compute_size()))
            .fold(self.bytes, u64::saturating_add);
        let over = if chunks > limits.max_chunks {
            Some(format!(
                "{chunks} chunks, more than the limit of {}",
                limits.max_chunks
            ))
        } else if objects > limits.max_objects {
            Some(format!(
                "{objects} pods and containers in {chunks} chunk(s), more than the limit of {}",
                limits.max_objects
            ))
        } else if bytes > limits.max_bytes {
            Some(format!(
                "{bytes} bytes in {chunks} chunk(s), more than the limit of {}",
                limits.max_bytes
            ))
        } else {
            None
        };
        if let Some(over) = over {
            return Err(format!(
                "Synchronize from the runtime is too large: {over}; the chunks received so far \
                 are dropped"
            ));
        }
        self.pods.extend(req.pods);
        self.containers.extend(req.containers);
        self.chunks = chunks;
        self.bytes = bytes;
        Ok(())
    }
}

/// Per-connection state shared between the service and the connection's owner.
pub(crate) struct Session {
    /// The chunked Synchronize in progress, if any.
    sync_chunks: Mutex<Option<SyncBuffer>>,
    /// Bounds on a Synchronize.
    limits: SyncLimits,
    /// The runtime sent Shutdown.
    pub(crate) shutdown_received: AtomicBool,
    /// `idx-name`, for logs.
    pub(crate) plugin_id: String,
    /// Which connection attempt this is (see `LinkTracker`).
    pub(crate) connection: u64,
}

impl Session {
    pub(crate) fn new(plugin_id: String, limits: SyncLimits, connection: u64) -> Self {
        Session {
            sync_chunks: Mutex::new(None),
            limits,
            shutdown_received: AtomicBool::new(false),
            plugin_id,
            connection,
        }
    }

    /// Drops a half-received Synchronize. Called when the connection ends: the ttrpc tasks
    /// that hold this session may outlive the connection for a while, its chunks must not.
    pub(crate) fn release(&self) {
        let dropped = self
            .sync_chunks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(buf) = dropped {
            tracing::debug!(
                chunks = buf.chunks,
                bytes = buf.bytes,
                "dropping an unfinished Synchronize"
            );
        }
    }
}

/// Bridges the generated ttrpc service trait to a [`Plugin`].
pub(crate) struct PluginService<P: Plugin> {
    pub(crate) plugin: Arc<P>,
    pub(crate) session: Arc<Session>,
    pub(crate) handle: RuntimeHandle,
}

fn take<T: Default>(field: MessageField<T>) -> T {
    field.0.map(|b| *b).unwrap_or_default()
}

/// Runs a handler call marked as "inside an event handler" (see
/// [`RuntimeHandle::update_containers`]) and converts its error for ttrpc.
async fn dispatch<T>(
    call: impl std::future::Future<Output = HandlerResult<T>>,
) -> ttrpc::Result<T> {
    IN_EVENT_HANDLER
        .scope(true, call)
        .await
        .map_err(ttrpc::Error::from)
}

impl<P: Plugin> PluginService<P> {
    /// Routes a StateChange notification to the matching handler method. Unimplemented
    /// is swallowed: StateChange itself is implemented, and the runtime only sends events
    /// the plugin subscribed to.
    async fn state_change(&self, evt: StateChangeEvent) -> HandlerResult<()> {
        let pod = take(evt.pod);
        let ctr = take(evt.container);
        let p = &self.plugin;
        let result = match evt.event.enum_value() {
            Ok(Event::RUN_POD_SANDBOX) => p.run_pod_sandbox(pod).await,
            Ok(Event::POST_UPDATE_POD_SANDBOX) => p.post_update_pod_sandbox(pod).await,
            Ok(Event::STOP_POD_SANDBOX) => p.stop_pod_sandbox(pod).await,
            Ok(Event::REMOVE_POD_SANDBOX) => p.remove_pod_sandbox(pod).await,
            Ok(Event::POST_CREATE_CONTAINER) => p.post_create_container(pod, ctr).await,
            Ok(Event::START_CONTAINER) => p.start_container(pod, ctr).await,
            Ok(Event::POST_START_CONTAINER) => p.post_start_container(pod, ctr).await,
            Ok(Event::POST_UPDATE_CONTAINER) => p.post_update_container(pod, ctr).await,
            Ok(Event::REMOVE_CONTAINER) => p.remove_container(pod, ctr).await,
            other => {
                tracing::debug!(event = ?other, "ignoring StateChange for an event without notification");
                Ok(())
            }
        };
        match result {
            Err(HandlerError::Unimplemented(_)) => Ok(()),
            other => other,
        }
    }

    async fn configure(&self, req: ConfigureRequest) -> HandlerResult<ConfigureResponse> {
        let info = RuntimeInfo::from_configure(&req);
        tracing::info!(plugin = %self.session.plugin_id, runtime = %info, "configuring");
        self.plugin.configure(&req.config, &info).await?;

        let wanted = self.plugin.events();
        let supported = info.supported_events();
        let dropped = wanted.difference(supported);
        if !dropped.is_empty() {
            tracing::warn!(
                events = %dropped,
                runtime = %info,
                "runtime's NRI does not know these events; not subscribing to them"
            );
        }
        let mask = wanted.intersection(supported);
        if mask.is_empty() {
            // An empty mask on the wire means "everything": refuse instead.
            return Err(HandlerError::failed(format!(
                "plugin {} has no event the runtime {info} supports",
                self.session.plugin_id
            )));
        }
        tracing::info!(plugin = %self.session.plugin_id, events = %mask, "subscribing");
        self.handle.set_runtime(info.clone());
        self.handle.link.configured(self.session.connection, info);
        Ok(ConfigureResponse {
            events: mask.bits(),
            ..Default::default()
        })
    }

    async fn synchronize(&self, req: SynchronizeRequest) -> HandlerResult<SynchronizeResponse> {
        let more = req.more;
        let (pods, containers) = {
            let mut chunks = self
                .session
                .sync_chunks
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            let buf = chunks.get_or_insert_with(Default::default);
            if let Err(message) = buf.add(req, &self.session.limits) {
                *chunks = None;
                tracing::warn!(plugin = %self.session.plugin_id, "{message}");
                return Err(HandlerError::Status {
                    code: protobuf::Enum::value(&ttrpc::Code::RESOURCE_EXHAUSTED),
                    message,
                });
            }
            if more {
                tracing::debug!(
                    pods = buf.pods.len(),
                    containers = buf.containers.len(),
                    bytes = buf.bytes,
                    "collecting Synchronize chunk"
                );
                // Updates may only be sent with the last chunk.
                return Ok(SynchronizeResponse {
                    more: true,
                    ..Default::default()
                });
            }
            let buf = chunks.take().unwrap_or_default();
            (buf.pods, buf.containers)
        };
        tracing::info!(
            pods = pods.len(),
            containers = containers.len(),
            "synchronizing"
        );
        let update = self.plugin.synchronize(pods, containers).await?;
        self.handle.link.synchronized(self.session.connection);
        Ok(SynchronizeResponse {
            update,
            more: false,
            ..Default::default()
        })
    }
}

#[async_trait]
impl<P: Plugin> services::Plugin for PluginService<P> {
    async fn configure(
        &self,
        _: &TtrpcContext,
        req: ConfigureRequest,
    ) -> ttrpc::Result<ConfigureResponse> {
        dispatch(PluginService::configure(self, req)).await
    }

    async fn synchronize(
        &self,
        _: &TtrpcContext,
        req: SynchronizeRequest,
    ) -> ttrpc::Result<SynchronizeResponse> {
        dispatch(PluginService::synchronize(self, req)).await
    }

    async fn shutdown(&self, _: &TtrpcContext, _: Empty) -> ttrpc::Result<Empty> {
        tracing::info!(plugin = %self.session.plugin_id, "runtime is shutting down");
        self.session.shutdown_received.store(true, Ordering::SeqCst);
        self.plugin.shutdown().await;
        Ok(Empty::default())
    }

    async fn run_pod_sandbox(
        &self,
        _: &TtrpcContext,
        req: api::RunPodSandboxRequest,
    ) -> ttrpc::Result<api::RunPodSandboxResponse> {
        dispatch(self.plugin.run_pod_sandbox(take(req.pod))).await?;
        Ok(Default::default())
    }

    async fn update_pod_sandbox(
        &self,
        _: &TtrpcContext,
        req: api::UpdatePodSandboxRequest,
    ) -> ttrpc::Result<api::UpdatePodSandboxResponse> {
        dispatch(self.plugin.update_pod_sandbox(req)).await?;
        Ok(Default::default())
    }

    async fn post_update_pod_sandbox(
        &self,
        _: &TtrpcContext,
        req: api::PostUpdatePodSandboxRequest,
    ) -> ttrpc::Result<api::PostUpdatePodSandboxResponse> {
        dispatch(self.plugin.post_update_pod_sandbox(take(req.pod))).await?;
        Ok(Default::default())
    }

    async fn stop_pod_sandbox(
        &self,
        _: &TtrpcContext,
        req: api::StopPodSandboxRequest,
    ) -> ttrpc::Result<api::StopPodSandboxResponse> {
        dispatch(self.plugin.stop_pod_sandbox(take(req.pod))).await?;
        Ok(Default::default())
    }

    async fn remove_pod_sandbox(
        &self,
        _: &TtrpcContext,
        req: api::RemovePodSandboxRequest,
    ) -> ttrpc::Result<api::RemovePodSandboxResponse> {
        dispatch(self.plugin.remove_pod_sandbox(take(req.pod))).await?;
        Ok(Default::default())
    }

    async fn create_container(
        &self,
        _: &TtrpcContext,
        req: api::CreateContainerRequest,
    ) -> ttrpc::Result<api::CreateContainerResponse> {
        dispatch(
            self.plugin
                .create_container(take(req.pod), take(req.container)),
        )
        .await
    }

    async fn post_create_container(
        &self,
        _: &TtrpcContext,
        req: api::PostCreateContainerRequest,
    ) -> ttrpc::Result<api::PostCreateContainerResponse> {
        dispatch(
            self.plugin
                .post_create_container(take(req.pod), take(req.container)),
        )
        .await?;
        Ok(Default::default())
    }

    async fn start_container(
        &self,
        _: &TtrpcContext,
        req: api::StartContainerRequest,
    ) -> ttrpc::Result<api::StartContainerResponse> {
        dispatch(
            self.plugin
                .start_container(take(req.pod), take(req.container)),
        )
        .await?;
        Ok(Default::default())
    }

    async fn post_start_container(
        &self,
        _: &TtrpcContext,
        req: api::PostStartContainerRequest,
    ) -> ttrpc::Result<api::PostStartContainerResponse> {
        dispatch(
            self.plugin
                .post_start_container(take(req.pod), take(req.container)),
        )
        .await?;
        Ok(Default::default())
    }

    async fn update_container(
        &self,
        _: &TtrpcContext,
        req: api::UpdateContainerRequest,
    ) -> ttrpc::Result<api::UpdateContainerResponse> {
        let resources = req.linux_resources.0.map(|b| *b);
        dispatch(
            self.plugin
                .update_container(take(req.pod), take(req.container), resources),
        )
        .await
    }

    async fn post_update_container(
        &self,
        _: &TtrpcContext,
        req: api::PostUpdateContainerRequest,
    ) -> ttrpc::Result<api::PostUpdateContainerResponse> {
        dispatch(
            self.plugin
                .post_update_container(take(req.pod), take(req.container)),
        )
        .await?;
        Ok(Default::default())
    }

    async fn stop_container(
        &self,
        _: &TtrpcContext,
        req: api::StopContainerRequest,
    ) -> ttrpc::Result<api::StopContainerResponse> {
        dispatch(
            self.plugin
                .stop_container(take(req.pod), take(req.container)),
        )
        .await
    }

    async fn remove_container(
        &self,
        _: &TtrpcContext,
        req: api::RemoveContainerRequest,
    ) -> ttrpc::Result<api::RemoveContainerResponse> {
        dispatch(
            self.plugin
                .remove_container(take(req.pod), take(req.container)),
        )
        .await?;
        Ok(Default::default())
    }

    async fn state_change(&self, _: &TtrpcContext, evt: StateChangeEvent) -> ttrpc::Result<Empty> {
        dispatch(PluginService::state_change(self, evt)).await?;
        Ok(Empty::default())
    }

    async fn validate_container_adjustment(
        &self,
        _: &TtrpcContext,
        req: api::ValidateContainerAdjustmentRequest,
    ) -> ttrpc::Result<api::ValidateContainerAdjustmentResponse> {
        dispatch(self.plugin.validate_container_adjustment(req)).await
    }
}
