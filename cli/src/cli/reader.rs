//! Whether anybody still reads what a follower prints.
//!
//! `leasehold runs events ID --follow | head -5` has had its five lines
//! once `head` exits, and a follower that waits on a run paused for hours
//! would only learn it at its next write. As `tail -f` does, [`left`]
//! watches standard output itself: a pipe or socket whose reader closed it
//! reports an error on its write end at once, without a write.

use std::os::fd::AsFd;

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::stat::{SFlag, fstat};

/// Completes once standard output is a pipe or socket nobody reads any
/// more; never on a terminal or a file, where nobody leaves.
pub(crate) async fn left() {
    let watched = fstat(std::io::stdout().as_fd()).is_ok_and(|stat| {
        let kind = SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT;
        kind == SFlag::S_IFIFO || kind == SFlag::S_IFSOCK
    });
    if !watched {
        return std::future::pending().await;
    }
    let (tell, told) = tokio::sync::oneshot::channel();
    // A thread of its own, not the runtime's blocking pool: it blocks until
    // the reader leaves, perhaps for the process's whole life, and must not
    // hold the runtime's shutdown.
    let spawned = std::thread::Builder::new()
        .name("stdout-reader".to_owned())
        .spawn(move || {
            let stdout = std::io::stdout();
            loop {
                // No events asked for: the error and hang-up a closed
                // reader causes are reported whatever is asked.
                let mut fds = [PollFd::new(stdout.as_fd(), PollFlags::empty())];
                match poll(&mut fds, PollTimeout::NONE) {
                    Ok(n) if n > 0 => {
                        let gone = PollFlags::POLLERR | PollFlags::POLLHUP | PollFlags::POLLNVAL;
                        if fds[0].revents().is_some_and(|r| r.intersects(gone)) {
                            let _ = tell.send(());
                            return;
                        }
                    }
                    Ok(_) | Err(nix::errno::Errno::EINTR) => {}
                    // Not watchable after all: nobody is said to leave.
                    Err(_) => return,
                }
            }
        });
    match spawned {
        Ok(_) if told.await.is_ok() => {}
        _ => std::future::pending().await,
    }
}
