//! isol-cri: a small CRI client that drives containerd the way the kubelet does (the gRPC
//! RuntimeService over containerd's socket), for the containerd guest scenario
//! (tests/tests/qemu_debian/containerd.rs).
//!
//! ```text
//! isol-cri [--socket PATH] pod NAME [--annotation K=V]...     RunPodSandbox (host network)
//! isol-cri [--socket PATH] container POD NAME [--cpuset LIST] [--annotation K=V]...
//!                                                              CreateContainer + StartContainer
//! isol-cri [--socket PATH] stop ID | rm ID                     StopContainer (1 s) | RemoveContainer
//! isol-cri [--socket PATH] stoppod ID | rmpod ID               StopPodSandbox | RemovePodSandbox
//! isol-cri [--socket PATH] pid ID                              the container's process (ContainerStatus)
//! isol-cri [--socket PATH] ps                                  every container: ID NAME STATE
//! ```
//!
//! It prints `pod=ID`, `container=ID` or `pid=N` on success; on a failed call
//! `error=<the runtime's gRPC status message>` on stdout (so a step can judge it), and exits 1.
//! The pods look like the kubelet's for a Guaranteed pod under the cgroupfs driver: cgroup
//! parent `/kubepods/pod<uid>`, namespace `default`, host network, no hostname.

use std::collections::HashMap;

use hyper_util::rt::TokioIo;
use k8s_cri::v1::runtime_service_client::RuntimeServiceClient;
use k8s_cri::v1::*;
use tonic::transport::{Channel, Endpoint, Uri};

const USAGE: &str = "usage: isol-cri [--socket PATH] pod NAME [--annotation K=V]... | container POD NAME [--cpuset LIST] [--annotation K=V]... | stop ID | rm ID | stoppod ID | rmpod ID | pid ID | ps";
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

/// `--annotation K=V` and `--cpuset LIST` options after the positional arguments.
struct Opts {
    positional: Vec<String>,
    annotations: HashMap<String, String>,
    cpuset: String,
}

fn opts(args: &[String]) -> Result<Opts, String> {
    let mut o = Opts {
        positional: Vec::new(),
        annotations: HashMap::new(),
        cpuset: String::new(),
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

async fn run(socket: &str, args: &[String]) -> Result<String, String> {
    let o = opts(args)?;
    let p: Vec<&str> = o.positional.iter().map(String::as_str).collect();
    let mut c = connect(socket).await?;
    match p.as_slice() {
        ["pod", name] => {
            let r = c
                .run_pod_sandbox(RunPodSandboxRequest {
                    config: Some(sandbox_config(name, o.annotations)),
                    runtime_handler: String::new(),
                })
                .await
                .map_err(status)?;
            Ok(format!("pod={}", r.into_inner().pod_sandbox_id))
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
            let config = ContainerConfig {
                metadata: Some(ContainerMetadata {
                    name: name.to_string(),
                    attempt: 0,
                }),
                image: Some(ImageSpec {
                    image: IMAGE.into(),
                    ..Default::default()
                }),
                annotations: o.annotations,
                linux: Some(LinuxContainerConfig {
                    resources: Some(LinuxContainerResources {
                        cpuset_cpus: o.cpuset,
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
                    sandbox_config: Some(sandbox_config(&pod_name, sandbox.annotations)),
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
