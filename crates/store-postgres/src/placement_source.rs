//! The PostgreSQL side of `berth import placement`: a [`SourceConn`] over
//! an OpenStack Placement database on PostgreSQL (the SQL itself is
//! [`berth_store::placement_source`]'s).

use berth_store::placement_source::{SourceConn, SourceDialect};
use postgres::{Client, NoTls, SimpleQueryMessage};

/// A read-only connection to a Placement database on PostgreSQL.
pub struct PlacementSource {
    client: Client,
}

impl std::fmt::Debug for PlacementSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PlacementSource").finish_non_exhaustive()
    }
}

impl PlacementSource {
    /// Connect to `url` (`postgresql://…` or `postgres://…`). The
    /// session is read-only: the import never writes to the old database.
    pub fn connect(url: &str) -> Result<Self, String> {
        let url = match url.strip_prefix("postgresql+psycopg2://") {
            Some(rest) => format!("postgresql://{rest}"),
            None => url.to_owned(),
        };
        let mut client = Client::connect(&url, NoTls).map_err(|err| err.to_string())?;
        // One snapshot for every query: a Placement still serving while
        // it is read cannot tear the dump (an allocation without its
        // consumer row).
        client.batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY").map_err(|err| err.to_string())?;
        Ok(Self { client })
    }
}

impl SourceConn for PlacementSource {
    fn dialect(&self) -> SourceDialect {
        SourceDialect::Postgres
    }

    fn text_rows(&mut self, sql: &str) -> Result<Vec<Vec<Option<String>>>, String> {
        let messages = self.client.simple_query(sql).map_err(|err| match err.as_db_error() {
            Some(db) => db.message().to_owned(),
            None => err.to_string(),
        })?;
        Ok(messages
            .into_iter()
            .filter_map(|message| match message {
                SimpleQueryMessage::Row(row) => {
                    Some((0..row.len()).map(|idx| row.get(idx).map(str::to_owned)).collect())
                }
                _ => None,
            })
            .collect())
    }
}
