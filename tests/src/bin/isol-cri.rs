//! isol-cri: a small CRI client that drives containerd the way the kubelet does (the gRPC
//! RuntimeService over containerd's socket), for the containerd guest scenario
//! (tests/tests/qemu_debian/containerd.rs).
//!
//! ```text
//! isol-cri [--socket PATH] pod NAME [--qos Q] [--pad BYTES] [--annotation K=V]...
//!                                                              RunPodSandbox (host network)
//! isol-cri [--socket PATH] container POD NAME [--qos Q] [--cpuset LIST] [--cpus MILLI] [--annotation K=V]...
//!                                                              CreateContainer + StartContainer
//! isol-cri [--socket PATH] update ID --cpuset LIST             UpdateContainerResources (cpuset only)
//! isol-cri [--socket PATH] pods PREFIX N [--pad BYTES]         N pods, each with a container, all at once
//! isol-cri [--socket PATH] rmpods PREFIX                       every pod named PREFIX*, stopped and removed
//! isol-cri [--socket PATH] stop ID | rm ID                     StopContainer (1 s) | RemoveContainer
//! isol-cri [--socket PATH] stoppod ID | rmpod ID               StopPodSandbox | RemovePodSandbox
//! isol-cri [--socket PATH] pid ID                              the container's process (ContainerStatus)
//! isol-cri [--socket PATH] cpuset ID                           the container's cpuset (ContainerStatus)
//! isol-cri [--socket PATH] ps                                  every container: ID NAME STATE
//! ```
//!
//! It prints `pod=ID`, `container=ID` or `pid=N` on success; on a failed call
//! `error=<the runtime's gRPC status message>` on stdout (so a step can judge it), and exits 1.
//! The pods look like the kubelet's under the cgroupfs driver: cgroup parent
//! `/kubepods/pod<uid>` (`--qos guaranteed`, the default), `/kubepods/burstable/pod<uid>` or
//! `/kubepods/besteffort/pod<uid>`, uid `uid-NAME`, namespace `default`, host network, no
//! hostname. A container's CPU request is `--cpus` millicores (by default one CPU per CPU of
//! its cpuset, none without one), given as the kubelet gives it: shares `MILLI * 1024 / 1000`
//! (2 for none), quota `MILLI * 100` of a 100 ms period. `--pad BYTES` adds an annotation
//! of that size (`kubectl.kubernetes.io/last-applied-configuration`, the big one of real
//! pods).

use std::collections::HashMap;

use hyper_util::rt::TokioIo;
use k8s_cri::v1::runtime_service_client::RuntimeServiceClient;
use k8s_cri::v1::*;
use tonic::transport::{Channel, Endpoint, Uri};

const USAGE: &str = "usage: isol-cri [--socket PATH] pod NAME [--qos Q] [--pad BYTES] [--annotation K=V]... | container POD NAME [--qos Q] [--cpuset LIST] [--cpus MILLI] [--annotation K=V]... | update ID --cpuset LIST | pods PREFIX N [--pad BYTES] | rmpods PREFIX | stop ID | rm ID | stoppod ID | rmpod ID | pid ID | cpuset ID | ps";
const IMAGE: &str = "docker.io/library/isol-busybox:1";

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let mut socket = "/run/containerd/containerd.sock".to_string();
    if args.first().map(String::as_str) == Some("--socket") && args.len() > 1 {
        socket = args.remove(1);
        args.remove(0);
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    match rt.block_on(run(&socket, &args)) {
        Ok(out) => println!("{out}"),
        Err(e) => {
            println!("error={}", e.replace('\n', " "));
            std::process::exit(1);
        }
    }
}

/// The options after the positional arguments.
struct Opts {
    positional: Vec<String>,
    annotations: HashMap<String, String>,
    cpuset: String,
    /// Millicores.
    cpus: Option<i64>,
    qos: String,
    pad: usize,
}

