use super::*;

fn env<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
    move |k| {
        pairs
            .iter()
            .find(|(n, _)| *n == k)
            .map(|(_, v)| v.to_string())
    }
}

#[test]
fn kubeconfig_wins_then_service_account_then_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let svc = [
        ("KUBERNETES_SERVICE_HOST", "10.96.0.1"),
        ("KUBERNETES_SERVICE_PORT", "443"),
    ];
    let kc = Path::new("/etc/nri-align/kubeconfig");
    assert_eq!(
        ApiAccess::detect_with(Some(kc), env(&svc), dir.path()),
        Some(ApiAccess::Kubeconfig {
            path: kc.into(),
            context: None
        })
    );
    // No token mounted: not in a pod with a service account.
    assert_eq!(ApiAccess::detect_with(None, env(&svc), dir.path()), None);
    std::fs::write(dir.path().join("token"), "t").expect("token");
    assert_eq!(
        ApiAccess::detect_with(None, env(&svc), dir.path()),
        Some(ApiAccess::InCluster {
            server: "https://10.96.0.1:443".into(),
            dir: dir.path().into()
        })
    );
    let v6 = [
        ("KUBERNETES_SERVICE_HOST", "fd00::1"),
        ("KUBERNETES_SERVICE_PORT", "6443"),
    ];
    assert!(matches!(
        ApiAccess::detect_with(None, env(&v6), dir.path()),
        Some(ApiAccess::InCluster { server, .. }) if server == "https://[fd00::1]:6443"
    ));
    assert_eq!(ApiAccess::detect_with(None, env(&[]), dir.path()), None);
}

#[tokio::test]
async fn in_cluster_config_reads_the_token_file_and_ca_by_path() {
    let dir = tempfile::tempdir().expect("tempdir");
    let access = ApiAccess::InCluster {
        server: "https://10.96.0.1:443".into(),
        dir: dir.path().into(),
    };
    let err = access
        .config(Timeouts::default())
        .await
        .expect_err("no files");
    assert!(err.to_string().contains("token is missing"), "{err}");
}

#[tokio::test]
async fn a_missing_kubeconfig_names_the_file() {
    let access = ApiAccess::Kubeconfig {
        path: "/nonexistent/kubeconfig".into(),
        context: None,
    };
    let err = access
        .config(Timeouts::default())
        .await
        .expect_err("missing");
    assert!(err.to_string().contains("/nonexistent/kubeconfig"), "{err}");
}
