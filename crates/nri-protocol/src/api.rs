//! The NRI API types (`nri.pkg.api.v1alpha1`), re-exported from the generated code, plus
//! [`EventMask`] for event subscriptions and the protobuf helpers needed to build messages.

use std::fmt;

pub use crate::generated::api::*;
pub use protobuf::{Enum, EnumOrUnknown, Message, MessageField};

/// Set of lifecycle [`Event`]s, as carried in `ConfigureResponse.events`: event `e` is bit
/// `1 << (e - 1)`. On the wire, 0 means "all events the runtime knows"; this type never
/// produces 0 for a non-empty set.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct EventMask(i32);

/// Every subscribable event, in enum order.
pub const ALL_EVENTS: [Event; 14] = [
    Event::RUN_POD_SANDBOX,
    Event::STOP_POD_SANDBOX,
    Event::REMOVE_POD_SANDBOX,
    Event::CREATE_CONTAINER,
    Event::POST_CREATE_CONTAINER,
    Event::START_CONTAINER,
    Event::POST_START_CONTAINER,
    Event::UPDATE_CONTAINER,
    Event::POST_UPDATE_CONTAINER,
    Event::STOP_CONTAINER,
    Event::REMOVE_CONTAINER,
    Event::UPDATE_POD_SANDBOX,
    Event::POST_UPDATE_POD_SANDBOX,
    Event::VALIDATE_CONTAINER_ADJUSTMENT,
];

fn bit(event: Event) -> i32 {
    let value = event.value();
    if (1..Event::LAST.value()).contains(&value) {
        1 << (value - 1)
    } else {
        0
    }
}

impl EventMask {
    /// No events.
    pub const EMPTY: EventMask = EventMask(0);

    /// Mask from raw wire bits.
    pub fn from_bits(bits: i32) -> Self {
        EventMask(bits)
    }

    /// Raw wire bits.
    pub fn bits(self) -> i32 {
        self.0
    }

    /// Mask holding exactly `events` (UNKNOWN and LAST are ignored).
    pub fn of(events: &[Event]) -> Self {
        events.iter().fold(Self::EMPTY, |m, e| m.with(*e))
    }

    /// Every event from RUN_POD_SANDBOX up to and including `last`.
    pub fn up_to(last: Event) -> Self {
        Self::of(&ALL_EVENTS[..ALL_EVENTS.iter().take_while(|e| **e != last).count() + 1])
    }

    /// This mask plus `event`.
    pub fn with(self, event: Event) -> Self {
        EventMask(self.0 | bit(event))
    }

    /// Whether `event` is in the mask.
    pub fn contains(self, event: Event) -> bool {
        let b = bit(event);
        b != 0 && self.0 & b == b
    }

    /// Whether no event is set.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// Events in both masks.
    pub fn intersection(self, other: EventMask) -> Self {
        EventMask(self.0 & other.0)
    }

    /// Events in `self` but not in `other`.
    pub fn difference(self, other: EventMask) -> Self {
        EventMask(self.0 & !other.0)
    }

    /// The events in the mask, in enum order.
    pub fn events(self) -> Vec<Event> {
        ALL_EVENTS
            .into_iter()
            .filter(|e| self.contains(*e))
            .collect()
    }
}

/// Human-friendly name of an event, as upstream prints it (`CreateContainer`, ...).
pub fn event_name(event: Event) -> &'static str {
    match event {
        Event::UNKNOWN => "Unknown",
        Event::RUN_POD_SANDBOX => "RunPodSandbox",
        Event::STOP_POD_SANDBOX => "StopPodSandbox",
        Event::REMOVE_POD_SANDBOX => "RemovePodSandbox",
        Event::CREATE_CONTAINER => "CreateContainer",
        Event::POST_CREATE_CONTAINER => "PostCreateContainer",
        Event::START_CONTAINER => "StartContainer",
        Event::POST_START_CONTAINER => "PostStartContainer",
        Event::UPDATE_CONTAINER => "UpdateContainer",
        Event::POST_UPDATE_CONTAINER => "PostUpdateContainer",
        Event::STOP_CONTAINER => "StopContainer",
        Event::REMOVE_CONTAINER => "RemoveContainer",
        Event::UPDATE_POD_SANDBOX => "UpdatePodSandbox",
        Event::POST_UPDATE_POD_SANDBOX => "PostUpdatePodSandbox",
        Event::VALIDATE_CONTAINER_ADJUSTMENT => "ValidateContainerAdjustment",
        Event::LAST => "Last",
    }
}

