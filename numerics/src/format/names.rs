//! The other names of the OCP MX formats that ML engineers type: the OCP specification's
//! format names (`mxfp8_e4m3`, `mxfp4`, `mxint8`), the element spellings of microxcaling,
//! PyTorch and ml_dtypes (`fp8_e4m3`, `float8_e4m3fn`) and microxcaling's keywords
//! (`elem_format`, `block_size`). Each parses to the one canonical [`Format::Mx`] value, so it
//! prints as `mx(elem = ..., block = ...)` and quantizes with the same bits.

use super::MxElem;

/// The OCP MX v1.0 format names (section 5, table 1), each `mx(elem = E)` with 32-element
/// blocks and an E8M0 scale.
pub(crate) const OCP_FORMATS: &[(&str, MxElem)] = &[
    ("mxfp8_e4m3", MxElem::Fp8E4M3),
    ("mxfp8_e5m2", MxElem::Fp8E5M2),
    ("mxfp6_e3m2", MxElem::Fp6E3M2),
    ("mxfp6_e2m3", MxElem::Fp6E2M3),
    ("mxfp4", MxElem::Fp4E2M1),
    ("mxfp4_e2m1", MxElem::Fp4E2M1),
    ("mxint8", MxElem::Int8),
];

/// Element names other than the canonical ones ([`MxElem::name`]): microxcaling's
/// `ElemFormat` spellings, and PyTorch's / ml_dtypes' dtype names.
const ELEM_ALIASES: &[(&str, MxElem)] = &[
    ("fp8_e4m3", MxElem::Fp8E4M3),
    ("float8_e4m3fn", MxElem::Fp8E4M3),
    ("fp8_e5m2", MxElem::Fp8E5M2),
    ("float8_e5m2", MxElem::Fp8E5M2),
    ("fp6_e3m2", MxElem::Fp6E3M2),
    ("float6_e3m2fn", MxElem::Fp6E3M2),
    ("fp6_e2m3", MxElem::Fp6E2M3),
    ("float6_e2m3fn", MxElem::Fp6E2M3),
    ("fp4_e2m1", MxElem::Fp4E2M1),
    ("fp4", MxElem::Fp4E2M1),
    ("float4_e2m1fn", MxElem::Fp4E2M1),
];

/// microxcaling's keyword names for `mx`'s parameters.
pub(crate) const KEY_ALIASES: &[(&str, &str)] = &[("elem_format", "elem"), ("block_size", "block")];

/// The element an `elem` value names: canonical or an alias.
pub(crate) fn elem(name: &str) -> Option<MxElem> {
    let canonical = MxElem::ALL.iter().map(|e| (e.name(), *e));
    canonical
        .chain(ELEM_ALIASES.iter().copied())
        .find(|(n, _)| *n == name)
        .map(|(_, e)| e)
}

/// The OCP format `name` names, if any.
pub(crate) fn ocp_format(name: &str) -> Option<MxElem> {
    OCP_FORMATS.iter().find(|(n, _)| *n == name).map(|p| p.1)
}

/// The help for a format name that is not a format but is close to the MX family: an element
/// name used alone, a width without its element (`mxfp8`), any other `mx...` name. `None` for
/// other names.
pub(crate) fn mx_help(name: &str) -> Option<String> {
    let ocp: Vec<&str> = OCP_FORMATS.iter().map(|p| p.0).collect();
    let family = format!(
        "OCP MX formats: {}, or `mx(elem, block)`; `mx9`, `mx6`, `mx4` are Microsoft's \
         shared-microexponent formats (`hbfp`), not OCP MX",
        ocp.join(", ")
    );
    if let Some(e) = elem(name).filter(|_| name != "int8") {
        return Some(format!(
            "`{name}` is an MX element type: write `mx(elem = {})` for the OCP block format \
             (a scalar IEEE-style float is `fp(e, m)`, which keeps infinities); {family}",
            e.name()
        ));
    }
    let lower = name.to_ascii_lowercase();
    match lower.as_str() {
        "mxfp8" => Some(format!(
            "OCP MXFP8 has two element types: `mxfp8_e4m3` (what torchao's and microxcaling's \
             MXFP8 default to) or `mxfp8_e5m2`; {family}"
        )),
        "mxfp6" => Some(format!(
            "OCP MXFP6 has two element types: `mxfp6_e3m2` or `mxfp6_e2m3`; {family}"
        )),
        _ if lower.starts_with("mx") => Some(family),
        _ => None,
    }
}
