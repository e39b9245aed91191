//! What ships: the Kubernetes manifests, the systemd unit on a real containerd, and the command
//! line's conventions (--version, --help, completions, man pages).

mod alerts;
mod cli_conventions;
mod doc_paths;
mod image_tag;
mod kubernetes;
mod kubernetes_security;
mod monitoring;
mod systemd;
