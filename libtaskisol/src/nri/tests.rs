//! Tests of the NRI codec: byte streams written out by hand from the protocol's definition
//! (the multiplexer's and ttrpc's headers, the protobuf keys of api.proto v0.8.0), so that the
//! encoder and the decoder are each checked against the wire, not only against each other;
//! and a connection between a real containerd 2.1.9 and isold, recorded byte for byte
//! (tests/fixtures/nri).

use std::collections::BTreeMap;

use super::api::{self, Container, ContainerState, Event, PodContainer, PodSandbox, Synchronize};
use super::mux::{self, Demux};
use super::ttrpc::{self, Reader, Request, Response};
use super::*;

/// A length-delimited protobuf field: key, one-byte length, bytes.
fn ld(number: u8, bytes: &[u8]) -> Vec<u8> {
    assert!(bytes.len() < 128);
    let mut v = vec![(number << 3) | 2, bytes.len() as u8];
    v.extend_from_slice(bytes);
    v
}

/// The plugin's registration as it goes on the trunk: frame header (conn 2, length), ttrpc
/// header (length, stream 1, request, flags 0), the request envelope, RegisterPluginRequest.
#[test]
fn the_registration_is_written_byte_for_byte() {
    let body = api::register_plugin("isold", "90");
    assert_eq!(
        body,
        [0x0a, 5, b'i', b's', b'o', b'l', b'd', 0x12, 2, b'9', b'0']
    );
    let env = Request {
        service: api::RUNTIME_SERVICE.into(),
        method: "RegisterPlugin".into(),
        payload: body.clone(),
        timeout_nano: 0,
    }
    .encode();
    let mut want = ld(1, b"nri.pkg.api.v1alpha1.Runtime");
    want.extend(ld(2, b"RegisterPlugin"));
    want.extend(ld(3, &body));
    assert_eq!(env, want);
    let msg = ttrpc::Message {
        stream: 1,
        kind: ttrpc::REQUEST,
        flags: 0,
        data: env.clone(),
    }
    .encode();
    let mut want = (env.len() as u32).to_be_bytes().to_vec();
    want.extend([0, 0, 0, 1, 1, 0]);
    want.extend(&env);
    assert_eq!(msg, want);
    let trunk = mux::frames(mux::RUNTIME_CONN, &msg);
    assert_eq!(&trunk[..8], &[0, 0, 0, 2, 0, 0, 0, msg.len() as u8]);
    assert_eq!(&trunk[8..], &msg[..]);
}

/// containerd's Configure as it arrives on conn 1 (the values seen live from 2.1.9), read
/// whatever the pieces the trunk delivers it in.
#[test]
fn configure_is_read_from_the_trunk_in_any_pieces() {
    let mut conf = ld(2, b"containerd");
    conf.extend(ld(3, b"2.1.9+unknown"));
    conf.extend([4 << 3, 0x88, 0x27]); // registration_timeout = 5000
    conf.extend([5 << 3, 0xd0, 0x0f]); // request_timeout = 2000
    let mut env = ld(1, b"nri.pkg.api.v1alpha1.Plugin");
    env.extend(ld(2, b"Configure"));
    env.extend(ld(3, &conf));
    env.extend([4 << 3, 0x80, 0xa8, 0xd6, 0xb9, 0x07]); // timeout_nano = 2e9
    let mut stream = (env.len() as u32).to_be_bytes().to_vec();
    stream.extend([0, 0, 0, 3, 1, 0]);
    stream.extend(&env);
    let mut trunk = Vec::new();
    // The runtime's sender may cut a message anywhere: two frames.
    for part in [&stream[..7], &stream[7..]] {
        trunk.extend((mux::PLUGIN_CONN).to_be_bytes());
        trunk.extend((part.len() as u32).to_be_bytes());
        trunk.extend_from_slice(part);
    }
    for step in [1, 3, 8, 9, 64, trunk.len()] {
        let mut d = Demux::default();
        let mut r = Reader::default();
        let mut got = Vec::new();
        for piece in trunk.chunks(step) {
            d.push(piece);
            while let Some((conn, payload)) = d.next_frame().unwrap() {
                assert_eq!(conn, mux::PLUGIN_CONN);
                r.push(&payload);
                while let Some(m) = r.next_message().unwrap() {
                    got.push(m);
                }
            }
        }
        assert_eq!(got.len(), 1, "pieces of {step}");
        let m = &got[0];
        assert_eq!((m.stream, m.kind, m.flags), (3, ttrpc::REQUEST, 0));
        let req = Request::decode(&m.data).unwrap();
        assert_eq!(
            (req.service.as_str(), req.method.as_str(), req.timeout_nano),
            (api::PLUGIN_SERVICE, "Configure", 2_000_000_000)
        );
        let c = api::Configure::decode(&req.payload).unwrap();
        assert_eq!(
            c,
            api::Configure {
                config: String::new(),
                runtime_name: "containerd".into(),
                runtime_version: "2.1.9+unknown".into(),
                registration_timeout: 5000,
                request_timeout: 2000,
            }
        );
    }
    // A plugin configuration, which containerd 2.1.9 sends empty: field 1.
    let mut with_config = ld(1, b"cpus = 3");
    with_config.extend(ld(2, b"containerd"));
    let c = api::Configure::decode(&with_config).unwrap();
    assert_eq!(
        (c.config.as_str(), c.runtime_name.as_str()),
        ("cpus = 3", "containerd")
    );
}

