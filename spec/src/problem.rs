//! One problem with an input, the form every validator returns: the field it concerns
//! and what is wrong with it, its advice naming other fields. Problems name fields, not
//! command-line flags: the caller names each `Field` in its user's words (`--dep` for
//! `twin forward`, `serving.decode.dep` in a scenario); `Display` names each field by
//! its own name, `field: message`.

use std::fmt;

/// What a problem is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Field {
    /// A field of a hardware, model or scenario file, by path (`moe.top_k`,
    /// `layers[1].count`).
    Path(String),
    /// A deployment's DEP size (ranks per instance).
    Dep,
    /// A deployment's tensor-parallel size (GPUs per attention replica).
    Tp,
    /// A deployment's redundant experts per instance.
    RedundantExperts,
    /// Whether a tensor-parallel deployment keeps its routed experts whole, spread over
    /// its GPUs (expert parallelism), instead of slicing every expert.
    ExpertParallel,
    /// A deployment's requests per rank.
    BatchPerRank,
}

impl fmt::Display for Field {
    /// The field's own name (a path, or the deployment setting's name).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Field::Path(p) => f.write_str(p),
            Field::Dep => f.write_str("dep"),
            Field::Tp => f.write_str("tp"),
            Field::RedundantExperts => f.write_str("redundant_experts"),
            Field::ExpertParallel => f.write_str("expert_parallel"),
            Field::BatchPerRank => f.write_str("batch_per_rank"),
        }
    }
}

/// A problem's text: words, and fields it mentions (in its advice) for the caller to
/// name.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Message(Vec<Part>);

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Text(String),
    Field(Field),
}

impl Message {
    pub fn text(mut self, s: impl Into<String>) -> Self {
        self.0.push(Part::Text(s.into()));
        self
    }

    pub fn field(mut self, f: Field) -> Self {
        self.0.push(Part::Field(f));
        self
    }

    /// This message followed by `rest`.
    pub fn then(mut self, rest: Message) -> Self {
        self.0.extend(rest.0);
        self
    }

    /// The text, each field named by `name`.
    pub fn render(&self, name: &dyn Fn(&Field) -> String) -> String {
        self.0
            .iter()
            .map(|p| match p {
                Part::Text(t) => t.clone(),
                Part::Field(f) => name(f),
            })
            .collect()
    }
}

impl From<String> for Message {
    fn from(s: String) -> Self {
        Message::default().text(s)
    }
}

impl From<&str> for Message {
    fn from(s: &str) -> Self {
        Message::default().text(s)
    }
}

/// How a problem reads: its field, then the message (`moe.top_k: must lie in ...`), or
/// a sentence that names the field itself (`modes is empty`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    Labelled,
    Sentence,
}

/// One problem with an input: the field it concerns and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub field: Field,
    pub message: Message,
    pub form: Form,
}

impl Problem {
    /// A problem with the file field at `path`.
    pub fn new(path: impl Into<String>, message: impl Into<Message>) -> Self {
        Problem::at(Field::Path(path.into()), message)
    }

    pub fn at(field: Field, message: impl Into<Message>) -> Self {
        Problem {
            field,
            message: message.into(),
            form: Form::Labelled,
        }
    }

    /// A problem with the field at `path` whose `sentence` names the field itself
    /// (`modes is empty`): it reads as the sentence alone.
    pub fn sentence(path: impl Into<String>, sentence: impl Into<Message>) -> Self {
        Problem {
            form: Form::Sentence,
            ..Problem::new(path, sentence)
        }
    }

    /// `field: message` (or the sentence), every field named by `name`.
    pub fn render(&self, name: &dyn Fn(&Field) -> String) -> String {
        match self.form {
            Form::Labelled => format!("{}: {}", name(&self.field), self.message.render(name)),
            Form::Sentence => self.message.render(name),
        }
    }
}

impl fmt::Display for Problem {
    /// With each field's own name (`Field`'s `Display`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.render(&|f| f.to_string()))
    }
}

/// A problem as the line it prints, for callers that collect lines.
impl From<Problem> for String {
    fn from(p: Problem) -> String {
        p.to_string()
    }
}

/// A problem equals the line it prints (tests compare problems with their text).
impl PartialEq<str> for Problem {
    fn eq(&self, line: &str) -> bool {
        let text = self.to_string();
        text == line
    }
}

impl PartialEq<&str> for Problem {
    fn eq(&self, line: &&str) -> bool {
        self == *line
    }
}

impl PartialEq<String> for Problem {
    fn eq(&self, line: &String) -> bool {
        self == line.as_str()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_problem_reads_as_its_field_and_message() {
        let p = Problem::new("moe.top_k", "must be at least 1");
        assert_eq!(p.to_string(), "moe.top_k: must be at least 1");
        assert_eq!(p, "moe.top_k: must be at least 1");
        assert_ne!(p, "moe.top_k: must be at least 2");
        assert_eq!(String::from(p), "moe.top_k: must be at least 1");
        let s = Problem::sentence("modes", "modes is empty");
        assert_eq!(s.to_string(), "modes is empty");
        assert_eq!(s.field, Field::Path("modes".into()));
    }

    #[test]
    fn the_caller_names_the_fields() {
        let p = Problem::at(
            Field::Dep,
            Message::default().text("use a smaller ").field(Field::Dep),
        );
        assert_eq!(p.to_string(), "dep: use a smaller dep");
        let named = p.render(&|f| match f {
            Field::Dep => "--dep".into(),
            other => other.to_string(),
        });
        assert_eq!(named, "--dep: use a smaller --dep");
    }
}
