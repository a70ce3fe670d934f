//! Hints between the berth processes on one database: PostgreSQL's
//! `LISTEN`/`NOTIFY` on one channel per berth schema. A payload goes to
//! every listening session, the sender's own listener too, so each starts
//! with the sending process's token and a listener drops its own.
//! Notifications are not durable; callers use them to act sooner on
//! what they would also find by reading the database.

use std::time::Duration;

use postgres::fallible_iterator::FallibleIterator;
use postgres::NoTls;

/// PostgreSQL's limit on an identifier (the channel name), in bytes.
const MAX_IDENTIFIER: usize = 63;

/// How long the listener waits for a notification before it checks its
/// connection (a silently dropped connection would otherwise wait forever).
const LISTEN_CHECK: Duration = Duration::from_secs(10);

/// The channel of the berth processes on `schema` (the default schema:
/// `None`), cut to PostgreSQL's identifier length at a character boundary.
/// Two schemas whose names agree in their first 50 bytes share a channel;
/// the only cost is hints their listeners find nothing to act on.
pub(crate) fn channel(schema: Option<&str>) -> String {
    let mut name = format!("berth_peers.{}", schema.unwrap_or("public"));
    if name.len() > MAX_IDENTIFIER {
        let mut end = MAX_IDENTIFIER;
        while !name.is_char_boundary(end) {
            end -= 1;
        }
        name.truncate(end);
    }
    name
}

/// A token for this process's messages: its pid and the time it started
/// listening, enough to tell it from the other processes on the database.
pub(crate) fn token() -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    format!("{:x}.{:x}", std::process::id(), nanos)
}

/// `payload` as sent by the process with `token`.
pub(crate) fn message(token: &str, payload: &str) -> String {
    format!("{token} {payload}")
}

/// The payload of a message, unless it is `own` (sent by this process).
pub(crate) fn payload_from_peer<'m>(message: &'m str, own: &str) -> Option<&'m str> {
    let (token, payload) = message.split_once(' ')?;
    (token != own).then_some(payload)
}

/// Listen on `channel` for good: call `on` with each peer's payload,
/// reconnecting (after a second) whenever the connection is lost.
pub(crate) fn listen_forever(
    config: postgres::Config,
    channel: String,
    own: String,
    on: Box<dyn Fn(&str) + Send + Sync>,
) {
    loop {
        // Any error ends this connection; the hints missed meanwhile are
        // found by the readers the hints only hurry.
        let _ = listen(&config, &channel, &own, &*on);
        std::thread::sleep(Duration::from_secs(1));
    }
}

fn listen(config: &postgres::Config, channel: &str, own: &str, on: &dyn Fn(&str)) -> Result<(), postgres::Error> {
    let mut client = config.connect(NoTls)?;
    client.batch_execute(&format!("LISTEN \"{}\"", channel.replace('"', "\"\"")))?;
    loop {
        {
            let mut notifications = client.notifications();
            let mut waiting = notifications.timeout_iter(LISTEN_CHECK);
            while let Some(notification) = waiting.next()? {
                if let Some(payload) = payload_from_peer(notification.payload(), own) {
                    on(payload);
                }
            }
        }
        // A quiet spell, or the server went away: a round trip tells.
        client.simple_query("")?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channels_fit_an_identifier_and_own_messages_are_dropped() {
        assert_eq!(channel(None), "berth_peers.public");
        assert_eq!(channel(Some("bx1")), "berth_peers.bx1");
        let long = channel(Some(&"é".repeat(40)));
        assert!(long.len() <= MAX_IDENTIFIER && long.starts_with("berth_peers.é"), "{long}");
        let (me, other) = ("1.2", "3.4");
        assert_eq!(payload_from_peer(&message(other, "a b\nc"), me), Some("a b\nc"));
        assert_eq!(payload_from_peer(&message(me, "a"), me), None);
        assert_eq!(payload_from_peer("no-token", me), None);
    }
}