/// What the plugin answers: the subscription (events = field 2), an empty reply as no bytes,
/// a refusal as a status, a split synchronization echoing `more`.
#[test]
fn replies_are_encoded_as_the_runtime_reads_them() {
    let events = api::mask(&[
        Event::RunPodSandbox,
        Event::CreateContainer,
        Event::StopContainer,
        Event::RemoveContainer,
        Event::RemovePodSandbox,
    ]);
    assert_eq!(events, 0x1 | 0x4 | 0x8 | 0x200 | 0x400);
    assert_eq!(api::configure_response(events), [0x10, 0x8d, 0x0c]);
    assert_eq!(Response::default().encode(), Vec::<u8>::new());
    let refused = Response {
        code: ttrpc::code::FAILED_PRECONDITION,
        message: "no".into(),
        payload: Vec::new(),
    };
    let bytes = refused.encode();
    let mut status = vec![0x08, 9];
    status.extend(ld(2, b"no"));
    assert_eq!(bytes, ld(1, &status));
    assert_eq!(Response::decode(&bytes).unwrap(), refused);
    assert_eq!(api::synchronize_response(true), [0x10, 1]);
    assert_eq!(api::synchronize_response(false), Vec::<u8>::new());
}

fn pod() -> PodSandbox {
    PodSandbox {
        id: "a1b2c3".into(),
        name: "rt-pod".into(),
        uid: "0f1e-2d3c".into(),
        namespace: "default".into(),
        annotations: BTreeMap::from([
            ("isold.io/isolate".to_string(), "true".to_string()),
            ("cpu-c-states.crio.io".to_string(), "disable".to_string()),
        ]),
        cgroup_parent: "/kubepods/pod0f1e-2d3c".into(),
        pid: 0,
    }
}

fn container() -> Container {
    Container {
        id: "c0ffee".into(),
        pod_sandbox_id: "a1b2c3".into(),
        name: "rt".into(),
        state: ContainerState::Created,
        annotations: BTreeMap::from([(
            "io.kubernetes.cri.container-name".to_string(),
            "rt".to_string(),
        )]),
        cpus: "3".into(),
        shares: Some(1024),
        cgroups_path: "/kubepods/pod0f1e-2d3c/c0ffee".into(),
        pid: 4242,
    }
}

/// A container's cpuset and cgroups path sit three and one levels down
/// (linux=11 > resources=3 > cpu=2 > cpus=6; linux=11 > cgroups_path=5): read from bytes
/// written out by hand, with fields isold skips (a fixed64, an unknown varint) in between.
#[test]
fn a_containers_cpuset_and_annotations_are_read_from_its_bytes() {
    let mut cpu = ld(1, &[1 << 3, 0x80, 0x08]); // shares: OptionalUInt64 { value: 1024 }
    cpu.extend(ld(6, b"3"));
    let mut resources = vec![0x09, 1, 2, 3, 4, 5, 6, 7, 8]; // memory as a fixed64 (skipped)
    resources.extend(ld(2, &cpu));
    let mut linux = ld(3, &resources);
    linux.extend(ld(5, b"/kubepods/pod0f1e-2d3c/c0ffee"));
    let mut entry = ld(1, b"io.kubernetes.cri.container-name");
    entry.extend(ld(2, b"rt"));
    // An annotation isold does not read: skipped, not kept.
    let mut other = ld(1, b"kubectl.kubernetes.io/last-applied-configuration");
    other.extend(ld(2, b"{\"big\": true}"));
    let mut c = ld(1, b"c0ffee");
    c.extend(ld(2, b"a1b2c3"));
    c.extend(ld(3, b"rt"));
    c.extend([4 << 3, 1]);
    c.extend(ld(6, &entry));
    c.extend(ld(6, &other));
    c.extend([15 << 3, 42]); // a field of a later version
    c.extend(ld(11, &linux));
    c.extend([12 << 3, 0xca, 0x21]); // pid: 0x4a + (0x21 << 7)
    let got = Container::decode(&c).unwrap();
    let mut want = container();
    want.pid = 0x4a + (0x21 << 7);
    assert_eq!(got, want);
    assert_eq!(Container::decode(&want.encode().0).unwrap(), want);
    let p = pod();
    assert_eq!(PodSandbox::decode(&p.encode().0).unwrap(), p);
    // A pod's pid (field 9), and each state of a container (field 4) as NRI numbers them.
    let p = PodSandbox { pid: 4711, ..pod() };
    assert_eq!(PodSandbox::decode(&p.encode().0).unwrap().pid, 4711);
    for (number, state) in [
        (1, ContainerState::Created),
        (2, ContainerState::Paused),
        (3, ContainerState::Running),
        (4, ContainerState::Stopped),
        (0, ContainerState::Unknown),
        (9, ContainerState::Unknown),
    ] {
        let mut c = ld(1, b"c0ffee");
        c.extend([4 << 3, number]);
        assert_eq!(Container::decode(&c).unwrap().state, state, "{number}");
    }
}

