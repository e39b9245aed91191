//! Enforcement: the plugin's side of each container event, from the NRI wire to the adjustment.
//!
//! Read top to bottom: [`nri`] converts NRI messages (the only code touching `nri_protocol`),
//! [`engine`] handles each event (recovery and reconciliation included) and asks the placer
//! through its seam, [`inputs`] turns a [`container`] into a placement request, [`adjust`]
//! turns a decision into the container's adjustment, [`state`] persists the decisions and
//! [`drift`] checks running containers against them (`nri-align verify`).

pub mod adjust;
pub mod container;
pub mod cri_listing;
pub mod engine;
pub mod inputs;
pub mod nri;
pub mod podresources;
pub mod state;
#[cfg(test)]
pub(crate) mod testing;
pub mod verify;
