//! The disks of a cold move, from the source's agent to the destination's.
//!
//! The source's agent serves each guest it handed over: its root disk
//! (`{instances}/{uuid}_resize/disk`) at
//! `http://{my_ip}:{migration_port}/v1/moves/{uuid}/disk` and its
//! ephemeral disk, when it has one, at `…/disk.local` (the swap disk is
//! made anew, as a powered-off guest's swap holds nothing), to a caller
//! that shows the move's secret (`Authorization: Bearer …`): the control
//! plane writes the secret with the move's claim and sends it with the
//! source's and the destination's tasks only; the source keeps it beside
//! the disk (`transfer-token`, 0600) until the move is confirmed or
//! reverted. The server is a few lines of HTTP/1.1 on a tokio listener
//! (one GET, then the connection closes): no HTTP server crate in the
//! agent for one route. The destination fetches with the agent's HTTP
//! client.

use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The file beside a handed-over disk holding the move's secret.
pub const TOKEN_FILE: &str = "transfer-token";

/// The directory a handed-over guest waits in until its move is
/// confirmed (removed) or reverted (renamed back).
pub fn resize_dir(instances: &Path, instance: &str) -> PathBuf {
    instances.join(format!("{instance}_resize"))
}

/// Serve handed-over disks under `instances` on `listener` until the
/// process ends.
pub async fn serve(listener: TcpListener, instances: PathBuf) {
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(err) => {
                tracing::warn!(error = %err, "disk transfer: accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let instances = instances.clone();
        tokio::spawn(async move {
            if let Err(err) = answer(stream, &instances).await {
                tracing::warn!(%peer, error = %err, "disk transfer failed");
            }
        });
    }
}

/// The files of a handed-over guest a destination may fetch.
pub const DISKS: &[&str] = &["disk", "disk.local"];

/// What a request asks for: the instance, its disk and the secret shown.
#[derive(Debug, PartialEq, Eq)]
pub struct DiskRequest {
    /// The instance uuid.
    pub instance: String,
    /// The disk (one of [`DISKS`]).
    pub disk: String,
    /// The bearer token (empty: none shown).
    pub token: String,
}

/// Parse a request head (`GET /v1/moves/{uuid}/{disk} HTTP/1.1` and its
/// headers); `Err` carries the status to answer.
pub fn parse_request(head: &str) -> Result<DiskRequest, u16> {
    let mut lines = head.split("\r\n");
    let mut first = lines.next().unwrap_or("").split(' ');
    let (method, path) = (first.next().unwrap_or(""), first.next().unwrap_or(""));
    if method != "GET" {
        return Err(405);
    }
    let (instance, disk) = path
        .strip_prefix("/v1/moves/")
        .and_then(|rest| rest.split_once('/'))
        .filter(|(id, disk)| uuid::Uuid::parse_str(id).is_ok() && DISKS.contains(disk))
        .ok_or(404u16)?;
    let (instance, disk) = (instance.to_owned(), disk.to_owned());
    let token = lines
        .filter_map(|line| line.split_once(':'))
        .find(|(name, _)| name.trim().eq_ignore_ascii_case("authorization"))
        .and_then(|(_, value)| value.trim().strip_prefix("Bearer "))
        .map(|t| t.trim().to_owned())
        .unwrap_or_default();
    Ok(DiskRequest { instance, disk, token })
}

/// Equal secrets, compared in time independent of where they differ.
pub fn same_secret(a: &str, b: &str) -> bool {
    a.len() == b.len() && a.bytes().zip(b.bytes()).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

async fn refuse(mut stream: TcpStream, status: u16) -> Result<(), String> {
    let reason = match status {
        401 => "Unauthorized",
        404 => "Not Found",
        405 => "Method Not Allowed",
        _ => "Bad Request",
    };
    let text = format!("HTTP/1.1 {status} {reason}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
    stream.write_all(text.as_bytes()).await.map_err(|e| e.to_string())
}

async fn answer(mut stream: TcpStream, instances: &Path) -> Result<(), String> {
    // The head: at most 8 KiB, within 10 s.
    let mut head = Vec::with_capacity(1024);
    let read = tokio::time::timeout(Duration::from_secs(10), async {
        let mut buf = [0u8; 1024];
        while !head.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = stream.read(&mut buf).await.map_err(|e| e.to_string())?;
            if n == 0 || head.len() > 8192 {
                return Err("request head cut short or too long".to_owned());
            }
            head.extend_from_slice(&buf[..n]);
        }
        Ok(())
    })
    .await;
    match read {
        Ok(Ok(())) => {}
        Ok(Err(err)) => return Err(err),
        Err(_) => return Err("no request head within 10 s".to_owned()),
    }
    let text = String::from_utf8_lossy(&head).into_owned();
    let request = match parse_request(&text) {
        Ok(request) => request,
        Err(status) => return refuse(stream, status).await,
    };
    let dir = resize_dir(instances, &request.instance);
    let secret = tokio::fs::read_to_string(dir.join(TOKEN_FILE)).await.unwrap_or_default();
    let secret = secret.trim();
    if secret.is_empty() {
        return refuse(stream, 404).await;
    }
    if request.token.is_empty() || !same_secret(secret, &request.token) {
        tracing::warn!(instance = %request.instance, "disk transfer refused: wrong or no move secret");
        return refuse(stream, 401).await;
    }
    let path = dir.join(&request.disk);
    let mut file = match tokio::fs::File::open(&path).await {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return refuse(stream, 404).await,
        Err(e) => return Err(format!("opening {}: {e}", path.display())),
    };
    let size = file.metadata().await.map_err(|e| e.to_string())?.len();
    let head = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: {size}\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).await.map_err(|e| e.to_string())?;
    tokio::io::copy(&mut file, &mut stream).await.map_err(|e| e.to_string())?;
    stream.shutdown().await.map_err(|e| e.to_string())?;
    tracing::info!(instance = %request.instance, disk = %request.disk, bytes = size, "disk handed to the move's destination");
    Ok(())
}

/// Fetch `disk` (one of [`DISKS`]) of `instance` from the source's agent
/// at `base` (`http://ip:port`) with the move's `token` into `out`
/// (written whole or not at all: `out.part` then renamed); `None` when
/// the source has no such disk.
pub async fn fetch(base: &str, instance: &str, disk: &str, token: &str, out: &Path) -> Result<Option<u64>, String> {
    let url = format!("{base}/v1/moves/{instance}/{disk}");
    // Host to host: never through a proxy of the environment.
    let client = reqwest::Client::builder()
        .no_proxy()
        .connect_timeout(Duration::from_secs(10))
        .build()
        .map_err(|e| format!("disk transfer client: {e}"))?;
    let mut resp = client
        .get(&url)
        .bearer_auth(token)
        .timeout(Duration::from_secs(3600))
        .send()
        .await
        .map_err(|e| format!("GET {url}: {e}"))?;
    if resp.status() == reqwest::StatusCode::NOT_FOUND && disk != "disk" {
        return Ok(None);
    }
    if !resp.status().is_success() {
        return Err(format!("GET {url}: HTTP {}", resp.status()));
    }
    // The announced length, read before the body (reqwest's hint counts
    // down as the body is read).
    let expected = resp.content_length();
    let part = out.with_extension("part");
    let mut file = tokio::fs::File::create(&part).await.map_err(|e| format!("creating {}: {e}", part.display()))?;
    let mut bytes = 0u64;
    while let Some(chunk) = resp.chunk().await.map_err(|e| format!("GET {url}: {e}"))? {
        bytes += chunk.len() as u64;
        file.write_all(&chunk).await.map_err(|e| format!("writing {}: {e}", part.display()))?;
    }
    file.sync_all().await.map_err(|e| format!("syncing {}: {e}", part.display()))?;
    if let Some(expected) = expected {
        if expected != bytes {
            let _ = tokio::fs::remove_file(&part).await;
            return Err(format!("GET {url}: {bytes} bytes of {expected}"));
        }
    }
    tokio::fs::rename(&part, out).await.map_err(|e| format!("renaming {}: {e}", part.display()))?;
    Ok(Some(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_parse_and_secrets_compare() {
        let id = "6f9619ff-8b86-d011-b42d-00c04fc964ff";
        let head = format!("GET /v1/moves/{id}/disk HTTP/1.1\r\nHost: x\r\nauthorization: Bearer s3cret\r\n\r\n");
        assert_eq!(
            parse_request(&head),
            Ok(DiskRequest { instance: id.to_owned(), disk: "disk".to_owned(), token: "s3cret".to_owned() })
        );
        let local = format!("GET /v1/moves/{id}/disk.local HTTP/1.1\r\n\r\n");
        assert_eq!(parse_request(&local).map(|r| r.disk), Ok("disk.local".to_owned()));
        assert_eq!(parse_request(&format!("GET /v1/moves/{id}/transfer-token HTTP/1.1\r\n\r\n")), Err(404));
        assert_eq!(parse_request(&format!("GET /v1/moves/{id}/libvirt.xml HTTP/1.1\r\n\r\n")), Err(404));
        let bare = format!("GET /v1/moves/{id}/disk HTTP/1.1\r\n\r\n");
        assert_eq!(parse_request(&bare).map(|r| r.token), Ok(String::new()));
        assert_eq!(parse_request("GET /v1/moves/../etc/disk HTTP/1.1\r\n\r\n"), Err(404));
        assert_eq!(parse_request(&format!("PUT /v1/moves/{id}/disk HTTP/1.1\r\n\r\n")), Err(405));
        assert!(same_secret("abc", "abc"));
        assert!(!same_secret("abc", "abd") && !same_secret("abc", "abcd"));
    }

    /// A real listener: the disk only for the right secret.
    #[tokio::test]
    async fn the_source_serves_the_disk_only_for_the_secret() {
        let instances = std::env::temp_dir().join(format!("berth-transfer-{}", uuid::Uuid::new_v4().simple()));
        let id = uuid::Uuid::new_v4().to_string();
        let dir = resize_dir(&instances, &id);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("disk"), vec![7u8; 100_000]).unwrap();
        std::fs::write(dir.join(TOKEN_FILE), "right\n").unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(serve(listener, instances.clone()));
        let out = instances.join("fetched");
        assert!(fetch(&base, &id, "disk", "wrong", &out).await.unwrap_err().contains("401"));
        assert!(fetch(&base, &id, "disk.local", "wrong", &out).await.unwrap_err().contains("401"));
        assert!(!out.exists());
        let other = uuid::Uuid::new_v4().to_string();
        assert!(fetch(&base, &other, "disk", "right", &out).await.unwrap_err().contains("404"));
        // No ephemeral disk on the source: none fetched, no error.
        assert_eq!(fetch(&base, &id, "disk.local", "right", &out).await, Ok(None));
        assert!(!out.exists());
        assert_eq!(fetch(&base, &id, "disk", "right", &out).await, Ok(Some(100_000)));
        assert_eq!(std::fs::read(&out).unwrap(), vec![7u8; 100_000]);
        std::fs::write(dir.join("disk.local"), vec![9u8; 5_000]).unwrap();
        let eph = instances.join("fetched.local");
        assert_eq!(fetch(&base, &id, "disk.local", "right", &eph).await, Ok(Some(5_000)));
        assert_eq!(std::fs::read(&eph).unwrap(), vec![9u8; 5_000]);
        let _ = std::fs::remove_dir_all(&instances);
    }
}
