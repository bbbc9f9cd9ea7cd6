//! The NNP firmware language: lexer, parser, checker and target descriptions.
//!
//! Pipeline: `source text --lex/parse--> AST --check--> Program`.
//!
//! ```
//! use nnp_grammar::{SourceFile, check};
//! use std::sync::Arc;
//! let src = Arc::new(SourceFile::new("t.nnp", "input x : [128]\noutput y : [128]\n\
//!     v_rd netq\nv_relu\nv_wr netq\nend_chain\n"));
//! let out = check(src, None).expect("valid program");
//! assert_eq!(out.program.chains.len(), 1);
//! ```

pub mod ast;
pub mod check;
pub mod diagnostics;
pub mod isa;
pub mod lexer;
pub mod limits;
pub mod ops;
pub mod parse;
pub mod program;
pub mod read;
pub mod source_text;
pub mod synth;
pub mod target;

pub use check::{CheckOutput, check, check_file};
pub use diagnostics::{Diagnostic, Diagnostics, Severity, codes};
pub use limits::{Footprint, SizeError};
pub use parse::parse;
pub use program::*;
pub use source_text::SourceText;
pub use synth::synthetic_program;
pub use target::{Accumulation, NonFinite, Target, TargetError};
