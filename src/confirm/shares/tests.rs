use super::*;

const LIMIT: usize = 64;
const SHORT: Duration = BORROW_HOLD;
const LONG: Duration = Duration::from_secs(600);

#[tokio::test(start_paused = true)]
async fn long_probes_never_hold_more_than_a_share_and_room_stays_for_a_newcomer() {
    let s = Shares::new(LIMIT);
    // Alone, a namespace whose probes hang takes half: room for one more.
    let hang: Vec<_> = std::iter::from_fn(|| s.try_take("hang", LONG)).collect();
    assert_eq!(hang.len(), LIMIT / 2);
    // A namespace never seen before starts at once, up to its share.
    let mut quiet = Vec::new();
    while let Some(share) = s.try_take("quiet", SHORT) {
        quiet.push(share);
    }
    assert_eq!(
        s.in_work("quiet"),
        LIMIT / 2,
        "its share: half while two ask"
    );
    // Three namespaces with hanging targets: each a third at most, and a
    // fourth still finds room.
    drop(quiet);
    drop(hang);
    let mut held = Vec::new();
    for ns in ["h1", "h2", "h3"] {
        while let Some(share) = s.try_take(ns, LONG) {
            held.push(share);
        }
    }
    assert!(s.lock().total < LIMIT, "{} of {LIMIT}", s.lock().total);
    assert!(s.try_take("h4", LONG).is_some(), "a newcomer finds room");
}

#[tokio::test(start_paused = true)]
async fn short_probes_borrow_and_give_way_to_a_namespace_below_its_share() {
    let s = Shares::new(LIMIT);
    let mut busy: Vec<_> = std::iter::from_fn(|| s.try_take("busy", SHORT)).collect();
    assert_eq!(busy.len(), LIMIT, "alone, short probes use the whole limit");
    // Another namespace waits; the next share given back is its, not busy's.
    let waiter = s.take("other", SHORT, Duration::from_secs(5));
    tokio::pin!(waiter);
    assert!(futures::poll!(waiter.as_mut()).is_pending());
    busy.pop();
    assert!(s.try_take("busy", SHORT).is_none(), "busy gives way");
    let share = waiter.await.expect("the starved namespace's turn");
    assert_eq!(s.in_work("other"), 1);
    drop(share);
}

#[tokio::test(start_paused = true)]
async fn the_wait_is_bounded_in_time_and_in_numbers() {
    let s = Shares::new(LIMIT);
    let _held: Vec<_> = std::iter::from_fn(|| s.try_take("busy", SHORT)).collect();
    let started = Instant::now();
    assert!(
        s.take("busy", SHORT, Duration::from_secs(1))
            .await
            .is_none()
    );
    assert_eq!(started.elapsed(), Duration::from_secs(1));
    // As many waiting as the limit (below twice its share when alone):
    // the next is refused at once.
    let mut waiters: Vec<_> = (0..LIMIT)
        .map(|_| Box::pin(s.take("busy", SHORT, Duration::from_secs(5))))
        .collect();
    for w in &mut waiters {
        assert!(futures::poll!(w.as_mut()).is_pending());
    }
    let started = Instant::now();
    assert!(
        s.take("busy", SHORT, Duration::from_secs(5))
            .await
            .is_none()
    );
    assert_eq!(started.elapsed(), Duration::ZERO, "refused without waiting");
    drop(waiters);
    assert!(
        s.lock().spaces.get("busy").is_none_or(|sp| sp.waiting == 0),
        "a dropped ask waits no more"
    );
}
