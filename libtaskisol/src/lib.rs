//! libtaskisol: Linux CPU isolation for latency-critical work.
pub mod abi;
