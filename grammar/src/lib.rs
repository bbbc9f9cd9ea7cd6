//! The NNP firmware language: lexer, parser, checker and target descriptions.
//!
//! Pipeline: `source text --lex/parse--> AST --check--> Program`.

pub mod program;
pub mod target;

pub use program::*;
pub use target::{Accumulation, NonFinite, Target, TargetError};