/// The claim NRI's container asks for is the OCI hook's: the same annotations (the pod's,
/// the container's winning), its name for `KEY/NAME`, its pod for sharing CPUs.
#[test]
fn a_container_asks_for_the_claim_its_annotations_say() {
    let (p, c) = (pod(), container());
    let req = claim_of(&p, &c).unwrap().unwrap();
    assert_eq!(
        (
            req.container.as_str(),
            req.name.as_deref(),
            req.pod.as_deref(),
            req.pid,
            req.cpus.as_str()
        ),
        ("c0ffee", Some("rt"), Some("a1b2c3"), 4242, "3")
    );
    assert_eq!(req.request.isolate, crate::claims::Isolate::All);
    assert_eq!(req.request.pm_qos.as_deref(), Some("n/a"));
    // The container's own annotation wins; `KEY/NAME` for another container does not apply.
    let mut c2 = c.clone();
    c2.annotations
        .insert("isold.io/isolate".into(), "false".into());
    let mut p2 = p.clone();
    p2.annotations.remove("cpu-c-states.crio.io");
    assert_eq!(claim_of(&p2, &c2).unwrap(), None);
    p2.annotations
        .insert("isold.io/isolate/other".into(), "true".into());
    c2.annotations.remove("isold.io/isolate");
    p2.annotations
        .insert("isold.io/isolate".into(), "false".into());
    assert_eq!(claim_of(&p2, &c2).unwrap(), None);
    p2.annotations
        .insert("isold.io/isolate/rt".into(), "true".into());
    assert!(claim_of(&p2, &c2).unwrap().is_some());
    // A bad value is an error, as the hook's.
    p2.annotations
        .insert("isold.io/isolate/rt".into(), "yes".into());
    assert!(claim_of(&p2, &c2)
        .unwrap_err()
        .to_string()
        .contains("'yes' is not true or false"));
}

/// Synchronize, the lifecycle requests and the pod events, each from its field numbers.
#[test]
fn synchronize_requests_and_events_carry_pods_and_containers() {
    let (p, c) = (pod(), container());
    // The container is longer than 127 bytes: its length as a two-byte varint.
    let body = c.encode().0;
    let mut sync = ld(1, &p.encode().0);
    sync.push(2 << 3 | 2);
    sync.extend([(body.len() as u8) | 0x80, (body.len() >> 7) as u8]);
    sync.extend(&body);
    sync.extend([3 << 3, 1]);
    let s = Synchronize::decode(&sync).unwrap();
    assert_eq!(s.pods, std::slice::from_ref(&p));
    assert_eq!(s.containers, std::slice::from_ref(&c));
    assert!(s.more);
    let mut req = wire::Encoder::default();
    req.message(1, &p.encode()).message(2, &c.encode());
    let pc = PodContainer::decode_request(&req.0).unwrap();
    assert_eq!(
        (pc.event, &pc.pod, pc.container.as_ref()),
        (None, &p, Some(&c))
    );
    let mut ev = wire::Encoder::default();
    ev.varint(1, 3).message(2, &p.encode());
    let pc = PodContainer::decode_event(&ev.0).unwrap();
    assert_eq!(
        (pc.event, &pc.pod, pc.container),
        (Some(Event::RemovePodSandbox), &p, None)
    );
    assert_eq!(Event::of(12), None);
    assert_eq!(Event::of(0), None);
}

/// Every event is its number in NRI's enum, and a subscription mask has its bit once,
/// however often it is named.
#[test]
fn each_event_is_its_number_and_its_bit() {
    use Event::*;
    let all = [
        RunPodSandbox,
        StopPodSandbox,
        RemovePodSandbox,
        CreateContainer,
        PostCreateContainer,
        StartContainer,
        PostStartContainer,
        UpdateContainer,
        PostUpdateContainer,
        StopContainer,
        RemoveContainer,
    ];
    for (i, e) in all.into_iter().enumerate() {
        assert_eq!(Event::of(i as u64 + 1), Some(e));
        assert_eq!(e.bit(), 1 << i);
        assert_eq!(api::mask(&[e, e]), e.bit(), "{e:?} twice");
    }
    assert_eq!(api::mask(&all), 0x7ff);
    assert_eq!(api::mask(&[]), 0);
}

