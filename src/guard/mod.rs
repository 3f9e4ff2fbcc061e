//! Final-action risk scoring under untrusted tool feedback (TRUST-BENCH episodes, triplet abstraction, scorers and
//! GuardedJoint). Work in progress (issue 9).
