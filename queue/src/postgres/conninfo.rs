//! The TLS options of a connection string that tokio-postgres does not read (`sslmode`'s
//! `verify-ca` and `verify-full`, `sslrootcert`, `sslcert`, `sslkey`), taken out of the
//! string before tokio-postgres parses the rest.
//!
//! Both of libpq's forms, as tokio-postgres reads them: a URL (`postgres://…?sslmode=…&…`,
//! values percent-encoded) and `key=value` pairs separated by white space (a value in single
//! quotes may hold white space; a backslash escapes the next character, in or out of quotes).
//! `sslmode` is taken out too, whatever its value, so that one place reads it. A string this
//! cannot read is `None`: the caller lets tokio-postgres say what is wrong with it, and never
//! connects without its TLS options.

use std::borrow::Cow;

/// The options taken out; the last one wins when a key comes twice (as in tokio-postgres).
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct TlsOptions {
    pub(super) sslmode: Option<String>,
    pub(super) sslrootcert: Option<String>,
    pub(super) sslcert: Option<String>,
    pub(super) sslkey: Option<String>,
}

impl TlsOptions {
    /// Keeps `value` when `key` is one of ours: `true` then.
    fn take(&mut self, key: &str, value: String) -> bool {
        let slot = match key {
            "sslmode" => &mut self.sslmode,
            "sslrootcert" => &mut self.sslrootcert,
            "sslcert" => &mut self.sslcert,
            "sslkey" => &mut self.sslkey,
            _ => return false,
        };
        *slot = Some(value);
        true
    }
}

/// `url` without the TLS options, and the options; `None` when `url` does not read as either
/// form.
pub(super) fn split(url: &str) -> Option<(Cow<'_, str>, TlsOptions)> {
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        split_url(url)
    } else {
        split_pairs(url)
    }
}

/// The URL form. Its query starts at the first `?` after the user information (which ends at
/// the first `@`, as tokio-postgres reads it); `&` separates its `key=value` parameters.
fn split_url(url: &str) -> Option<(Cow<'_, str>, TlsOptions)> {
    let after_user = url.find('@').map_or(0, |at| at + 1);
    let Some(question) = url[after_user..].find('?').map(|q| after_user + q) else {
        return Some((Cow::Borrowed(url), TlsOptions::default()));
    };
    let mut options = TlsOptions::default();
    let mut kept = Vec::new();
    // An empty parameter (`?&a=1`, a trailing `&`) is nothing, as tokio-postgres reads it.
    for param in url[question + 1..].split('&').filter(|p| !p.is_empty()) {
        let (key, value) = param.split_once('=')?;
        let key = decode(key)?;
        let value = decode(value)?;
        if !options.take(&key, value) {
            kept.push(param);
        }
    }
    let base = &url[..question];
    let rest = match kept.is_empty() {
        true => base.to_owned(),
        false => format!("{base}?{}", kept.join("&")),
    };
    Some((Cow::Owned(rest), options))
}

fn decode(text: &str) -> Option<String> {
    percent_encoding::percent_decode_str(text)
        .decode_utf8()
        .ok()
        .map(Cow::into_owned)
}

/// The `key=value` form: each pair's text is dropped whole when the key is ours.
fn split_pairs(url: &str) -> Option<(Cow<'_, str>, TlsOptions)> {
    let mut options = TlsOptions::default();
    let mut rest = String::with_capacity(url.len());
    let mut at = 0;
    while let Some(pair) = next_pair(url, at)? {
        // A pair kept takes the white space before it along; one taken out leaves nothing.
        if !options.take(pair.key, pair.value) {
            rest.push_str(&url[at..pair.end]);
        }
        at = pair.end;
    }
    rest.push_str(&url[at..]);
    Some((Cow::Owned(rest), options))
}

/// One `key = value` pair of the `key=value` form.
struct Pair<'a> {
    key: &'a str,
    value: String,
    /// Where its value ends, in bytes.
    end: usize,
}

/// The pair after byte `from` (`Ok(None)` at the end): white space, a key (no white space,
/// no `=`), `=` between optional white space, then a value in quotes or up to white space.
/// `None` when it does not read as one, as tokio-postgres's parser would refuse it.
fn next_pair(s: &str, from: usize) -> Option<Option<Pair<'_>>> {
    let skip_ws = |i: usize| {
        s[i..]
            .find(|c: char| !c.is_whitespace())
            .map_or(s.len(), |n| i + n)
    };
    let start = skip_ws(from);
    if start == s.len() {
        return Some(None);
    }
    let key_end = s[start..]
        .find(|c: char| c.is_whitespace() || c == '=')
        .map_or(s.len(), |n| start + n);
    let key = &s[start..key_end];
    let equals = skip_ws(key_end);
    if key.is_empty() || !s[equals..].starts_with('=') {
        return None;
    }
    let (value, end) = value(s, skip_ws(equals + 1))?;
    Some(Some(Pair { key, value, end }))
}

