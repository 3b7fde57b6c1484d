//! PostgreSQL's WHERE clauses: the read predicate (`crate::predicate`) in PostgreSQL's
//! dialect (numbered parameters, arrays), plus the clauses of single queries; and its rows
//! read as [`Fields`].

use pgvector::Vector;
use tokio_postgres::Row;
use tokio_postgres::types::{FromSql, ToSql, Type};

use spine_core::Category;

use crate::codec::vec_to_blob;
use crate::fields::Fields;
use crate::predicate::{Bound, Clause, Dialect};
use crate::{Result, Shared, StoreError};

/// One bound parameter.
pub(super) type Param = Box<dyn ToSql + Sync + Send>;

/// A parameter of a [`Where`], with the PostgreSQL type it is sent as.
pub(super) struct Typed {
    value: Param,
    ty: Type,
}

/// A value a [`Where`] binds, and the PostgreSQL type it is bound as. Giving the types lets
/// a statement be parsed, bound and run in one round trip ([`PgStore::query_where`]) where
/// a statement whose types the server infers is first prepared, a round trip of its own.
///
/// [`PgStore::query_where`]: super::PgStore::query_where
pub(super) trait PgType: ToSql + Sync + Send + 'static {
    const TYPE: Type;
}

impl PgType for String {
    const TYPE: Type = Type::TEXT;
}

impl PgType for i64 {
    const TYPE: Type = Type::INT8;
}

impl PgType for Vec<String> {
    const TYPE: Type = Type::TEXT_ARRAY;
}

impl PgType for Vec<i64> {
    const TYPE: Type = Type::INT8_ARRAY;
}

/// A vector, sent as `real[]`: the SQL casts it (`$n::real[]::vector(384)`), which needs no
/// lookup of the extension's type.
impl PgType for Vec<f32> {
    const TYPE: Type = Type::FLOAT4_ARRAY;
}

/// A WHERE clause under construction with its parameters (`$1`, `$2`, … in push order).
pub(super) type Where = Clause<Typed>;

impl Where {
    /// Binds `v` and returns its placeholder.
    pub(super) fn bind<T: PgType>(&mut self, v: T) -> String {
        self.params.push(Typed { value: Box::new(v), ty: T::TYPE });
        format!("${}", self.params.len())
    }

    /// A hash of the clause and its values: equal for two clauses that select the same
    /// rows the same way.
    pub(super) fn fingerprint(&self) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        self.sql.hash(&mut h);
        for p in &self.params {
            format!("{:?}", p.value).hash(&mut h);
        }
        h.finish()
    }

    /// The parameters as the client takes them for a prepared statement.
    pub(super) fn refs(&self) -> Vec<&(dyn ToSql + Sync)> {
        self.params.iter().map(|p| p.value.as_ref() as &(dyn ToSql + Sync)).collect()
    }

    /// The parameters with their types, as the client takes them for a statement it sends
    /// unprepared (`query_typed`).
    pub(super) fn typed(&self) -> Vec<(&(dyn ToSql + Sync), Type)> {
        self.params
            .iter()
            .map(|p| (p.value.as_ref() as &(dyn ToSql + Sync), p.ty.clone()))
            .collect()
    }
}

impl Dialect for Where {
    fn bind(&mut self, v: Bound) -> String {
        match v {
            Bound::Text(t) => Where::bind(self, t),
            Bound::Int(i) => Where::bind(self, i),
        }
    }

    fn category_in(&mut self, categories: &[Category]) -> String {
        let names: Vec<String> = categories.iter().map(|c| c.as_str().to_owned()).collect();
        format!("m.category = ANY({}::text[])", Where::bind(self, names))
    }

    fn has_tags(&mut self, tags: &[String]) -> String {
        format!("m.tags @> {}::text[]", Where::bind(self, tags.to_vec()))
    }

    fn body_text(&self, field: &str) -> String {
        match field {
            // A column of its own (the discovery filter reads it without parsing the body).
            "kind" => "m.kind".into(),
            _ => format!("m.body->>'{field}'"),
        }
    }

    fn shares(&mut self, shared: Shared<'_>) -> String {
        match shared {
            Shared::Tags(tags) => format!("m.tags && {}::text[]", Where::bind(self, tags.to_vec())),
            Shared::Citations(citations) => {
                let kinds: Vec<String> =
                    citations.iter().map(|c| c.kind.as_str().to_owned()).collect();
                let refs: Vec<String> = citations.iter().map(|c| c.reference.clone()).collect();
                let (kinds, refs) = (Where::bind(self, kinds), Where::bind(self, refs));
                format!(
                    "EXISTS (SELECT 1
                        FROM json_array_elements(coalesce(m.body->'citations', '[]'::json)) c,
                        unnest({kinds}::text[], {refs}::text[]) AS w(kind, ref)
                     WHERE c->>'kind' = w.kind AND c->>'ref' = w.ref)"
                )
            }
        }
    }
}

/// Column `i` of `r`; a value of another type than asked is a corrupt row, not a lost
/// connection.
fn get<'a, T: FromSql<'a>>(r: &'a Row, i: usize) -> Result<T> {
    r.try_get(i).map_err(|e| StoreError::Corrupt(format!("column {i}: {e}")))
}

impl Fields for Row {
    fn text(&self, i: usize) -> Result<String> {
        get(self, i)
    }
    fn text_opt(&self, i: usize) -> Result<Option<String>> {
        get(self, i)
    }
    fn int(&self, i: usize) -> Result<i64> {
        self.int_opt(i)?.ok_or_else(|| StoreError::Corrupt(format!("column {i} is NULL")))
    }
    /// `integer` columns (`dims`, `vector_dims`) read as `bigint` ones do.
    fn int_opt(&self, i: usize) -> Result<Option<i64>> {
        match self.columns().get(i).map(|c| c.type_()) {
            Some(&Type::INT4) => Ok(get::<Option<i32>>(self, i)?.map(i64::from)),
            _ => get(self, i),
        }
    }
    fn flag(&self, i: usize) -> Result<bool> {
        get(self, i)
    }
    fn vector_bytes(&self, i: usize) -> Result<Option<Vec<u8>>> {
        Ok(get::<Option<Vector>>(self, i)?.map(|v| vec_to_blob(v.as_slice())))
    }
}
