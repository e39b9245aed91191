//! What each subcommand does: CRI calls and crictl-shaped output.

use std::collections::HashMap;
use std::io::Write;

use anyhow::{bail, Context, Result};

use crate::cli::{
    exec_deadline, inspect_doc, list_json, load, name_matches, parse_labels, print_json, Cli,
    Command, Format, PodsArgs, PsArgs, UpdateArgs,
};
use crate::config::{Overrides, Settings};
use crate::proto::*;
use crate::render::{container_table, pod_table, print_log};
use crate::CriClient;

/// Runs the parsed command line; returns the process exit code.
pub fn run(cli: Cli) -> Result<i32> {
    let settings = Settings::resolve(&Overrides {
        runtime_endpoint: cli.runtime_endpoint.clone(),
        image_endpoint: cli.image_endpoint.clone(),
        timeout: cli.timeout.clone(),
        config: cli.config.clone(),
    })?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("start tokio runtime")?;
    rt.block_on(async move {
        let client = CriClient::connect(&settings)
            .await
            .with_context(|| format!("connect to {}", settings.runtime_socket.display()))?;
        dispatch(client, cli.command).await
    })
}

/// Runs one subcommand; returns the exit code.
pub async fn dispatch(mut client: CriClient, command: Command) -> Result<i32> {
    let client = &mut client;
    match command {
        Command::Version => version(client).await?,
        Command::Runp {
            runtime,
            pod_config,
        } => println!("{}", run_pod(client, &pod_config, runtime).await?),
        Command::Create {
            pod_id,
            container_config,
            pod_config,
            no_pull: _,
        } => println!(
            "{}",
            create(client, &pod_id, &container_config, &pod_config).await?
        ),
        Command::Run {
            runtime,
            container_config,
            pod_config,
        } => {
            let pod = run_pod(client, &pod_config, runtime).await?;
            let id = create(client, &pod, &container_config, &pod_config).await?;
            start(client, &id).await?;
            println!("{id}");
        }
        Command::Start { ids } => {
            for id in ids {
                start(client, &id).await?;
                println!("{id}");
            }
        }
        Command::Stop { timeout, ids } => {
            for id in ids {
                stop(client, &id, timeout).await?;
                println!("{id}");
            }
        }
        Command::Rm { force, all, ids } => rm(client, force, all, ids).await?,
        Command::Stopp { ids } => {
            for id in ids {
                stop_pod(client, &id).await?;
                println!("Stopped sandbox {id}");
            }
        }
        Command::Rmp { force, all, ids } => rmp(client, force, all, ids).await?,
        Command::Ps(args) => ps(client, args).await?,
        Command::Pods(args) => pods(client, args).await?,
        Command::Inspect { output, ids } => inspect(client, &output, ids).await?,
        Command::Inspectp { output, ids } => inspectp(client, &output, ids).await?,
        Command::Exec {
            sync: _,
            timeout,
            interactive,
            tty,
            id,
            cmd,
        } => {
            if interactive || tty {
                bail!("interactive exec (-i/-t) is not supported; use a synchronous exec");
            }
            return exec(client, &id, cmd, timeout).await;
        }
        Command::Logs {
            tail,
            timestamps,
            id,
        } => logs(client, &id, tail, timestamps).await?,
        Command::Update(args) => update(client, args).await?,
        Command::Updatep(args) => update_pods(client, args).await?,
        Command::Images { quiet, output } => images(client, quiet, output).await?,
        Command::Inspecti { images } => inspecti(client, images).await?,
    }
    Ok(0)
}

async fn version(client: &CriClient) -> Result<()> {
    let mut req = VersionRequest::new();
    req.version = "v1".into();
    let v = client.version(&req).await.context("get version")?;
    println!("Version:  {}", v.version);
    println!("RuntimeName:  {}", v.runtime_name);
    println!("RuntimeVersion:  {}", v.runtime_version);
    println!("RuntimeApiVersion:  {}", v.runtime_api_version);
    Ok(())
}

async fn rm(client: &CriClient, force: bool, all: bool, ids: Vec<String>) -> Result<()> {
    let ids = if all {
        all_containers(client).await?
    } else {
        ids
    };
    if ids.is_empty() && !all {
        bail!("ID cannot be empty");
    }
    for id in ids {
        remove_container(client, &id, force).await?;
        println!("{id}");
    }
    Ok(())
}

async fn rmp(client: &CriClient, force: bool, all: bool, ids: Vec<String>) -> Result<()> {
    let ids = if all { all_pods(client).await? } else { ids };
    if ids.is_empty() && !all {
        bail!("ID cannot be empty");
    }
    for id in ids {
        remove_pod(client, &id, force).await?;
        println!("Removed sandbox {id}");
    }
    Ok(())
}

