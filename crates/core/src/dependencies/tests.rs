use super::*;

fn node(labels: &[(&str, &str)], names: &[&str], down: Option<&str>) -> Node {
    Node {
        labels: labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        depends: (!names.is_empty()).then(|| {
            Box::new(Depends {
                names: names.iter().map(|n| n.to_string()).collect(),
                selector: None,
            })
        }),
        down: down.map(Arc::from),
        fall: Duration::from_secs(10),
    }
}

fn blocker(g: &Graph, ns: &str, name: &str) -> Option<String> {
    g.edges(ns)
        .get(name)
        .and_then(|e| e.blocker.as_ref())
        .map(|b| format!("{}:{}", b.name, b.reason))
}

#[test]
fn a_dependency_down_for_its_own_reason_blocks() {
    let mut g = Graph::default();
    g.set("shop", "gateway", node(&[], &[], Some("ConnectError")));
    g.set("shop", "cart", node(&[], &["gateway"], None));
    assert_eq!(
        blocker(&g, "shop", "cart").as_deref(),
        Some("gateway:ConnectError")
    );
    let e = &g.edges("shop")["cart"];
    assert_eq!(e.hold, Duration::from_secs(12), "its fall plus the spread");
    assert!(e.cycle.is_none());
    assert!(!g.edges("shop").contains_key("gateway"), "no dependencies");
}

#[test]
fn a_dependency_up_or_missing_blocks_nothing() {
    let mut g = Graph::default();
    g.set("shop", "gateway", node(&[], &[], None));
    g.set("shop", "cart", node(&[], &["gateway", "gone"], None));
    assert_eq!(blocker(&g, "shop", "cart"), None);
}

#[test]
fn the_root_of_a_chain_blocks_its_far_dependents() {
    let mut g = Graph::default();
    g.set("shop", "lb", node(&[], &[], Some("Timeout")));
    g.set("shop", "api", node(&[], &["lb"], Some(DEPENDENCY_DOWN)));
    g.set("shop", "ui", node(&[], &["api"], None));
    assert_eq!(blocker(&g, "shop", "ui").as_deref(), Some("lb:Timeout"));
    assert_eq!(blocker(&g, "shop", "api").as_deref(), Some("lb:Timeout"));
}

#[test]
fn a_dependency_down_only_because_of_its_own_dependency_is_not_a_root() {
    // api still says DependencyDown, but lb is back: api is about to say
    // its own reason or recover; it blocks nobody meanwhile.
    let mut g = Graph::default();
    g.set("shop", "lb", node(&[], &[], None));
    g.set("shop", "api", node(&[], &["lb"], Some(DEPENDENCY_DOWN)));
    g.set("shop", "ui", node(&[], &["api"], None));
    assert_eq!(blocker(&g, "shop", "ui"), None);
}

#[test]
fn within_a_cycle_nobody_blocks_anybody() {
    let mut g = Graph::default();
    g.set("shop", "a", node(&[], &["b"], Some("ConnectError")));
    g.set("shop", "b", node(&[], &["a"], Some("ConnectError")));
    g.set("shop", "c", node(&[], &["a"], None));
    let edges = g.edges("shop");
    assert_eq!(edges["a"].blocker, None);
    assert_eq!(edges["b"].blocker, None);
    assert_eq!(edges["a"].cycle.as_deref(), Some("b"));
    assert_eq!(
        blocker(&g, "shop", "c").as_deref(),
        Some("a:ConnectError"),
        "outside the cycle, its failures block as any other"
    );
    assert!(edges["c"].cycle.is_none());
}

#[test]
fn a_selector_picks_checkers_of_the_namespace_by_label_but_never_itself() {
    let mut g = Graph::default();
    let mut edge = node(&[("tier", "edge")], &[], None);
    edge.depends = Some(Box::new(Depends {
        names: vec![],
        selector: Some(Selector {
            labels: [("tier".to_string(), "edge".to_string())].into(),
            expressions: vec![],
        }),
    }));
    g.set("shop", "self-selecting", edge);
    g.set(
        "shop",
        "lb",
        node(&[("tier", "edge")], &[], Some("TLSError")),
    );
    g.set(
        "other",
        "lb",
        node(&[("tier", "edge")], &[], Some("Timeout")),
    );
    assert_eq!(
        blocker(&g, "shop", "self-selecting").as_deref(),
        Some("lb:TLSError")
    );
    g.set("shop", "lb", node(&[("tier", "edge")], &[], None));
    assert_eq!(
        blocker(&g, "shop", "self-selecting"),
        None,
        "another namespace's checker is never a dependency"
    );
}

#[test]
fn a_selector_counts_its_first_checkers_by_name() {
    let mut g = Graph::default();
    for i in 0..MAX_SELECTED + 1 {
        let down = (i == MAX_SELECTED).then_some("Timeout");
        g.set("shop", &format!("b{i:03}"), node(&[("t", "x")], &[], down));
    }
    let mut d = node(&[], &[], None);
    d.depends = Some(Box::new(Depends {
        names: vec![],
        selector: Some(Selector {
            labels: [("t".to_string(), "x".to_string())].into(),
            expressions: vec![],
        }),
    }));
    g.set("shop", "a", d);
    assert_eq!(blocker(&g, "shop", "a"), None, "the 65th is past the cap");
}

#[test]
fn the_hold_is_the_slowest_reachable_fall_and_is_capped() {
    let mut g = Graph::default();
    let mut slow = node(&[], &[], None);
    slow.fall = Duration::from_secs(40);
    g.set("shop", "slow", slow);
    g.set("shop", "mid", node(&[], &["slow"], None));
    g.set("shop", "top", node(&[], &["mid"], None));
    assert_eq!(g.edges("shop")["top"].hold, Duration::from_secs(42));
    let mut glacial = node(&[], &[], None);
    glacial.fall = Duration::from_secs(3600);
    g.set("shop", "slow", glacial);
    assert_eq!(g.edges("shop")["top"].hold, MAX_HOLD);
}

#[test]
fn a_snapshot_changes_only_when_a_namespace_edges_do() {
    let mut g = Graph::default();
    g.set("shop", "lb", node(&[], &[], None));
    g.set("shop", "api", node(&[], &["lb"], None));
    let mut deps = Dependencies::default();
    assert!(deps.set("shop", g.edges("shop")));
    assert!(!deps.set("shop", g.edges("shop")), "nothing new");
    assert!(!deps.set("empty", g.edges("empty")));
    g.set("shop", "lb", node(&[], &[], Some("Timeout")));
    assert!(deps.set("shop", g.edges("shop")));
    assert_eq!(deps.counts(), (1, 1));
    g.remove("shop", "api");
    assert!(deps.set("shop", g.edges("shop")));
    assert!(deps.of("shop", "api").is_none());
    assert_eq!(deps.counts(), (0, 0));
}