/// The plugin never sends a frame over 4096 bytes (containerd closes the trunk on one), and
/// the frames give the payload back whole; a frame announced over the limit is refused.
#[test]
fn frames_the_plugin_sends_stay_under_4096_bytes() {
    let payload: Vec<u8> = (0..10_000u32).map(|i| i as u8).collect();
    let trunk = mux::frames(mux::RUNTIME_CONN, &payload);
    let mut d = Demux::default();
    d.push(&trunk);
    let mut back = Vec::new();
    let mut n = 0;
    while let Some((conn, p)) = d.next_frame().unwrap() {
        assert_eq!(conn, mux::RUNTIME_CONN);
        assert!(p.len() <= mux::MAX_SENT_PAYLOAD);
        back.extend(p);
        n += 1;
    }
    assert_eq!((n, back), (3, payload));
    // A frame of a whole 4 MiB ttrpc message and its 10-byte header is waited for; one byte
    // more is refused.
    let mut d = Demux::default();
    let mut whole = 1u32.to_be_bytes().to_vec();
    whole.extend(((4u32 << 20) + 10).to_be_bytes());
    d.push(&whole);
    assert_eq!(d.next_frame(), Ok(None));
    let mut d = Demux::default();
    let mut big = 1u32.to_be_bytes().to_vec();
    big.extend(((4u32 << 20) + 11).to_be_bytes());
    d.push(&big);
    assert_eq!(
        d.next_frame().unwrap_err(),
        mux::FrameTooBig {
            conn: 1,
            len: mux::MAX_RECEIVED_PAYLOAD + 1
        }
    );
    // A ttrpc message of 4 MiB of data is waited for; one byte more is refused.
    let mut r = Reader::default();
    let mut whole = (4u32 << 20).to_be_bytes().to_vec();
    whole.extend([0, 0, 0, 1, 1, 0]);
    r.push(&whole);
    assert_eq!(r.next_message().unwrap(), None);
    let mut r = Reader::default();
    let mut huge = ((4u32 << 20) + 1).to_be_bytes().to_vec();
    huge.extend([0, 0, 0, 1, 1, 0]);
    r.push(&huge);
    assert!(r.next_message().is_err());
}

/// The wire's edges: a varint of all 64 bits (ten bytes, the last 1) and one over; a map
/// entry cut to its limit at a character boundary, one that is not UTF-8 whatever the
/// limit, one of another wire type; a string at its cap and one byte over.
#[test]
fn the_wire_holds_at_its_limits() {
    let mut max = wire::Encoder::default();
    max.varint(1, u64::MAX);
    assert_eq!(max.0.len(), 11, "a key and ten bytes");
    assert_eq!(*max.0.last().unwrap(), 1);
    let mut b = &max.0[1..];
    assert_eq!(wire::varint("v", &mut b).unwrap(), u64::MAX);
    let mut over = max.0[1..].to_vec();
    *over.last_mut().unwrap() = 2;
    assert!(wire::varint("v", &mut &over[..]).is_err());

    let entry = |key: &[u8], value: &[u8]| {
        let mut e = ld(1, key);
        e.extend(ld(2, value));
        e
    };
    let kept = |e: &[u8], max_value: usize| {
        let mut map = BTreeMap::new();
        wire::map_entry_kept(
            "m",
            &wire::Value::Bytes(e),
            &mut map,
            |_| true,
            4,
            max_value,
        )
        .map(|k| (k, map))
    };
    let e = entry(b"k", "a\u{e9}\u{e9}".as_bytes());
    for (limit, want) in [
        (2, "a"),
        (3, "a\u{e9}"),
        (4, "a\u{e9}"),
        (5, "a\u{e9}\u{e9}"),
        (9, "a\u{e9}\u{e9}"),
    ] {
        let (k, map) = kept(&e, limit).unwrap();
        assert!(k);
        assert_eq!(map["k"], want, "limit {limit}");
    }
    // Cut short by its sender, not by the limit: refused.
    assert!(kept(&entry(b"k", b"ab\xc3"), 9).is_err());
    assert!(kept(&entry(b"k", b"a\xffb"), 9).is_err());
    let mut numeric = vec![1 << 3, 7];
    numeric.extend(ld(2, b"v"));
    assert!(kept(&numeric, 9).is_err(), "a key of another wire type");
    // The entry count: the fifth is not kept.
    let mut map = BTreeMap::new();
    for i in 0..5u8 {
        let e = entry(&[b'a' + i], b"v");
        let k =
            wire::map_entry_kept("m", &wire::Value::Bytes(&e), &mut map, |_| true, 4, 9).unwrap();
        assert_eq!(k, i < 4);
    }

    let s = |n: usize| wire::Value::Bytes(&b"xxxxxxxx"[..n]);
    assert_eq!(wire::string_capped("s", &s(8), 8).unwrap(), "xxxxxxxx");
    assert!(wire::string_capped("s", &s(8), 7).is_err());

    // A fixed64 and a fixed32 that end the message exactly; one byte short.
    let fixed = [0x09, 1, 2, 3, 4, 5, 6, 7, 8, 0x15, 1, 2, 3, 4];
    assert_eq!(wire::fields("m", &fixed).unwrap().len(), 2);
    assert!(wire::fields("m", &fixed[..13]).is_err());

    // A response's status and payload.
    let r = Response {
        code: 9,
        message: "refused".into(),
        payload: vec![1, 2, 3],
    };
    assert_eq!(Response::decode(&r.encode()).unwrap(), r);
}

