//! The driver seam: what a host does with its guests. The agent's task
//! loop ([`crate::run_task`]) turns each task of the control plane's
//! protocol into one call here and the call's outcome into the event it
//! reports; the protocol is the same whatever the driver. Two drivers:
//! the fake hosts ([`crate::fake`], the default and the tests'
//! workhorse) and libvirt ([`crate::libvirt`], real QEMU guests).

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::task::{Context, Poll};

use serde_json::Value;

/// What a driver call answers: `Err` carries the message an event (or a
/// log line) reports.
pub type DriverFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, String>> + Send + 'a>>;

/// One task as a driver sees it.
#[derive(Debug, Clone, Copy)]
pub struct TaskRef<'a> {
    /// The task's kind (`build`, `stop`, ...).
    pub kind: &'a str,
    /// The instance uuid.
    pub instance: &'a str,
    /// The host it runs on.
    pub host: &'a str,
    /// The whole task as the control plane sent it (`key_data`,
    /// `display_name`, ...).
    pub body: &'a Value,
}

/// A guest's power state as the hypervisor reports it (libvirt's domain
/// states, as Nova's `power_state` maps them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GuestPower {
    /// Running (or blocked).
    Running,
    /// Paused (by berth, or suspended to disk in progress).
    Paused,
    /// Shut off (cleanly or not).
    Shutoff,
    /// Crashed.
    Crashed,
    /// Anything else (in shutdown, suspended by the guest, ...).
    Other,
}

/// One guest a host runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Guest {
    /// The instance uuid.
    pub instance: String,
    /// The host it runs on.
    pub host: String,
    /// Its power state.
    pub power: GuestPower,
}

/// What a host does. Every call is idempotent for its (instance, task):
/// an agent restarted in the middle of a task runs it again and must
/// find what it had done (a build finds its domain and does not spawn it
/// twice).
pub trait Driver: Send + Sync + std::fmt::Debug {
    /// The `hypervisor_type` the hosts register with (`fake`, `QEMU`).
    fn hypervisor_type(&self) -> &'static str;
    /// Does this driver make guests from the task's `server` (the long
    /// poll then asks for it: `guests=1`)? The fake hosts do not.
    fn needs_guest(&self) -> bool {
        false
    }
    /// Create and boot the guest (`build`).
    fn spawn<'a>(&'a self, task: TaskRef<'a>) -> DriverFuture<'a, ()>;
    /// Re-create the guest from its (new) image (`rebuild`).
    fn rebuild<'a>(&'a self, task: TaskRef<'a>) -> DriverFuture<'a, ()>;
    /// Destroy the guest and everything it has on the host (`delete`,
    /// `destroy_evacuated`).
    fn destroy<'a>(&'a self, task: TaskRef<'a>) -> DriverFuture<'a, ()>;
    /// Clean shutdown bounded by a timeout, then power off (`stop`).
    fn power_off<'a>(&'a self, task: TaskRef<'a>) -> DriverFuture<'a, ()>;
    /// Power on (`start`).
    fn power_on<'a>(&'a self, task: TaskRef<'a>) -> DriverFuture<'a, ()>;
    /// Reboot: soft (ACPI) then hard (`reboot`).
    fn reboot<'a>(&'a self, task: TaskRef<'a>) -> DriverFuture<'a, ()>;
    /// Pause the guest's vCPUs (`pause`).
    fn pause<'a>(&'a self, task: TaskRef<'a>) -> DriverFuture<'a, ()>;
    /// Unpause (`unpause`).
    fn unpause<'a>(&'a self, task: TaskRef<'a>) -> DriverFuture<'a, ()>;
    /// Save the guest's memory to disk and stop it (`suspend`).
    fn suspend<'a>(&'a self, task: TaskRef<'a>) -> DriverFuture<'a, ()>;
    /// Restore a suspended guest (`resume`).
    fn resume<'a>(&'a self, task: TaskRef<'a>) -> DriverFuture<'a, ()>;
    /// The guest's serial console log (`console_output`).
    fn console_output<'a>(&'a self, task: TaskRef<'a>) -> DriverFuture<'a, String>;
    /// Accept an incoming live migration (`live_migration_prepare`).
    fn live_migration_prepare<'a>(&'a self, task: TaskRef<'a>) -> DriverFuture<'a, ()>;
    /// Send the guest to the destination (`live_migrate`).
    fn live_migrate<'a>(&'a self, task: TaskRef<'a>) -> DriverFuture<'a, ()>;
    /// Boot the guest from a rescue image, its own disk attached
    /// (`rescue`).
    fn rescue<'a>(&'a self, task: TaskRef<'a>) -> DriverFuture<'a, ()>;
    /// Boot the guest from its own disk again (`unrescue`).
    fn unrescue<'a>(&'a self, task: TaskRef<'a>) -> DriverFuture<'a, ()>;
    /// The guest's root disk as an image's data, for `createImage`,
    /// `createBackup` and `shelve` (`snapshot`; the task's `image` is
    /// where it goes).
    fn snapshot<'a>(&'a self, task: TaskRef<'a>) -> DriverFuture<'a, DiskImage>;
    /// A step of a cold move or of shelving (`resize_*`, `shelve*`,
    /// `unshelve`), named by the task's kind.
    fn move_step<'a>(&'a self, task: TaskRef<'a>) -> DriverFuture<'a, ()>;
    /// The guests the hosts run and their power states, for the power
    /// sync; `None`: this driver has no guests to watch (the fake hosts).
    fn guests(&self) -> DriverFuture<'_, Option<Vec<Guest>>>;
}

