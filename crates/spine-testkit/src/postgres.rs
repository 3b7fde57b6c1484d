//! Fresh PostgreSQL databases for tests of the PostgreSQL backend.
//!
//! The server is the one `SPINE_TEST_DATABASE_URL` names (`scripts/postgres.sh` starts a
//! throw-away one and prints its URL). Each [`FreshDatabase`] is a new database on it, with
//! pgvector, dropped again when the guard goes. Without the variable the tests that need it
//! are skipped, except in CI (`CI` set), where a missing database is a failure.

use std::time::{SystemTime, UNIX_EPOCH};

/// The variable naming the test server.
pub const URL_VAR: &str = "SPINE_TEST_DATABASE_URL";

/// A database of its own for one test; dropped (with its connections) on drop.
pub struct FreshDatabase {
    admin: String,
    name: String,
    /// Its URL, for `--database-url` or `PgStore::connect`.
    pub url: String,
}

/// The test server's URL, or `None` (skip) outside CI when it is not set.
pub fn server_url() -> Option<String> {
    match std::env::var(URL_VAR).ok().filter(|u| !u.is_empty()) {
        Some(url) => Some(url),
        None if std::env::var_os("CI").is_some() => {
            panic!("{URL_VAR} is not set: CI runs the PostgreSQL tests (scripts/postgres.sh)")
        }
        None => None,
    }
}

/// A new, empty database on the test server, or `None` when there is no server (see the
/// module docs).
pub fn fresh_database() -> Option<FreshDatabase> {
    Some(fresh_database_on(&server_url()?))
}

/// A new, empty database (with pgvector) on the server at `admin`.
pub fn fresh_database_on(admin: &str) -> FreshDatabase {
    let admin = admin.to_owned();
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_nanos();
    let name = format!("spine_test_{}_{:x}", std::process::id(), nanos);
    execute(&admin, &format!("CREATE DATABASE {name}"));
    let url = with_database(&admin, &name);
    execute(&url, "CREATE EXTENSION IF NOT EXISTS vector");
    FreshDatabase { admin, name, url }
}

impl Drop for FreshDatabase {
    fn drop(&mut self) {
        execute(&self.admin, &format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name));
    }
}

/// `url` with its database replaced by `name`.
fn with_database(url: &str, name: &str) -> String {
    let (base, query) = url.split_once('?').map_or((url, None), |(b, q)| (b, Some(q)));
    let scheme_end = base.find("://").map_or(0, |i| i + 3);
    let path = base[scheme_end..].find('/').map(|i| scheme_end + i);
    let root = path.map_or(base, |i| &base[..i]);
    match query {
        Some(q) => format!("{root}/{name}?{q}"),
        None => format!("{root}/{name}"),
    }
}

/// Runs `sql` (one or more statements) on a connection of its own, on a runtime of its own
/// (callers may be inside or outside one); panics if it fails.
pub fn execute(url: &str, sql: &str) {
    let (url, sql) = (url.to_owned(), sql.to_owned());
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
                .await
                .unwrap_or_else(|e| panic!("connecting to the test database server: {e}"));
            let driver = tokio::spawn(conn);
            client.batch_execute(&sql).await.unwrap_or_else(|e| panic!("{sql}: {e:?}"));
            drop(client);
            let _ = driver.await;
        })
    })
    .join()
    .expect("the test database statement ran");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_database_of_a_url_is_replaced() {
        let cases = [
            ("postgres://u@h:5/spine", "postgres://u@h:5/x"),
            ("postgres://u@h:5", "postgres://u@h:5/x"),
            ("postgres://u:p@h/spine?sslmode=disable", "postgres://u:p@h/x?sslmode=disable"),
        ];
        for (url, want) in cases {
            assert_eq!(with_database(url, "x"), want);
        }
    }
}