/// Broken messages are errors that say what and where, never a panic.
#[test]
fn broken_messages_are_errors() {
    for (bytes, why) in [
        (&[0x0a, 5, b'a'][..], "length 5 past the end"),
        (&[0x0a][..], "varint cut short"),
        (&[0x0b, 0][..], "wire type 3"),
        (&[0x00, 0][..], "field number 0"),
        (&[0x09, 1, 2][..], "fixed-size value cut short"),
        (
            &[
                0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f,
            ][..],
            "over 64 bits",
        ),
        (&[0x0a, 1, 0xff][..], "not UTF-8"),
    ] {
        let e = Container::decode(bytes).unwrap_err().to_string();
        assert!(
            e.starts_with("Container: ") && e.contains(why),
            "{bytes:?}: {e}"
        );
    }
}

proptest::proptest! {
    /// Any trunk bytes, pushed in any pieces: frames or an error, never a panic, and the
    /// frames of a valid stream come back whatever the cuts.
    #[test]
    fn framing_holds_for_any_cut(
        payloads in proptest::collection::vec(proptest::collection::vec(proptest::num::u8::ANY, 0..9000), 1..4),
        cuts in proptest::collection::vec(1usize..5000, 1..20),
    ) {
        let mut trunk = Vec::new();
        for (i, p) in payloads.iter().enumerate() {
            trunk.extend(mux::frames(1 + i as u32 % 2, p));
        }
        let mut d = Demux::default();
        let mut got: Vec<Vec<u8>> = vec![Vec::new(); 2];
        let mut at = 0;
        let mut k = 0;
        while at < trunk.len() {
            let n = cuts[k % cuts.len()].min(trunk.len() - at);
            d.push(&trunk[at..at + n]);
            at += n;
            k += 1;
            while let Some((conn, p)) = d.next_frame().unwrap() {
                proptest::prop_assert!(p.len() <= mux::MAX_SENT_PAYLOAD);
                got[conn as usize - 1].extend(p);
            }
        }
        let mut want: Vec<Vec<u8>> = vec![Vec::new(); 2];
        for (i, p) in payloads.iter().enumerate() {
            want[i % 2].extend(p);
        }
        proptest::prop_assert_eq!(got, want);
    }

    /// Any bytes as any message: decoded or refused, never a panic.
    #[test]
    fn any_bytes_decode_or_are_refused(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..300)) {
        let _ = Container::decode(&bytes);
        let _ = PodSandbox::decode(&bytes);
        let _ = Synchronize::decode(&bytes);
        let _ = PodContainer::decode_event(&bytes);
        let _ = api::Configure::decode(&bytes);
        let _ = Request::decode(&bytes);
        let _ = Response::decode(&bytes);
        let mut d = Demux::default();
        d.push(&bytes);
        while let Ok(Some(_)) = d.next_frame() {}
        let mut r = Reader::default();
        r.push(&bytes);
        while let Ok(Some(_)) = r.next_message() {}
    }
}

/// A real containerd 2.1.9 and isold, recorded by the containerd guest scenario through
/// isol-nri-tap (tests/tests/qemu_debian/containerd.rs, `TASKISOL_UPDATE_FIXTURES=1`): one
/// connection, both directions, byte for byte. A claimed container's life (CreateContainer,
/// StartContainer, StopContainer, RemoveContainer) and a creation isold refused.
const RECORDED_RUNTIME: &[u8] =
    include_bytes!("../../tests/fixtures/nri/containerd-2.1.9/runtime.bin");
const RECORDED_PLUGIN: &[u8] =
    include_bytes!("../../tests/fixtures/nri/containerd-2.1.9/plugin.bin");

/// The runtime's calls of a recording, decoded: (stream, method, payload).
fn recorded_calls() -> Vec<(u32, String, Vec<u8>)> {
    read_trunk(RECORDED_RUNTIME)
        .unwrap()
        .into_iter()
        .filter(|(conn, m)| *conn == mux::PLUGIN_CONN && m.kind == ttrpc::REQUEST)
        .map(|(_, m)| {
            let r = Request::decode(&m.data).unwrap();
            assert_eq!(r.service, api::PLUGIN_SERVICE);
            assert!(
                r.timeout_nano > 0 && r.timeout_nano <= 2_000_000_000,
                "{r:?}"
            );
            (m.stream, r.method, r.payload)
        })
        .collect()
}

