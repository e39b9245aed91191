//! Enforcement: the plugin's side of each container event, from the NRI wire to the adjustment.
//!
//! Read top to bottom: [`nri`] converts NRI messages (the only code touching `nri_protocol`),
//! [`cri_listing`] lists what runs over the runtime's CRI where NRI sends no Synchronize,
//! [`podresources`] asks the kubelet what it allocated (both before the engine lock),
//! [`engine`] handles each event (recovery and reconciliation included) and asks the placer
//! through its seam, [`inputs`] turns a [`container`] into a placement request, [`adjust`]
//! turns a decision into the container's adjustment, [`state`] persists the decisions and
//! [`verify`] checks running containers against them (`nri-align verify`), with [`memloc`]
//! saying where their memory lives.
//!
//! May use: `placement` (through the [`engine::Placer`] seam), `topology`, `host`, `config`,
//! `metrics`, `nrt` (the pod id type only). The crate's page walks one CreateContainer through
//! these modules step by step.

pub mod adjust;
pub mod container;
pub mod cri_listing;
pub mod engine;
pub mod inputs;
pub mod memloc;
pub mod nri;
pub mod podresources;
pub mod state;
#[cfg(test)]
pub(crate) mod testing;
pub mod verify;
