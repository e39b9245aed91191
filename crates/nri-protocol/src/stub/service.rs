//! The ttrpc `Plugin` service of one connection: protocol duties (event mask, chunked
//! Synchronize, StateChange routing) done here, everything else handed to the [`Plugin`]
//! handler.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use ttrpc::asynchronous::TtrpcContext;

use super::event_bounds::{request_schema, BoundedMethod};
use super::handler::{HandlerError, HandlerResult, Plugin};
use super::options::{EventLimits, SyncKeep, SyncLimits};
use super::sync_decode::{decode_chunk, DecodeError, Totals};
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
    totals: Totals,
}

/// Per-connection state shared between the service and the connection's owner.
pub(crate) struct Session {
    /// The chunked Synchronize in progress, if any.
    sync_chunks: Mutex<Option<SyncBuffer>>,
    /// Bounds on a Synchronize.
    limits: SyncLimits,
    /// What is kept of its pods and containers.
    keep: SyncKeep,
    /// The runtime sent Shutdown.
    pub(crate) shutdown_received: AtomicBool,
    /// `idx-name`, for logs.
    pub(crate) plugin_id: String,
    /// Which connection attempt this is (see `LinkTracker`).
    pub(crate) connection: u64,
}

impl Session {
    pub(crate) fn new(
        plugin_id: String,
        limits: SyncLimits,
        keep: SyncKeep,
        connection: u64,
    ) -> Self {
        Session {
            sync_chunks: Mutex::new(None),
            limits,
            keep,
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
                chunks = buf.totals.chunks,
                bytes = buf.totals.bytes,
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

    /// One chunk of a Synchronize, as it came on the wire: walked and counted against the
    /// session's bounds before anything of it is kept (see `sync_decode`), joined to the
    /// chunks before it, and handed to the plugin with the last one.
    async fn synchronize(&self, payload: &[u8]) -> HandlerResult<SynchronizeResponse> {
        let (pods, containers) = {
            let mut chunks = self
                .session
                .sync_chunks
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            let buf = chunks.get_or_insert_with(Default::default);
            let decoded = decode_chunk(
                payload,
                &self.session.keep,
                &self.session.limits,
                buf.totals,
            );
            let (chunk, totals) = match decoded {
                Ok(d) => d,
                Err(e) => {
                    *chunks = None;
                    let (code, message) = match e {
                        DecodeError::Over(over) => (
                            ttrpc::Code::RESOURCE_EXHAUSTED,
                            format!(
                                "Synchronize from the runtime is too large: {over}; the chunks \
                                 received so far are dropped"
                            ),
                        ),
                        wire => (
                            ttrpc::Code::INVALID_ARGUMENT,
                            format!("{wire}; the chunks received so far are dropped"),
                        ),
                    };
                    tracing::warn!(plugin = %self.session.plugin_id, "{message}");
                    return Err(HandlerError::Status {
                        code: protobuf::Enum::value(&code),
                        message,
                    });
                }
            };
            if chunk.nameless > 0 {
                tracing::warn!(
                    plugin = %self.session.plugin_id,
                    dropped = chunk.nameless,
                    "Synchronize from the runtime has pods or containers without an id; \
                     they are left out"
                );
            }
            buf.pods.extend(chunk.pods);
            buf.containers.extend(chunk.containers);
            buf.totals = totals;
            if chunk.more {
                tracing::debug!(
                    pods = buf.pods.len(),
                    containers = buf.containers.len(),
                    bytes = buf.totals.bytes,
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

/// The ttrpc handler of `Synchronize` that replaces the generated one (which decodes the whole
/// request into generated types first): it hands the payload to
/// [`PluginService::synchronize`] undecoded.
pub(crate) struct SynchronizeMethod<P: Plugin> {
    pub(crate) service: Arc<PluginService<P>>,
}

#[async_trait]
impl<P: Plugin> ttrpc::asynchronous::MethodHandler for SynchronizeMethod<P> {
    async fn handler(
        &self,
        _: TtrpcContext,
        req: ttrpc::Request,
    ) -> ttrpc::Result<ttrpc::Response> {
        use ttrpc::proto::ResponseInit;
        let answer = dispatch(self.service.synchronize(&req.payload)).await;
        drop(req);
        Ok(match answer {
            Ok(reply) => {
                let payload = reply
                    .write_to_bytes()
                    .map_err(|e| ttrpc::Error::Others(format!("encoding response: {e}")))?;
                let mut res = ttrpc::Response::init_status(ttrpc::get_status(ttrpc::Code::OK, ""));
                res.set_payload(payload);
                res
            }
            Err(ttrpc::Error::RpcStatus(s)) => ttrpc::Response::init_status(s),
            Err(other) => ttrpc::Response::init_status(ttrpc::get_status(
                ttrpc::Code::UNKNOWN,
                format!("{other:?}"),
            )),
        })
    }
}

/// The service map of `service`: the generated one, with [`SynchronizeMethod`] in place of the
/// generated `Synchronize`, and every method whose request carries pods or containers behind
/// a [`BoundedMethod`] counting it against `limits` before the generated handler decodes it.
pub(crate) fn service_map<P: Plugin>(
    service: PluginService<P>,
    limits: EventLimits,
) -> std::collections::HashMap<String, ttrpc::asynchronous::Service> {
    let plugin_id = service.session.plugin_id.clone();
    let service = Arc::new(service);
    let mut map = services::create_plugin(service.clone());
    if let Some(s) = map.get_mut(services::PLUGIN_SERVICE) {
        let generated = std::mem::take(&mut s.methods);
        for (method, inner) in generated {
            let Some(schema) = request_schema(&method) else {
                s.methods.insert(method, inner);
                continue;
            };
            let bounded = BoundedMethod {
                inner,
                method: method.clone(),
                schema,
                limits,
                plugin_id: plugin_id.clone(),
            };
            s.methods.insert(method, Box::new(bounded));
        }
        s.methods.insert(
            "Synchronize".to_string(),
            Box::new(SynchronizeMethod { service }),
        );
    }
    map
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

    /// Not reached through [`service_map`] (its [`SynchronizeMethod`] takes the payload
    /// undecoded); a request that arrives decoded is walked the same way.
    async fn synchronize(
        &self,
        _: &TtrpcContext,
        req: SynchronizeRequest,
    ) -> ttrpc::Result<SynchronizeResponse> {
        let payload = req
            .write_to_bytes()
            .map_err(|e| ttrpc::Error::Others(format!("encoding request: {e}")))?;
        drop(req);
        dispatch(PluginService::synchronize(self, &payload)).await
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