async fn inspect(client: &CriClient, output: &str, ids: Vec<String>) -> Result<()> {
    check_json(output)?;
    for id in ids {
        let mut req = ContainerStatusRequest::new();
        req.container_id = id.clone();
        req.verbose = true;
        let resp = client
            .container_status(&req)
            .await
            .with_context(|| format!("get container status {id}"))?;
        print_json(&inspect_doc(resp.status.as_ref(), &resp.info)?)?;
    }
    Ok(())
}

async fn inspectp(client: &CriClient, output: &str, ids: Vec<String>) -> Result<()> {
    check_json(output)?;
    for id in ids {
        let mut req = PodSandboxStatusRequest::new();
        req.pod_sandbox_id = id.clone();
        req.verbose = true;
        let resp = client
            .pod_sandbox_status(&req)
            .await
            .with_context(|| format!("get pod status {id}"))?;
        print_json(&inspect_doc(resp.status.as_ref(), &resp.info)?)?;
    }
    Ok(())
}

async fn logs(client: &CriClient, id: &str, tail: Option<usize>, timestamps: bool) -> Result<()> {
    let mut req = ContainerStatusRequest::new();
    req.container_id = id.to_string();
    let resp = client
        .container_status(&req)
        .await
        .with_context(|| format!("get container status {id}"))?;
    let path = resp
        .status
        .as_ref()
        .map(|s| s.log_path.clone())
        .unwrap_or_default();
    if path.is_empty() {
        bail!("container {id} has no log path (no log_directory in its pod config?)");
    }
    let text = std::fs::read_to_string(&path).with_context(|| format!("read log {path}"))?;
    print_log(&text, tail, timestamps)
}

async fn images(client: &CriClient, quiet: bool, output: Format) -> Result<()> {
    let resp = client
        .list_images(&ListImagesRequest::new())
        .await
        .context("list images")?;
    if output == Format::Json {
        print_json(&list_json(&resp)?)?;
    } else if quiet {
        for i in &resp.images {
            println!("{}", i.id);
        }
    } else {
        let rows: Vec<Vec<String>> = resp.images.iter().flat_map(image_rows).collect();
        print!(
            "{}",
            crate::output::table(&["IMAGE", "TAG", "IMAGE ID", "SIZE"], &rows)
        );
    }
    Ok(())
}

/// One row per tag of an image (`<none>` for an untagged one), as `crictl images` prints.
fn image_rows(i: &Image) -> impl Iterator<Item = Vec<String>> + '_ {
    let id =
        i.id.trim_start_matches("sha256:")
            .chars()
            .take(13)
            .collect::<String>();
    let tags = if i.repo_tags.is_empty() {
        vec!["<none>:<none>".to_string()]
    } else {
        i.repo_tags.clone()
    };
    tags.into_iter().map(move |t| {
        let (repo, tag) = t
            .rsplit_once(':')
            .map(|(r, t)| (r.to_string(), t.to_string()))
            .unwrap_or((t.clone(), String::new()));
        vec![repo, tag, id.clone(), i.size.to_string()]
    })
}

async fn inspecti(client: &CriClient, images: Vec<String>) -> Result<()> {
    for image in images {
        let mut req = ImageStatusRequest::new();
        req.image = protobuf::MessageField::some(ImageSpec {
            image: image.clone(),
            ..Default::default()
        });
        req.verbose = true;
        let resp = client
            .image_status(&req)
            .await
            .with_context(|| format!("image status {image}"))?;
        if resp.image.is_none() {
            bail!("no such image {image} present");
        }
        print_json(&inspect_doc(resp.image.as_ref(), &resp.info)?)?;
    }
    Ok(())
}

fn check_json(output: &str) -> Result<()> {
    if output != "json" {
        bail!("unsupported output format {output:?}: only json");
    }
    Ok(())
}

async fn run_pod(
    client: &CriClient,
    path: &std::path::Path,
    runtime: Option<String>,
) -> Result<String> {
    let config: PodSandboxConfig = load(path)?;
    let mut req = RunPodSandboxRequest::new();
    req.config = protobuf::MessageField::some(config);
    req.runtime_handler = runtime.unwrap_or_default();
    let resp = client
        .run_pod_sandbox(&req)
        .await
        .context("run pod sandbox")?;
    Ok(resp.pod_sandbox_id)
}

async fn create(
    client: &CriClient,
    pod_id: &str,
    container_config: &std::path::Path,
    pod_config: &std::path::Path,
) -> Result<String> {
    let config: ContainerConfig = load(container_config)?;
    let sandbox: PodSandboxConfig = load(pod_config)?;
    let mut req = CreateContainerRequest::new();
    req.pod_sandbox_id = pod_id.to_string();
    req.config = protobuf::MessageField::some(config);
    req.sandbox_config = protobuf::MessageField::some(sandbox);
    let resp = client
        .create_container(&req)
        .await
        .context("creating container")?;
    Ok(resp.container_id)
}

