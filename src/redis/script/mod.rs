//! The bottom floor: what a limiter sends to Redis and reads back, as
//! text and data, with no I/O. The scripts' Lua (`lua`; the sliding
//! window log's in `log`), each limit's
//! settings in the scripts' units (`spec`), a client's state as Redis
//! holds it and the decisions read from it (`state`), the packed form the
//! scripts write a state in (`packed`), a bucket carried
//! onto the clock of a node its key moved to (`moved`), and the keys
//! (`key`). Uses only the crate's algorithms and figures.

pub(crate) mod key;
pub(crate) mod log;
pub(crate) mod lua;
pub(crate) mod moved;
pub(crate) mod packed;
pub(crate) mod spec;
pub(crate) mod state;
