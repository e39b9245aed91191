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
