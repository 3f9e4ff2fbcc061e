//! Behavioural evaluation: generation on every case x channel x condition, tool-call parsing and six-class outcome
//! scoring. Work in progress (issue 8).
