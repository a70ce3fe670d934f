//! Pull-mode scheduling's work queues on NATS JetStream.
//!
//! One stream per deployment (`{PREFIX}_BOOTS`, work-queue retention, file
//! storage) holds every boot queue as a subject `{prefix}.boot.{queue}`;
//! each queue has one durable pull consumer `boot_{queue}` filtered on
//! exactly its subject (nats-server 2.9 takes one filter per consumer, and
//! a work-queue stream refuses overlapping filters). The control plane
//! publishes a boot with `Nats-Msg-Id` = `{instance}:{attempt}`, so a
//! second publish of the same attempt (the outbox sweep after a crash, a
//! restart) inside the stream's duplicate window is dropped by JetStream.
//! Agents bind to the consumers of the queues their hosts can take, fetch
//! with a bound on messages in flight, and ack after the build or nak with
//! a delay (another agent takes it).
//!
//! Every other task for a host (a delete, a start, the build of a boot
//! routed to push) travels on the host's own core-NATS subject
//! `{prefix}.host.{host}` as a request: the agent subscribed to it answers
//! that it took the task ([`Queues::send_to_host`], [`Queues::host_tasks`]).
//! Nothing is stored in NATS for it: the task state in the cell database
//! is the durable record, and the control plane falls back to the agent
//! API's long poll when no agent answers.
//!
//! It owns the NATS names and the NATS calls, nothing else: which
//! queue a boot goes to is `berth_compute_model::pull::queue_key`, and
//! the claim is the control plane's one planned write. It does not touch
//! the databases or serve HTTP.

use std::time::Duration;

use anyhow::{anyhow, Context as _};
use async_nats::jetstream::{self, consumer, stream};
use futures_util::StreamExt;
use serde_json::json;
use uuid::Uuid;

/// Subject, stream and consumer names of one deployment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Names {
    prefix: String,
}

impl Names {
    /// Names under `prefix` (letters, digits, `_` and `-` are kept; anything
    /// else becomes `_`).
    pub fn new(prefix: &str) -> Self {
        let prefix: String =
            prefix.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '-' { c } else { '_' }).collect();
        Names { prefix: if prefix.is_empty() { "berth".to_owned() } else { prefix } }
    }

    /// The prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The boot stream.
    pub fn stream(&self) -> String {
        format!("{}_BOOTS", self.prefix.to_uppercase())
    }

    /// The subject of `queue`.
    pub fn subject(&self, queue: &str) -> String {
        format!("{}.boot.{queue}", self.prefix)
    }

    /// The durable consumer of `queue`.
    pub fn consumer(&self, queue: &str) -> String {
        format!("boot_{queue}")
    }

    /// The subject of `host`'s tasks: `{prefix}.host.{token}`, the host
    /// name as one subject token ([`host_token`]).
    pub fn host_subject(&self, host: &str) -> String {
        format!("{}.host.{}", self.prefix, host_token(host))
    }
}

/// `host` as one NATS subject token. ASCII letters, digits and `-` stay;
/// every other byte becomes `_` and two hex digits (`.` → `_2E`, `_` →
/// `_5F`). Unlike the prefix's lossy `_`, this keeps two hosts apart
/// (`a.b` and `a_b`): hosts sharing a subject would take each other's
/// tasks, and host names are often FQDNs, whose dots would split the
/// token.
pub fn host_token(host: &str) -> String {
    let mut token = String::with_capacity(host.len());
    for byte in host.bytes() {
        if byte.is_ascii_alphanumeric() || byte == b'-' {
            token.push(byte as char);
        } else {
            token.push_str(&format!("_{byte:02X}"));
        }
    }
    if token.is_empty() {
        token.push('_');
    }
    token
}

/// The settings every user of the queues shares.
#[derive(Debug, Clone)]
pub struct Settings {
    /// `nats://host:port`.
    pub url: String,
    /// Stream and subject prefix (tests use a random one each).
    pub prefix: String,
    /// How long a fetched message may stay unacked before JetStream
    /// delivers it again.
    pub ack_wait: Duration,
}

