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
#[path = "api_tests.rs"]
mod tests;
