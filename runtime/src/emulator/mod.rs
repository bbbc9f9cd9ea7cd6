//! The emulator (in progress).
