//! What a Redis limiter's peek reports: the peek script's reply turned
//! into the decision an in-process peek makes, whether a check would admit
//! (and when it would, if not), with the figures of the state as it stands.

use super::script::{DecodeError, Spec};
use super::Mode;
use crate::decision::Decision;

impl Spec {
    /// The decision a reply to a check, or to a peek, stands for.
    pub(super) fn decode_reply(
        &self,
        mode: Mode,
        reply: &[i64],
        cost: u64,
    ) -> Result<Decision, DecodeError> {
        match mode {
            Mode::Check => self.decode(reply, cost),
            Mode::Peek => self.decode_peek(reply, cost),
        }
    }

    /// The decision a peek of `cost` reports, from the peek script's reply
    /// (which is what a check would leave): a denial left the state as it
    /// stood, and is the check's decision; an admission is the check's
    /// decision on the state before it, recomputed with nothing taken.
    pub(crate) fn decode_peek(&self, reply: &[i64], cost: u64) -> Result<Decision, DecodeError> {
        let check = self.decode(reply, cost)?;
        if check.is_denied() || cost == 0 {
            return Ok(check);
        }
        let mut before = reply.to_vec();
        self.unadmit(&mut before, cost)?;
        self.decode(&before, 0)
    }

    /// Takes the admission of `cost` back out of a reply that admitted it:
    /// the state the script read, which `decode` with a cost of 0 reads as
    /// the quota as it stands.
    fn unadmit(&self, reply: &mut [i64], cost: u64) -> Result<(), DecodeError> {
        let field = match self {
            // {1, TAT, now}: the TAT moved on by `cost` intervals, from
            // the later of the old TAT and now (a full bucket reads so).
            Self::Bucket { interval_us, .. } => (1, cost.saturating_mul(*interval_us)),
            // {1, k, c, now} and {1, k, c, p, now}: `cost` counted in `c`.
            Self::Fixed { .. } | Self::Sliding { .. } => (2, cost),
            // {1, used, earliest, retry, now}: `cost` entries more. The
            // earliest entry is one of them only in a log that was empty,
            // whose quota is full anyway.
            Self::Log { .. } => (1, cost),
            Self::Pair { .. } => {
                let (Some(a), Some(b)) = (self.half(0), self.half(1)) else {
                    return Err(DecodeError::Shape(reply.len()));
                };
                let la = a.reply_len();
                if reply.len() != la + b.reply_len() - 1 {
                    return Err(DecodeError::Shape(reply.len()));
                }
                // Each half as a reply of its own: the outcome, then its
                // fields.
                let mut first = reply[..la].to_vec();
                let mut second: Vec<i64> = core::iter::once(reply[0])
                    .chain(reply[la..].iter().copied())
                    .collect();
                a.unadmit(&mut first, cost)?;
                b.unadmit(&mut second, cost)?;
                reply[..la].copy_from_slice(&first);
                reply[la..].copy_from_slice(&second[1..]);
                return Ok(());
            }
        };
        let (index, taken) = field;
        let taken = i64::try_from(taken).map_err(|_| DecodeError::Range("a cost out of range"))?;
        match reply.get_mut(index) {
            Some(value) if *value >= taken => {
                *value -= taken;
                Ok(())
            }
            Some(_) => Err(DecodeError::Range("an admission the state does not hold")),
            None => Err(DecodeError::Shape(reply.len())),
        }
    }
}
