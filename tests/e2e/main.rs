//! End to end against real runtimes (containerd 1.7 and 2.1, CRI-O), one module per area; each
//! test brings up its own instance (`test_support::e2e`), so they run in parallel. Root only:
//! `NRI_ALIGN_E2E=skip` skips them knowingly. One runtime: `cargo test --test e2e crio`.

mod daemon;
mod devices;
mod dra;
mod enforce;
mod enforce_load;
mod evict;
mod image;
mod kubelet_shapes;
mod mempolicy;
mod mig;
mod nrt;
mod nrt_refresh;
mod observe;
mod others;
mod plugin;
mod podlevel;
mod quota;
mod required_plugins;
mod resize;
mod scheduler;
mod soak;

/// An admin client of the test API server, on a tokio runtime of its own (the tests are
/// synchronous): what the tests that read the server's objects start from.
fn admin_client(
    server: &test_support::apiserver::ApiServer,
) -> (tokio::runtime::Runtime, kube::Client) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio");
    let client = rt.block_on(async {
        let kc = kube::config::Kubeconfig::read_from(server.path("KUBECONFIG_ADMIN"))
            .expect("admin kubeconfig");
        let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
            .await
            .expect("config");
        kube::Client::try_from(cfg).expect("client")
    });
    (rt, client)
}
