//! Notes a library has to say as they happen: a Hugging Face config imported in memory
//! and the fallbacks it took, a timing method that fell back. Library crates print
//! nothing themselves; the binary says where notes go ([`set_sink`]: its stderr), and
//! until it does they go nowhere (library tests print nothing).

use std::sync::OnceLock;

static SINK: OnceLock<fn(&str)> = OnceLock::new();

/// Where every note goes from now on (one line each); the first call wins.
pub fn set_sink(sink: fn(&str)) {
    let _ = SINK.set(sink);
}

/// Says `line` where the binary sends notes, if it said where.
pub fn say(line: &str) {
    if let Some(sink) = SINK.get() {
        sink(line);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    static HEARD: Mutex<Vec<String>> = Mutex::new(Vec::new());

    #[test]
    fn a_note_goes_to_the_first_sink_only() {
        say("before any sink: nowhere");
        set_sink(|l| HEARD.lock().unwrap().push(l.to_string()));
        set_sink(|_| panic!("a second sink is ignored"));
        say("a note");
        assert_eq!(*HEARD.lock().unwrap(), vec!["a note".to_string()]);
    }
}
