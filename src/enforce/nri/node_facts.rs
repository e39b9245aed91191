//! What the node says of a container before the engine is locked, gathered as one value
//! apart from the runtime's view ([`NodeFacts`]): the kubelet's PodResources answer (a slow
//! kubelet delays this container only, within the lookup's deadline, never the engine's
//! other callers) and the CDI spec registry's in-memory resolution of its names.

use crate::enforce::container::{ContainerView, NodeFacts, PodView};
use crate::enforce::inputs::resolve_cdi;
use crate::enforce::podresources::KubeletSource;
use crate::host::cdi::CdiRegistry;
use crate::metrics::Metrics;

/// Where the facts come from: the kubelet and the CDI registry where the node has them.
pub(super) struct Sources<'a> {
    pub kubelet: Option<&'a KubeletSource>,
    pub cdi: Option<&'a CdiRegistry>,
    pub metrics: Option<&'a Metrics>,
}

/// What the node says of container `c` of `pod`. What the kubelet may hand out (its
/// allocatable devices) is asked only for a `remap`, which moves a container onto a GPU of
/// nri-align's choosing.
pub(super) async fn node_facts(
    from: Sources<'_>,
    remap: bool,
    pod: &PodView,
    c: &ContainerView,
) -> NodeFacts {
    let (kubelet_devices, kubelet_allocatable, kubelet_claims) = match from.kubelet {
        Some(k) => {
            let answer = k.lookup(pod, &c.name, remap, from.metrics).await;
            let claims = k.claims_for(pod, &c.name).await;
            (answer.devices, answer.allocatable, claims)
        }
        None => (None, None, Vec::new()),
    };
    // The claims' CDI names are names of the container too.
    let cdi_resolved = from
        .cdi
        .map(|r| resolve_cdi(&r.snapshot(), c, &kubelet_claims))
        .unwrap_or_default();
    NodeFacts {
        kubelet_devices,
        kubelet_allocatable,
        kubelet_claims,
        cdi_resolved,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn without_a_kubelet_the_cdi_names_alone_are_resolved() {
        let dir = tempfile::tempdir().expect("tmp");
        std::fs::create_dir_all(dir.path().join("etc/cdi")).expect("mkdir");
        std::fs::write(
            dir.path().join("etc/cdi/v.yaml"),
            "cdiVersion: 0.6.0\nkind: v.com/c\ndevices:\n- name: a\n  containerEdits:\n    deviceNodes:\n    - path: /dev/nvidia0\n",
        )
        .expect("write");
        let registry = CdiRegistry::new(dir.path(), &["/etc/cdi".into()]);
        let c = ContainerView {
            cdi_devices: vec!["v.com/c=a".into()],
            ..Default::default()
        };
        let from = Sources {
            kubelet: None,
            cdi: Some(&registry),
            metrics: None,
        };
        let facts = node_facts(from, true, &PodView::default(), &c).await;
        let names: Vec<&str> = facts.cdi_resolved.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(names, ["v.com/c=a"]);
        assert_eq!(
            (facts.kubelet_devices, facts.kubelet_allocatable),
            (None, None)
        );
        // Nothing to ask: nothing learnt.
        let none = Sources {
            kubelet: None,
            cdi: None,
            metrics: None,
        };
        let facts = node_facts(none, false, &PodView::default(), &c).await;
        assert_eq!(facts, NodeFacts::default());
    }
}
