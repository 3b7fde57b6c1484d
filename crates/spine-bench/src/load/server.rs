//! A `spine serve` started from `--binary`, and the server's CPU time from `/proc`.

use std::os::unix::process::CommandExt;

use super::session::Connection;
use super::*;

/// A server started from `--binary`, killed (and its data directory removed) on drop.
pub(super) struct Server {
    pub(super) child: Child,
    _data_dir: tempfile::TempDir,
}

impl Server {
    /// The data directory the server was started on.
    pub(super) fn data_dir(&self) -> &Path {
        self._data_dir.path()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `binary serve` on a fresh data directory and a free loopback port, and waits for
/// `/healthz` to answer 200.
pub(super) async fn start(
    binary: &Path,
    extra: &[String],
    env: &[(String, String)],
) -> Result<(Server, Uri)> {
    let data_dir = tempfile::tempdir()?;
    let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let mut command = Command::new(binary);
    // Killed with the bench: a bench stopped by a signal (Ctrl-C, a timeout) ran no drop
    // and left the server running. The signal follows the spawning thread, a runtime worker
    // that lives as long as the bench.
    // SAFETY: between fork and exec the closure only calls prctl, which is async-signal-safe.
    unsafe {
        command.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = command
        .arg("serve")
        .arg("--data-dir")
        .arg(data_dir.path())
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .args(extra)
        .env("SPINE_LOG", "warn")
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .with_context(|| format!("starting {} serve", binary.display()))?;
    let mut server = Server { child, _data_dir: data_dir };
    let mcp: Uri = format!("http://127.0.0.1:{port}/mcp").parse()?;
    let started = Instant::now();
    loop {
        if let Some(status) = server.child.try_wait()? {
            bail!("{} serve exited before answering /healthz: {status}", binary.display());
        }
        if let Ok(mut c) = Connection::open(&mcp).await
            && let Ok(healthz) = Request::get("/healthz").body(Full::default())
            && c.send(healthz).await.is_ok_and(|(status, ..)| status == StatusCode::OK)
        {
            return Ok((server, mcp));
        }
        if started.elapsed() > Duration::from_secs(60) {
            bail!("{mcp}: /healthz did not answer 200 within 60 s");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The pid of the process with a LISTEN socket on `port` (best effort: /proc/net/tcp{,6}
/// for the socket's inode, then the /proc/*/fd links that point at it).
pub(super) fn listening_pid(port: u16) -> Option<u32> {
    let inode = ["/proc/net/tcp", "/proc/net/tcp6"].iter().find_map(|table| {
        let text = std::fs::read_to_string(table).ok()?;
        text.lines().skip(1).find_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let local_port = u16::from_str_radix(f.get(1)?.rsplit(':').next()?, 16).ok()?;
            let listening = local_port == port && *f.get(3)? == "0A";
            listening.then(|| f.get(9).map(|s| s.to_string())).flatten()
        })
    })?;
    let target = format!("socket:[{inode}]");
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|entry| {
        let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
        let fds = std::fs::read_dir(entry.path().join("fd")).ok()?;
        fds.flatten()
            .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|l| l.as_os_str() == target.as_str()))
            .then_some(pid)
    })
}

/// utime + stime of a process (`self` or a pid) in seconds, from /proc/PID/stat.
pub(super) fn cpu_seconds(pid: impl Display) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the parenthesised command name start at field 3 (state); utime and
    // stime are fields 14 and 15.
    let f: Vec<&str> = stat[stat.rfind(')')? + 1..].split_whitespace().collect();
    let ticks = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
    // SAFETY: sysconf reads a constant of the system; it has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    Some(ticks / if hz > 0 { hz as f64 } else { 100.0 })
}

/// A local OTLP/HTTP receiver on a free loopback port: answers every POST (`/v1/traces`,
/// `/v1/metrics`) with an empty success, reading the body and keeping nothing. Returns its
/// base URL and the count of requests it took.
pub(super) async fn otlp_sink() -> Result<(String, Arc<AtomicUsize>)> {
    use hyper::service::service_fn;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let endpoint = format!("http://{}", listener.local_addr()?);
    let taken = Arc::new(AtomicUsize::new(0));
    let counted = taken.clone();
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            let counted = counted.clone();
            tokio::spawn(async move {
                let serve = service_fn(move |request: Request<hyper::body::Incoming>| {
                    let counted = counted.clone();
                    async move {
                        let _ = request.into_body().collect().await;
                        counted.fetch_add(1, Ordering::Relaxed);
                        hyper::Response::builder()
                            .header(CONTENT_TYPE, "application/x-protobuf")
                            .body(Full::new(Bytes::new()))
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(socket), serve)
                    .await;
            });
        }
    });
    Ok((endpoint, taken))
}