async fn start(client: &CriClient, id: &str) -> Result<()> {
    let mut req = StartContainerRequest::new();
    req.container_id = id.to_string();
    client
        .start_container(&req)
        .await
        .with_context(|| format!("starting the container {id:?}"))?;
    Ok(())
}

async fn stop(client: &CriClient, id: &str, timeout: i64) -> Result<()> {
    let mut req = StopContainerRequest::new();
    req.container_id = id.to_string();
    req.timeout = timeout;
    client
        .stop_container(&req)
        .await
        .with_context(|| format!("stopping the container {id:?}"))?;
    Ok(())
}

async fn stop_pod(client: &CriClient, id: &str) -> Result<()> {
    let mut req = StopPodSandboxRequest::new();
    req.pod_sandbox_id = id.to_string();
    client
        .stop_pod_sandbox(&req)
        .await
        .with_context(|| format!("stopping the pod sandbox {id:?}"))?;
    Ok(())
}

async fn remove_container(client: &CriClient, id: &str, force: bool) -> Result<()> {
    let mut sreq = ContainerStatusRequest::new();
    sreq.container_id = id.to_string();
    let status = client
        .container_status(&sreq)
        .await
        .with_context(|| format!("get container status {id}"))?;
    let running = status
        .status
        .as_ref()
        .map(|s| s.state.enum_value_or_default())
        == Some(ContainerState::CONTAINER_RUNNING);
    if running {
        if !force {
            bail!("container {id} is running, please stop the container before removing or force removal");
        }
        stop(client, id, 0).await?;
    }
    let mut req = RemoveContainerRequest::new();
    req.container_id = id.to_string();
    client
        .remove_container(&req)
        .await
        .with_context(|| format!("removing the container {id:?}"))?;
    Ok(())
}

async fn remove_pod(client: &CriClient, id: &str, force: bool) -> Result<()> {
    let mut sreq = PodSandboxStatusRequest::new();
    sreq.pod_sandbox_id = id.to_string();
    let status = client
        .pod_sandbox_status(&sreq)
        .await
        .with_context(|| format!("get pod status {id}"))?;
    let ready = status
        .status
        .as_ref()
        .map(|s| s.state.enum_value_or_default())
        == Some(PodSandboxState::SANDBOX_READY);
    if ready {
        if !force {
            bail!("pod sandbox {id} is running, please stop it first or use -f");
        }
        stop_pod(client, id).await?;
    }
    let mut req = RemovePodSandboxRequest::new();
    req.pod_sandbox_id = id.to_string();
    client
        .remove_pod_sandbox(&req)
        .await
        .with_context(|| format!("removing the pod sandbox {id:?}"))?;
    Ok(())
}

async fn all_containers(client: &CriClient) -> Result<Vec<String>> {
    let resp = client
        .list_containers(&ListContainersRequest::new())
        .await
        .context("list containers")?;
    Ok(resp.containers.into_iter().map(|c| c.id).collect())
}

async fn all_pods(client: &CriClient) -> Result<Vec<String>> {
    let resp = client
        .list_pod_sandbox(&ListPodSandboxRequest::new())
        .await
        .context("list pods")?;
    Ok(resp.items.into_iter().map(|p| p.id).collect())
}

fn container_state(raw: &str) -> Result<ContainerState> {
    Ok(match raw.to_ascii_lowercase().as_str() {
        "created" => ContainerState::CONTAINER_CREATED,
        "running" => ContainerState::CONTAINER_RUNNING,
        "exited" => ContainerState::CONTAINER_EXITED,
        "unknown" => ContainerState::CONTAINER_UNKNOWN,
        _ => bail!("unknown container state {raw:?}: created, running, exited or unknown"),
    })
}

async fn ps(client: &CriClient, args: PsArgs) -> Result<()> {
    let mut filter = ContainerFilter::new();
    if let Some(id) = &args.list.id {
        filter.id = id.clone();
    }
    if let Some(pod) = &args.pod {
        filter.pod_sandbox_id = pod.clone();
    }
    filter.label_selector = parse_labels(&args.list.labels)?;
    let state = match (&args.state, args.all || args.list.keep().is_some()) {
        (Some(s), _) => Some(container_state(s)?),
        (None, true) => None,
        (None, false) => Some(ContainerState::CONTAINER_RUNNING),
    };
    if let Some(state) = state {
        filter.state = protobuf::MessageField::some(ContainerStateValue {
            state: state.into(),
            ..Default::default()
        });
    }
    let mut req = ListContainersRequest::new();
    req.filter = protobuf::MessageField::some(filter);
    let mut resp = client
        .list_containers(&req)
        .await
        .context("list containers")?;
    if let Some(name) = &args.list.name {
        resp.containers
            .retain(|c| name_matches(name, &c.metadata.name));
    }
    resp.containers
        .sort_by_key(|c| std::cmp::Reverse(c.created_at));
    if let Some(n) = args.list.keep() {
        resp.containers.truncate(n);
    }
    if args.list.output == Format::Json {
        return print_json(&list_json(&resp)?);
    }
    if args.list.quiet {
        let mut out = std::io::stdout().lock();
        for c in &resp.containers {
            writeln!(out, "{}", c.id)?;
        }
        return Ok(());
    }
    let pods = client
        .list_pod_sandbox(&ListPodSandboxRequest::new())
        .await
        .context("list pods")?;
    let names: HashMap<String, String> = pods
        .items
        .into_iter()
        .map(|p| (p.id, p.metadata.name.clone()))
        .collect();
    print!("{}", container_table(&resp.containers, &names));
    Ok(())
}

