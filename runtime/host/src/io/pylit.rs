//! The header of a `.npy` file is a Python dict literal, which numpy reads with
//! `ast.literal_eval`: this reads the subset a valid header can hold (string keys; string,
//! boolean, integer and tuple values) as `literal_eval` reads it, and refuses the rest. A
//! key given twice keeps its last value, as a Python dict does; a dict that does not close,
//! or text after it other than white space, is an error, as it is for Python.

use std::collections::BTreeMap;

/// A value of the literal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Value {
    Str(String),
    Bool(bool),
    Int(i128),
    Tuple(Vec<Value>),
}

impl Value {
    /// The value as Python's `repr` writes it (in error messages).
    pub(super) fn repr(&self) -> String {
        match self {
            Value::Str(s) => format!("'{s}'"),
            Value::Bool(b) => if *b { "True" } else { "False" }.to_string(),
            Value::Int(i) => i.to_string(),
            Value::Tuple(items) if items.len() == 1 => format!("({},)", items[0].repr()),
            Value::Tuple(items) => {
                let items: Vec<String> = items.iter().map(Value::repr).collect();
                format!("({})", items.join(", "))
            }
        }
    }
}

/// The dict literal `text`, its keys with their last values, or why it is not one (a
/// sentence naming the byte offset in `text`).
pub(super) fn dict(text: &str) -> Result<BTreeMap<String, Value>, String> {
    let mut p = Parser {
        s: text.as_bytes(),
        i: 0,
    };
    // `literal_eval` strips leading spaces and tabs; the expression may end in white space.
    p.skip_ws();
    p.expect(b'{', "the header's dict to open with `{`")?;
    let mut out = BTreeMap::new();
    loop {
        p.skip_ws();
        if p.eat(b'}') {
            break;
        }
        let key = match p.value(0)? {
            Value::Str(s) => s,
            other => {
                return Err(format!(
                    "the dict has the key {}, not a string",
                    other.repr()
                ));
            }
        };
        p.skip_ws();
        p.expect(b':', "`:` after a key")?;
        p.skip_ws();
        let value = p.value(0)?;
        // A key given twice: the last value, as in a Python dict.
        out.insert(key, value);
        p.skip_ws();
        if p.eat(b'}') {
            break;
        }
        p.expect(b',', "`,` or the closing `}`")?;
    }
    p.skip_ws();
    if p.i < p.s.len() {
        return Err(format!(
            "text after the dict's closing `}}` at byte {}",
            p.i
        ));
    }
    Ok(out)
}