#[test]
fn a_recorded_containerd_connection_is_read_whole() {
    let calls = recorded_calls();
    let methods: Vec<&str> = calls.iter().map(|(_, m, _)| m.as_str()).collect();
    assert_eq!(
        methods,
        [
            "Configure",
            "Synchronize",
            "CreateContainer",
            "StateChange",
            "StopContainer",
            "StateChange",
            "CreateContainer",
            "StopContainer",
            "StateChange"
        ]
    );
    assert_eq!(
        calls.iter().map(|c| c.0).collect::<Vec<_>>(),
        [1, 3, 5, 7, 9, 11, 13, 15, 17]
    );
    let conf = api::Configure::decode(&calls[0].2).unwrap();
    assert_eq!(
        (
            conf.runtime_name.as_str(),
            conf.runtime_version.as_str(),
            conf.registration_timeout,
            conf.request_timeout
        ),
        ("containerd", "2.1.9+unknown", 5000, 2000)
    );
    let sync = Synchronize::decode(&calls[1].2).unwrap();
    assert!(sync.pods.is_empty() && sync.containers.is_empty() && !sync.more);

    // CreateContainer: the pod's annotations as the CRI client gave them, with containerd's
    // own; the container's cpuset and its cgroup below the pod's parent; no process yet.
    let created = PodContainer::decode_request(&calls[2].2).unwrap();
    let c = created.container.as_ref().unwrap();
    assert_eq!(created.pod.name, "rec");
    assert_eq!(created.pod.annotations["isold.io/isolate"], "true");
    assert_eq!(created.pod.annotations["cpu-c-states.crio.io"], "disable");
    assert_eq!(
        created.pod.annotations["io.kubernetes.cri.sandbox-id"],
        created.pod.id
    );
    assert_eq!((c.name.as_str(), c.cpus.as_str(), c.pid), ("work", "3", 0));
    assert_eq!(c.pod_sandbox_id, created.pod.id);
    assert_eq!(c.cgroups_path, format!("/kubepods/poduid-rec/{}", c.id));
    let admitted = claim_of(&created.pod, c).unwrap().unwrap();
    assert_eq!(admitted.container, c.id);
    assert_eq!(admitted.pod.as_deref(), Some(created.pod.id.as_str()));
    assert_eq!(admitted.name.as_deref(), Some("work"));
    assert_eq!(admitted.cpus, "3");
    assert_eq!(admitted.source.as_deref(), Some(SOURCE));

    // StartContainer: the same container with its process (containerd still says Created).
    let started = PodContainer::decode_event(&calls[3].2).unwrap();
    assert_eq!(started.event, Some(Event::StartContainer));
    let sc = started.container.as_ref().unwrap();
    assert_eq!((sc.id.as_str(), sc.pid), (c.id.as_str(), 3069));
    assert_eq!(sc.state, ContainerState::Created);
    assert_eq!(claim_of(&started.pod, sc).unwrap().unwrap().pid, 3069);

    let stopped = PodContainer::decode_request(&calls[4].2).unwrap();
    let st = stopped.container.as_ref().unwrap();
    assert_eq!(
        (st.id.as_str(), st.state),
        (c.id.as_str(), ContainerState::Running)
    );
    let removed = PodContainer::decode_event(&calls[5].2).unwrap();
    assert_eq!(removed.event, Some(Event::RemoveContainer));
    assert_eq!(removed.container.as_ref().unwrap().id, c.id);

    let refused = PodContainer::decode_request(&calls[6].2).unwrap();
    let hk = refused.container.as_ref().unwrap();
    assert_eq!((hk.name.as_str(), hk.cpus.as_str()), ("hk", "0-1"));
}

/// isold's side of the recording: the registration byte for byte as the encoder writes it,
/// an answer on each of the runtime's streams in order, all OK but the refused creation's,
/// and no frame over 4096 bytes.
#[test]
fn isolds_recorded_side_is_what_its_encoder_writes() {
    let msg = ttrpc::Message {
        stream: 1,
        kind: ttrpc::REQUEST,
        flags: 0,
        data: Request {
            service: api::RUNTIME_SERVICE.into(),
            method: "RegisterPlugin".into(),
            payload: api::register_plugin(PLUGIN_NAME, PLUGIN_IDX),
            timeout_nano: 0,
        }
        .encode(),
    }
    .encode();
    let registration = mux::frames(mux::RUNTIME_CONN, &msg);
    assert_eq!(&RECORDED_PLUGIN[..registration.len()], &registration[..]);

    let answers: Vec<(u32, Response)> = read_trunk(RECORDED_PLUGIN)
        .unwrap()
        .into_iter()
        .filter(|(conn, m)| *conn == mux::PLUGIN_CONN && m.kind == ttrpc::RESPONSE)
        .map(|(_, m)| (m.stream, Response::decode(&m.data).unwrap()))
        .collect();
    let streams: Vec<u32> = answers.iter().map(|a| a.0).collect();
    let calls: Vec<u32> = recorded_calls().iter().map(|c| c.0).collect();
    assert_eq!(streams, calls);
    for (stream, r) in &answers {
        if *stream == 13 {
            assert_eq!(r.code, ttrpc::code::FAILED_PRECONDITION);
            assert!(
                r.message
                    .starts_with("isold: claim refused: container hk (")
                    && r.message.contains("CPUs 0-1 are not for containers"),
                "{}",
                r.message
            );
        } else {
            assert_eq!(
                (r.code, r.message.as_str()),
                (ttrpc::code::OK, ""),
                "stream {stream}"
            );
        }
    }
    let mut d = Demux::default();
    d.push(RECORDED_PLUGIN);
    let mut n = 0;
    while let Some((_, payload)) = d.next_frame().unwrap() {
        assert!(payload.len() <= mux::MAX_SENT_PAYLOAD);
        n += 1;
    }
    assert_eq!(n, answers.len() + 1);
}

