//! The [`Plugin`] handler trait the stub dispatches NRI requests to, and the error a handler
//! returns ([`HandlerError`]), mapped to a ttrpc status in one place.

use async_trait::async_trait;

use crate::api::{
    Container, ContainerUpdate, CreateContainerResponse, EventMask, LinuxResources, PodSandbox,
    StopContainerResponse, UpdateContainerResponse, UpdatePodSandboxRequest,
    ValidateContainerAdjustmentRequest, ValidateContainerAdjustmentResponse,
};
use crate::version::RuntimeInfo;

/// Error a [`Plugin`] method returns to the runtime.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HandlerError {
    /// The plugin does not handle this request: ttrpc code 12 (Unimplemented), which NRI
    /// v0.12+ runtimes answer by falling back to StateChange.
    #[error("{0} is not implemented by this plugin")]
    Unimplemented(&'static str),
    /// The request failed; the runtime reports `message` (for CreateContainer: the CRI
    /// create fails with it). Sent with ttrpc code 2 (Unknown), like a plain Go error.
    #[error("{0}")]
    Failed(String),
    /// The request failed with a specific ttrpc status code (gRPC numbering).
    #[error("{message}")]
    Status {
        /// gRPC/ttrpc status code.
        code: i32,
        /// Message for the runtime.
        message: String,
    },
}

impl HandlerError {
    /// A [`HandlerError::Failed`] with `message`.
    pub fn failed(message: impl std::fmt::Display) -> Self {
        HandlerError::Failed(message.to_string())
    }

    /// The ttrpc status code this error is sent with.
    pub fn code(&self) -> ttrpc::Code {
        match self {
            HandlerError::Unimplemented(_) => ttrpc::Code::UNIMPLEMENTED,
            HandlerError::Failed(_) => ttrpc::Code::UNKNOWN,
            HandlerError::Status { code, .. } => {
                <ttrpc::Code as protobuf::Enum>::from_i32(*code).unwrap_or(ttrpc::Code::UNKNOWN)
            }
        }
    }
}

impl From<HandlerError> for ttrpc::Error {
    fn from(err: HandlerError) -> Self {
        ttrpc::Error::RpcStatus(ttrpc::get_status(err.code(), err.to_string()))
    }
}

/// Result of a handler method.
pub type HandlerResult<T> = Result<T, HandlerError>;