impl fmt::Display for EventMask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.events().into_iter().map(event_name).collect();
        let known = Self::of(&ALL_EVENTS);
        let unknown = self.difference(known);
        write!(f, "{}", names.join(","))?;
        if !unknown.is_empty() {
            let sep = if names.is_empty() { "" } else { "," };
            write!(f, "{sep}unknown(0x{:x})", unknown.0)?;
        }
        Ok(())
    }
}

impl fmt::Debug for EventMask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "EventMask(0x{:x}: {self})", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bits_follow_event_numbers() {
        assert_eq!(EventMask::of(&[Event::RUN_POD_SANDBOX]).bits(), 0x1);
        assert_eq!(EventMask::of(&[Event::CREATE_CONTAINER]).bits(), 0x8);
        assert_eq!(
            EventMask::of(&[Event::VALIDATE_CONTAINER_ADJUSTMENT]).bits(),
            1 << 13
        );
        assert_eq!(
            EventMask::of(&[Event::UNKNOWN, Event::LAST]),
            EventMask::EMPTY
        );
    }

    #[test]
    fn up_to_remove_container_is_the_pre_v0_10_set() {
        let mask = EventMask::up_to(Event::REMOVE_CONTAINER);
        assert_eq!(mask.bits(), 0x7ff);
        assert!(!mask.contains(Event::UPDATE_POD_SANDBOX));
        assert_eq!(mask.events().len(), 11);
    }

    #[test]
    fn display_names_events_and_unknown_bits() {
        let mask = EventMask::of(&[Event::CREATE_CONTAINER, Event::STOP_CONTAINER]);
        assert_eq!(mask.to_string(), "CreateContainer,StopContainer");
        let odd = EventMask::from_bits(mask.bits() | (1 << 20));
        assert_eq!(
            odd.to_string(),
            "CreateContainer,StopContainer,unknown(0x100000)"
        );
    }

    #[test]
    fn field_numbers_match_upstream_wire_format() {
        // ConfigureResponse.events is field 2 (varint): tag 0x10.
        let reply = ConfigureResponse {
            events: 8,
            ..Default::default()
        };
        assert_eq!(reply.write_to_bytes().unwrap(), vec![0x10, 0x08]);
        // RegisterPluginRequest: plugin_name = 1, plugin_idx = 2 (length-delimited).
        let reg = RegisterPluginRequest {
            plugin_name: "a".into(),
            plugin_idx: "10".into(),
            ..Default::default()
        };
        assert_eq!(
            reg.write_to_bytes().unwrap(),
            vec![0x0a, 1, b'a', 0x12, 2, b'1', b'0']
        );
        // ContainerAdjustment.env is field 4: tag 0x22.
        let adjust = ContainerAdjustment {
            env: vec![KeyValue {
                key: "K".into(),
                value: "V".into(),
                ..Default::default()
            }],
            ..Default::default()
        };
        assert_eq!(
            adjust.write_to_bytes().unwrap(),
            vec![0x22, 6, 0x0a, 1, b'K', 0x12, 1, b'V']
        );
    }

    #[test]
    fn set_operations() {
        let a = EventMask::of(&[Event::CREATE_CONTAINER, Event::UPDATE_POD_SANDBOX]);
        let b = EventMask::up_to(Event::REMOVE_CONTAINER);
        assert_eq!(a.intersection(b), EventMask::of(&[Event::CREATE_CONTAINER]));
        assert_eq!(a.difference(b), EventMask::of(&[Event::UPDATE_POD_SANDBOX]));
    }
}
