//! Serde of a float that may be infinite or NaN, which JSON has no number for: a finite value
//! is a number, the others are the strings `"inf"`, `"-inf"` and `"nan"` (which Python's
//! `float()` reads).

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// f32 or f64.
pub trait Float: Copy + Serialize + serde::de::DeserializeOwned {
    fn to_f64(self) -> f64;
    fn from_f64(x: f64) -> Self;
}
impl Float for f32 {
    fn to_f64(self) -> f64 {
        f64::from(self)
    }
    fn from_f64(x: f64) -> Self {
        x as f32
    }
}
impl Float for f64 {
    fn to_f64(self) -> f64 {
        self
    }
    fn from_f64(x: f64) -> Self {
        x
    }
}

pub fn serialize<F: Float, S: Serializer>(v: &F, s: S) -> Result<S::Ok, S::Error> {
    let x = v.to_f64();
    if x.is_finite() {
        v.serialize(s)
    } else if x.is_nan() {
        s.serialize_str("nan")
    } else if x > 0.0 {
        s.serialize_str("inf")
    } else {
        s.serialize_str("-inf")
    }
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Repr<F> {
    Number(F),
    Text(String),
}

pub fn deserialize<'de, F: Float, D: Deserializer<'de>>(d: D) -> Result<F, D::Error> {
    match Repr::<F>::deserialize(d)? {
        Repr::Number(v) => Ok(v),
        Repr::Text(t) => match t.as_str() {
            "inf" => Ok(F::from_f64(f64::INFINITY)),
            "-inf" => Ok(F::from_f64(f64::NEG_INFINITY)),
            "nan" => Ok(F::from_f64(f64::NAN)),
            other => Err(serde::de::Error::custom(format!(
                "expected a number, \"inf\", \"-inf\" or \"nan\", not \"{other}\""
            ))),
        },
    }
}
