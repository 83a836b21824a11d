//! Tests of the claims domain and its adapters.
use super::annotations::*;
use super::oci::*;
use super::store::*;
use super::wire::*;
use super::*;
use std::collections::BTreeMap;
use std::path::Path;

fn ann(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn req(pairs: &[(&str, &str)]) -> Result<Option<Request>, String> {
    Request::from_annotations(&ann(pairs), Some("rt")).map_err(|e| e.to_string())
}

#[test]
fn isolds_and_crios_annotations_ask_the_same() {
    let all = Some(Request {
        isolate: Isolate::All,
        pm_qos: None,
        governor: None,
    });
    assert_eq!(req(&[(ISOLATE, "true")]).unwrap(), all);
    assert_eq!(req(&[(CRIO_IRQ, "disable")]).unwrap(), all);
    assert_eq!(req(&[(CRIO_IRQ, "true")]).unwrap(), all);
    assert_eq!(
        req(&[(CRIO_IRQ, "housekeeping")]).unwrap().unwrap().isolate,
        Isolate::Housekeeping
    );
    assert_eq!(
        req(&[(ISOLATE, "true"), (CRIO_IRQ, "housekeeping")])
            .unwrap()
            .unwrap()
            .isolate,
        Isolate::All
    );
    assert_eq!(req(&[(ISOLATE, "false")]).unwrap(), None);
    assert_eq!(req(&[(CRIO_IRQ, "enable")]).unwrap(), None);
    assert_eq!(req(&[("io.other", "x")]).unwrap(), None);
    assert_eq!(req(&[]).unwrap(), None);
    for (v, want) in [
        ("enable", "0"),
        ("disable", "n/a"),
        ("max_latency:10", "10"),
        ("max_latency:2147483647", "2147483647"),
    ] {
        let r = req(&[(CRIO_CSTATES, v)]).unwrap().unwrap();
        assert_eq!(r.pm_qos.as_deref(), Some(want), "{v}");
        assert_eq!(r.isolate, Isolate::No);
    }
    let r = req(&[(CRIO_GOVERNOR, "performance")]).unwrap().unwrap();
    assert_eq!(r.governor.as_deref(), Some("performance"));
    // The runtime's own annotation asks isold for nothing.
    assert_eq!(req(&[(CRIO_RUNTIME_ONLY[0], "disable")]).unwrap(), None);
    // CPU load balancing off is the same intent as IRQ load balancing off.
    for v in ["disable", "true"] {
        let r = req(&[(CRIO_CPU_LB, v)]).unwrap().unwrap();
        assert_eq!(r.isolate, Isolate::All, "{v}");
    }
    assert_eq!(req(&[(CRIO_CPU_LB, "enable")]).unwrap(), None);
    assert!(req(&[(CRIO_CPU_LB, "off")]).is_err());
    let r = req(&[(CRIO_CPU_LB, "enable"), (CRIO_IRQ, "housekeeping")]).unwrap();
    assert_eq!(r.unwrap().isolate, Isolate::Housekeeping);
}

#[test]
fn a_containers_own_annotation_wins_and_others_do_not_apply() {
    let r = req(&[(ISOLATE, "false"), ("isold.io/isolate/rt", "true")]).unwrap();
    assert_eq!(r.unwrap().isolate, Isolate::All);
    assert_eq!(req(&[("isold.io/isolate/other", "true")]).unwrap(), None);
    let r = Request::from_annotations(&ann(&[("isold.io/isolate/rt", "true")]), None);
    assert_eq!(r.unwrap(), None);
}

#[test]
fn bad_annotation_values_are_refused_naming_key_and_value() {
    for (k, v, why) in [
        (
            ISOLATE,
            "yes",
            "annotation isold.io/isolate: 'yes' is not true or false",
        ),
        (
            ISOLATE,
            "",
            "annotation isold.io/isolate: '' is not true or false",
        ),
        (
            CRIO_IRQ,
            "off",
            "annotation irq-load-balancing.crio.io: 'off' is not disable, housekeeping or enable",
        ),
        (CRIO_CSTATES, "max_latency:", "is not max_latency:N"),
        (CRIO_CSTATES, "max_latency:-1", "is not max_latency:N"),
        (CRIO_CSTATES, "max_latency:0", "asks for a zero latency"),
        (
            CRIO_CSTATES,
            "max_latency:2147483648",
            "over the kernel's limit",
        ),
        (
            CRIO_CSTATES,
            "max_latency:99999999999",
            "is not max_latency:N",
        ),
        (
            CRIO_CSTATES,
            "off",
            "is not enable, disable or max_latency:N",
        ),
        (
            CRIO_GOVERNOR,
            "Performance",
            "is not a cpufreq governor name",
        ),
        (CRIO_GOVERNOR, "../../x", "is not a cpufreq governor name"),
        (
            CRIO_GOVERNOR,
            "a_governor_name_too_long",
            "is not a cpufreq governor name",
        ),
        (CRIO_GOVERNOR, "", "is not a cpufreq governor name"),
    ] {
        let e = req(&[(k, v)]).unwrap_err().to_string();
        assert!(e.contains(why) && e.contains(k), "{k}={v}: {e}");
    }
    let e = req(&[(ISOLATE, "tr\nue")]).unwrap_err().to_string();
    assert!(e.contains("'tr\\nue'"), "{e}");
}

#[test]
fn the_hook_state_is_checked_field_by_field() {
    let ok = br#"{"ociVersion":"1.0.2","id":"abc123","status":"created","pid":42,"bundle":"/run/b","annotations":{"isold.io/isolate":"true"}}"#;
    let s = HookState::parse(ok).unwrap();
    assert_eq!(
        (s.id.as_str(), s.pid, s.status.as_str()),
        ("abc123", 42, "created")
    );
    assert_eq!(s.bundle, Path::new("/run/b"));
    assert_eq!(s.annotations.get(ISOLATE).map(String::as_str), Some("true"));
    // poststop: no pid.
    let s = HookState::parse(br#"{"id":"abc","bundle":"/b","status":"stopped"}"#).unwrap();
    assert_eq!(s.pid, 0);
    for (input, why) in [
        (&b"not json"[..], "is not an OCI state (JSON)"),
        (br#"{"bundle":"/b"}"#, "has no id"),
        (
            br#"{"id":"../x","bundle":"/b"}"#,
            "id '../x' is not a container id",
        ),
        (br#"{"id":"","bundle":"/b"}"#, "is not a container id"),
        (
            br#"{"id":"a","bundle":"b"}"#,
            "bundle 'b' is not an absolute path",
        ),
        (br#"{"id":"a"}"#, "has no bundle"),
        (
            br#"{"id":"a","bundle":"/b","pid":-4}"#,
            "pid '-4' is not a process id",
        ),
        (
            br#"{"id":"a","bundle":"/b","pid":"x"}"#,
            "is not an OCI state",
        ),
        (
            br#"{"id":"a","bundle":"/b","annotations":{"k":1}}"#,
            "is not an OCI state",
        ),
    ] {
        let e = HookState::parse(input).unwrap_err().to_string();
        assert!(e.contains(why), "{}: {e}", String::from_utf8_lossy(input));
    }
    let big = vec![b' '; MAX_INPUT + 1];
    assert!(HookState::parse(&big)
        .unwrap_err()
        .to_string()
        .contains("over"));
}

#[test]
fn the_bundle_gives_the_cpuset_and_the_annotations() {
    let b = Bundle::parse(
        br#"{"ociVersion":"1.0","annotations":{"a":"b"},"linux":{"resources":{"cpu":{"cpus":"3","shares":2}}}}"#,
    )
    .unwrap();
    assert_eq!(b.cpus, Some("3".parse().unwrap()));
    assert_eq!(b.annotations.get("a").map(String::as_str), Some("b"));
    assert_eq!(Bundle::parse(br#"{"linux":{}}"#).unwrap().cpus, None);
    assert_eq!(b.pod_qos(), None);
    let json = r#"{"linux":{"cgroupsPath":"kubepods-burstable-pod1.slice:crio:abc"}}"#;
    assert_eq!(
        Bundle::parse(json.as_bytes()).unwrap().pod_qos(),
        Some(PodQos::Burstable)
    );
    assert_eq!(Bundle::parse(br#"{}"#).unwrap().cpus, None);
    let e = Bundle::parse(br#"{"linux":{"resources":{"cpu":{"cpus":"3-x"}}}}"#)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("linux.resources.cpu.cpus '3-x' is not a CPU list"),
        "{e}"
    );
    assert!(Bundle::parse(b"[")
        .unwrap_err()
        .to_string()
        .contains("not an OCI runtime configuration"));
    let dir = tempfile::tempdir().unwrap();
    let e = Bundle::read(dir.path()).unwrap_err().to_string();
    assert!(
        e.contains("config.json") && e.contains("No such file"),
        "{e}"
    );
}

#[test]
fn socket_messages_are_checked() {
    let m = Message::parse(
        br#"{"claim":{"container":"abc","pid":4,"cpus":"3","request":{"isolate":"all"}}}"#,
    )
    .unwrap();
    assert!(
        matches!(m, Message::Claim(ref c) if c.cpus == "3" && c.request.isolate == Isolate::All)
    );
    assert_eq!(
        Message::parse(br#"{"release":{"container":"abc"}}"#).unwrap(),
        Message::Release {
            container: "abc".into()
        }
    );
    assert_eq!(Message::parse(br#"{"list":{}}"#).unwrap(), Message::List {});
    for (input, why) in [
        (
            &br#"{"claim":{"container":"a/b","pid":4,"cpus":"3","request":{"isolate":"all"}}}"#[..],
            "container id 'a/b'",
        ),
        (
            br#"{"release":{"container":""}}"#,
            "release's container id ''",
        ),
        (br#"{"restore":{}}"#, "not a request"),
        (
            br#"{"claim":{"container":"a","pid":4,"cpus":"3","request":{"isolate":"most"}}}"#,
            "not a request",
        ),
        (
            br#"{"claim":{"container":"a","pid":4,"cpus":"3","request":{"isolate":"all"},"x":1}}"#,
            "not a request",
        ),
        (b"", "not a request"),
    ] {
        let e = Message::parse(input).unwrap_err().to_string();
        assert!(e.contains(why), "{}: {e}", String::from_utf8_lossy(input));
    }
}

fn claim(cpus: &str, isolated: &str) -> Claim {
    Claim {
        container: format!("c{cpus}"),
        name: None,
        pod: None,
        source: None,
        pid: 1,
        starttime: 1,
        cpus: cpus.into(),
        isolated: isolated.into(),
        pm_qos: None,
        governor: None,
    }
}

/// A policy isolating `isolated` of CPUs 0-7, with `[containers] cpus` when given.
fn allowing(isolated: &str, containers: Option<&str>) -> crate::policy::Policy {
    let mut p = policy(isolated);
    p.config.containers = containers.map(|c| crate::policy::config::ContainersConfig {
        cpus: c.parse().unwrap(),
        ..Default::default()
    });
    p
}

fn policy(isolated: &str) -> crate::policy::Policy {
    use crate::policy::config::{Config, CpuSpec};
    let iso: CpuSet = isolated.parse().unwrap();
    let online: CpuSet = "0-7".parse().unwrap();
    crate::policy::Policy {
        config: Config::defaults(
            crate::policy::preset::Preset::RealtimeVirtualHost,
            CpuSpec::List(iso.clone()),
        ),
        housekeeping: online.difference(&iso),
        online,
        isolated: iso,
        claimed: CpuSet::new(),
        claimed_power: Default::default(),
    }
}

/// Claims add their isolated CPUs to the configuration's, never take the configuration's
/// away, and a policy with other claims starts from the configuration's CPUs again.
#[test]
fn claims_add_cpus_to_the_configurations_and_are_replaced_whole() {
    let p = policy("2");
    let with = policy_with(&p, &[claim("3", "3"), claim("2,5", "2,5"), claim("6", "")]);
    assert_eq!(with.isolated.to_string(), "2-3,5");
    assert_eq!(with.claimed.to_string(), "3,5");
    assert_eq!(with.housekeeping.to_string(), "0-1,4,6-7");
    assert_eq!(with.static_isolated().to_string(), "2");
    assert_eq!(with.claimed_power.len(), 0);
    let fewer = policy_with(&with, &[claim("5", "5")]);
    assert_eq!(fewer.isolated.to_string(), "2,5");
    assert_eq!(fewer.housekeeping.to_string(), "0-1,3-4,6-7");
    let none = policy_with(&fewer, &[]);
    assert_eq!(none, p);
    // Claims that would leave no housekeeping CPU are left out (refused before).
    let all = policy_with(&p, &[claim("0-1,3-7", "0-1,3-7")]);
    assert_eq!(all.isolated.to_string(), "2");
    assert!(all.claimed.is_empty());
    // Offline CPUs are no claim's.
    let off = policy_with(&p, &[claim("9", "9")]);
    assert_eq!(off.isolated.to_string(), "2");
}

/// What a claim is checked for against the machine: its process read, its CPUs online,
/// a housekeeping CPU left with the others' claims, no power setting another holds
/// differently, CRI-O's housekeeping keeping the first core's siblings.
#[test]
fn a_claim_is_resolved_against_the_machine_and_the_other_claims() {
    let dir = tempfile::tempdir().unwrap();
    let root = SysRoot::new(dir.path());
    let put = |p: &str, v: &str| {
        let f = dir.path().join(p.trim_start_matches('/'));
        std::fs::create_dir_all(f.parent().unwrap()).unwrap();
        std::fs::write(f, v).unwrap();
    };
    put("/proc/7/task/7/stat", "7 (rt) S 1 7 7 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 99 2314240 379 18446744073709551615 4198400 5785993 140721731535456 0 0 0 0 4 65538 1 0 0 17 3 0 0 0 0 0 6141704 6178576 911699968 140721731538890 140721731538912 140721731538912 140721731538930 0\n");
    put(
        "/sys/devices/system/cpu/cpu4/topology/thread_siblings_list",
        "4,6\n",
    );
    // Every CPU is the containers': the checks below are the machine's and the others'.
    let pol = allowing("2", Some("0-1,3-7"));
    let req = |cpus: &str, isolate: Isolate, q: Option<&str>| ClaimRequest {
        container: "abc".into(),
        name: Some("rt".into()),
        pod: Some("p1".into()),
        source: None,
        pid: 7,
        cpus: cpus.into(),
        request: Request {
            isolate,
            pm_qos: q.map(Into::into),
            governor: None,
        },
    };
    let c = Claim::resolve(&root, &req("3", Isolate::All, Some("n/a")), &pol, &[]).unwrap();
    assert_eq!(
        (c.starttime, c.cpus.as_str(), c.isolated.as_str()),
        (99, "3", "3")
    );
    assert_eq!(c.who(), "container rt (abc)");
    let c = Claim::resolve(&root, &req("4-7", Isolate::Housekeeping, None), &pol, &[]).unwrap();
    assert_eq!(c.isolated, "5,7");
    let c = Claim::resolve(&root, &req("3", Isolate::No, Some("5")), &pol, &[]).unwrap();
    assert_eq!(c.isolated, "");
    put(
        "/sys/devices/system/cpu/cpu3/cpufreq/scaling_available_governors",
        "performance powersave\n",
    );
    let mut g = req("3", Isolate::No, None);
    g.request.governor = Some("performance".into());
    let c = Claim::resolve(&root, &g, &pol, &[]).unwrap();
    assert_eq!(c.governor.as_deref(), Some("performance"));
    g.request.governor = Some("schedutil".into());
    let e = Claim::resolve(&root, &g, &pol, &[])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("CPU 3 offers no governor schedutil (available: performance powersave)"),
        "{e}"
    );
    g.request.governor = Some("Bad".into());
    let e = Claim::resolve(&root, &g, &pol, &[])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("governor 'Bad' is not a cpufreq governor name"),
        "{e}"
    );
    let mut other = claim("3-4", "0-1,3-7");
    other.pm_qos = Some("n/a".into());
    other.name = Some("db".into());
    other.pod = Some("p1".into());
    for (r, others, why) in [
        (
            req("3", Isolate::All, Some("5")),
            vec![other.clone()],
            "CPUs 3 have PM QoS n/a for container db (c3-4), not 5",
        ),
        (
            req("0-1,3-7", Isolate::All, None),
            vec![],
            "leaves no housekeeping CPU",
        ),
        (
            req("3,8", Isolate::All, None),
            vec![],
            "CPUs 8 are not online",
        ),
        (req("", Isolate::All, None), vec![], "no cpuset"),
        (
            req("x", Isolate::All, None),
            vec![],
            "cpus 'x' is not a CPU list",
        ),
    ] {
        let e = Claim::resolve(&root, &r, &pol, &others)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(why) && e.starts_with("container rt (abc): "),
            "{e}"
        );
    }
    // The same PM QoS is no conflict; another container's isolated CPUs count.
    let mut same = other.clone();
    same.isolated = "3".into();
    assert!(Claim::resolve(&root, &req("3", Isolate::All, Some("n/a")), &pol, &[same]).is_ok());
    let mut wide = claim("0-1,4-7", "0-1,4-7");
    wide.container = "wide".into();
    let e = Claim::resolve(&root, &req("3", Isolate::All, None), &pol, &[wide.clone()])
        .unwrap_err()
        .to_string();
    assert!(e.contains("leaves no housekeeping CPU"), "{e}");
    // A claim replacing its own earlier one does not conflict with it.
    let mut mine = wide;
    mine.container = "abc".into();
    assert!(Claim::resolve(&root, &req("3", Isolate::All, None), &pol, &[mine]).is_ok());
    let mut gone = req("3", Isolate::All, None);
    gone.pid = 8;
    let e = Claim::resolve(&root, &gone, &pol, &[])
        .unwrap_err()
        .to_string();
    assert!(e.contains("its process 8 cannot be read"), "{e}");
    // Alive while the same process; gone when it is not (or reused).
    let mut c = Claim::resolve(&root, &req("3", Isolate::All, None), &pol, &[]).unwrap();
    assert!(c.alive(&root));
    c.starttime = 98;
    assert!(!c.alive(&root));
    c.pid = 8;
    assert!(!c.alive(&root));
}

#[test]
fn names_and_values_are_checked_character_by_character() {
    for ok in ["performance", "gov_2", "a"] {
        assert!(valid_governor(ok), "{ok}");
    }
    for bad in ["", "Gov", "a-b", "sixteen_letters_", "a b"] {
        assert!(!valid_governor(bad), "{bad}");
    }
    for ok in ["n/a", "0", "7", "2147483647"] {
        assert!(valid_pm_qos(ok), "{ok}");
    }
    for bad in ["", "N/A", "1x", "-1", "2147483648", "99999999999", " 1"] {
        assert!(!valid_pm_qos(bad), "{bad}");
    }
    for ok in ["a", "a.b-c_D9", &"f".repeat(128)] {
        assert!(valid_container_id(ok), "{ok}");
    }
    for bad in ["", ".a", "a/b", "a b", "a\n", &"f".repeat(129)] {
        assert!(!valid_container_id(bad), "{bad}");
    }
    // What is shown of a value: 64 characters, then "...".
    let v64 = "v".repeat(64);
    assert_eq!(shown(&v64), v64);
    assert_eq!(shown(&format!("{v64}w")), format!("{v64}..."));
}

/// Inputs up to MAX_INPUT bytes are read whole; one byte more is refused as too big.
#[test]
fn inputs_are_bounded_at_exactly_max_input() {
    let pad = |json: &str, len: usize| {
        let mut v = json.as_bytes().to_vec();
        v.resize(len, b' ');
        v
    };
    let state = r#"{"id":"a","bundle":"/b"}"#;
    assert!(HookState::parse(&pad(state, MAX_INPUT)).is_ok());
    assert!(HookState::parse(&pad(state, MAX_INPUT + 1))
        .unwrap_err()
        .to_string()
        .contains("over"));
    let config = r#"{"linux":{"resources":{"cpu":{"cpus":"3"}}}}"#;
    assert!(Bundle::parse(&pad(config, MAX_INPUT)).is_ok());
    assert!(Bundle::parse(&pad(config, MAX_INPUT + 1))
        .unwrap_err()
        .to_string()
        .contains("over"));
    let list = r#"{"list":{}}"#;
    assert!(Message::parse(&pad(list, MAX_INPUT)).is_ok());
    assert!(Message::parse(&pad(list, MAX_INPUT + 1))
        .unwrap_err()
        .to_string()
        .contains("over"));
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("config.json"), pad(config, MAX_INPUT)).unwrap();
    assert_eq!(
        Bundle::read(dir.path()).unwrap().cpus,
        Some("3".parse().unwrap())
    );
    std::fs::write(dir.path().join("config.json"), pad(config, MAX_INPUT + 1)).unwrap();
    let e = Bundle::read(dir.path()).unwrap_err().to_string();
    assert!(e.contains("config.json is 1048577 bytes, over"), "{e}");
    // An empty cpuset is none.
    let b = Bundle::parse(br#"{"linux":{"resources":{"cpu":{"cpus":" "}}}}"#).unwrap();
    assert_eq!(b.cpus, None);
}

#[test]
fn power_follows_each_claims_cpus() {
    let c = |cpus: &str, q: Option<&str>, g: Option<&str>| Claim {
        container: "c".into(),
        name: None,
        pod: None,
        source: None,
        pid: 1,
        starttime: 1,
        cpus: cpus.into(),
        isolated: String::new(),
        pm_qos: q.map(Into::into),
        governor: g.map(Into::into),
    };
    let p = power_of(&[
        c("2-3", Some("n/a"), None),
        c("5", None, Some("performance")),
        c("6", None, None),
    ]);
    assert_eq!(p.keys().copied().collect::<Vec<_>>(), vec![2, 3, 5]);
    assert_eq!(p[&3].pm_qos.as_deref(), Some("n/a"));
    assert_eq!(p[&5].governor.as_deref(), Some("performance"));
    assert_eq!(p[&5].pm_qos, None);
}

#[test]
fn claims_files_of_another_boot_hold_nothing_bad_files_are_refused_and_bad_claims_dropped_alone() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("run/claims.json");
    let claim = Claim {
        container: "abc".into(),
        name: Some("rt".into()),
        pod: None,
        source: None,
        pid: 5,
        starttime: 7,
        cpus: "3".into(),
        isolated: "3".into(),
        pm_qos: Some("n/a".into()),
        governor: None,
    };
    ClaimsFile::save(&path, "boot1", std::slice::from_ref(&claim)).unwrap();
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
        0o600
    );
    assert_eq!(
        ClaimsFile::load(&path, "boot1").unwrap().claims,
        vec![claim.clone()]
    );
    assert_eq!(ClaimsFile::load(&path, "boot2").unwrap().claims, vec![]);
    ClaimsFile::save(&path, "boot1", &[]).unwrap();
    assert!(!path.exists());
    assert_eq!(ClaimsFile::load(&path, "boot1").unwrap().claims, vec![]);
    std::fs::write(&path, "{").unwrap();
    assert!(ClaimsFile::load(&path, "b")
        .unwrap_err()
        .to_string()
        .contains("not a claims file"));
    let mut bad = claim;
    bad.pm_qos = Some("lots".into());
    let f = ClaimsFile {
        version: 1,
        boot_id: "b".into(),
        claims: vec![bad],
    };
    std::fs::write(&path, serde_json::to_vec(&f).unwrap()).unwrap();
    let l = ClaimsFile::load(&path, "b").unwrap();
    assert!(l.claims.is_empty());
    assert_eq!(
        l.dropped,
        vec!["claim 1 (\"abc\"): its PM QoS \"lots\" is not one isold writes".to_string()]
    );
    // Each field is checked on its own.
    let good = Claim {
        container: "abc".into(),
        name: None,
        pod: Some("p9".into()),
        source: None,
        pid: 5,
        starttime: 7,
        cpus: "3".into(),
        isolated: "3".into(),
        pm_qos: None,
        governor: None,
    };
    let bads: [fn(&mut Claim); 5] = [
        |c| c.container = "a/b".into(),
        |c| c.cpus = "x".into(),
        |c| c.isolated = "x".into(),
        |c| c.pm_qos = Some("x".into()),
        |c| c.governor = Some("X".into()),
    ];
    for (i, bad) in bads.iter().enumerate() {
        let mut c = good.clone();
        bad(&mut c);
        let f = ClaimsFile {
            version: 1,
            boot_id: "b".into(),
            claims: vec![good.clone(), c],
        };
        std::fs::write(&path, serde_json::to_vec(&f).unwrap()).unwrap();
        // The bad one is left out alone: the good one loads.
        let l = ClaimsFile::load(&path, "b").unwrap();
        assert_eq!(l.claims, vec![good.clone()], "{i}");
        assert_eq!(l.dropped.len(), 1, "{i}: {:?}", l.dropped);
        assert!(l.dropped[0].starts_with("claim 2 "), "{i}: {:?}", l.dropped);
    }
    // A claim of the wrong shape is left out the same way.
    let mut v = serde_json::to_value(ClaimsFile {
        version: 1,
        boot_id: "b".into(),
        claims: vec![good.clone()],
    })
    .unwrap();
    v["claims"]
        .as_array_mut()
        .unwrap()
        .push(serde_json::json!({"container": "def", "pid": "many"}));
    std::fs::write(&path, serde_json::to_vec(&v).unwrap()).unwrap();
    let l = ClaimsFile::load(&path, "b").unwrap();
    assert_eq!(l.claims, vec![good.clone()]);
    assert!(
        l.dropped[0].starts_with("claim 2 (\"def\"): not a claim:"),
        "{:?}",
        l.dropped
    );
    let f = ClaimsFile {
        version: 2,
        boot_id: "b".into(),
        claims: vec![],
    };
    std::fs::write(&path, serde_json::to_vec(&f).unwrap()).unwrap();
    assert!(ClaimsFile::load(&path, "b")
        .unwrap_err()
        .to_string()
        .contains("claims file version 2"));
    // A path that cannot be read is an error, not "no claim"; nor can it be saved over.
    let e = ClaimsFile::load(dir.path(), "b").unwrap_err().to_string();
    assert!(e.contains("cannot read"), "{e}");
    assert!(ClaimsFile::save(dir.path(), "b", &[]).is_err());
    std::fs::remove_file(&path).unwrap();
    ClaimsFile::save(&path, "b", &[]).unwrap();
    assert_eq!(
        ClaimsFile::path_for(Path::new("/run/isold/state.json")),
        Path::new("/run/isold/claims.json")
    );
}

/// The QoS class is read from the kubelet's layout level by level, for both cgroup drivers;
/// a name that only contains a class's word is not that class.
#[test]
fn the_pod_qos_class_comes_from_the_kubelets_cgroup_levels() {
    use PodQos::*;
    for (path, qos) in [
        // systemd driver (CRI-O, containerd)
        ("kubepods-burstable-pod1_2.slice:crio:abc", Some(Burstable)),
        (
            "kubepods-besteffort-pod1.slice:cri-containerd:abc",
            Some(BestEffort),
        ),
        ("kubepods-pod1_2.slice:crio:abc", Some(Guaranteed)),
        (
            "kubepods-pod1.slice:cri-containerd:kubepods-burstable",
            Some(Guaranteed),
        ),
        ("kubepods-podburstable.slice:crio:abc", Some(Guaranteed)),
        ("kubepods-burstable.slice:crio:abc", None),
        ("kubepods-burstable-pod1-x.slice:crio:abc", None),
        ("kubepods-guaranteed-pod1.slice:crio:abc", None),
        ("machine.slice:libpod:abc", None),
        ("mykubepods-burstable-pod1.slice:crio:abc", None),
        ("kubepods-burstable-pod1.slice", None),
        ("kubepods-burstable-notapod.slice:crio:abc", None),
        ("kubepods-besteffort-pod.slice:crio:abc", None),
        ("kubepods-pod.slice:crio:abc", None),
        // cgroupfs driver
        ("/kubepods/pod1-2/abc", Some(Guaranteed)),
        ("/kubepods/burstable/pod1/abc", Some(Burstable)),
        ("/kubepods/besteffort/pod1/abc", Some(BestEffort)),
        ("/kubepods/podburstable/abc", Some(Guaranteed)),
        ("/kubepods/pod1/burstable", Some(Guaranteed)),
        ("/custom-root/kubepods/burstable/pod1/abc", Some(Burstable)),
        ("/kubepods/burstable/abc", None),
        ("/kubepods/other/pod1/abc", None),
        ("/kubepods/burstable/pod1/abc/extra", None),
        ("/kubepods/pod1/abc/extra", None),
        ("/machine.slice/libpod-abc.scope", None),
        ("/burstable/kubepods-x", None),
        ("/kubepods/pod/abc", None),
        ("", None),
    ] {
        assert_eq!(PodQos::of_cgroups_path(path), qos, "{path}");
    }
    assert_eq!(Guaranteed.name(), "Guaranteed");
    assert_eq!(BestEffort.name(), "BestEffort");
}

/// Values from a container reach messages escaped: a newline cannot start a line of its own.
#[test]
fn container_names_and_ids_are_escaped_in_messages() {
    assert_eq!(
        who("abc", Some("rt\nisold: forged")),
        "container rt\\nisold: forged (abc)"
    );
    assert_eq!(
        who("abc", Some("a\nb\u{1b}[31m")),
        "container a\\nb\\u{1b}[31m (abc)"
    );
    assert!(!who("x", Some("a\rb\0")).contains(['\n', '\r', '\0']));
    assert_eq!(short("0123456789abcdef"), "0123456789ab");
    assert_eq!(short("é".repeat(13).as_str()), "é".repeat(12));
    let e = Request::from_annotations(&ann(&[("isold.io/isolate/a\nb", "x\ny")]), Some("a\nb"))
        .unwrap_err()
        .to_string();
    assert!(!e.contains('\n'), "{e}");
    assert!(e.contains("isold.io/isolate/a\\nb: 'x\\ny'"), "{e}");
}

/// The administrator's rule: a claim has only CPUs of isolated_cpus and [containers] cpus;
/// without the table, only the isolated ones (for its power settings); never another pod's.
#[test]
fn a_claim_takes_only_what_the_administrator_gave_containers() {
    let dir = tempfile::tempdir().unwrap();
    let root = SysRoot::new(dir.path());
    let stat = dir.path().join("proc/7/task/7/stat");
    std::fs::create_dir_all(stat.parent().unwrap()).unwrap();
    std::fs::write(&stat, "7 (rt) S 1 7 7 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 99 2314240 379 18446744073709551615 4198400 5785993 140721731535456 0 0 0 0 4 65538 1 0 0 17 3 0 0 0 0 0 6141704 6178576 911699968 140721731538890 140721731538912 140721731538912 140721731538930 0\n").unwrap();
    let req = |id: &str, cpus: &str, pod: Option<&str>| ClaimRequest {
        container: id.into(),
        name: None,
        pod: pod.map(Into::into),
        source: None,
        pid: 7,
        cpus: cpus.into(),
        request: Request {
            isolate: Isolate::All,
            pm_qos: Some("n/a".into()),
            governor: None,
        },
    };
    let table = allowing("2", Some("3-4"));
    let bare = allowing("2", None);
    // Allowed: isolated_cpus, [containers] cpus, or both.
    for cpus in ["3", "2-4", "4"] {
        let c = Claim::resolve(&root, &req("a", cpus, None), &table, &[]).unwrap();
        assert_eq!(c.cpus, cpus);
    }
    // A housekeeping CPU, with or without an allowed one: refused whole.
    for cpus in ["0-1", "1,3", "5"] {
        let e = Claim::resolve(&root, &req("a", cpus, None), &table, &[]).unwrap_err();
        assert_eq!(e.reason(), "not_allowed", "{cpus}");
        let text = e.to_string();
        assert!(
            text.contains("are not for containers") && text.contains("(2-4)"),
            "{text}"
        );
    }
    // Without the table: only the isolated CPUs, for their power settings.
    let c = Claim::resolve(&root, &req("a", "2", None), &bare, &[]).unwrap();
    assert_eq!(
        (c.isolated.as_str(), c.pm_qos.as_deref()),
        ("2", Some("n/a"))
    );
    assert_eq!(policy_with(&bare, &[c]).isolated.to_string(), "2");
    let e = Claim::resolve(&root, &req("a", "3", None), &bare, &[]).unwrap_err();
    assert_eq!(e.reason(), "not_allowed");
    assert!(
        e.to_string().contains("it has no [containers] table"),
        "{e}"
    );
    // Another pod's CPUs are refused; the same pod's shared.
    let held = Claim::resolve(&root, &req("a", "3-4", Some("pod1")), &table, &[]).unwrap();
    for (other, pod) in [("b", None), ("b", Some("pod2"))] {
        let e = Claim::resolve(
            &root,
            &req(other, "4", pod),
            &table,
            std::slice::from_ref(&held),
        )
        .unwrap_err();
        assert_eq!(e.reason(), "shared", "{pod:?}");
        assert!(
            e.to_string().contains("CPUs 4 are claimed by container a"),
            "{e}"
        );
    }
    let mut no_pod = held.clone();
    no_pod.pod = None;
    let e = Claim::resolve(&root, &req("b", "4", None), &table, &[no_pod]).unwrap_err();
    assert_eq!(e.reason(), "shared");
    let c = Claim::resolve(&root, &req("b", "4", Some("pod1")), &table, &[held]).unwrap();
    assert_eq!(c.pod.as_deref(), Some("pod1"));
    // A pod id that is not an id.
    let e = Claim::resolve(&root, &req("b", "4", Some("a/b")), &table, &[]).unwrap_err();
    assert_eq!(e.reason(), "invalid");
}

proptest::proptest! {
    /// Any bytes on the socket: a message or an error, never a panic.
    #[test]
    fn any_socket_line_parses_or_is_refused(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..512)) {
        let _ = Message::parse(&bytes);
    }

    /// Every message a hook sends is read back as sent, with its newline; a container id
    /// that is not one is refused whatever else the message holds.
    #[test]
    fn messages_are_read_back_as_sent(
        id in "[a-zA-Z0-9][a-zA-Z0-9._-]{0,60}",
        name in proptest::option::of("[ -~\n\t]{0,20}"),
        pod in proptest::option::of("[a-f0-9]{1,64}"),
        pid in 1i32..i32::MAX,
        cpus in "[0-9]{1,3}(-[0-9]{1,3})?",
        release in proptest::bool::ANY,
        bad in "[/ \n]",
    ) {
        let msg = if release {
            Message::Release { container: id.clone() }
        } else {
            Message::Claim(ClaimRequest {
                container: id.clone(),
                name,
                pod,
                source: None,
                pid,
                cpus,
                request: Request { isolate: Isolate::All, pm_qos: None, governor: None },
            })
        };
        let mut line = serde_json::to_vec(&msg).unwrap();
        line.push(b'\n');
        proptest::prop_assert_eq!(Message::parse(&line).unwrap(), msg.clone());
        let text = String::from_utf8(line).unwrap().replace(&format!("\"{id}\""), &format!("\"{id}{bad}\""));
        proptest::prop_assert!(Message::parse(text.as_bytes()).is_err());
    }
}

/// What a claim may ever have isolated beyond the configuration: `[containers] cpus` and the
/// claims' own, online; never the configuration's isolated CPUs by themselves.
#[test]
fn claimable_cpus_are_the_tables_and_the_claims() {
    let p = allowing("2", Some("3-4"));
    assert_eq!(claimable(&p, &[]).to_string(), "3-4");
    assert_eq!(claimable(&p, &[claim("5-6", "5-6")]).to_string(), "3-6");
    assert_eq!(claimable(&policy("2"), &[claim("9", "9")]).to_string(), "");
}
