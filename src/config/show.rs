//! The effective configuration written out as a configuration file, every key explicit
//! (`nri-align config check` prints it): what a node runs with, defaults included, in the
//! form an operator can copy into a section. Parsing it back gives the same configuration.

use serde_yaml_ng::{Mapping, Value};

use super::Config;

fn put(m: &mut Mapping, key: &str, value: impl Into<Value>) {
    m.insert(Value::from(key), value.into());
}

fn text(s: Option<&str>) -> Value {
    s.map_or(Value::Null, Value::from)
}

fn path(p: Option<&std::path::Path>) -> Value {
    text(p.map(|p| p.to_str().unwrap_or("(not UTF-8)")))
}

fn list(v: &[String]) -> Value {
    Value::Sequence(v.iter().map(|s| Value::from(s.as_str())).collect())
}

fn enum_value<T: serde::Serialize>(v: &T) -> Value {
    serde_yaml_ng::to_value(v).unwrap_or(Value::Null)
}

impl Config {
    /// Every key with its effective value, as a configuration file.
    pub fn to_yaml(&self) -> String {
        let mut m = Mapping::new();
        self.put_placement(&mut m);
        self.put_inputs(&mut m);
        self.put_daemon(&mut m);
        put(&mut m, "nrt", self.nrt_mapping());
        serde_yaml_ng::to_string(&Value::Mapping(m)).unwrap_or_default()
    }

    /// The placement keys and the namespaces they apply to.
    fn put_placement(&self, m: &mut Mapping) {
        let p = &self.placement;
        put(m, "policy", enum_value(&p.policy));
        put(m, "scope", enum_value(&p.scope));
        put(m, "reserved_cpus", p.reserved_cpus.to_string());
        put(m, "gpu_mode", enum_value(&p.gpu_mode));
        put(m, "scheduler_choice", enum_value(&p.scheduler_choice));
        put(m, "numa_choice", enum_value(&p.numa_choice));
        put(m, "allow_device_annotations", p.allow_device_annotations);
        put(m, "full_pcpus_only", p.full_pcpus_only);
        put(m, "exclusive_headroom", p.exclusive_headroom);
        put(m, "mempolicy", enum_value(&p.mempolicy));
        put(m, "cpu_spread", enum_value(&p.cpu_spread));
        put(m, "resize_shrink", enum_value(&p.resize_shrink));
        put(m, "exempt_namespaces", list(&self.exempt_namespaces));
        put(
            m,
            "exclusive_annotation_namespaces",
            list(&p.exclusive_annotation_namespaces),
        );
        put(m, "isolated_namespaces", list(&p.isolated_namespaces));
    }

    /// Where devices and running containers are read from, and what is left to others.
    fn put_inputs(&self, m: &mut Mapping) {
        match &self.podresources {
            // An empty socket turns the lookup off; the other two keys then do not matter.
            None => put(m, "podresources_socket", ""),
            Some(pr) => {
                put(m, "podresources_socket", path(Some(&pr.socket)));
                put(m, "podresources_resources", list(&pr.resources));
                let ms = u64::try_from(pr.timeout.as_millis()).unwrap_or(u64::MAX);
                put(m, "podresources_timeout_ms", ms);
            }
        }
        put(
            m,
            "trust_visible_devices_env",
            self.trust_visible_devices_env,
        );
        put(m, "pod_budgets", self.pod_budgets);
        let trusted: Vec<String> = self
            .trusted_schedulers
            .iter()
            .map(|s| s.label().to_string())
            .collect();
        put(m, "trusted_schedulers", list(&trusted));
        put(m, "cri_socket", path(self.cri_socket.as_deref()));
        let dirs: Vec<String> = self
            .cdi_spec_dirs
            .iter()
            .map(|d| d.to_str().unwrap_or("(not UTF-8)").to_string())
            .collect();
        put(m, "cdi_spec_dirs", list(&dirs));
        let left: Vec<String> = self
            .leave_to_others
            .names()
            .into_iter()
            .map(String::from)
            .collect();
        put(m, "leave_to_others", list(&left));
        put(m, "create_dev_char_links", self.create_dev_char_links);
    }

    /// The daemon's own settings: state, quota, verification, metrics, logs, eviction.
    fn put_daemon(&self, m: &mut Mapping) {
        put(m, "state_dir", path(self.state_dir.as_deref()));
        put(m, "state_fsync", self.state_fsync);
        put(
            m,
            "exclusive_cpu_quota",
            enum_value(&self.exclusive_cpu_quota),
        );
        put(m, "replace_offlined_cpus", self.replace_offlined_cpus);
        put(
            m,
            "verify_remote_memory_threshold",
            self.verify_remote_memory_threshold,
        );
        let addr = self.metrics_address.map(|a| a.to_string());
        put(m, "metrics_address", text(addr.as_deref()));
        put(m, "log_format", enum_value(&self.log_format));
        put(m, "log_level", text(self.log_level.as_deref()));
        put(m, "plugin_idx", text(self.plugin_idx.as_deref()));
        let evict = self.evict_refused_after.map(super::duration::format);
        put(m, "evict_refused_after", text(evict.as_deref()));
    }

    /// The NodeResourceTopology publisher's keys, a mapping of their own.
    fn nrt_mapping(&self) -> Value {
        let n = &self.nrt;
        let mut nrt = Mapping::new();
        put(&mut nrt, "publish", n.publish);
        put(&mut nrt, "node_name", text(n.node_name.as_deref()));
        put(&mut nrt, "gpu_resource", text(n.resources.gpu.as_deref()));
        put(
            &mut nrt,
            "rdma_nic_resource",
            text(n.resources.rdma_nic.as_deref()),
        );
        put(&mut nrt, "resync_seconds", n.resync_seconds);
        put(&mut nrt, "take_over_foreign", n.take_over_foreign);
        Value::Mapping(nrt)
    }
}

#[cfg(test)]
#[path = "show_tests.rs"]
mod tests;