/// An NRI plugin: one method per NRI request.
///
/// Only [`Plugin::events`] is required. Every event method has a default that answers
/// Unimplemented; override the ones the plugin subscribes to. The stub subscribes to
/// `events()` minus whatever the runtime's NRI release does not know, so a handler never
/// sees events it did not ask for.
///
/// Methods run concurrently with the plugin's other tasks but the runtime sends requests
/// one at a time per plugin. Answer within the runtime's request timeout (default 2 s)
/// or the runtime drops the plugin. **Never call
/// [`RuntimeHandle::update_containers`](super::RuntimeHandle::update_containers) from
/// inside a method**: the runtime holds its NRI lock while waiting for the answer, so the
/// call would block until the timeout (the stub refuses such calls). Return updates in the
/// response instead.
#[async_trait]
pub trait Plugin: Send + Sync + 'static {
    /// Events the plugin wants to receive. Called right after [`Plugin::configure`] on
    /// every connection, so the answer may depend on the configuration; events the
    /// runtime's NRI release does not know are removed before subscribing.
    fn events(&self) -> EventMask;

    /// Configure: `config` is the drop-in configuration the runtime has for this plugin
    /// (empty for plugins that were not launched by the runtime). Called on every
    /// (re)connection, before [`Plugin::synchronize`]. An error makes the runtime drop the
    /// connection.
    async fn configure(&self, config: &str, runtime: &RuntimeInfo) -> HandlerResult<()> {
        let _ = (config, runtime);
        Ok(())
    }

    /// All pods and containers the runtime knows (chunked transfers are already joined).
    /// Called after every (re)registration: this is where the plugin reconciles its state.
    /// Return updates for existing containers.
    async fn synchronize(
        &self,
        pods: Vec<PodSandbox>,
        containers: Vec<Container>,
    ) -> HandlerResult<Vec<ContainerUpdate>> {
        let _ = (pods, containers);
        Ok(Vec::new())
    }

    /// The runtime announced it is shutting down.
    async fn shutdown(&self) {}

    /// The connection to the runtime was lost (`reason` says why). In dial mode the stub
    /// reconnects and registers again, followed by Configure and Synchronize.
    async fn disconnected(&self, reason: &str) {
        let _ = reason;
    }

    /// A pod sandbox is being started.
    async fn run_pod_sandbox(&self, pod: PodSandbox) -> HandlerResult<()> {
        let _ = pod;
        Err(HandlerError::Unimplemented("RunPodSandbox"))
    }

    /// A pod's resources are being updated (NRI v0.10+).
    async fn update_pod_sandbox(&self, req: UpdatePodSandboxRequest) -> HandlerResult<()> {
        let _ = req;
        Err(HandlerError::Unimplemented("UpdatePodSandbox"))
    }

    /// A pod's resources have been updated (NRI v0.10+).
    async fn post_update_pod_sandbox(&self, pod: PodSandbox) -> HandlerResult<()> {
        let _ = pod;
        Err(HandlerError::Unimplemented("PostUpdatePodSandbox"))
    }

    /// A pod sandbox is being stopped.
    async fn stop_pod_sandbox(&self, pod: PodSandbox) -> HandlerResult<()> {
        let _ = pod;
        Err(HandlerError::Unimplemented("StopPodSandbox"))
    }

    /// A pod sandbox is being removed.
    async fn remove_pod_sandbox(&self, pod: PodSandbox) -> HandlerResult<()> {
        let _ = pod;
        Err(HandlerError::Unimplemented("RemovePodSandbox"))
    }

    /// A container is being created: return its adjustment and updates to other
    /// containers. An error fails the creation with the error's message.
    async fn create_container(
        &self,
        pod: PodSandbox,
        container: Container,
    ) -> HandlerResult<CreateContainerResponse> {
        let _ = (pod, container);
        Err(HandlerError::Unimplemented("CreateContainer"))
    }

    /// A container has been created.
    async fn post_create_container(
        &self,
        pod: PodSandbox,
        container: Container,
    ) -> HandlerResult<()> {
        let _ = (pod, container);
        Err(HandlerError::Unimplemented("PostCreateContainer"))
    }

    /// A container is being started.
    async fn start_container(&self, pod: PodSandbox, container: Container) -> HandlerResult<()> {
        let _ = (pod, container);
        Err(HandlerError::Unimplemented("StartContainer"))
    }

    /// A container has been started.
    async fn post_start_container(
        &self,
        pod: PodSandbox,
        container: Container,
    ) -> HandlerResult<()> {
        let _ = (pod, container);
        Err(HandlerError::Unimplemented("PostStartContainer"))
    }

    /// A container's resources are being updated to `resources`.
    async fn update_container(
        &self,
        pod: PodSandbox,
        container: Container,
        resources: Option<LinuxResources>,
    ) -> HandlerResult<UpdateContainerResponse> {
        let _ = (pod, container, resources);
        Err(HandlerError::Unimplemented("UpdateContainer"))
    }

    /// A container's resources have been updated.
    async fn post_update_container(
        &self,
        pod: PodSandbox,
        container: Container,
    ) -> HandlerResult<()> {
        let _ = (pod, container);
        Err(HandlerError::Unimplemented("PostUpdateContainer"))
    }

    /// A container is being stopped: return updates to the remaining containers.
    async fn stop_container(
        &self,
        pod: PodSandbox,
        container: Container,
    ) -> HandlerResult<StopContainerResponse> {
        let _ = (pod, container);
        Err(HandlerError::Unimplemented("StopContainer"))
    }

    /// A container is being removed.
    async fn remove_container(&self, pod: PodSandbox, container: Container) -> HandlerResult<()> {
        let _ = (pod, container);
        Err(HandlerError::Unimplemented("RemoveContainer"))
    }

    /// Validate the combined adjustments of all plugins (NRI v0.10+).
    async fn validate_container_adjustment(
        &self,
        req: ValidateContainerAdjustmentRequest,
    ) -> HandlerResult<ValidateContainerAdjustmentResponse> {
        let _ = req;
        Err(HandlerError::Unimplemented("ValidateContainerAdjustment"))
    }
}
