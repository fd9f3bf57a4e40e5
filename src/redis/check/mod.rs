//! A check's way through Redis: the deny shortcut's answer, the breaker
//! and the timeout around one call, the slow path that converts a state
//! written under other settings, and the fail policy's answer (`decide`);
//! the checks of one client carried in one batch call (`coalesce`); and
//! bookings and their cancellation (`book`). Works on `shared`'s `Inner`
//! and the floors below it.

pub(crate) mod book;
pub(crate) mod coalesce;
pub(crate) mod decide;
