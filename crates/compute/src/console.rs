//! `os-getConsoleOutput`: the console log is the hypervisor's, so the API
//! asks the host's agent for it (a [`TaskKind::ConsoleOutput`] task, no
//! task state, nothing written) and waits for the agent's
//! `console_output` event, which carries the text. Concurrent requests
//! for one server share one task and one answer. The wait is in this
//! process: an agent connected to another process (several processes on
//! PostgreSQL) is not reached, and the request times out (409).
//!
//! [`TaskKind::ConsoleOutput`]: crate::hub::TaskKind::ConsoleOutput

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use uuid::Uuid;

use crate::action::conflict;
use crate::agents::AgentEvent;
use crate::error::ServiceError;
use crate::hub::Task;
use crate::servers::ServerRecord;
use crate::Compute;

/// How long the API waits for the agent's answer (Nova's RPC timeout is
/// 60 s; a fake or local agent answers in milliseconds).
pub const CONSOLE_TIMEOUT: Duration = Duration::from_secs(20);

/// Requests waiting for console output, by task id.
#[derive(Debug, Default)]
pub struct Waiters(Mutex<HashMap<String, Vec<tokio::sync::oneshot::Sender<String>>>>);

impl Waiters {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Vec<tokio::sync::oneshot::Sender<String>>>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Compute {
    /// The console output of a server, the last `length` lines as Nova
    /// cuts them (`None`: all). A server without a host is Nova's 409
    /// "Instance X is not ready".
    pub async fn console_output(&self, uuid: &Uuid, length: Option<i64>) -> Result<String, ServiceError> {
        let instance = match self.get_server(uuid).await? {
            ServerRecord::Placed { instance, .. } => instance,
            ServerRecord::Pending(_) => return Err(conflict(format!("Instance {uuid} is not ready"))),
            ServerRecord::Unreachable(_) => {
                return Err(ServiceError::Unavailable("the server's cell is not answering".into()))
            }
        };
        let Some(host) = instance.host.as_deref() else {
            return Err(conflict(format!("Instance {uuid} is not ready")));
        };
        let task = Task::console_output(*uuid, host, &instance.spec.display_name);
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.console_waiters.lock().entry(task.id.clone()).or_default().push(tx);
        self.hub.push(task.clone());
        let answer = tokio::time::timeout(CONSOLE_TIMEOUT, rx).await;
        let Ok(Ok(text)) = answer else {
            let mut waiters = self.console_waiters.lock();
            if let Some(list) = waiters.get_mut(&task.id) {
                list.retain(|tx| !tx.is_closed());
                if list.is_empty() {
                    waiters.remove(&task.id);
                }
            }
            return Err(conflict(format!("The console of instance {uuid} did not answer from host {host}.")));
        };
        Ok(tail(&text, length))
    }

    /// An agent's `console_output` event: hand the text to the requests
    /// waiting for it (true if any was).
    pub(crate) fn console_answered(&self, event: &AgentEvent) -> bool {
        let Some(task) = &event.task else { return false };
        let Some(waiters) = self.console_waiters.lock().remove(task) else { return false };
        let text = event.message.clone().unwrap_or_default();
        let mut delivered = false;
        for tx in waiters {
            delivered |= tx.send(text.clone()).is_ok();
        }
        delivered
    }
}

/// Nova's cut (`ComputeManager._tail_log`, then the API's filter of
/// control characters): 0 is nothing; `n > 0` the last `n` lines; a
/// negative `n` (the schema allows -1, and any negative string) Python's
/// `lines[-n:]`, which drops the first `|n|` lines.
pub fn tail(text: &str, length: Option<i64>) -> String {
    let cut = match length {
        None => text.to_owned(),
        Some(0) => String::new(),
        Some(n) => {
            let lines: Vec<&str> = text.split('\n').collect();
            let count = lines.len() as i64;
            let start = if n > 0 { (count - n).max(0) } else { (-n).min(count) };
            lines[start as usize..].join("\n")
        }
    };
    cut.chars().filter(|c| !matches!(*c as u32, 0x00..=0x08 | 0x0B..=0x1F)).collect()
}

#[cfg(test)]
mod tests {
    use super::tail;

    #[test]
    fn tails_as_nova_does() {
        let text = "a\nb\nc";
        assert_eq!(tail(text, None), "a\nb\nc");
        assert_eq!(tail(text, Some(0)), "");
        assert_eq!(tail(text, Some(2)), "b\nc");
        assert_eq!(tail(text, Some(9)), "a\nb\nc");
        assert_eq!(tail(text, Some(-1)), "b\nc");
        assert_eq!(tail(text, Some(-5)), "");
        assert_eq!(tail("x\u{1b}[0m\ty\r", None), "x[0m\ty");
    }
}
