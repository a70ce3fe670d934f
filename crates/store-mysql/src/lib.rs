//! The MariaDB/MySQL side of `berth import placement`: a [`SourceConn`]
//! over an OpenStack Placement (or Nova API) database on MariaDB/MySQL
//! (the SQL itself is [`berth_store::placement_source`]'s). The session
//! is read-only, in one consistent snapshot.

use berth_store::placement_source::{SourceConn, SourceDialect};
/// The client itself, for tests that build a Placement database to read.
pub use mysql_async;

/// A read-only connection to a database on MariaDB/MySQL, through
/// `mysql_async`'s text protocol on a runtime of its own.
pub struct MysqlSource {
    runtime: tokio::runtime::Runtime,
    conn: Option<mysql_async::Conn>,
}

impl std::fmt::Debug for MysqlSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MysqlSource").finish_non_exhaustive()
    }
}

impl MysqlSource {
    /// Connect to `url` (`mysql://…`, `mariadb://…`, or SQLAlchemy's
    /// `mysql+pymysql://…?charset=utf8` as placement.conf has it).
    /// `redact` renders the URL for messages (without its password).
    pub fn connect(url: &str, redact: fn(&str) -> String) -> Result<Self, String> {
        // SQLAlchemy's driver suffix (`mysql+pymysql://`) and its query
        // parameters (`?charset=utf8`, which mysql_async would refuse) are
        // accepted, so the URL can be copied from placement.conf.
        let url = match url.split_once("://") {
            Some((_, rest)) => format!("mysql://{}", rest.split('?').next().unwrap_or(rest)),
            None => url.to_owned(),
        };
        let opts = mysql_async::Opts::from_url(&url).map_err(|err| format!("{}: {err}", redact(&url)))?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|err| format!("starting the MySQL client's runtime: {err}"))?;
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
        let conn = conn.map_err(|err| format!("connecting to {}: {err}", redact(&url)))?;
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
