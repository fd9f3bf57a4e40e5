//! A word algorithm's state as the scripts write it: after the head and
//! the call's number, a `#` and the state's fields as 8-byte
//! little-endian doubles (`struct.pack('<d…')`), which hold every whole
//! number the scripts write (below 2^53) exactly:
//!
//! ```text
//! <settings>|<tier>:<generation>|<writer>.<call>#<f1><f2>…
//! ```
//!
//! Lua reads such a state with one `struct.unpack`, where the text form
//! (`…<call>|<f1>|<f2>…`, decimal) costs a pattern match and a
//! conversion of each field, and writes it with one `struct.pack`, where
//! the text costs a `string.format` a field: about 3 k instructions inside
//! `redis-server` a check on a key present.
//!
//! The text form is still read, wherever a state is read (the form that
//! earlier releases, and the slow path of this one, write), and the next
//! script write leaves the state packed. The slow path reads and compares
//! values in the text form: its read and its compare-and-set render a
//! packed value as text (`text`) first, so that the limiter's own code
//! never sees the bytes. No text value holds a `#` (a settings stamp,
//! numbers, `|`, `:`, `.`, `+` and a writer's hex id), so the byte before
//! the last `8 n` tells the two apart.

/// The `struct` format of `n` fields.
fn format(n: usize) -> String {
    format!("<{}", "d".repeat(n))
}

/// The position (from the end, as Lua's negative index) of the `#` before
/// a packed state of `n` fields.
fn mark_at(n: usize) -> usize {
    8 * n + 1
}

/// The Lua condition: the value `v` holds a packed state of `n` fields.
pub(super) fn is_packed(n: usize) -> String {
    format!("string.byte(v, -{}) == 35", mark_at(n))
}

/// The Lua expression of the state part of a value written from the
/// variables `vars`: the mark and the fields packed.
pub(super) fn pack(vars: &[String]) -> String {
    format!(
        "'#' .. struct.pack('{}', {})",
        format(vars.len()),
        vars.join(", ")
    )
}

/// The Lua that reads a packed state from `v` into `vars`, and runs
/// `bad_range` for a field that is not a whole number in range (a value
/// whose bytes tollgate did not write).
pub(super) fn unpack(vars: &[String], bad_range: &str) -> String {
    let n = vars.len();
    let bad = vars
        .iter()
        .map(|f| format!("{f} ~= {f} or {f} < 0 or {f} > 9007199254740991 or {f} % 1 ~= 0"))
        .collect::<Vec<_>>()
        .join(" or ");
    format!(
        "{vars} = struct.unpack('{fmt}', v, #v - {from})\n    if {bad} then {bad_range} end",
        vars = vars.join(", "),
        fmt = format(n),
        from = 8 * n - 1,
    )
}

/// The Lua function `text(v)`: the value `v` (or `nil`) in the text form,
/// a packed state of `n` fields rendered as decimal fields (a field that
/// is not a whole number in range as `x`, which the slow path refuses as
/// it refuses any such text); a text value as it is.
pub(super) fn text_lua(n: usize) -> String {
    format!(
        r"
local function text(v)
  if not v or not ({packed}) then return v end
  local out = {{string.sub(v, 1, -{head})}}
  local x = {{struct.unpack('{fmt}', v, #v - {from})}}
  for i = 1, {n} do
    local f = x[i]
    if f ~= f or f < 0 or f > 9007199254740991 or f % 1 ~= 0 then
      out[i + 1] = 'x'
    else
      out[i + 1] = string.format('%d', f)
    end
  end
  return table.concat(out, '|')
end
",
        packed = is_packed(n),
        head = mark_at(n) + 1,
        fmt = format(n),
        from = 8 * n - 1,
    )
}

/// A value as the slow path sees it (see [`text_lua`]), decoded here, for
/// tests that read a key's raw bytes: `None` for bytes that are neither
/// form.
#[cfg(all(test, not(feature = "loom")))]
pub(crate) fn text_of(raw: &[u8]) -> Option<String> {
    let Some(mark) = raw.iter().position(|&b| b == b'#') else {
        return String::from_utf8(raw.to_vec()).ok();
    };
    let (head, packed) = (&raw[..mark], &raw[mark + 1..]);
    if packed.len() % 8 != 0 {
        return None;
    }
    let mut text = String::from_utf8(head.to_vec()).ok()?;
    for field in packed.chunks_exact(8) {
        let f = f64::from_le_bytes(field.try_into().ok()?);
        if !(0.0..=9_007_199_254_740_991.0).contains(&f) || f.fract() != 0.0 {
            return None;
        }
        text.push('|');
        text.push_str(&(f as u64).to_string());
    }
    Some(text)
}
