//! The live host: the only code that reads or writes cgroups, scans `/proc`, looks up device
//! nodes, changes capabilities, checks file permissions or opens the files nri-align owns.
//! Everything takes a root directory (`/` in production) so tests run on a tree in a
//! temporary directory.
//!
//! May use: `topology` (its id sets) and nothing else of the crate; everything else goes
//! through here to reach the host, which keeps what touches a live machine in one place.

pub mod caps;
pub mod cdi;
pub mod cgroup;
pub mod devices;
pub mod devpath;
pub mod files;
pub mod memloc;
pub mod perms;
pub mod procfs;
#[cfg(test)]
pub(crate) mod testing;
