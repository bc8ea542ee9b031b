//! `shmemrun -n N [--engine E] [--tag-output] PROGRAM [ARGS...]`

use std::ffi::OsString;

use shmem_launch::{launch, LaunchOptions};

const USAGE: &str =
    "usage: shmemrun -n N [--engine HCCS|SDMA|ROCE] [--tag-output] [--env K=V]... PROGRAM [ARGS...]

Starts N PEs of PROGRAM on this machine. Each PE gets SHMEM_RANK/SHMEM_NRANKS,
the config-store address and a fresh job secret, plus torchrun's RANK,
WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT.
When a PE fails the others are stopped and shmemrun exits non-zero, naming it.

  -n, -np, --np N    number of PEs
  --engine E         set SHMEM_TEST_ENGINE=E for every PE
  --tag-output       prefix every output line with [PE i]
  --env K=V          extra environment variable for every PE
  --timeout SECS     stop the whole job after SECS seconds (exit 124)
  --bind-to core|none  one core per PE when they fit (default core; SHMEM_BIND=none)
  --nnodes K         the job spans K nodes, each running shmemrun with -n N
  --node-rank R      this node's index (its PEs get ranks R*N .. R*N+N-1)
  --master-addr A    node 0's address; its shmemrun hosts the store on port P+1
  --master-port P    torch's MASTER_PORT on node 0 (default 29500)
  -h, --help         this text";

fn main() {
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    match parse(args) {
        Ok(Some(opts)) => match launch(&opts) {
            Ok(report) => {
                if let Some(line) = report.summary() {
                    eprintln!("{line}");
                }
                std::process::exit(report.exit_code());
            }
            Err(e) => {
                eprintln!("shmemrun: {e}");
                std::process::exit(1);
            }
        },
        Ok(None) => println!("{USAGE}"),
        Err(msg) => {
            eprintln!("shmemrun: {msg}\n\n{USAGE}");
            std::process::exit(2);
        }
    }
}

fn parse(args: Vec<OsString>) -> Result<Option<LaunchOptions>, String> {
    let mut n = None;
    let mut engine = None;
    let mut tag = false;
    let mut env = Vec::new();
    let mut timeout = None;
    let mut bind: Option<bool> = None;
    let mut nnodes = 1usize;
    let mut node_rank = 0usize;
    let mut master_addr: Option<String> = None;
    let mut master_port: u16 = 29500;
    let mut it = args.into_iter();
    let program = loop {
        let Some(a) = it.next() else {
            return Err("missing PROGRAM".into());
        };
        let s = a.to_string_lossy().into_owned();
        let mut value = |name: &str| -> Result<String, String> {
            it.next()
                .map(|v| v.to_string_lossy().into_owned())
                .ok_or(format!("{name} needs a value"))
        };
        match s.as_str() {
            "-h" | "--help" => return Ok(None),
            "-n" | "-np" | "--np" => {
                let v = value(&s)?;
                n = Some(
                    v.parse::<usize>()
                        .map_err(|_| format!("{s} {v:?}: not a number"))?,
                );
            }
            "--engine" => engine = Some(value("--engine")?),
            "--tag-output" => tag = true,
            "--bind-to" => {
                let v = value("--bind-to")?;
                bind = match v.as_str() {
                    "core" => Some(true),
                    "none" => Some(false),
                    _ => return Err(format!("--bind-to {v:?}: expected core or none")),
                };
            }
            "--nnodes" => {
                let v = value("--nnodes")?;
                nnodes = v
                    .parse()
                    .map_err(|_| format!("--nnodes {v:?}: not a number"))?;
            }
            "--node-rank" => {
                let v = value("--node-rank")?;
                node_rank = v
                    .parse()
                    .map_err(|_| format!("--node-rank {v:?}: not a number"))?;
            }
            "--master-addr" => master_addr = Some(value("--master-addr")?),
            "--master-port" => {
                let v = value("--master-port")?;
                master_port = v
                    .parse()
                    .map_err(|_| format!("--master-port {v:?}: not a port"))?;
            }
            "--timeout" => {
                let v = value("--timeout")?;
                let secs: f64 = v
                    .parse()
                    .map_err(|_| format!("--timeout {v:?}: not a number of seconds"))?;
                if !(secs.is_finite() && secs > 0.0) {
                    return Err(format!("--timeout {v:?}: must be positive"));
                }
                timeout = Some(std::time::Duration::from_secs_f64(secs));
            }
            "--env" => {
                let kv = value("--env")?;
                let (k, v) = kv
                    .split_once('=')
                    .ok_or(format!("--env {kv:?}: expected K=V"))?;
                env.push((k.to_string(), v.to_string()));
            }
            _ if s.starts_with('-') && s.len() > 1 => return Err(format!("unknown option {s}")),
            _ => break a,
        }
    };
    let n = n.ok_or("missing -n N")?;
    let mut opts = LaunchOptions::new(n, program);
    opts.args = it.collect();
    opts.engine = engine;
    opts.tag_output = tag;
    opts.env = env;
    opts.timeout = timeout;
    if let Some(b) = bind {
        opts.bind = b;
    }
    opts.nnodes = nnodes;
    opts.node_rank = node_rank;
    if let Some(a) = master_addr {
        use std::net::ToSocketAddrs;
        let addr = (a.as_str(), master_port)
            .to_socket_addrs()
            .map_err(|e| format!("--master-addr {a:?}: {e}"))?
            .next()
            .ok_or(format!("--master-addr {a:?}: no address"))?;
        opts.master = Some(addr);
    }
    Ok(Some(opts))
}