/// A boot as it travels on a queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Boot {
    /// The instance.
    pub instance: Uuid,
    /// Its queue.
    pub queue: String,
    /// Its build attempt (1 for the first).
    pub attempt: i64,
    /// A multi-create's instances, `instance` first (a gang: claimed all
    /// or nothing by one agent); empty for a single boot.
    pub gang: Vec<Uuid>,
}

impl Boot {
    fn payload(&self) -> String {
        let mut payload = json!({"instance": self.instance.to_string(), "queue": self.queue, "attempt": self.attempt});
        if !self.gang.is_empty() {
            payload["gang"] = self.gang.iter().map(Uuid::to_string).collect();
        }
        payload.to_string()
    }

    fn parse(payload: &[u8]) -> Option<Self> {
        let value: serde_json::Value = serde_json::from_slice(payload).ok()?;
        let gang = match value.get("gang") {
            None => Vec::new(),
            Some(list) => list
                .as_array()?
                .iter()
                .map(|u| u.as_str().and_then(|u| Uuid::parse_str(u).ok()))
                .collect::<Option<Vec<Uuid>>>()?,
        };
        Some(Boot {
            instance: Uuid::parse_str(value["instance"].as_str()?).ok()?,
            queue: value["queue"].as_str()?.to_owned(),
            attempt: value["attempt"].as_i64().unwrap_or(1),
            gang,
        })
    }

    /// The deduplication id: one message per instance and attempt.
    pub fn message_id(&self) -> String {
        format!("{}:{}", self.instance, self.attempt)
    }
}

/// A connection to the queues (cheap to clone).
#[derive(Clone)]
pub struct Queues {
    client: async_nats::Client,
    js: jetstream::Context,
    names: Names,
    ack_wait: Duration,
}

impl std::fmt::Debug for Queues {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queues").field("names", &self.names).finish_non_exhaustive()
    }
}

impl Queues {
    /// Connect to `settings.url`. The client keeps reconnecting in the
    /// background, so this succeeds with NATS down: calls fail until it
    /// is back.
    pub async fn connect(settings: &Settings) -> anyhow::Result<Self> {
        let client = async_nats::ConnectOptions::new()
            .retry_on_initial_connect()
            .connection_timeout(Duration::from_secs(2))
            .connect(settings.url.as_str())
            .await
            .with_context(|| format!("connecting to NATS at {}", settings.url))?;
        let mut js = jetstream::new(client.clone());
        js.set_timeout(Duration::from_secs(3));
        Ok(Queues { client, js, names: Names::new(&settings.prefix), ack_wait: settings.ack_wait })
    }

    /// The names in use.
    pub fn names(&self) -> &Names {
        &self.names
    }

    /// Is the connection up now?
    pub fn connected(&self) -> bool {
        self.client.connection_state() == async_nats::connection::State::Connected
    }

    /// The boot stream, created if missing.
    pub async fn stream(&self) -> anyhow::Result<stream::Stream> {
        let names = &self.names;
        self.js
            .get_or_create_stream(stream::Config {
                name: names.stream(),
                subjects: vec![format!("{}.boot.*", names.prefix())],
                retention: stream::RetentionPolicy::WorkQueue,
                storage: stream::StorageType::File,
                duplicate_window: Duration::from_secs(120),
                ..Default::default()
            })
            .await
            .map_err(|e| anyhow!("creating stream {}: {e}", names.stream()))
    }

    /// The durable pull consumer of `queue`, created if missing.
    pub async fn consumer(&self, queue: &str) -> anyhow::Result<consumer::Consumer<consumer::pull::Config>> {
        let stream = self.stream().await?;
        let name = self.names.consumer(queue);
        stream
            .get_or_create_consumer(
                &name,
                consumer::pull::Config {
                    durable_name: Some(name.clone()),
                    filter_subject: self.names.subject(queue),
                    ack_policy: consumer::AckPolicy::Explicit,
                    ack_wait: self.ack_wait,
                    max_ack_pending: 10_000,
                    ..Default::default()
                },
            )
            .await
            .map_err(|e| anyhow!("creating consumer {name}: {e}"))
    }

