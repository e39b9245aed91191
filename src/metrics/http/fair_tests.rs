use super::*;

fn ip(last: u8) -> IpAddr {
    IpAddr::from([127, 0, 0, last])
}

fn admitted(a: Admission) -> Option<Slot> {
    match a {
        Admission::Admitted(s) => Some(s),
        Admission::Refused => None,
    }
}

#[test]
fn a_full_table_makes_room_for_an_address_holding_less_never_for_an_equal() {
    let t = Arc::new(Table::default());
    // 4 addresses x 2 fill a table of 8.
    let mut held: Vec<Slot> = Vec::new();
    for round in 0..2 {
        for a in 2..6 {
            held.push(admitted(t.admit(ip(a), 8, 4)).unwrap_or_else(|| panic!("{a} {round}")));
        }
    }
    assert_eq!(t.len(), 8);
    // An address holding 2 already gets nothing: the others hold no more than it does.
    assert!(admitted(t.admit(ip(2), 8, 4)).is_none());
    // A newcomer takes the oldest connection of an address holding the most.
    let probe = admitted(t.admit(ip(1), 8, 4)).expect("newcomer admitted");
    assert_eq!(t.len(), 8);
    // 127.0.0.2's first connection was the oldest: it is gone from the table, and its
    // slot dropping later changes nothing.
    drop(held.remove(0));
    assert_eq!(t.len(), 8);
    drop(probe);
    assert_eq!(t.len(), 7);
    // The per-address share holds below the total too.
    let t = Arc::new(Table::default());
    let _mine: Vec<Slot> = (0..3)
        .map(|_| admitted(t.admit(ip(9), 100, 3)).expect("under the share"))
        .collect();
    assert!(admitted(t.admit(ip(9), 100, 3)).is_none());
}
