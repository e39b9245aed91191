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
    // The per-address share holds below the total too: with every connection of the address
    // being answered, a newcomer is closed.
    let t = Arc::new(Table::default());
    let mine: Vec<Slot> = (0..3)
        .map(|_| admitted(t.admit(ip(9), 100, 3)).expect("under the share"))
        .collect();
    for s in &mine {
        t.answering(s.id());
    }
    assert!(admitted(t.admit(ip(9), 100, 3)).is_none());
    assert_eq!(t.len(), 3);
}

#[test]
fn at_its_share_a_newcomer_takes_the_place_of_its_address_oldest_waiting_connection() {
    let t = Arc::new(Table::default());
    // The probe's own address holds its share: the first being answered, two still waiting
    // for their requests (slow clients).
    let mine: Vec<Slot> = (0..3)
        .map(|_| admitted(t.admit(ip(1), 100, 3)).expect("under the share"))
        .collect();
    t.answering(mine[0].id());
    let probe = admitted(t.admit(ip(1), 100, 3)).expect("the probe is admitted");
    // The oldest waiting one (the second) made way; the one being answered kept its place.
    let held: Vec<u64> = {
        let inner = t.lock();
        let mut ids: Vec<u64> = inner.conns.keys().copied().collect();
        ids.sort_unstable();
        ids
    };
    assert_eq!(held, vec![mine[0].id(), mine[2].id(), probe.id()]);
    // The probe, once its request is in, is not closed by the next newcomers of its address.
    t.answering(probe.id());
    let next = admitted(t.admit(ip(1), 100, 3)).expect("takes the third's place");
    assert!(t.lock().conns.contains_key(&probe.id()));
    t.answering(next.id());
    assert!(
        admitted(t.admit(ip(1), 100, 3)).is_none(),
        "all three answered"
    );
    assert_eq!(t.len(), 3);
}
