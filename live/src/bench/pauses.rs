//! Pauses of a measured run: spells in which a busy server sent no token at all.

use super::Bench;

impl Bench {
    /// Spells longer than `min_s` in which the server sent no token at all (no first
    /// token, no later one) while requests were in flight: pauses of the whole server,
    /// as (start seconds after the first send, length seconds, requests in flight).
    /// Needs the file's `start_times`; empty without them.
    pub fn silences(&self, min_s: f64) -> Vec<(f64, f64, usize)> {
        if self.requests.iter().any(|r| r.sent_s.is_none()) {
            return Vec::new();
        }
        // Each request's span, from its send to its last token.
        let spans: Vec<(f64, f64)> = self
            .requests
            .iter()
            .filter_map(|r| {
                let sent = r.sent_s?;
                Some((sent, r.itls_s.iter().fold(sent + r.ttft_s, |t, g| t + g)))
            })
            .collect();
        let mut out = Vec::new();
        let mut last: Option<f64> = None;
        for (t, _, _) in super::steps::Events::new(self) {
            if let Some(prev) = last.filter(|prev| t - prev > min_s) {
                let busy = spans.iter().filter(|(a, b)| *a < t && *b > prev).count();
                if busy > 0 {
                    out.push((prev, t - prev, busy));
                }
            }
            last = Some(t);
        }
        out
    }
}

#[cfg(test)]
mod silence_tests {
    use super::*;

    /// Two requests: A sent at 0 (first token at 0.1 s, gaps 0.1, 0.1, 1.5, 0.1), B
    /// sent at 0.05 s (first token at 0.25 s, gaps 0.1, 1.4, 0.1). Their tokens: 0.1,
    /// 0.2, 0.25, 0.3, 0.35, then 1.75, 1.8, 1.85, 1.9: one silence of 1.4 s from 0.35 s
    /// with both in flight, however long A's own gap (1.5 s) is.
    #[test]
    fn a_silence_is_a_spell_with_no_token_from_any_busy_request() {
        let text = r#"{"input_lens": [10, 10], "output_lens": [5, 4], "duration": 2.0,
            "ttfts": [0.1, 0.2], "itls": [[0.1, 0.1, 1.5, 0.1], [0.1, 1.4, 0.1]],
            "start_times": [100.0, 100.05]}"#;
        let b = Bench::parse(text, "t").unwrap();
        let s = b.silences(0.5);
        assert_eq!(s.len(), 1, "{s:?}");
        let (t, d, n) = s[0];
        assert!(
            (t - 0.35).abs() < 1e-9 && (d - 1.4).abs() < 1e-9 && n == 2,
            "{s:?}"
        );
        assert!(b.silences(1.5).is_empty());
        // Without send times nothing can be placed.
        let no_starts = text.replace(r#""start_times": [100.0, 100.05]"#, r#""x": 0"#);
        assert!(Bench::parse(&no_starts, "t")
            .unwrap()
            .silences(0.5)
            .is_empty());
    }
}
