//! Typed CRI calls (RuntimeService and ImageService of runtime.v1) over [`crate::grpc::Channel`].

use std::time::Duration;

use crate::config::Settings;
use crate::grpc::{Channel, GrpcError};
use crate::proto::*;

/// A connected CRI client.
pub struct CriClient {
    runtime: Channel,
    image: Channel,
    timeout: Duration,
}

/// Declares one unary call: the channel it goes over and its full gRPC method path.
macro_rules! rpc {
    ($(#[$doc:meta])* $fn:ident, $chan:ident, $path:literal, $req:ty, $resp:ty) => {
        $(#[$doc])*
        pub async fn $fn(&self, request: &$req) -> Result<$resp, GrpcError> {
            self.$chan.unary($path, request, self.timeout).await
        }
    };
}

impl CriClient {
    /// Connects to the runtime (and image) sockets of `settings`.
    pub async fn connect(settings: &Settings) -> Result<Self, GrpcError> {
        let runtime = Channel::connect(&settings.runtime_socket).await?;
        let image = if settings.image_socket == settings.runtime_socket {
            runtime.clone()
        } else {
            Channel::connect(&settings.image_socket).await?
        };
        Ok(Self {
            runtime,
            image,
            timeout: settings.timeout,
        })
    }

    /// The per-call deadline in force.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Changes the per-call deadline (exec with its own timeout needs a longer one).
    pub fn set_timeout(&mut self, timeout: Duration) {
        self.timeout = timeout;
    }

    rpc!(/// Runtime name and version.
        version, runtime, "/runtime.v1.RuntimeService/Version", VersionRequest, VersionResponse);
    rpc!(/// Creates and starts a pod sandbox.
        run_pod_sandbox, runtime, "/runtime.v1.RuntimeService/RunPodSandbox", RunPodSandboxRequest, RunPodSandboxResponse);
    rpc!(/// Stops a pod sandbox and its containers.
        stop_pod_sandbox, runtime, "/runtime.v1.RuntimeService/StopPodSandbox", StopPodSandboxRequest, StopPodSandboxResponse);
    rpc!(/// Removes a pod sandbox.
        remove_pod_sandbox, runtime, "/runtime.v1.RuntimeService/RemovePodSandbox", RemovePodSandboxRequest, RemovePodSandboxResponse);
    rpc!(/// Status of one pod sandbox.
        pod_sandbox_status, runtime, "/runtime.v1.RuntimeService/PodSandboxStatus", PodSandboxStatusRequest, PodSandboxStatusResponse);
    rpc!(/// Lists pod sandboxes.
        list_pod_sandbox, runtime, "/runtime.v1.RuntimeService/ListPodSandbox", ListPodSandboxRequest, ListPodSandboxResponse);
    rpc!(/// Creates a container in a pod sandbox.
        create_container, runtime, "/runtime.v1.RuntimeService/CreateContainer", CreateContainerRequest, CreateContainerResponse);
    rpc!(/// Starts a created container.
        start_container, runtime, "/runtime.v1.RuntimeService/StartContainer", StartContainerRequest, StartContainerResponse);
    rpc!(/// Stops a container.
        stop_container, runtime, "/runtime.v1.RuntimeService/StopContainer", StopContainerRequest, StopContainerResponse);
    rpc!(/// Removes a container.
        remove_container, runtime, "/runtime.v1.RuntimeService/RemoveContainer", RemoveContainerRequest, RemoveContainerResponse);
    rpc!(/// Lists containers.
        list_containers, runtime, "/runtime.v1.RuntimeService/ListContainers", ListContainersRequest, ListContainersResponse);
    rpc!(/// Status of one container.
        container_status, runtime, "/runtime.v1.RuntimeService/ContainerStatus", ContainerStatusRequest, ContainerStatusResponse);
    rpc!(/// Updates the resources of a container.
        update_container_resources, runtime, "/runtime.v1.RuntimeService/UpdateContainerResources", UpdateContainerResourcesRequest, UpdateContainerResourcesResponse);
    rpc!(/// Updates a pod sandbox's pod-level resources (what the kubelet sends after a pod resize).
        update_pod_sandbox_resources, runtime, "/runtime.v1.RuntimeService/UpdatePodSandboxResources", UpdatePodSandboxResourcesRequest, UpdatePodSandboxResourcesResponse);
    rpc!(/// Runs a command in a container and returns its output.
        exec_sync, runtime, "/runtime.v1.RuntimeService/ExecSync", ExecSyncRequest, ExecSyncResponse);
    rpc!(/// Lists images.
        list_images, image, "/runtime.v1.ImageService/ListImages", ListImagesRequest, ListImagesResponse);
    rpc!(/// Status of one image.
        image_status, image, "/runtime.v1.ImageService/ImageStatus", ImageStatusRequest, ImageStatusResponse);
}
