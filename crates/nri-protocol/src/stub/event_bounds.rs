//! Every request of the Plugin service but Synchronize (which `sync_decode` walks) counted on
//! the wire before ttrpc's generated handler decodes it: the entries of its repeated fields
//! and maps (variables, mounts and their options, labels, annotations, hooks, device nodes and
//! rules, namespaces, rlimits, CDI devices, seccomp syscalls...) at every depth, against
//! [`EventLimits`]. The generated types cost up to ninety times the encoded size of an empty
//! entry (a `Mount` of 2 bytes on the wire is over a hundred in memory, plus the vector's
//! growth): a 4 MiB CreateContainer of empty mounts took 348 MiB decoded, 2 million empty
//! variables 120 MiB. Counted first, a request over the bound is answered with
//! `RESOURCE_EXHAUSTED` and never decoded.
//!
//! Field numbers are those of `PodSandbox`, `LinuxPodSandbox`, `Container`, `Mount`, `Hooks`,
//! `Hook`, `LinuxContainer`, `LinuxResources`, `LinuxSeccomp`, `LinuxSyscall`,
//! `LinuxScheduler`, `LinuxRdt`, `OptionalRepeatedString`, `User`, `ContainerAdjustment`,
//! `LinuxContainerAdjustment`, `LinuxMemoryPolicy`, `ContainerUpdate`, `OwningPlugins`,
//! `FieldOwners`, `CompoundFieldOwners` and the request messages in
//! containerd/nri `pkg/api/api.proto` (our copy: `proto/nri/api.proto`). Singular fields are
//! not listed unless they hold repeated ones: repeated on the wire, a singular string replaces
//! the one before and a singular message merges into it, so only repeated entries accumulate.

use async_trait::async_trait;
use ttrpc::asynchronous::{MethodHandler, TtrpcContext};

use super::options::EventLimits;
use super::sync_decode::{walk, DecodeError, Value};

/// The fields of a message that can accumulate entries.
pub(crate) type Schema = &'static [(u32, Kind)];

/// What one occurrence of a field costs.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Kind {
    /// An entry of a repeated field or map (a string, a scalar, a message without repeated
    /// fields of its own).
    Entry,
    /// A packed repeated scalar: at most one element per byte.
    Packed,
    /// A message with repeated fields of its own: an entry, and its own entries counted too.
    Message(Schema),
}

use Kind::{Entry, Message, Packed};

const RESOURCES: Schema = &[(3, Entry), (6, Entry), (7, Entry)];
const LINUX_POD: Schema = &[
    (1, Message(RESOURCES)),
    (2, Message(RESOURCES)),
    (5, Entry),
    (6, Message(RESOURCES)),
];
const POD: Schema = &[(5, Entry), (6, Entry), (8, Message(LINUX_POD)), (10, Entry)];
const MOUNT: Schema = &[(4, Entry)];
const HOOK: Schema = &[(2, Entry), (3, Entry)];
const HOOKS: Schema = &[
    (1, Message(HOOK)),
    (2, Message(HOOK)),
    (3, Message(HOOK)),
    (4, Message(HOOK)),
    (5, Message(HOOK)),
    (6, Message(HOOK)),
];
const SYSCALL: Schema = &[(1, Entry), (4, Entry)];
const SECCOMP: Schema = &[(3, Entry), (4, Entry), (7, Message(SYSCALL))];
const SCHEDULER: Schema = &[(4, Packed)];
const REPEATED_STRING: Schema = &[(1, Entry)];
const RDT: Schema = &[(2, Message(REPEATED_STRING))];
const LINUX_CONTAINER: Schema = &[
    (1, Entry),
    (2, Entry),
    (3, Message(RESOURCES)),
    (8, Message(SECCOMP)),
    (9, Entry),
    (10, Entry),
    (11, Message(SCHEDULER)),
    (12, Message(RDT)),
];
const USER: Schema = &[(3, Packed)];
const CONTAINER: Schema = &[
    (5, Entry),
    (6, Entry),
    (7, Entry),
    (8, Entry),
    (9, Message(MOUNT)),
    (10, Message(HOOKS)),
    (11, Message(LINUX_CONTAINER)),
    (13, Entry),
    (20, Entry),
    (21, Message(USER)),
];

