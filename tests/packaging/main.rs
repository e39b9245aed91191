//! What ships: the Kubernetes manifests, the systemd unit on a real containerd, the command
//! line's conventions (--version, --help, completions, man pages), the docs' house rules
//! (lengths, no tracker numbers) and one rule of the source's layout (a container's devices are
//! parsed once, in `src/enforce/inputs/`).

mod alerts;
mod cli_conventions;
mod doc_paths;
mod house_rules;
mod image_tag;
mod kubernetes;
mod kubernetes_security;
mod monitoring;
mod parse_once;
mod skips;
mod systemd;