/// The recorded runtime side read in pieces of every size from 1 to 97 bytes gives the same
/// messages as read whole; cut anywhere, it gives the messages before the cut and says so.
#[test]
fn a_recording_reads_the_same_in_any_pieces_and_cut_anywhere() {
    let whole = read_trunk(RECORDED_RUNTIME).unwrap();
    for piece in 1..=97 {
        let mut d = Demux::default();
        let mut readers: BTreeMap<u32, Reader> = BTreeMap::new();
        let mut got = Vec::new();
        for chunk in RECORDED_RUNTIME.chunks(piece) {
            d.push(chunk);
            while let Some((conn, p)) = d.next_frame().unwrap() {
                let r = readers.entry(conn).or_default();
                r.push(&p);
                while let Some(m) = r.next_message().unwrap() {
                    got.push((conn, m));
                }
            }
        }
        assert_eq!(got, whole, "pieces of {piece}");
    }
    for cut in 1..RECORDED_RUNTIME.len() {
        match read_trunk(&RECORDED_RUNTIME[..cut]) {
            Err(_) => {}
            Ok(v) => assert!(
                v.len() < whole.len() && whole.starts_with(&v),
                "cut at {cut}"
            ),
        }
    }
}

/// A message split over frames and cut after a whole frame is a cut message, not an end.
#[test]
fn a_recording_cut_between_the_frames_of_a_message_is_an_error() {
    let msg = ttrpc::Message {
        stream: 1,
        kind: ttrpc::RESPONSE,
        flags: 0,
        data: vec![7; 5000],
    }
    .encode();
    let trunk = mux::frames(mux::PLUGIN_CONN, &msg);
    assert_eq!(read_trunk(&trunk).unwrap().len(), 1);
    let first = 8 + mux::MAX_SENT_PAYLOAD;
    let e = read_trunk(&trunk[..first]).unwrap_err();
    assert!(e.contains("cut"), "{e}");
}

/// Only a container that holds exclusive CPUs claims: a Burstable or BestEffort pod's (either
/// cgroup driver), a fractional Guaranteed one's, or one the kubelet recorded otherwise is
/// left as it is; a whole-CPU Guaranteed one's, or a container outside Kubernetes, claims
/// within the administrator's rule; with no view yet, a claim is refused.
#[test]
fn only_a_container_with_exclusive_cpus_claims() {
    use crate::claims::kubelet::CpuManagerState;
    use crate::policy::config::{Config, ContainersConfig, CpuSpec};
    use crate::CpuSet;
    let root = SysRoot::new("/nonexistent-taskisol-root");
    let (iso, online): (CpuSet, CpuSet) = ("2".parse().unwrap(), "0-3".parse().unwrap());
    let mut config = Config::defaults(
        crate::policy::preset::Preset::RealtimeVirtualHost,
        CpuSpec::List(iso.clone()),
    );
    config.containers = Some(ContainersConfig {
        cpus: "3".parse().unwrap(),
        ..Default::default()
    });
    let policy = Policy {
        config,
        housekeeping: online.difference(&iso),
        online,
        isolated: iso,
        claimed: CpuSet::new(),
        claimed_power: Default::default(),
    };
    let view = Some((&policy, &[][..]));
    let none = Ok(None);
    let judge = |path: &str, shares: Option<u64>, cpus: &str| {
        let c = Container {
            cgroups_path: path.into(),
            shares,
            cpus: cpus.into(),
            ..container()
        };
        claim_for(&root, &pod(), &c, || none.clone(), view)
    };
    for path in [
        "kubepods-burstable-pod1_2.slice:cri-containerd:abc",
        "kubepods-besteffort-pod1_2.slice:cri-containerd:abc",
        "/kubepods/burstable/pod1-2/abc",
    ] {
        assert!(
            matches!(judge(path, Some(1024), "3"), Judged::NotExclusive(ref w) if w.contains("not Guaranteed")),
            "{path}"
        );
    }
    assert!(matches!(
        judge("/kubepods/pod1-2/abc", Some(1500), "3"),
        Judged::NotExclusive(w) if w.contains("not a whole number")
    ));
    for path in [
        "kubepods-pod1_2.slice:cri-containerd:abc",
        "/kubepods/pod1-2/abc",
        "/system.slice/podman-abc.scope",
    ] {
        assert!(
            matches!(judge(path, Some(1024), "3"), Judged::Claim(_)),
            "{path}"
        );
    }
    // The administrator's rule: CPU 1 is housekeeping.
    assert!(matches!(
        judge("/kubepods/pod1-2/abc", Some(2048), "1,3"),
        Judged::Refused {
            reason: "not_allowed",
            claim: Some(_),
            ..
        }
    ));
    // The kubelet's record: it gave this container CPU 2, not 3.
    let rec = Ok(Some(CpuManagerState {
        policy_name: "static".into(),
        default_cpu_set: "0-1".into(),
        entries: BTreeMap::from([(
            "1-2".to_string(),
            BTreeMap::from([("rt".to_string(), "2".to_string())]),
        )]),
        checksum: 0,
    }));
    let c = Container {
        cgroups_path: "/kubepods/pod1-2/abc".into(),
        ..container()
    };
    assert!(matches!(
        claim_for(&root, &pod(), &c, || rec.clone(), view),
        Judged::NotExclusive(w) if w.contains("not the CPUs the kubelet gave it (2")
    ));
    let c2 = Container {
        cpus: "2".into(),
        ..c.clone()
    };
    assert!(matches!(
        claim_for(&root, &pod(), &c2, || rec.clone(), view),
        Judged::Claim(_)
    ));
    // The kubelet's state unreadable: isold cannot tell, so it refuses.
    let broken = Err(crate::claims::kubelet::StateError::Read {
        path: "/var/lib/kubelet/cpu_manager_state".into(),
        error: "Permission denied (EACCES)".into(),
    });
    assert!(matches!(
        claim_for(&root, &pod(), &c2, || broken.clone(), view),
        Judged::Refused { reason: "kubelet_state", message, .. } if message.contains("EACCES")
    ));
    // Another pod's container holds CPU 2: refused; the container's own claim of it (asked
    // again at a Synchronize) is no obstacle.
    let held = |container: &str, pod: &str| Claim {
        container: container.into(),
        name: None,
        pod: Some(pod.into()),
        source: Some(SOURCE.into()),
        pid: 4242,
        starttime: 1,
        cpus: "2".into(),
        isolated: "2".into(),
        pm_qos: None,
        governor: None,
    };
    let theirs = [held("beef", "other-pod")];
    assert!(matches!(
        claim_for(&root, &pod(), &c2, || rec.clone(), Some((&policy, &theirs[..]))),
        Judged::Refused { reason: "shared", message, .. } if message.contains("beef")
    ));
    let mine = [held("c0ffee", "a1b2c3")];
    assert!(matches!(
        claim_for(
            &root,
            &pod(),
            &c2,
            || rec.clone(),
            Some((&policy, &mine[..]))
        ),
        Judged::Claim(_)
    ));
    // No view yet: refused, not let through.
    assert!(matches!(
        claim_for(&root, &pod(), &c2, || rec.clone(), None),
        Judged::Refused {
            reason: "starting",
            ..
        }
    ));
    // Asking for nothing, or asking badly.
    let mut p = pod();
    p.annotations.clear();
    let plain = Container {
        annotations: BTreeMap::new(),
        ..c2.clone()
    };
    assert_eq!(
        claim_for(&root, &p, &plain, || rec.clone(), view),
        Judged::Nothing
    );
    p.annotations
        .insert("isold.io/isolate".into(), "yes".into());
    assert!(matches!(
        claim_for(&root, &p, &plain, || rec.clone(), view),
        Judged::Refused {
            reason: "invalid",
            claim: None,
            ..
        }
    ));
}

