//! Discrete-event simulator of a disaggregated serving system (issue 3; in progress).