    /// Publish `boot` to its queue; `Ok(true)` when JetStream already had
    /// this attempt (a duplicate it dropped).
    pub async fn publish(&self, boot: &Boot) -> anyhow::Result<bool> {
        let mut headers = async_nats::HeaderMap::new();
        headers.insert(async_nats::header::NATS_MESSAGE_ID, boot.message_id().as_str());
        let ack = self
            .js
            .publish_with_headers(self.names.subject(&boot.queue), headers, boot.payload().into())
            .await
            .map_err(|e| anyhow!("publishing {}: {e}", boot.instance))?
            .await
            .map_err(|e| anyhow!("publishing {}: {e}", boot.instance))?;
        Ok(ack.duplicate)
    }

    /// Up to `max` boots from `queue`, waiting at most `wait` for the
    /// first and not at all for the others (a batch request for `max`
    /// would wait the whole `wait` when fewer are there). Returns within
    /// about `wait` (plus the client's 5 s grace on the first) even when
    /// NATS never answers.
    pub async fn fetch(
        &self,
        consumer: &consumer::Consumer<consumer::pull::Config>,
        max: usize,
        wait: Duration,
    ) -> anyhow::Result<Vec<Delivery>> {
        let first = consumer.batch().max_messages(1).expires(wait).messages().await;
        let mut out = Vec::new();
        self.collect(first.map_err(|e| anyhow!("fetching: {e}"))?, &mut out).await;
        if !out.is_empty() && max > 1 {
            // A no-wait fetch has no expiry, so the client never ends it
            // by itself: its answer lost (NATS restarted between request
            // and answer) would hold the caller, and the agent's permits,
            // for good. What came is kept; what comes later is delivered
            // again after the ack wait.
            let more = async {
                let more = consumer.fetch().max_messages(max - 1).messages().await;
                self.collect(more.map_err(|e| anyhow!("fetching: {e}"))?, &mut out).await;
                anyhow::Ok(())
            };
            match tokio::time::timeout(wait, more).await {
                Ok(fetched) => fetched?,
                Err(_) => tracing::debug!("no answer to a fetch; ending it"),
            }
        }
        Ok(out)
    }

    async fn collect(&self, mut batch: consumer::pull::Batch, out: &mut Vec<Delivery>) {
        while let Some(message) = batch.next().await {
            let message = match message {
                Ok(message) => message,
                Err(err) => {
                    tracing::debug!(error = %err, "fetch ended");
                    break;
                }
            };
            let delivered = message.info().map(|i| i.delivered).unwrap_or(1);
            match Boot::parse(&message.payload) {
                Some(boot) => out.push(Delivery { boot, delivered, message }),
                None => {
                    // Not ours to understand: never deliver it again.
                    tracing::warn!(subject = %message.subject, "dropping a malformed boot message");
                    let _ = message.ack_with(jetstream::AckKind::Term).await;
                }
            }
        }
    }

    /// Totals over the boot stream (see [`QueueStats`]).
    pub async fn stats(&self) -> anyhow::Result<QueueStats> {
        let mut stream = self.js.get_stream(self.names.stream()).await.map_err(|e| anyhow!("{e}"))?;
        let messages = stream.info().await.map_err(|e| anyhow!("{e}"))?.state.messages;
        let mut stats = QueueStats { messages, ..QueueStats::default() };
        let mut consumers = stream.consumers();
        while let Some(info) = consumers.next().await {
            let info = info.map_err(|e| anyhow!("{e}"))?;
            stats.consumers += 1;
            stats.redelivered += info.num_redelivered as u64;
            stats.deliveries += info.delivered.consumer_sequence;
        }
        Ok(stats)
    }

