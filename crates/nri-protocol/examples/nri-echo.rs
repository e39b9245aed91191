//! Minimal NRI plugin for manual checks against a real runtime: prints what the runtime
//! sends and adds `NRI_ECHO=1` to every container it sees created.
//!
//! `cargo run -p nri-protocol --example nri-echo -- /path/to/nri.sock [index]`

use std::sync::Arc;

use async_trait::async_trait;
use nri_protocol::api::{
    Container, ContainerAdjustment, ContainerUpdate, CreateContainerResponse, Event, EventMask,
    KeyValue, MessageField, PodSandbox,
};
use nri_protocol::stub::{HandlerResult, Plugin, Stub, StubOptions};
use nri_protocol::version::RuntimeInfo;

struct Echo;

#[async_trait]
impl Plugin for Echo {
    fn events(&self) -> EventMask {
        EventMask::of(&[
            Event::CREATE_CONTAINER,
            Event::REMOVE_CONTAINER,
            Event::UPDATE_POD_SANDBOX,
        ])
    }

    async fn configure(&self, config: &str, runtime: &RuntimeInfo) -> HandlerResult<()> {
        println!("configure: runtime={runtime} config={config:?}");
        println!(
            "subscribing: {}",
            self.events().intersection(runtime.supported_events())
        );
        Ok(())
    }

    async fn synchronize(
        &self,
        pods: Vec<PodSandbox>,
        containers: Vec<Container>,
    ) -> HandlerResult<Vec<ContainerUpdate>> {
        println!(
            "synchronize: {} pods, {} containers",
            pods.len(),
            containers.len()
        );
        Ok(Vec::new())
    }

    async fn disconnected(&self, reason: &str) {
        println!("disconnected: {reason}");
    }

    async fn create_container(
        &self,
        pod: PodSandbox,
        container: Container,
    ) -> HandlerResult<CreateContainerResponse> {
        println!("create_container: {}/{}", pod.name, container.name);
        let adjust = ContainerAdjustment {
            env: vec![KeyValue {
                key: "NRI_ECHO".into(),
                value: "1".into(),
                ..Default::default()
            }],
            ..Default::default()
        };
        Ok(CreateContainerResponse {
            adjust: MessageField::some(adjust),
            ..Default::default()
        })
    }

    async fn remove_container(&self, pod: PodSandbox, container: Container) -> HandlerResult<()> {
        println!("remove_container: {}/{}", pod.name, container.name);
        Ok(())
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let socket = args
        .next()
        .unwrap_or_else(|| nri_protocol::stub::DEFAULT_SOCKET_PATH.into());
    let index = args.next().unwrap_or_else(|| "50".into());
    let opts = StubOptions::new("nri-echo", index)
        .socket(socket)
        .from_env()?;
    Stub::new(opts)?.run(Arc::new(Echo)).await?;
    Ok(())
}
