//! A second NRI plugin beside nri-align, for the end-to-end tests of `leave_to_others`: it
//! sets `cpuset.cpus` of every container it sees created to one list, as the NRI plugin of
//! kubernetes-sigs/dra-driver-cpu does (`pkg/driver/nri_hooks.go`: a claim's CPUs, or its
//! shared pool), or `cpuset.mems`, as a DRA memory driver's plugin (ffromani/dra-driver-memory)
//! does, or both. Built on this repository's own NRI stub (`nri-protocol`), served from a
//! thread of the test process, registered with its own index.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use nri_protocol::api::{
    Container, ContainerAdjustment, CreateContainerResponse, Event, EventMask, LinuxCPU,
    LinuxContainerAdjustment, LinuxResources, MessageField, PodSandbox,
};
use nri_protocol::stub::{HandlerResult, Plugin, Stub, StubOptions};
use nri_protocol::version::RuntimeInfo;

use super::{err, wait_until, HResult, HarnessError};

struct SetsCpus {
    /// `cpuset.cpus` to set; empty: not set (NRI claims a field only when it is non-empty).
    cpus: String,
    /// `cpuset.mems` to set; empty: not set.
    mems: String,
    configured: Arc<AtomicUsize>,
}

#[async_trait]
impl Plugin for SetsCpus {
    fn events(&self) -> EventMask {
        EventMask::of(&[Event::CREATE_CONTAINER])
    }

    async fn configure(&self, _config: &str, _runtime: &RuntimeInfo) -> HandlerResult<()> {
        self.configured.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    async fn create_container(
        &self,
        _pod: PodSandbox,
        _container: Container,
    ) -> HandlerResult<CreateContainerResponse> {
        let cpu = LinuxCPU {
            cpus: self.cpus.clone(),
            mems: self.mems.clone(),
            ..Default::default()
        };
        let adjust = ContainerAdjustment {
            linux: MessageField::some(LinuxContainerAdjustment {
                resources: MessageField::some(LinuxResources {
                    cpu: MessageField::some(cpu),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        Ok(CreateContainerResponse {
            adjust: MessageField::some(adjust),
            ..Default::default()
        })
    }
}

/// The running plugin; stopped (its connection closed) when dropped.
pub struct CpusetPlugin {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl CpusetPlugin {
    /// Connects to the runtime's NRI socket `socket` as plugin `NAME` with index `index` and
    /// sets `cpus` on every container created from then on; returns once the runtime
    /// configured it.
    pub fn start(socket: &Path, name: &str, index: &str, cpus: &str) -> HResult<Self> {
        Self::start_setting(socket, name, index, cpus, "")
    }

    /// [`CpusetPlugin::start`] setting `cpuset.cpus` to `cpus` and `cpuset.mems` to `mems`,
    /// each only when non-empty (a memory driver's plugin: `cpus` empty).
    pub fn start_setting(
        socket: &Path,
        name: &str,
        index: &str,
        cpus: &str,
        mems: &str,
    ) -> HResult<Self> {
        let configured = Arc::new(AtomicUsize::new(0));
        let plugin = Arc::new(SetsCpus {
            cpus: cpus.to_string(),
            mems: mems.to_string(),
            configured: configured.clone(),
        });
        let opts = StubOptions::new(name, index).socket(socket);
        let stub = Stub::new(opts).map_err(|e| HarnessError(format!("{name}: {e}")))?;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let label = name.to_string();
        let thread = std::thread::spawn(move || {
            let rt = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => return eprintln!("{label}: no runtime: {e}"),
            };
            let until = async {
                let _ = stopped.await;
            };
            if let Err(e) = rt.block_on(stub.run_until(plugin, until)) {
                eprintln!("{label}: {e}");
            }
        });
        let me = CpusetPlugin {
            stop: Some(stop),
            thread: Some(thread),
        };
        if !wait_until(Duration::from_secs(20), || {
            configured.load(Ordering::SeqCst) > 0
        }) {
            return err(format!(
                "{name} was not configured by the runtime within 20 s"
            ));
        }
        Ok(me)
    }
}

impl Drop for CpusetPlugin {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