fn opts(args: &[String]) -> Result<Opts, String> {
    let mut o = Opts {
        positional: Vec::new(),
        annotations: HashMap::new(),
        cpuset: String::new(),
        cpus: None,
        qos: "guaranteed".into(),
        pad: 0,
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--annotation" => {
                let kv = it.next().ok_or(USAGE)?;
                let (k, v) = kv
                    .split_once('=')
                    .ok_or(format!("--annotation {kv}: no '='"))?;
                o.annotations.insert(k.into(), v.into());
            }
            "--cpuset" => o.cpuset = it.next().ok_or(USAGE)?.clone(),
            "--cpus" => {
                o.cpus = Some(
                    it.next()
                        .ok_or(USAGE)?
                        .parse()
                        .map_err(|e| format!("--cpus: {e}"))?,
                )
            }
            "--qos" => o.qos = it.next().ok_or(USAGE)?.clone(),
            "--pad" => {
                o.pad = it
                    .next()
                    .ok_or(USAGE)?
                    .parse()
                    .map_err(|e| format!("--pad: {e}"))?
            }
            _ => o.positional.push(a.clone()),
        }
    }
    Ok(o)
}

async fn connect(socket: &str) -> Result<RuntimeServiceClient<Channel>, String> {
    let path = socket.to_string();
    let channel = Endpoint::try_from("http://[::]:50051")
        .map_err(|e| e.to_string())?
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let path = path.clone();
            async move {
                Ok::<_, std::io::Error>(TokioIo::new(tokio::net::UnixStream::connect(path).await?))
            }
        }))
        .await
        .map_err(|e| format!("{socket}: {e}"))?;
    Ok(RuntimeServiceClient::new(channel))
}

fn status(e: tonic::Status) -> String {
    format!("{:?}: {}", e.code(), e.message())
}

/// The cgroup parent of pod `uid` of QoS class `qos`, as the kubelet's cgroupfs driver names it.
fn cgroup_parent(qos: &str, uid: &str) -> Result<String, String> {
    Ok(match qos {
        "guaranteed" => format!("/kubepods/pod{uid}"),
        "burstable" | "besteffort" => format!("/kubepods/{qos}/pod{uid}"),
        q => {
            return Err(format!(
                "--qos {q}: not guaranteed, burstable or besteffort"
            ))
        }
    })
}

/// The number of CPUs in a CPU list.
fn count_cpus(list: &str) -> i64 {
    list.split(',')
        .filter(|r| !r.is_empty())
        .map(|r| match r.split_once('-') {
            Some((a, b)) => b.parse::<i64>().unwrap_or(0) - a.parse::<i64>().unwrap_or(0) + 1,
            None => 1,
        })
        .sum()
}

/// A pod's configuration: the sandbox's with its QoS class's cgroup parent, and `pad` bytes
/// of a big annotation.
fn pod_config(
    name: &str,
    qos: &str,
    mut annotations: HashMap<String, String>,
    pad: usize,
) -> Result<PodSandboxConfig, String> {
    if pad > 0 {
        annotations.insert(
            "kubectl.kubernetes.io/last-applied-configuration".into(),
            "x".repeat(pad),
        );
    }
    let mut c = sandbox_config(name, annotations);
    if let Some(l) = c.linux.as_mut() {
        l.cgroup_parent = cgroup_parent(qos, &format!("uid-{name}"))?;
    }
    Ok(c)
}