/// The value starting at byte `at` and where it ends: quoted (`'…'`, up to the closing quote)
/// or bare (up to white space, not empty); a backslash takes the next character as it is.
fn value(s: &str, at: usize) -> Option<(String, usize)> {
    let quoted = s[at..].starts_with('\'');
    let mut chars = s[at..].char_indices().skip(usize::from(quoted));
    let mut value = String::new();
    while let Some((i, c)) = chars.next() {
        match c {
            '\'' if quoted => return Some((value, at + i + 1)),
            c if c.is_whitespace() && !quoted => return Some((value, at + i)),
            '\\' => value.extend(chars.next().map(|(_, c)| c)),
            c => value.push(c),
        }
    }
    // The end of the string: a quoted value is unterminated; a bare one must not be empty.
    (!quoted && !value.is_empty()).then_some((value, s.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(mode: &str, root: Option<&str>, cert: Option<&str>) -> TlsOptions {
        TlsOptions {
            sslmode: Some(mode.to_owned()),
            sslrootcert: root.map(str::to_owned),
            sslcert: cert.map(str::to_owned),
            sslkey: cert.map(|_| "/k.pem".to_owned()),
        }
    }

    #[test]
    fn the_tls_options_are_taken_out_of_either_form() {
        let none = TlsOptions::default;
        let cases: Vec<(&str, &str, TlsOptions)> = vec![
            ("postgres://u@h/db", "postgres://u@h/db", none()),
            (
                "postgres://u:p@h:5/db?sslmode=verify-full&sslrootcert=/etc/ca.pem",
                "postgres://u:p@h:5/db",
                options("verify-full", Some("/etc/ca.pem"), None),
            ),
            (
                "postgresql://u@h/db?application_name=x&sslmode=verify-ca&sslrootcert=%2Fa%20b.pem&connect_timeout=3",
                "postgresql://u@h/db?application_name=x&connect_timeout=3",
                options("verify-ca", Some("/a b.pem"), None),
            ),
            (
                // A `?` in the user information is not the query's.
                "postgres://u:p?x@h/db?sslmode=require&sslcert=/c.pem&sslkey=/k.pem",
                "postgres://u:p?x@h/db",
                options("require", None, Some("/c.pem")),
            ),
            (
                "postgres://u@h/db?sslmode=disable&sslmode=verify-full&",
                "postgres://u@h/db",
                options("verify-full", None, None),
            ),
            (
                "host=h user=u sslmode=verify-full sslrootcert=/etc/ca.pem dbname=d",
                "host=h user=u dbname=d",
                options("verify-full", Some("/etc/ca.pem"), None),
            ),
            (
                "sslmode = 'verify-ca'  sslrootcert='/my certs/ca.pem' password='a b\\'c'",
                " password='a b\\'c'",
                options("verify-ca", Some("/my certs/ca.pem"), None),
            ),
            (
                "host=h sslcert=/c\\ d.pem sslkey=/k.pem sslmode=require",
                "host=h",
                options("require", None, Some("/c d.pem")),
            ),
            // An option whose name only starts like ours stays.
            ("host=h sslmodes=x", "host=h sslmodes=x", none()),
        ];
        for (url, rest, expected) in cases {
            let (got, options) = split(url).unwrap();
            assert_eq!(got, rest, "{url}");
            assert_eq!(options, expected, "{url}");
        }
    }

    #[test]
    fn a_string_that_does_not_read_is_none() {
        for url in [
            "host=h password='unterminated sslmode=verify-full",
            "host=h sslmode",
            "host=h sslrootcert=",
            "postgres://u@h/db?sslmode",
            "postgres://u@h/db?sslrootcert=%FF",
        ] {
            assert!(split(url).is_none(), "{url}");
        }
    }

    #[test]
    fn what_is_left_parses_as_tokio_postgres_reads_it() {
        let (rest, _) =
            split("host=h port=6 sslmode='verify-full' password='x y' dbname=d").unwrap();
        let config: tokio_postgres::Config = rest.parse().unwrap();
        assert_eq!(config.get_password(), Some(&b"x y"[..]));
        assert_eq!(config.get_dbname(), Some("d"));
        assert_eq!(config.get_ports(), [6]);
    }
}