/// `pod = 1`, `container = 2`: CreateContainer and the other container events.
const POD_CONTAINER: Schema = &[(1, Message(POD)), (2, Message(CONTAINER))];
/// UpdateContainer: `linux_resources = 3` besides.
const UPDATE_CONTAINER: Schema = &[
    (1, Message(POD)),
    (2, Message(CONTAINER)),
    (3, Message(RESOURCES)),
];
/// `pod = 1`: the pod events.
const POD_ONLY: Schema = &[(1, Message(POD))];
/// UpdatePodSandbox: `overhead_linux_resources = 2`, `linux_resources = 3`.
const UPDATE_POD: Schema = &[
    (1, Message(POD)),
    (2, Message(RESOURCES)),
    (3, Message(RESOURCES)),
];
/// StateChangeEvent: `pod = 2`, `container = 3`.
const STATE_CHANGE: Schema = &[(2, Message(POD)), (3, Message(CONTAINER))];
const MEMORY_POLICY: Schema = &[(3, Packed)];
const LINUX_ADJUSTMENT: Schema = &[
    (1, Entry),
    (2, Message(RESOURCES)),
    (6, Message(SECCOMP)),
    (7, Entry),
    (8, Entry),
    (9, Entry),
    (10, Message(SCHEDULER)),
    (11, Message(RDT)),
    (12, Message(MEMORY_POLICY)),
];
const ADJUSTMENT: Schema = &[
    (2, Entry),
    (3, Message(MOUNT)),
    (4, Entry),
    (5, Message(HOOKS)),
    (6, Message(LINUX_ADJUSTMENT)),
    (7, Entry),
    (8, Entry),
    (9, Entry),
];
const LINUX_UPDATE: Schema = &[(1, Message(RESOURCES))];
const CONTAINER_UPDATE: Schema = &[(2, Message(LINUX_UPDATE))];
// OwningPlugins: `map<string, FieldOwners>`, FieldOwners `map<int32, string>` and
// `map<int32, CompoundFieldOwners>`; a map entry is a message of `key = 1`, `value = 2`.
const COMPOUND_OWNERS: Schema = &[(1, Entry)];
const COMPOUND_ENTRY: Schema = &[(2, Message(COMPOUND_OWNERS))];
const FIELD_OWNERS: Schema = &[(1, Entry), (2, Message(COMPOUND_ENTRY))];
const OWNERS_ENTRY: Schema = &[(2, Message(FIELD_OWNERS))];
const OWNING_PLUGINS: Schema = &[(1, Message(OWNERS_ENTRY))];
/// ValidateContainerAdjustment: the pod, container, adjustment, updates, owners and plugins.
const VALIDATE: Schema = &[
    (1, Message(POD)),
    (2, Message(CONTAINER)),
    (3, Message(ADJUSTMENT)),
    (4, Message(CONTAINER_UPDATE)),
    (5, Message(OWNING_PLUGINS)),
    (6, Entry),
];

/// The schema of the request of Plugin service method `method`, for those that carry pods
/// or containers.
pub(crate) fn request_schema(method: &str) -> Option<Schema> {
    Some(match method {
        "CreateContainer"
        | "PostCreateContainer"
        | "StartContainer"
        | "PostStartContainer"
        | "PostUpdateContainer"
        | "StopContainer"
        | "RemoveContainer" => POD_CONTAINER,
        "UpdateContainer" => UPDATE_CONTAINER,
        "RunPodSandbox" | "PostUpdatePodSandbox" | "StopPodSandbox" | "RemovePodSandbox" => {
            POD_ONLY
        }
        "UpdatePodSandbox" => UPDATE_POD,
        "StateChange" => STATE_CHANGE,
        "ValidateContainerAdjustment" => VALIDATE,
        _ => return None,
    })
}

/// Counts the entries of the encoded message `payload` of `schema`, failing as soon as they
/// pass `max`. Returns the count.
pub(crate) fn count_entries(
    payload: &[u8],
    schema: Schema,
    max: usize,
) -> Result<usize, DecodeError> {
    let mut n = 0usize;
    count_into(payload, schema, max, &mut n)?;
    Ok(n)
}

fn count_into(b: &[u8], schema: Schema, max: usize, n: &mut usize) -> Result<(), DecodeError> {
    walk(b, |field, value| {
        let Some((_, kind)) = schema.iter().find(|(f, _)| *f == field) else {
            return Ok(());
        };
        *n = n.saturating_add(match (kind, value) {
            (Packed, Value::Bytes(x)) => x.len(),
            _ => 1,
        });
        if *n > max {
            return Err(DecodeError::Over(format!(
                "more than {max} entries in its repeated fields and maps"
            )));
        }
        if let (Message(inner), Value::Bytes(x)) = (kind, value) {
            count_into(x, inner, max, n)?;
        }
        Ok(())
    })
}

/// A generated ttrpc method handler behind [`count_entries`]: a request over
/// [`EventLimits::max_entries`] is answered `RESOURCE_EXHAUSTED`, a malformed one
/// `INVALID_ARGUMENT`, both without being decoded.
pub(crate) struct BoundedMethod {
    pub(crate) inner: Box<dyn MethodHandler + Send + Sync>,
    pub(crate) method: String,
    pub(crate) schema: Schema,
    pub(crate) limits: EventLimits,
    /// `idx-name`, for logs.
    pub(crate) plugin_id: String,
}

#[async_trait]
impl MethodHandler for BoundedMethod {
    async fn handler(
        &self,
        ctx: TtrpcContext,
        req: ttrpc::Request,
    ) -> ttrpc::Result<ttrpc::Response> {
        use ttrpc::proto::ResponseInit;
        let (code, message) =
            match count_entries(&req.payload, self.schema, self.limits.max_entries) {
                Ok(_) => return self.inner.handler(ctx, req).await,
                Err(DecodeError::Over(over)) => (
                    ttrpc::Code::RESOURCE_EXHAUSTED,
                    format!(
                        "{} from the runtime is too large: {over} ({} bytes); not decoded",
                        self.method,
                        req.payload.len()
                    ),
                ),
                Err(DecodeError::Wire(wire)) => (
                    ttrpc::Code::INVALID_ARGUMENT,
                    format!("malformed {}: {wire}", self.method),
                ),
            };
        tracing::warn!(plugin = %self.plugin_id, "{message}");
        Ok(ttrpc::Response::init_status(ttrpc::get_status(
            code, message,
        )))
    }
}

#[cfg(test)]
#[path = "event_bounds_tests.rs"]
mod tests;
