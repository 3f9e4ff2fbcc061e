//! Matched-payload case sets.
