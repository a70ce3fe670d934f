//! Connections to the databases `berth import placement` reads: an old
//! Placement's (and Nova's API database, for `--verify --nova-db`), on
//! MariaDB/MySQL through berth-store-mysql or on PostgreSQL through
//! berth-store-postgres. They only run the SQL text of
//! [`berth_store::placement_source`], read-only, in one snapshot.

use berth_store::placement_source::SourceConn;

/// Open a connection to a Placement (or Nova) database by its URL.
pub(crate) fn connect(url: &str) -> anyhow::Result<Box<dyn SourceConn>> {
    let scheme = url.split("://").next().unwrap_or_default();
    match scheme.split('+').next().unwrap_or_default() {
        "mysql" | "mariadb" => {
            Ok(Box::new(berth_store_mysql::MysqlSource::connect(url, redact).map_err(|err| anyhow::anyhow!(err))?))
        }
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

#[cfg(test)]
mod tests {
    #[test]
    fn passwords_are_redacted() {
        assert_eq!(super::redact("mysql://root:secret@db/placement"), "mysql://root:***@db/placement");
        assert_eq!(super::redact("postgresql://pg@db/placement"), "postgresql://pg:***@db/placement");
        assert_eq!(super::redact("mysql://db/placement"), "mysql://db/placement");
    }
}
