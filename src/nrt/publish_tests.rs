use super::*;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

#[test]
fn replace_keeps_others_labels_and_the_server_version() {
    let mut cur = NodeResourceTopology::default();
    cur.metadata.resource_version = Some("17".into());
    cur.metadata.labels = Some([("team".to_string(), "a".to_string())].into());
    cur.metadata.annotations = Some([("note".to_string(), "x".to_string())].into());
    let mut desired = NodeResourceTopology::default();
    desired.metadata.labels = Some(
        [(
            "app.kubernetes.io/managed-by".to_string(),
            "nri-align".to_string(),
        )]
        .into(),
    );
    desired.metadata.owner_references = Some(vec![OwnerReference {
        kind: "Node".into(),
        ..Default::default()
    }]);
    let out = merge_metadata(&cur, desired);
    assert_eq!(out.metadata.resource_version.as_deref(), Some("17"));
    let labels = out.metadata.labels.expect("labels");
    assert_eq!(labels.len(), 2);
    assert_eq!(labels.get("team").map(String::as_str), Some("a"));
    assert!(out.metadata.annotations.is_some());
    assert_eq!(out.metadata.owner_references.map(|o| o.len()), Some(1));
}

#[test]
fn jitter_adds_at_most_a_quarter() {
    let d = Duration::from_secs(4);
    let j = jitter(d);
    assert!(j >= d && j <= Duration::from_secs(5), "{j:?}");
}