async fn pods(client: &CriClient, args: PodsArgs) -> Result<()> {
    let mut filter = PodSandboxFilter::new();
    if let Some(id) = &args.list.id {
        filter.id = id.clone();
    }
    filter.label_selector = parse_labels(&args.list.labels)?;
    if let Some(s) = &args.state {
        let state = match s.to_ascii_lowercase().as_str() {
            "ready" => PodSandboxState::SANDBOX_READY,
            "notready" => PodSandboxState::SANDBOX_NOTREADY,
            _ => bail!("unknown pod state {s:?}: ready or notready"),
        };
        filter.state = protobuf::MessageField::some(PodSandboxStateValue {
            state: state.into(),
            ..Default::default()
        });
    }
    let mut req = ListPodSandboxRequest::new();
    req.filter = protobuf::MessageField::some(filter);
    let mut resp = client.list_pod_sandbox(&req).await.context("list pods")?;
    if let Some(name) = &args.list.name {
        resp.items.retain(|p| name_matches(name, &p.metadata.name));
    }
    if let Some(ns) = &args.namespace {
        resp.items
            .retain(|p| name_matches(ns, &p.metadata.namespace));
    }
    resp.items.sort_by_key(|p| std::cmp::Reverse(p.created_at));
    if let Some(n) = args.list.keep() {
        resp.items.truncate(n);
    }
    if args.list.output == Format::Json {
        return print_json(&list_json(&resp)?);
    }
    if args.list.quiet {
        let mut out = std::io::stdout().lock();
        for p in &resp.items {
            writeln!(out, "{}", p.id)?;
        }
        return Ok(());
    }
    print!("{}", pod_table(&resp.items));
    Ok(())
}

async fn exec(client: &mut CriClient, id: &str, cmd: Vec<String>, timeout: i64) -> Result<i32> {
    let mut req = ExecSyncRequest::new();
    req.container_id = id.to_string();
    req.cmd = cmd;
    req.timeout = timeout;
    let base = client.timeout();
    client.set_timeout(exec_deadline(timeout, base));
    let resp = client
        .exec_sync(&req)
        .await
        .with_context(|| format!("execing command in container {id}"))?;
    std::io::stdout().write_all(&resp.stdout)?;
    std::io::stdout().flush()?;
    std::io::stderr().write_all(&resp.stderr)?;
    Ok(resp.exit_code)
}

fn resources_of(args: &UpdateArgs) -> LinuxContainerResources {
    let mut res = LinuxContainerResources::new();
    res.cpu_period = args.cpu_period.unwrap_or(0);
    res.cpu_quota = args.cpu_quota.unwrap_or(0);
    res.cpu_shares = args.cpu_share.unwrap_or(0);
    res.cpuset_cpus = args.cpuset_cpus.clone().unwrap_or_default();
    res.cpuset_mems = args.cpuset_mems.clone().unwrap_or_default();
    res.memory_limit_in_bytes = args.memory.unwrap_or(0);
    res
}

async fn update_pods(client: &CriClient, args: UpdateArgs) -> Result<()> {
    let res = resources_of(&args);
    for id in &args.ids {
        let mut req = UpdatePodSandboxResourcesRequest::new();
        req.pod_sandbox_id = id.clone();
        req.resources = protobuf::MessageField::some(res.clone());
        client
            .update_pod_sandbox_resources(&req)
            .await
            .with_context(|| format!("updating pod sandbox resources for {id:?}"))?;
        println!("{id}");
    }
    Ok(())
}

async fn update(client: &CriClient, args: UpdateArgs) -> Result<()> {
    let res = resources_of(&args);
    for id in &args.ids {
        let mut req = UpdateContainerResourcesRequest::new();
        req.container_id = id.clone();
        req.linux = protobuf::MessageField::some(res.clone());
        client
            .update_container_resources(&req)
            .await
            .with_context(|| format!("updating container resources for {id:?}"))?;
        println!("{id}");
    }
    Ok(())
}
