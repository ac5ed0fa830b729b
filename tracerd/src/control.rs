//! The daemon's root-only control socket: one request line (`dump`, `status`, `reload`), one
//! answer line (`ok ...` or `error ...`). The listener hands each request to the daemon's
//! loop, which owns the engine, and writes back what the loop answers; the client side is
//! what `tracerd dump`, `tracerd status` and `tracerd reload` run.
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use crossbeam_channel::Sender;

/// Where the daemon's loop sends a request's answer: the answer's text, or an error message.
pub type Reply = Sender<std::result::Result<String, String>>;

/// What the control socket (and the signal thread) ask of the daemon's loop.
pub enum Request {
    /// A dump; with a reply for `tracerd dump`, none for SIGUSR1.
    Dump(Option<Reply>),
    /// The daemon's state as JSON (`tracerd status`).
    Status(Reply),
    /// Re-read the configuration; with a reply for `tracerd reload`, none for SIGHUP.
    Reload(Option<Reply>),
    /// SIGTERM or SIGINT.
    Stop(&'static str),
}

/// The requests the socket takes, as their first words.
const VERBS: [&str; 3] = ["dump", "status", "reload"];

/// How long a client waits for the daemon's answer (a dump of a full window on a slow disk).
const ANSWER_WITHIN: Duration = Duration::from_secs(120);

/// Binds the control socket, refusing to steal it from a live daemon.
pub fn bind(path: &Path) -> Result<UnixListener> {
    if let Some(dir) = path.parent() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .with_context(|| format!("control socket directory {}", dir.display()))?;
    }
    if UnixStream::connect(path).is_ok() {
        bail!(
            "another tracerd is already running (its control socket {} answers)",
            path.display()
        );
    }
    let _ = std::fs::remove_file(path);
    let listener =
        UnixListener::bind(path).with_context(|| format!("binding control socket {}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    Ok(listener)
}

fn peer_is_root(stream: &UnixStream) -> bool {
    use nix::sys::socket::{getsockopt, sockopt::PeerCredentials};
    getsockopt(stream, PeerCredentials)
        .map(|c| c.uid() == 0)
        .unwrap_or(false)
}

fn serve_client(stream: UnixStream, tx: &Sender<Request>) -> Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    let mut writer = stream.try_clone()?;
    if !peer_is_root(&stream) {
        writeln!(writer, "error only root may talk to tracerd")?;
        return Ok(());
    }
    let mut line = String::new();
    BufReader::new(stream).read_line(&mut line)?;
    let (reply, answer) = crossbeam_channel::bounded(1);
    let request = match line.trim() {
        "dump" => Request::Dump(Some(reply)),
        "status" => Request::Status(reply),
        "reload" => Request::Reload(Some(reply)),
        other => {
            writeln!(
                writer,
                "error unknown request '{other}'; the requests are {}",
                VERBS.join(", ")
            )?;
            return Ok(());
        }
    };
    tx.send(request)?;
    match answer.recv_timeout(ANSWER_WITHIN) {
        Ok(Ok(text)) => writeln!(writer, "ok {text}")?,
        Ok(Err(e)) => writeln!(writer, "error {}", e.replace('\n', " "))?,
        Err(_) => writeln!(writer, "error the daemon did not answer in time")?,
    }
    Ok(())
}

/// Serves the socket on a thread of its own, one more thread per client (a slow client must
/// not hold up the next one).
pub fn spawn_listener(listener: UnixListener, tx: Sender<Request>) -> Result<()> {
    std::thread::Builder::new()
        .name("control".into())
        .spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let tx = tx.clone();
                let _ = std::thread::Builder::new()
                    .name("control-client".into())
                    .spawn(move || {
                        if let Err(e) = serve_client(stream, &tx) {
                            log::warn!("control socket client: {e:#}");
                        }
                    });
            }
        })?;
    Ok(())
}

/// Sends `verb` to the daemon at `socket`; returns the text of its `ok` answer.
pub fn request(socket: &Path, verb: &str) -> Result<String> {
    let mut stream = UnixStream::connect(socket).with_context(|| {
        format!(
            "cannot reach tracerd at {} (is it running? are you root?)",
            socket.display()
        )
    })?;
    stream.set_read_timeout(Some(ANSWER_WITHIN + Duration::from_secs(10)))?;
    stream.write_all(format!("{verb}\n").as_bytes())?;
    let mut line = String::new();
    BufReader::new(stream).read_line(&mut line)?;
    let line = line.trim_end();
    if let Some(text) = line.strip_prefix("ok ") {
        return Ok(text.to_string());
    }
    match line.strip_prefix("error ") {
        Some(msg) => bail!("tracerd could not {verb}: {msg}"),
        None => bail!("tracerd gave no answer to '{verb}'"),
    }
}