/// A disk image a driver hands over for upload to the image API.
#[derive(Debug)]
pub enum DiskImage {
    /// Bytes in memory (the fake hosts' small disks).
    Bytes(Vec<u8>),
    /// A file on the host, streamed to the image API in chunks (a real
    /// disk is gigabytes: it is never read into memory whole) and removed
    /// once the upload is over, whatever its outcome.
    File(PathBuf),
}

/// The bytes of a chunk the upload of a [`DiskImage::File`] reads at a
/// time: what the agent holds of a disk it uploads is a few of these.
pub const UPLOAD_CHUNK: usize = 256 * 1024;

/// A file as an HTTP request body, read [`UPLOAD_CHUNK`] bytes at a time
/// as the connection takes them (the body of a streamed upload).
#[derive(Debug)]
pub struct FileBody {
    file: tokio::fs::File,
    buf: Vec<u8>,
    remaining: u64,
}

impl FileBody {
    /// The body of `file`, `len` bytes long (its length when opened: the
    /// request declares it).
    pub fn new(file: tokio::fs::File, len: u64) -> Self {
        FileBody { file, buf: vec![0; UPLOAD_CHUNK], remaining: len }
    }
}

impl http_body::Body for FileBody {
    type Data = bytes::Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        let this = self.get_mut();
        if this.remaining == 0 {
            return Poll::Ready(None);
        }
        let want = usize::try_from(this.remaining).unwrap_or(usize::MAX).min(this.buf.len());
        let mut read = tokio::io::ReadBuf::new(&mut this.buf[..want]);
        match tokio::io::AsyncRead::poll_read(Pin::new(&mut this.file), cx, &mut read) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Err(err)) => Poll::Ready(Some(Err(err))),
            Poll::Ready(Ok(())) => {
                let n = read.filled().len();
                if n == 0 {
                    // Shorter than declared: the request is cut short (the
                    // image API refuses a body shorter than its length).
                    return Poll::Ready(Some(Err(std::io::Error::new(
                        std::io::ErrorKind::UnexpectedEof,
                        "the disk image file ended before its length",
                    ))));
                }
                this.remaining -= n as u64;
                Poll::Ready(Some(Ok(http_body::Frame::data(bytes::Bytes::copy_from_slice(&this.buf[..n])))))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.remaining == 0
    }

    fn size_hint(&self) -> http_body::SizeHint {
        http_body::SizeHint::with_exact(self.remaining)
    }
}