/// Nesting deeper than this is refused (no valid header nests more than a tuple in a dict).
const MAX_DEPTH: usize = 8;

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }

    fn skip_ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r' | b'\x0c')) {
            self.i += 1;
        }
    }

    fn eat(&mut self, c: u8) -> bool {
        let hit = self.peek() == Some(c);
        self.i += usize::from(hit);
        hit
    }

    fn expect(&mut self, c: u8, what: &str) -> Result<(), String> {
        if self.eat(c) {
            return Ok(());
        }
        Err(match self.peek() {
            None => format!("the header ends where it needs {what} (is it cut short?)"),
            Some(found) => format!(
                "expected {what} at byte {}, found `{}`",
                self.i,
                char::from(found).escape_default()
            ),
        })
    }

    fn value(&mut self, depth: usize) -> Result<Value, String> {
        if depth > MAX_DEPTH {
            return Err(format!("values nest deeper than {MAX_DEPTH} levels"));
        }
        let at = self.i;
        match self.peek() {
            Some(q @ (b'\'' | b'"')) => self.string(q),
            Some(b'(') => self.tuple(depth),
            Some(b'0'..=b'9' | b'+' | b'-') => self.int(),
            Some(c) if c.is_ascii_alphabetic() || c == b'_' => {
                let start = self.i;
                while self
                    .peek()
                    .is_some_and(|c| c.is_ascii_alphanumeric() || c == b'_')
                {
                    self.i += 1;
                }
                match &self.s[start..self.i] {
                    b"True" => Ok(Value::Bool(true)),
                    b"False" => Ok(Value::Bool(false)),
                    word => Err(format!(
                        "unsupported value `{}` at byte {at} (a header holds strings, True, \
                         False, integers and tuples)",
                        String::from_utf8_lossy(word)
                    )),
                }
            }
            None => Err("the header ends where it needs a value (is it cut short?)".into()),
            Some(c) => Err(format!(
                "unsupported value starting with `{}` at byte {at} (a header holds strings, \
                 True, False, integers and tuples)",
                char::from(c).escape_default()
            )),
        }
    }

    /// A string in quotes `q`, without escapes (a valid header has none: they are refused).
    fn string(&mut self, q: u8) -> Result<Value, String> {
        let at = self.i;
        self.i += 1;
        let start = self.i;
        loop {
            match self.peek() {
                None | Some(b'\n') => {
                    return Err(format!("the string at byte {at} does not close"));
                }
                Some(b'\\') => {
                    return Err(format!(
                        "the string at byte {at} has an escape sequence, which a header's \
                         strings do not need"
                    ));
                }
                Some(c) if c == q => break,
                Some(_) => self.i += 1,
            }
        }
        let text = String::from_utf8_lossy(&self.s[start..self.i]).into_owned();
        self.i += 1;
        Ok(Value::Str(text))
    }

    /// `()`, `(V,)`, `(V, W, ...)` with an optional trailing comma; `(V)` is `V` itself.
    fn tuple(&mut self, depth: usize) -> Result<Value, String> {
        self.i += 1;
        let mut items = Vec::new();
        let mut comma = false;
        loop {
            self.skip_ws();
            if self.eat(b')') {
                break;
            }
            items.push(self.value(depth + 1)?);
            self.skip_ws();
            if self.eat(b')') {
                comma = false;
                break;
            }
            self.expect(b',', "`,` or `)` in a tuple")?;
            comma = true;
        }
        if items.len() == 1 && !comma {
            // Parentheses around one value without a comma: the value, not a tuple.
            return Ok(items.remove(0));
        }
        Ok(Value::Tuple(items))
    }

    /// A decimal integer as Python writes one: an optional sign, digits with single
    /// underscores between them, no leading zeros (except in zero itself).
    fn int(&mut self) -> Result<Value, String> {
        let at = self.i;
        let mut negative = false;
        while let Some(sign @ (b'+' | b'-')) = self.peek() {
            negative ^= sign == b'-';
            self.i += 1;
            self.skip_ws();
        }
        let start = self.i;
        while self
            .peek()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'.')
        {
            self.i += 1;
        }
        let word = std::str::from_utf8(&self.s[start..self.i]).unwrap_or("");
        let bad = || format!("`{word}` at byte {at} is not a decimal integer");
        let valid = !word.is_empty()
            && word.bytes().all(|c| c.is_ascii_digit() || c == b'_')
            && !word.starts_with('_')
            && !word.ends_with('_')
            && !word.contains("__")
            && (!word.starts_with('0') || word.bytes().all(|c| c == b'0' || c == b'_'));
        if !valid {
            return Err(bad());
        }
        let digits: String = word.chars().filter(|c| *c != '_').collect();
        let magnitude: i128 = digits
            .parse()
            .map_err(|_| format!("the integer at byte {at} is too large"))?;
        Ok(Value::Int(if negative { -magnitude } else { magnitude }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(items: Vec<Value>) -> Value {
        Value::Tuple(items)
    }

    /// Headers as numpy writes them, and the variations `ast.literal_eval` reads alike.
    #[test]
    fn dicts_read_as_python_reads_them() {
        let d = dict("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }  \n").unwrap();
        assert_eq!(d["descr"], Value::Str("<f4".into()));
        assert_eq!(d["fortran_order"], Value::Bool(false));
        assert_eq!(d["shape"], t(vec![Value::Int(3), Value::Int(4)]));
        // One dimension, none, a trailing comma, double quotes, underscores, parentheses
        // around an integer (an integer, not a tuple).
        let d = dict("{\"shape\": (1_000,), 'a': (), 'b': ((7)), 'c': (2, 3,)}").unwrap();
        assert_eq!(d["shape"], t(vec![Value::Int(1000)]));
        assert_eq!(d["a"], t(vec![]));
        assert_eq!(d["b"], Value::Int(7));
        assert_eq!(d["c"], t(vec![Value::Int(2), Value::Int(3)]));
        // A key given twice keeps its last value (Python: {'k': 1, 'k': 2} == {'k': 2}).
        let d = dict("{'shape': (2,), 'shape': (5,)}").unwrap();
        assert_eq!(d["shape"], t(vec![Value::Int(5)]));
        assert_eq!(dict("{'n': -3}").unwrap()["n"], Value::Int(-3));
        assert_eq!(dict("{'n': 0}").unwrap()["n"], Value::Int(0));
    }

    /// What `literal_eval` refuses (a SyntaxError or ValueError in Python) is an error here.
    #[test]
    fn what_python_refuses_is_an_error() {
        for (text, says) in [
            ("{'descr': '<f4', 'shape': (3,)", "cut short"),
            ("{'descr': '<f4', 'shape': (3,) ", "cut short"),
            ("{'shape': (3,)} x", "text after"),
            ("'shape': (3,)", "open with `{`"),
            ("{'shape' (3,)}", "expected `:`"),
            ("{'shape': (3 4)}", "expected `,` or `)`"),
            ("{'shape': (03,)}", "not a decimal integer"),
            ("{'shape': (1__0,)}", "not a decimal integer"),
            ("{'shape': (3.0,)}", "not a decimal integer"),
            ("{'shape': [3]}", "unsupported value"),
            ("{'shape': None}", "unsupported value `None`"),
            ("{3: 'x'}", "the key 3, not a string"),
            ("{'a': 'x\\'y'}", "escape sequence"),
            ("{'a': 'open}", "does not close"),
        ] {
            let e = dict(text).unwrap_err();
            assert!(e.contains(says), "{text}: {e}");
        }
        let deep = format!("{{'a': {}1{}}}", "(".repeat(20), ")".repeat(20));
        assert!(dict(&deep).unwrap_err().contains("nest deeper"));
    }
}