/// The sandbox configuration of pod NAME, as the kubelet would send it (RunPodSandbox and
/// again with CreateContainer).
fn sandbox_config(name: &str, annotations: HashMap<String, String>) -> PodSandboxConfig {
    let uid = format!("uid-{name}");
    PodSandboxConfig {
        metadata: Some(PodSandboxMetadata {
            name: name.into(),
            uid: uid.clone(),
            namespace: "default".into(),
            attempt: 0,
        }),
        annotations,
        linux: Some(LinuxPodSandboxConfig {
            cgroup_parent: format!("/kubepods/pod{uid}"),
            security_context: Some(LinuxSandboxSecurityContext {
                namespace_options: Some(NamespaceOption {
                    network: NamespaceMode::Node as i32,
                    pid: NamespaceMode::Pod as i32,
                    ipc: NamespaceMode::Pod as i32,
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// CreateContainer and StartContainer of container `name` in `pod` (whose configuration the
/// kubelet sends again), with the CPU request the kubelet would give it: its id.
async fn create_and_start(
    c: &mut RuntimeServiceClient<Channel>,
    pod: &str,
    name: &str,
    sandbox: PodSandboxConfig,
    cpuset: String,
    millis: Option<i64>,
    annotations: HashMap<String, String>,
) -> Result<String, String> {
    // The pod's QoS class is in its cgroup parent; the container's resources follow it.
    let guaranteed = sandbox.linux.as_ref().is_some_and(|l| {
        !l.cgroup_parent.contains("burstable") && !l.cgroup_parent.contains("besteffort")
    });
    let millis = millis.unwrap_or(if guaranteed {
        count_cpus(&cpuset) * 1000
    } else {
        0
    });
    let (shares, quota) = if millis > 0 {
        (millis * 1024 / 1000, millis * 100)
    } else {
        (2, 0)
    };
    let config = ContainerConfig {
        metadata: Some(ContainerMetadata {
            name: name.to_string(),
            attempt: 0,
        }),
        image: Some(ImageSpec {
            image: IMAGE.into(),
            ..Default::default()
        }),
        annotations,
        linux: Some(LinuxContainerConfig {
            resources: Some(LinuxContainerResources {
                cpuset_cpus: cpuset,
                cpu_shares: shares,
                cpu_quota: quota,
                cpu_period: if quota > 0 { 100_000 } else { 0 },
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    };
    let id = c
        .create_container(CreateContainerRequest {
            pod_sandbox_id: pod.to_string(),
            config: Some(config),
            sandbox_config: Some(sandbox),
        })
        .await
        .map_err(status)?
        .into_inner()
        .container_id;
    c.start_container(StartContainerRequest {
        container_id: id.clone(),
    })
    .await
    .map_err(|e| format!("container={id} {}", status(e)))?;
    Ok(id)
}

async fn run(socket: &str, args: &[String]) -> Result<String, String> {
    let o = opts(args)?;
    let p: Vec<&str> = o.positional.iter().map(String::as_str).collect();
    let mut c = connect(socket).await?;
    match p.as_slice() {
        ["pod", name] => {
            let r = c
                .run_pod_sandbox(RunPodSandboxRequest {
                    config: Some(pod_config(name, &o.qos, o.annotations, o.pad)?),
                    runtime_handler: String::new(),
                })
                .await
                .map_err(status)?;
            Ok(format!("pod={}", r.into_inner().pod_sandbox_id))
        }
        ["update", id] => {
            c.update_container_resources(UpdateContainerResourcesRequest {
                container_id: id.to_string(),
                linux: Some(LinuxContainerResources {
                    cpuset_cpus: o.cpuset,
                    ..Default::default()
                }),
                ..Default::default()
            })
            .await
            .map_err(status)?;
            Ok("updated".into())
        }
        ["pods", prefix, n] => {
            let n: usize = n.parse().map_err(|e| format!("pods N: {e}"))?;
            let mut set = tokio::task::JoinSet::new();
            for i in 0..n {
                let (mut c, name, pad) = (c.clone(), format!("{prefix}{i}"), o.pad);
                set.spawn(async move {
                    let t0 = std::time::Instant::now();
                    let config = pod_config(&name, "besteffort", HashMap::new(), pad)?;
                    let pod = c
                        .run_pod_sandbox(RunPodSandboxRequest {
                            config: Some(config.clone()),
                            runtime_handler: String::new(),
                        })
                        .await
                        .map_err(status)?
                        .into_inner()
                        .pod_sandbox_id;
                    create_and_start(
                        &mut c,
                        &pod,
                        "work",
                        config,
                        String::new(),
                        None,
                        HashMap::new(),
                    )
                    .await?;
                    Ok::<f64, String>(t0.elapsed().as_secs_f64())
                });
            }
            let (mut ok, mut errors, mut worst) = (0, Vec::new(), 0f64);
            while let Some(r) = set.join_next().await {
                match r.map_err(|e| e.to_string()).and_then(|r| r) {
                    Ok(s) => {
                        ok += 1;
                        worst = worst.max(s);
                    }
                    Err(e) => errors.push(e),
                }
            }
            for e in &errors {
                eprintln!("{e}");
            }
            Ok(format!(
                "started={ok}
failed={}
slowest_s={worst:.2}",
                errors.len()
            ))
        }
        ["rmpods", prefix] => {
            let pods = c
                .list_pod_sandbox(ListPodSandboxRequest { filter: None })
                .await
                .map_err(status)?
                .into_inner()
                .items;
            let mut removed = 0;
            for p in pods {
                if !p
                    .metadata
                    .as_ref()
                    .is_some_and(|m| m.name.starts_with(prefix))
                {
                    continue;
                }
                c.stop_pod_sandbox(StopPodSandboxRequest {
                    pod_sandbox_id: p.id.clone(),
                })
                .await
                .map_err(status)?;
                c.remove_pod_sandbox(RemovePodSandboxRequest {
                    pod_sandbox_id: p.id,
                })
                .await
                .map_err(status)?;
                removed += 1;
            }
            Ok(format!("removed={removed}"))
        }
        ["cpuset", id] => {
            let r = c
                .container_status(ContainerStatusRequest {
                    container_id: id.to_string(),
                    verbose: false,
                })
                .await
                .map_err(status)?
                .into_inner();
            let cpus = r
                .status
                .and_then(|s| s.resources)
                .and_then(|r| r.linux)
                .map(|l| l.cpuset_cpus)
                .unwrap_or_default();
            Ok(format!("cpuset={cpus}"))
        }
        ["container", pod, name] => {
            // The pod's name and annotations as RunPodSandbox had them: the kubelet sends its
            // sandbox configuration again; the runtime uses the one it stored.
            let sandbox = c
                .pod_sandbox_status(PodSandboxStatusRequest {
                    pod_sandbox_id: pod.to_string(),
                    verbose: false,
                })
                .await
                .map_err(status)?
                .into_inner()
                .status
                .ok_or("PodSandboxStatus: no status")?;
            let pod_name = sandbox.metadata.map(|m| m.name).unwrap_or_default();
            // The pod's QoS class again (`--qos`, as given to `pod`): the runtime takes the
            // container's cgroup parent from the configuration sent with it.
            let mut config = sandbox_config(&pod_name, sandbox.annotations);
            if let Some(l) = config.linux.as_mut() {
                l.cgroup_parent = cgroup_parent(&o.qos, &format!("uid-{pod_name}"))?;
            }
            let id = create_and_start(&mut c, pod, name, config, o.cpuset, o.cpus, o.annotations)
                .await?;
            Ok(format!("container={id}"))
        }
        ["stop", id] => {
            c.stop_container(StopContainerRequest {
                container_id: id.to_string(),
                timeout: 1,
            })
            .await
            .map_err(status)?;
            Ok("stopped".into())
        }
        ["rm", id] => {
            c.remove_container(RemoveContainerRequest {
                container_id: id.to_string(),
            })
            .await
            .map_err(status)?;
            Ok("removed".into())
        }
        ["stoppod", id] => {
            c.stop_pod_sandbox(StopPodSandboxRequest {
                pod_sandbox_id: id.to_string(),
            })
            .await
            .map_err(status)?;
            Ok("stopped".into())
        }
        ["rmpod", id] => {
            c.remove_pod_sandbox(RemovePodSandboxRequest {
                pod_sandbox_id: id.to_string(),
            })
            .await
            .map_err(status)?;
            Ok("removed".into())
        }
        ["pid", id] => {
            let r = c
                .container_status(ContainerStatusRequest {
                    container_id: id.to_string(),
                    verbose: true,
                })
                .await
                .map_err(status)?
                .into_inner();
            let info = r
                .info
                .get("info")
                .ok_or("ContainerStatus: no verbose info")?;
            let v: serde_json::Value =
                serde_json::from_str(info).map_err(|e| format!("ContainerStatus info: {e}"))?;
            Ok(format!("pid={}", v["pid"]))
        }
        ["ps"] => {
            let r = c
                .list_containers(ListContainersRequest { filter: None })
                .await
                .map_err(status)?
                .into_inner();
            let mut out = Vec::new();
            for ct in r.containers {
                let state = ContainerState::try_from(ct.state)
                    .map(|s| s.as_str_name().to_string())
                    .unwrap_or_else(|_| ct.state.to_string());
                let name = ct.metadata.map(|m| m.name).unwrap_or_default();
                out.push(format!("{} {name} {state}", ct.id));
            }
            Ok(out.join("\n"))
        }
        _ => Err(USAGE.into()),
    }
}
