//! Connections to the databases `berth import placement` reads: an old
//! Placement's (and Nova's API database, for `--verify --nova-db`), on
//! MariaDB/MySQL through `mysql_async` or on PostgreSQL through
//! berth-store-postgres. They only run the SQL text of
//! [`berth_store::placement_source`], read-only, in one snapshot.

use anyhow::Context;
use berth_store::placement_source::{SourceConn, SourceDialect};

/// Open a connection to a Placement (or Nova) database by its URL.
pub(crate) fn connect(url: &str) -> anyhow::Result<Box<dyn SourceConn>> {
    let scheme = url.split("://").next().unwrap_or_default();
    match scheme.split('+').next().unwrap_or_default() {
        "mysql" | "mariadb" => Ok(Box::new(MysqlSource::connect(url)?)),
        "postgres" | "postgresql" => Ok(Box::new(
            berth_store_postgres::placement_source::PlacementSource::connect(url)
                .map_err(|err| anyhow::anyhow!("connecting to {}: {err}", redact(url)))?,
        )),
        _ => anyhow::bail!("unsupported database URL {}: expected mysql://… or postgresql://…", redact(url)),
    }
}

/// The URL without its password, for messages.
pub(crate) fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme_end), Some(at)) if at > scheme_end => {
            let userinfo = &url[scheme_end + 3..at];
            let user = userinfo.split(':').next().unwrap_or_default();
            format!("{}{user}:***{}", &url[..scheme_end + 3], &url[at..])
        }
        _ => url.to_owned(),
    }
}

/// A read-only connection to a database on MariaDB/MySQL, through
/// `mysql_async`'s text protocol on a runtime of its own.
struct MysqlSource {
    runtime: tokio::runtime::Runtime,
    conn: Option<mysql_async::Conn>,
}

impl MysqlSource {
    fn connect(url: &str) -> anyhow::Result<Self> {
        // SQLAlchemy's driver suffix (`mysql+pymysql://`) and its query
        // parameters (`?charset=utf8`, which mysql_async would refuse) are
        // accepted, so the URL can be copied from placement.conf.
        let url = match url.split_once("://") {
            Some((_, rest)) => format!("mysql://{}", rest.split('?').next().unwrap_or(rest)),
            None => url.to_owned(),
        };
        let opts = mysql_async::Opts::from_url(&url).map_err(|err| anyhow::anyhow!("{}: {err}", redact(&url)))?;
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        let conn = runtime.block_on(async {
            use mysql_async::prelude::Queryable;
            let mut conn = mysql_async::Conn::new(opts).await?;
            // UTC for UNIX_TIMESTAMP (Placement writes UTC), and one
            // consistent snapshot for every query while the old
            // Placement may still be serving.
            conn.query_drop("SET time_zone = '+00:00'").await?;
            conn.query_drop("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ").await?;
            conn.query_drop("START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY").await?;
            Ok::<_, mysql_async::Error>(conn)
        });
        let conn = conn.with_context(|| format!("connecting to {}", redact(&url)))?;
        Ok(Self { runtime, conn: Some(conn) })
    }
}

impl Drop for MysqlSource {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            let _ = self.runtime.block_on(conn.disconnect());
        }
    }
}

impl SourceConn for MysqlSource {
    fn dialect(&self) -> SourceDialect {
        SourceDialect::Mysql
    }

    fn text_rows(&mut self, sql: &str) -> Result<Vec<Vec<Option<String>>>, String> {
        use mysql_async::prelude::Queryable;
        let conn = self.conn.as_mut().ok_or("connection closed")?;
        let rows: Vec<mysql_async::Row> = self.runtime.block_on(conn.query(sql)).map_err(|err| err.to_string())?;
        Ok(rows
            .into_iter()
            .map(|row| {
                row.unwrap()
                    .into_iter()
                    .map(|value| match value {
                        mysql_async::Value::NULL => None,
                        mysql_async::Value::Bytes(bytes) => Some(String::from_utf8_lossy(&bytes).into_owned()),
                        mysql_async::Value::Int(n) => Some(n.to_string()),
                        mysql_async::Value::UInt(n) => Some(n.to_string()),
                        mysql_async::Value::Float(x) => Some(x.to_string()),
                        mysql_async::Value::Double(x) => Some(x.to_string()),
                        other => Some(other.as_sql(true)),
                    })
                    .collect()
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn passwords_are_redacted() {
        assert_eq!(super::redact("mysql://root:secret@db/placement"), "mysql://root:***@db/placement");
        assert_eq!(super::redact("postgresql://pg@db/placement"), "postgresql://pg:***@db/placement");
        assert_eq!(super::redact("mysql://db/placement"), "mysql://db/placement");
    }
}