/// What isold keeps of a pod is bounded: annotations it does not read are skipped undecoded,
/// at most MAX_KEPT of those it reads, each value cut to MAX_VALUE; an id over MAX_NAME fails
/// its pod alone in a Synchronize.
#[test]
fn what_isold_keeps_of_a_pod_is_bounded() {
    use crate::claims::annotations::{MAX_KEPT, MAX_VALUE};
    let mut p = pod();
    p.annotations.insert("big".into(), "x".repeat(1 << 20));
    for i in 0..2 * MAX_KEPT {
        p.annotations
            .insert(format!("isold.io/isolate/c{i}"), "true".into());
    }
    p.annotations
        .insert("cpu-freq-governor.crio.io".into(), "é".repeat(MAX_VALUE));
    let got = PodSandbox::decode(&p.encode().0).unwrap();
    assert!(!got.annotations.contains_key("big"));
    assert_eq!(got.annotations.len(), MAX_KEPT);
    assert!(got.annotations.values().all(|v| v.len() <= MAX_VALUE));
    let long = PodSandbox {
        id: "a".repeat(api::MAX_NAME + 1),
        ..pod()
    };
    let mut sync = wire::Encoder::default();
    sync.message(1, &long.encode()).message(1, &pod().encode());
    let s = Synchronize::decode(&sync.0).unwrap();
    assert_eq!((s.pods.len(), s.bad.len()), (1, 1));
    assert!(s.bad[0].to_string().contains("over 1024"), "{:?}", s.bad);
}

/// UpdateContainerRequest: the container as it is (2), and the resources it is to have (3),
/// whose shares are 0 when the kubelet sent only a cpuset.
#[test]
fn an_update_carries_the_new_cpuset() {
    let new = api::Resources {
        cpus: "2-3".into(),
        shares: Some(0),
    };
    let mut req = wire::Encoder::default();
    req.message(1, &pod().encode())
        .message(2, &container().encode())
        .message(3, &new.encode());
    let pc = PodContainer::decode_request(&req.0).unwrap();
    assert_eq!(pc.container.unwrap().cpus, "3");
    assert_eq!(pc.update, Some(new));
    assert_eq!(api::Event::PostUpdateContainer.bit(), 0x100);
    assert_eq!(api::Event::UpdateContainer.bit(), 0x80);
}
