//! Leases: a block of a client's token-bucket units granted by Redis in
//! one call and spent in this process, more asked for ahead of need, the
//! rest given back (`grant`). Keeps the units in `table`'s lease table,
//! and calls Redis, and answers what a lease cannot, through `check`.

pub(crate) mod grant;
