//! Proves the memory policy (`mempolicy`) reaches the runtimes that can carry it and costs
//! nothing on those that cannot, on every runtime here:
//! - containerd 2.3 (NRI v0.12) receives it: the container's OCI spec has `linux.memoryPolicy`
//!   with the mode and the container's memory nodes;
//! - containerd 1.7, 2.1 and CRI-O (NRI v0.6.1 to v0.10) cannot: the container is created
//!   without it, and `verify` says the policy was not applied;
//! - where the spec carries it, the bookworm runc (1.1.5) does not apply it (the process runs
//!   with the kernel's default policy), and `verify` reports that difference: nri-align never
//!   claims a policy it did not see in force.

use test_support::each_cdi_runtime;

use test_support::e2e::suite::{guaranteed, Enforced};
use test_support::e2e::{PodSpec, Runtime};

fn mempolicy_reaches_the_runtimes_that_carry_it(rt: Runtime) {
    let Some(e) = Enforced::builder(rt, "mempolicy", "e2e-mpol")
        .config("mempolicy: interleave\n")
        .start()
    else {
        return;
    };
    let pod = e.rt.run_pod(&PodSpec::new("mpol")).expect("pod");
    let id = e.run(&pod, &guaranteed("main", 1));
    let live = e.live(&id);
    let spec = e.rt.cri().inspect(&id).expect("inspect");
    let policy = &spec["info"]["runtimeSpec"]["linux"]["memoryPolicy"];
    let verify = e.run.verify(&[]).expect("verify");
    let report = String::from_utf8_lossy(&verify.stdout).into_owned();
    if rt == Runtime::CONTAINERD_2_3 {
        assert_eq!(policy["mode"], "MPOL_INTERLEAVE", "{rt:?}: {policy}");
        assert_eq!(policy["nodes"], live.mems.as_str(), "{rt:?}: {policy}");
        // runc 1.1.5 does not know the field: the process keeps the default policy, and
        // verify says so instead of reporting the container as it was decided.
        assert!(
            report.contains("memory policy default, decided interleave:"),
            "{rt:?}: {report}"
        );
    } else {
        assert!(policy.is_null(), "{rt:?}: {policy}");
        assert!(
            report.contains("mempolicy interleave") && report.contains("not applied"),
            "{rt:?}: {report}"
        );
    }
}

each_cdi_runtime!(mempolicy_reaches_the_runtimes_that_carry_it);