    /// Send `payload` (a task for `host`) to the host's subject as a
    /// request and wait up to `wait` for its agent to answer it took it.
    /// Fails at once when NATS is not connected (the caller falls back to
    /// the long poll rather than wait for a reconnection).
    pub async fn send_to_host(&self, host: &str, payload: Vec<u8>, wait: Duration) -> Result<(), HostSendError> {
        if !self.connected() {
            return Err(HostSendError::Unavailable("not connected to NATS".to_owned()));
        }
        let request = async_nats::Request::new().payload(payload.into()).timeout(Some(wait));
        // The whole request is bounded: queueing it may wait for the
        // connection, outside the client's own reply timeout.
        let sent = tokio::time::timeout(wait, self.client.send_request(self.names.host_subject(host), request)).await;
        match sent {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(err)) if err.kind() == async_nats::RequestErrorKind::NoResponders => Err(HostSendError::NoTaker),
            Ok(Err(err)) => Err(HostSendError::Unavailable(err.to_string())),
            Err(_) => Err(HostSendError::Unavailable(format!("no answer within {wait:?}"))),
        }
    }

    /// Subscribe to the subjects of `hosts` (core NATS: nothing is kept
    /// for a host nobody listens to; the client subscribes again after a
    /// reconnection).
    pub async fn host_tasks(&self, hosts: &[String]) -> anyhow::Result<HostTasks> {
        let mut subscriptions = futures_util::stream::SelectAll::new();
        let mut by_subject = std::collections::HashMap::with_capacity(hosts.len());
        for host in hosts {
            let subject = self.names.host_subject(host);
            let subscriber =
                self.client.subscribe(subject.clone()).await.map_err(|e| anyhow!("subscribing to {subject}: {e}"))?;
            subscriptions.push(subscriber);
            by_subject.insert(subject, host.clone());
        }
        // Subscribed at the server before a task is sent to it.
        self.client.flush().await.map_err(|e| anyhow!("subscribing to the host subjects: {e}"))?;
        Ok(HostTasks { client: self.client.clone(), subscriptions, hosts: by_subject })
    }

    /// Delete the boot stream and its consumers (tests and benchmarks
    /// clean up their prefix).
    pub async fn delete(&self) -> anyhow::Result<()> {
        match self.js.delete_stream(self.names.stream()).await {
            Ok(_) => Ok(()),
            Err(err) if err.to_string().contains("not found") => Ok(()),
            Err(err) => Err(anyhow!("deleting stream {}: {err}", self.names.stream())),
        }
    }
}

/// Why a task sent to a host's subject was not taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostSendError {
    /// Nobody subscribes to the host's subject (its agent does not pull,
    /// is down, or is connecting).
    NoTaker,
    /// NATS is unreachable, or the taker did not answer in time.
    Unavailable(String),
}

impl std::fmt::Display for HostSendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HostSendError::NoTaker => f.write_str("no agent subscribes to the host's subject"),
            HostSendError::Unavailable(why) => write!(f, "the host's subject is unavailable: {why}"),
        }
    }
}

impl std::error::Error for HostSendError {}

/// The subscriptions of an agent's hosts' subjects, as one stream.
pub struct HostTasks {
    client: async_nats::Client,
    subscriptions: futures_util::stream::SelectAll<async_nats::Subscriber>,
    /// Subject → host.
    hosts: std::collections::HashMap<String, String>,
}

impl std::fmt::Debug for HostTasks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostTasks").field("hosts", &self.hosts.len()).finish_non_exhaustive()
    }
}

impl HostTasks {
    /// The next task sent to one of the hosts (`None`: the connection is
    /// closed for good).
    pub async fn next(&mut self) -> Option<HostTask> {
        loop {
            let message = self.subscriptions.next().await?;
            let Some(host) = self.hosts.get(message.subject.as_str()) else { continue };
            return Some(HostTask {
                host: host.clone(),
                payload: message.payload.to_vec(),
                reply: message.reply,
                client: self.client.clone(),
            });
        }
    }
}

/// A task received on a host's subject.
pub struct HostTask {
    /// The host whose subject it came on.
    pub host: String,
    /// What the control plane sent (the agent API's task JSON).
    pub payload: Vec<u8>,
    reply: Option<async_nats::Subject>,
    client: async_nats::Client,
}

impl std::fmt::Debug for HostTask {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostTask").field("host", &self.host).field("payload", &self.payload.len()).finish()
    }
}

