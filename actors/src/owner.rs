//! [`OwnerId`]: who holds a run — an executor's identity, as run ownership
//! and the store keep it.

use std::fmt;

/// An executor's identity: the program and host it runs as, the process
/// and a random part that tell apart the processes of one program on one
/// host, and where it serves the HTTP API, if it does.
///
/// The store keeps it as its text, `leasehold@box/4242/9f3a61c2 at
/// http://10.0.0.5:7878` ([`Display`](fmt::Display)); [`OwnerId::parse`]
/// reads any such text back, so that whoever finds a run held by another
/// executor — in a refusal, a forwarded control, a listing — knows which
/// `--server` to ask. Any text is an owner id: one an embedder chose is
/// all name.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct OwnerId {
    /// `PROGRAM@HOST`, or the whole of an id an embedder chose.
    name: String,
    /// The process and its random part, for an id unique to one process.
    process: Option<(u32, u32)>,
    /// Where the executor serves the HTTP API, without credentials.
    serving: Option<String>,
}

impl OwnerId {
    /// The id of this program on this host, `PROGRAM@HOST` (the program's
    /// file name and the host's name): the same across restarts, so that a
    /// restarted process claims the runs it held at once (a claim by the
    /// run's own owner is granted whatever its lease says; the fence still
    /// rises, so nothing the dead process might still write lands). An
    /// engine given no owner id takes it.
    pub fn of_program() -> Self {
        let program = std::env::current_exe()
            .ok()
            .and_then(|path| path.file_stem().map(|s| s.to_string_lossy().into_owned()))
            .filter(|name| !name.is_empty())
            .unwrap_or_else(|| "leasehold".to_owned());
        Self::named(format!("{program}@{}", host()))
    }

    /// An id unique to this process: `leasehold@HOST`, the process id and a
    /// random part (`leasehold@box/4242/9f3a61c2`), so that executors
    /// sharing a store never mistake one another's runs for their own. A
    /// run a process stopped cleanly has its lease released, so the next
    /// process may claim it at once; a run whose process died is claimed
    /// once its lease expires.
    pub fn of_process() -> Self {
        Self {
            name: format!("leasehold@{}", host()),
            process: Some((std::process::id(), fastrand::u32(..))),
            serving: None,
        }
    }

    /// An id that is all name, as an embedder chose it.
    pub fn named(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            process: None,
            serving: None,
        }
    }

    /// The same executor, serving the HTTP API at `url`: an `http://` or
    /// `https://` URL, kept without the credentials it may carry
    /// (`https://user:secret@host/` is kept as `https://host/`). Any other
    /// text is no place to serve from, and is not kept.
    #[must_use]
    pub fn serving_at(mut self, url: &str) -> Self {
        self.serving = web_url(url).map(without_credentials);
        self
    }

    /// Reads an owner id back from its text. Never fails: text that is not
    /// `NAME/PID/NONCE`, with or without ` at URL`, is all name.
    pub fn parse(text: &str) -> Self {
        let (rest, serving) = match text.rsplit_once(" at ") {
            Some((rest, url)) if web_url(url).is_some() => (rest, Some(url.to_owned())),
            _ => (text, None),
        };
        let process = rest.rsplitn(3, '/').collect::<Vec<_>>();
        let (name, process) = match process.as_slice() {
            [nonce, pid, name] if nonce.len() == 8 => {
                match (pid.parse::<u32>(), u32::from_str_radix(nonce, 16)) {
                    (Ok(pid), Ok(nonce)) => ((*name).to_owned(), Some((pid, nonce))),
                    _ => (rest.to_owned(), None),
                }
            }
            _ => (rest.to_owned(), None),
        };
        Self {
            name,
            process,
            serving,
        }
    }

    /// `PROGRAM@HOST`, or the whole of a chosen id.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The id of the process, for an id unique to one.
    pub fn process(&self) -> Option<u32> {
        self.process.map(|(pid, _)| pid)
    }

    /// Where the executor serves the HTTP API, if its id says.
    pub fn serving(&self) -> Option<&str> {
        self.serving.as_deref()
    }
}

impl fmt::Display for OwnerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)?;
        if let Some((pid, nonce)) = self.process {
            write!(f, "/{pid}/{nonce:08x}")?;
        }
        if let Some(url) = &self.serving {
            write!(f, " at {url}")?;
        }
        Ok(())
    }
}

impl From<OwnerId> for String {
    fn from(id: OwnerId) -> Self {
        id.to_string()
    }
}

/// This host's name.
fn host() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .map(|host| host.trim().to_owned())
        .filter(|host| !host.is_empty() && !host.contains(char::is_whitespace))
        .unwrap_or_else(|| "localhost".to_owned())
}

fn web_url(url: &str) -> Option<&str> {
    (url.starts_with("http://") || url.starts_with("https://"))
        .then_some(url)
        .filter(|url| !url.contains(char::is_whitespace))
}

/// `url` without the `user:secret@` of its authority.
fn without_credentials(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => format!("{scheme}://{}", &rest[at + 1..]),
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_reads_back_as_it_was_written() {
        let id = OwnerId::of_process().serving_at("http://10.0.0.5:7878");
        let text = id.to_string();
        assert!(text.starts_with("leasehold@"), "{text}");
        assert!(text.ends_with(" at http://10.0.0.5:7878"), "{text}");
        assert_eq!(OwnerId::parse(&text), id);
        assert_eq!(
            OwnerId::parse(&text).serving(),
            Some("http://10.0.0.5:7878")
        );
        assert_eq!(id.process(), Some(std::process::id()));
        let program = OwnerId::of_program();
        assert_eq!(OwnerId::parse(&program.to_string()), program);
        assert_eq!(program.process(), None);
    }

    #[test]
    fn any_text_is_an_id_and_only_a_web_url_is_where_it_serves() {
        for text in [
            "a",
            "b/1/2",
            "worker at home",
            "x at ftp://h",
            "n/12/zzzzzzzz",
        ] {
            let id = OwnerId::parse(text);
            assert_eq!(id.to_string(), text);
            assert_eq!(id.serving(), None, "{text}");
        }
        let id = OwnerId::parse("embedder's own at https://ops.example.com/");
        assert_eq!(id.name(), "embedder's own");
        assert_eq!(id.serving(), Some("https://ops.example.com/"));
    }

    #[test]
    fn where_it_serves_is_kept_without_credentials() {
        let id = OwnerId::named("a").serving_at("https://user:secret@ops.example.com:8443/x?q=1");
        assert_eq!(id.serving(), Some("https://ops.example.com:8443/x?q=1"));
        assert!(!id.to_string().contains("secret"), "{id}");
        let id = OwnerId::named("a").serving_at("http://host/path@not-credentials");
        assert_eq!(id.serving(), Some("http://host/path@not-credentials"));
        assert_eq!(OwnerId::named("a").serving_at("not a url").serving(), None);
    }
}
