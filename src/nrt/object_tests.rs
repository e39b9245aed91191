use super::*;
use kube::Resource;

#[test]
fn rest_path_is_the_cluster_scoped_crd_path() {
    assert_eq!(
        NodeResourceTopology::url_path(&(), None),
        "/apis/topology.node.k8s.io/v1alpha2/noderesourcetopologies"
    );
}

#[test]
fn json_uses_the_upstream_field_names_and_omits_empty_optional_fields() {
    let obj = NodeResourceTopology {
        api_version: API_VERSION.into(),
        kind: KIND.into(),
        metadata: ObjectMeta {
            name: Some("n1".into()),
            ..Default::default()
        },
        topology_policies: vec![],
        zones: vec![Zone {
            name: "node-0".into(),
            zone_type: ZONE_TYPE_NODE.into(),
            costs: vec![CostInfo {
                name: "node-0".into(),
                value: 10,
            }],
            resources: vec![ResourceInfo {
                name: "cpu".into(),
                capacity: "4".into(),
                allocatable: "3".into(),
                available: "2".into(),
            }],
            ..Default::default()
        }],
        attributes: vec![AttributeInfo::new("topologyManagerPolicy", "none")],
    };
    let v = serde_json::to_value(&obj).expect("serialises");
    assert_eq!(
        v,
        serde_json::json!({
            "apiVersion": "topology.node.k8s.io/v1alpha2",
            "kind": "NodeResourceTopology",
            "metadata": {"name": "n1"},
            "zones": [{
                "name": "node-0",
                "type": "Node",
                "costs": [{"name": "node-0", "value": 10}],
                "resources": [{"name": "cpu", "capacity": "4", "allocatable": "3", "available": "2"}]
            }],
            "attributes": [{"name": "topologyManagerPolicy", "value": "none"}]
        })
    );
    let back: NodeResourceTopology = serde_json::from_value(v).expect("parses");
    assert_eq!(back, obj);
}

#[test]
fn reads_objects_written_by_other_producers() {
    // The upstream example instance (v1alpha1-era fields, integer quantities) and extra
    // metadata: unknown shapes must not break reading what is on the server.
    let v = serde_json::json!({
        "apiVersion": "topology.node.k8s.io/v1alpha2",
        "kind": "NodeResourceTopology",
        "metadata": {"name": "node1", "resourceVersion": "7", "labels": {"x": "y"}},
        "topologyPolicies": ["SingleNUMANodeContainerLevel"],
        "zones": [{"name": "node-0", "type": "Node", "parent": "socket-0",
                   "resources": [{"name": "vendor/nic1", "capacity": 3,
                                  "allocatable": "3", "available": 3}]}]
    });
    let obj: NodeResourceTopology = serde_json::from_value(v).expect("parses");
    assert_eq!(obj.topology_policies, ["SingleNUMANodeContainerLevel"]);
    assert_eq!(obj.zones[0].parent, "socket-0");
    assert_eq!(
        obj.zone("node-0")
            .and_then(|z| z.resource("vendor/nic1"))
            .map(|r| r.available.as_str()),
        Some("3")
    );
}