impl HostTask {
    /// Tell the sender the task was taken (it then does not queue it for
    /// the long poll). A no-op for a message sent without a reply
    /// subject. An observer beside the agent never calls it.
    pub async fn accept(&self) -> anyhow::Result<()> {
        let Some(reply) = &self.reply else { return Ok(()) };
        self.client.publish(reply.clone(), "taken".into()).await.map_err(|e| anyhow!("answering a host task: {e}"))
    }
}

/// Totals of the boot stream.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueStats {
    /// Durable consumers (queues in use).
    pub consumers: u64,
    /// Messages in the stream (boots not yet acked).
    pub messages: u64,
    /// Messages delivered more than once and not yet acked.
    pub redelivered: u64,
    /// Deliveries so far, first ones and again (nak'd or unacked in time)
    /// alike, over every consumer.
    pub deliveries: u64,
}

/// A fetched boot.
pub struct Delivery {
    /// What it asks.
    pub boot: Boot,
    /// How many times JetStream delivered it (1 the first time).
    pub delivered: i64,
    message: jetstream::Message,
}

impl std::fmt::Debug for Delivery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Delivery").field("boot", &self.boot).field("delivered", &self.delivered).finish()
    }
}

impl Delivery {
    /// Done: the queue forgets it.
    pub async fn ack(&self) -> anyhow::Result<()> {
        self.message.ack().await.map_err(|e| anyhow!("ack: {e}"))
    }

    /// Not now: deliver it again after `delay` (to whichever agent asks).
    pub async fn nak(&self, delay: Duration) -> anyhow::Result<()> {
        self.message.ack_with(jetstream::AckKind::Nak(Some(delay))).await.map_err(|e| anyhow!("nak: {e}"))
    }

    /// Still working: restart the ack wait.
    pub async fn in_progress(&self) -> anyhow::Result<()> {
        self.message.ack_with(jetstream::AckKind::Progress).await.map_err(|e| anyhow!("progress: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_safe_and_distinct_per_prefix() {
        let names = Names::new("it.a b");
        assert_eq!(names.prefix(), "it_a_b");
        assert_eq!(names.stream(), "IT_A_B_BOOTS");
        assert_eq!(names.subject("m1-00ff"), "it_a_b.boot.m1-00ff");
        assert_eq!(names.consumer("m1-00ff"), "boot_m1-00ff");
        assert_eq!(Names::new("").prefix(), "berth");
        assert_eq!(names.host_subject("cn-1.example.org"), "it_a_b.host.cn-1_2Eexample_2Eorg");
    }

    #[test]
    fn host_tokens_are_single_tokens_and_keep_hosts_apart() {
        let hosts = ["a.b", "a_b", "a_2Eb", "a b", "a*", "a>", "", "_", "hôte", "cn-07"];
        let tokens: Vec<String> = hosts.iter().map(|h| host_token(h)).collect();
        for token in &tokens {
            assert!(!token.is_empty() && token.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'));
        }
        let distinct: std::collections::HashSet<&String> = tokens.iter().collect();
        assert_eq!(distinct.len(), hosts.len(), "{tokens:?}");
        assert_eq!(host_token("cn-07"), "cn-07");
        assert_eq!(host_token("hôte"), "h_C3_B4te");
    }

    #[test]
    fn boots_round_trip_and_dedupe_per_attempt() {
        let boot = Boot { instance: Uuid::new_v4(), queue: "q".into(), attempt: 2, gang: Vec::new() };
        assert_eq!(Boot::parse(boot.payload().as_bytes()), Some(boot.clone()));
        assert_eq!(boot.message_id(), format!("{}:2", boot.instance));
        let gang = Boot { gang: vec![boot.instance, Uuid::new_v4()], ..boot.clone() };
        assert_eq!(Boot::parse(gang.payload().as_bytes()), Some(gang.clone()));
        assert_eq!(gang.message_id(), boot.message_id(), "a gang is named by its first instance");
        assert_eq!(
            Boot::parse(br#"{"instance": "00000000-0000-0000-0000-000000000001", "queue": "q", "gang": [1]}"#),
            None
        );
        assert_eq!(Boot::parse(b"{}"), None);
        assert_eq!(Boot::parse(b"not json"), None);
    }
}
