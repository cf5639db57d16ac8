//! An engine release's number, as records and scenarios name it (`0.18.0`, `v0.13.0`).

/// The (major, minor) of a release number (`0.18.0`, `v0.13.0`, `0.5.1.post1`); `None`
/// for what is not one (a nightly, a named build, nothing).
pub fn major_minor(version: &str) -> Option<(u32, u32)> {
    let mut parts = version.trim().trim_start_matches('v').split('.');
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

#[cfg(test)]
mod tests {
    use super::major_minor;

    #[test]
    fn release_numbers_read_their_major_and_minor() {
        assert_eq!(major_minor("0.18.0"), Some((0, 18)));
        assert_eq!(major_minor(" v0.13.0"), Some((0, 13)));
        assert_eq!(major_minor("0.5.1.post1"), Some((0, 5)));
        assert_eq!(major_minor("gpt-oss-dev"), None);
        assert_eq!(major_minor(""), None);
        assert_eq!(major_minor("1"), None);
    }
}
