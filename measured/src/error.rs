//! Why a record could not be simulated, or a fitted term not applied: a record's "not
//! priced" reason, by kind.

/// Why a record is not priced (its message is the reason `validate runs` lists).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MeasuredError {
    /// A file the record names (its hardware or model), or the scenario built from it,
    /// could not be read, parsed or imported.
    #[error("{0}")]
    Load(String),
    /// The record asks for what twin does not model (a layout, a mix of formats, a
    /// client's load).
    #[error("{0}")]
    NotModelled(String),
    /// The record, or the run built from it, fails twin's checks.
    #[error("{0}")]
    Invalid(String),
    /// A fitted term could not be applied to the record's run.
    #[error("{0}")]
    Term(String),
    /// The simulation failed, or gave no figure the record can be compared with.
    #[error("{0}")]
    Simulation(String),
}

impl MeasuredError {
    /// The kind's name (`load`, `not_modelled`, `invalid`, `term`, `simulation`), as a
    /// linearised record's cache stores it.
    pub fn kind(&self) -> &'static str {
        match self {
            MeasuredError::Load(_) => "load",
            MeasuredError::NotModelled(_) => "not_modelled",
            MeasuredError::Invalid(_) => "invalid",
            MeasuredError::Term(_) => "term",
            MeasuredError::Simulation(_) => "simulation",
        }
    }

    /// The error of `kind` (as [`MeasuredError::kind`] names it) with `message`; an
    /// unknown kind reads as [`MeasuredError::Invalid`].
    pub fn of_kind(kind: &str, message: String) -> MeasuredError {
        match kind {
            "load" => MeasuredError::Load(message),
            "not_modelled" => MeasuredError::NotModelled(message),
            "term" => MeasuredError::Term(message),
            "simulation" => MeasuredError::Simulation(message),
            _ => MeasuredError::Invalid(message),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::MeasuredError;

    #[test]
    fn every_kind_reads_back_by_its_name_with_its_message() {
        let all = [
            MeasuredError::Load("a".into()),
            MeasuredError::NotModelled("b".into()),
            MeasuredError::Invalid("c".into()),
            MeasuredError::Term("d".into()),
            MeasuredError::Simulation("e".into()),
        ];
        for e in all {
            assert_eq!(MeasuredError::of_kind(e.kind(), e.to_string()), e);
        }
        assert_eq!(
            MeasuredError::of_kind("?", "x".into()),
            MeasuredError::Invalid("x".into())
        );
    }
}
