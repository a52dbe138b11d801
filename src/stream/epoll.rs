//! `--epoll`: a thread waits for its sockets in an epoll instance of its own instead of
//! `poll()`.
//!
//! `poll()` hands the kernel the whole set on every call, which queues the thread on
//! each socket's wait queue and takes it off again; an epoll instance keeps the set
//! registered, so a wait is one `epoll_wait()` however many sockets there are, as in
//! the event loops of servers (and sockperf's default `-F epoll`). [`Epoll::poll_many`]
//! takes the same `pollfd` array as `poll()` (a negative fd skips the entry), so the
//! STREAMs wait the same way with either.
//!
//! Before each wait the registered set is brought up to date: one `epoll_ctl()` per
//! socket that joined, left or changed its events since the last wait, none in the
//! steady state of a run. An instance belongs to one thread: a clone (for a sender
//! thread) gets an instance of its own, made at its first wait.

use std::cell::RefCell;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// A thread's epoll instance, made at its first wait.
pub(crate) struct Epoll {
    instance: RefCell<Option<Instance>>,
}

impl Epoll {
    pub(crate) fn new() -> Epoll {
        Epoll {
            instance: RefCell::new(None),
        }
    }

    /// `poll()`'s contract over epoll: waits until an entry of `fds` is ready for its
    /// events or `ms` elapse (-1: no limit), sets each entry's `revents` and returns
    /// the number of ready entries. EINTR counts as none ready.
    pub(crate) fn poll_many(&self, fds: &mut [libc::pollfd], ms: i32) -> io::Result<usize> {
        let mut instance = self.instance.borrow_mut();
        let instance = match &mut *instance {
            Some(instance) => instance,
            slot => slot.insert(Instance::new()?),
        };
        instance.wait(fds, ms, |_| {})
    }

    /// [`Epoll::poll_many`] that also appends the index in `fds` of each ready entry to
    /// `ready`, from the events themselves: no scan of every entry's `revents`.
    pub(crate) fn poll_ready(
        &self,
        fds: &mut [libc::pollfd],
        ms: i32,
        ready: &mut Vec<usize>,
    ) -> io::Result<()> {
        let mut instance = self.instance.borrow_mut();
        let instance = match &mut *instance {
            Some(instance) => instance,
            slot => slot.insert(Instance::new()?),
        };
        instance.wait(fds, ms, |k| ready.push(k)).map(drop)
    }

    /// Forgets `fd`, about to be closed: a socket opened next may get the same number,
    /// and must be registered anew rather than taken for the closed one.
    pub(crate) fn forget(&self, fd: RawFd) {
        if let Some(instance) = &mut *self.instance.borrow_mut() {
            instance.registered.retain(|r| r.fd != fd);
        }
    }

    /// Waits until `fd` is ready for `events` or `ms` elapse; whether it became ready.
    pub(crate) fn poll_one(&self, fd: RawFd, events: libc::c_short, ms: i32) -> io::Result<bool> {
        let mut pfd = libc::pollfd {
            fd,
            events,
            revents: 0,
        };
        Ok(self.poll_many(std::slice::from_mut(&mut pfd), ms)? > 0)
    }
}

impl Clone for Epoll {
    /// An instance serves one thread: the clone waits in one of its own.
    fn clone(&self) -> Epoll {
        Epoll::new()
    }
}

/// `poll_one` through `epoll` if there is one, else `poll()`.
pub(crate) fn poll_one(
    epoll: Option<&Epoll>,
    fd: RawFd,
    events: libc::c_short,
    ms: i32,
) -> io::Result<bool> {
    match epoll {
        Some(epoll) => epoll.poll_one(fd, events, ms),
        None => super::sys::poll_one(fd, events, ms),
    }
}

/// `poll_many` through `epoll` if there is one, else `poll()`.
pub(crate) fn poll_many(
    epoll: Option<&Epoll>,
    fds: &mut [libc::pollfd],
    ms: i32,
) -> io::Result<usize> {
    match epoll {
        Some(epoll) => epoll.poll_many(fds, ms),
        None => super::sys::poll_many(fds, ms),
    }
}

/// One registered entry: its fd, the events asked and its index in the caller's
/// array (which the event's data carries back, with the fd).
#[derive(Clone, Copy, PartialEq, Eq)]
struct Registered {
    fd: RawFd,
    events: libc::c_short,
    index: u32,
}

impl Registered {
    fn data(self) -> u64 {
        (u64::from(self.index) << 32) | u64::from(self.fd as u32)
    }
}

struct Instance {
    epfd: OwnedFd,
    /// What the kernel holds, in the order of the last wait's array.
    registered: Vec<Registered>,
    /// `epoll_wait()`'s output, as long as `registered`.
    events: Vec<libc::epoll_event>,
}

impl Instance {
    fn new() -> io::Result<Instance> {
        // SAFETY: no pointers; the result is checked before it is owned.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Instance {
            // SAFETY: `fd` was just returned by epoll_create1 and nothing else owns it.
            epfd: unsafe { OwnedFd::from_raw_fd(fd) },
            registered: Vec::new(),
            events: Vec::new(),
        })
    }

    fn ctl(&self, op: libc::c_int, entry: Registered) -> io::Result<()> {
        // POLLIN/POLLOUT/POLLPRI have the values of EPOLLIN/EPOLLOUT/EPOLLPRI.
        let mut event = libc::epoll_event {
            events: u32::from(entry.events as u16),
            u64: entry.data(),
        };
        // SAFETY: `event` lives on the stack for the call; the kernel copies it.
        let rc = unsafe { libc::epoll_ctl(self.epfd.as_raw_fd(), op, entry.fd, &mut event) };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Registers what `fds` asks for and removes what it no longer does.
    fn sync(&mut self, fds: &[libc::pollfd]) -> io::Result<()> {
        let wanted = fds
            .iter()
            .enumerate()
            .filter(|(_, p)| p.fd >= 0)
            .map(|(index, p)| Registered {
                fd: p.fd,
                events: p.events,
                index: index as u32,
            });
        if wanted.clone().eq(self.registered.iter().copied()) {
            return Ok(());
        }
        let wanted: Vec<Registered> = wanted.collect();
        for old in &self.registered {
            if !wanted.iter().any(|w| w.fd == old.fd) {
                match self.ctl(libc::EPOLL_CTL_DEL, *old) {
                    // Closed since (which removed it), or never there: nothing to do.
                    Err(e) if matches!(e.raw_os_error(), Some(libc::EBADF | libc::ENOENT)) => {}
                    other => other?,
                }
            }
        }
        for new in &wanted {
            match self.registered.iter().find(|old| old.fd == new.fd) {
                Some(old) if old == new => {}
                Some(_) => self.ctl(libc::EPOLL_CTL_MOD, *new)?,
                None => self.ctl(libc::EPOLL_CTL_ADD, *new)?,
            }
        }
        self.registered = wanted;
        Ok(())
    }

    /// Waits for the entries of `fds`, sets their `revents` and returns how many are
    /// ready, calling `on_ready` with the index of each.
    fn wait(
        &mut self,
        fds: &mut [libc::pollfd],
        ms: i32,
        mut on_ready: impl FnMut(usize),
    ) -> io::Result<usize> {
        self.sync(fds)?;
        for p in fds.iter_mut() {
            p.revents = 0;
        }
        let capacity = self.registered.len().max(1);
        self.events
            .resize(capacity, libc::epoll_event { events: 0, u64: 0 });
        // SAFETY: `events` holds `capacity` entries, exclusively borrowed for the call.
        let rc = unsafe {
            libc::epoll_wait(
                self.epfd.as_raw_fd(),
                self.events.as_mut_ptr(),
                capacity as libc::c_int,
                ms,
            )
        };
        if rc < 0 {
            let err = io::Error::last_os_error();
            if err.kind() == io::ErrorKind::Interrupted {
                return Ok(0);
            }
            return Err(err);
        }
        let mut ready = 0;
        for event in &self.events[..rc as usize] {
            let (bits, data) = (event.events, event.u64);
            let (index, fd) = ((data >> 32) as usize, data as u32 as RawFd);
            if let Some(p) = fds.get_mut(index).filter(|p| p.fd == fd) {
                // Errors and hang-ups count as ready, as with poll().
                p.revents = bits as u16 as libc::c_short;
                ready += 1;
                on_ready(index);
            }
        }
        Ok(ready)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;
    use std::time::{Duration, Instant};

    fn pair() -> (UdpSocket, UdpSocket) {
        let a = UdpSocket::bind("127.0.0.1:0").expect("bind");
        let b = UdpSocket::bind("127.0.0.1:0").expect("bind");
        a.connect(b.local_addr().expect("addr")).expect("connect");
        b.connect(a.local_addr().expect("addr")).expect("connect");
        (a, b)
    }

    #[test]
    fn poll_ready_names_the_ready_entries_by_their_index() {
        let pairs: Vec<_> = (0..3).map(|_| pair()).collect();
        let mut fds: Vec<_> = pairs
            .iter()
            .map(|(_, b)| entry(b.as_raw_fd(), libc::POLLIN))
            .collect();
        pairs[2].0.send(b"x").expect("send");
        let epoll = Epoll::new();
        let mut ready = vec![7];
        epoll.poll_ready(&mut fds, 1000, &mut ready).expect("wait");
        assert_eq!(ready, [7, 2], "appended, by index");
        assert_eq!(fds[2].revents, libc::POLLIN);
        assert_eq!(fds[0].revents, 0);
    }

    fn entry(fd: RawFd, events: libc::c_short) -> libc::pollfd {
        libc::pollfd {
            fd,
            events,
            revents: 0,
        }
    }

    fn registered(epoll: &Epoll) -> usize {
        epoll
            .instance
            .borrow()
            .as_ref()
            .map_or(0, |i| i.registered.len())
    }

    #[test]
    fn reports_the_readable_socket_and_waits_out_the_quiet_one() {
        let (a, b) = pair();
        let (c, _d) = pair();
        let epoll = Epoll::new();
        let mut fds = [
            entry(b.as_raw_fd(), libc::POLLIN),
            entry(c.as_raw_fd(), libc::POLLIN),
        ];
        let start = Instant::now();
        assert_eq!(epoll.poll_many(&mut fds, 50).expect("wait"), 0);
        assert!(start.elapsed() >= Duration::from_millis(40));
        a.send(b"x").expect("send");
        assert_eq!(epoll.poll_many(&mut fds, 5000).expect("wait"), 1);
        assert_eq!(fds[0].revents, libc::POLLIN);
        assert_eq!(fds[1].revents, 0);
        // Level-triggered: still readable until read.
        assert!(epoll
            .poll_one(b.as_raw_fd(), libc::POLLIN, 0)
            .expect("wait"));
        b.recv(&mut [0u8; 8]).expect("recv");
        assert!(!epoll
            .poll_one(b.as_raw_fd(), libc::POLLIN, 0)
            .expect("wait"));
    }

    #[test]
    fn the_set_follows_the_array_skipped_and_changed_entries_included() {
        let (a, b) = pair();
        let epoll = Epoll::new();
        a.send(b"x").expect("send");
        // Skipped (negative fd): a readable socket is not reported, nor kept registered.
        let mut fds = [entry(-b.as_raw_fd(), libc::POLLIN)];
        assert_eq!(epoll.poll_many(&mut fds, 0).expect("wait"), 0);
        assert_eq!(registered(&epoll), 0);
        fds[0].fd = b.as_raw_fd();
        assert_eq!(epoll.poll_many(&mut fds, 0).expect("wait"), 1);
        assert_eq!(registered(&epoll), 1);
        // The same socket asked for writing instead: re-registered with POLLOUT only.
        assert!(epoll
            .poll_one(a.as_raw_fd(), libc::POLLOUT, 0)
            .expect("wait"));
        let mut out = [entry(b.as_raw_fd(), libc::POLLOUT)];
        assert_eq!(epoll.poll_many(&mut out, 0).expect("wait"), 1);
        assert_eq!(out[0].revents, libc::POLLOUT);
        assert_eq!(registered(&epoll), 1);
    }

    #[test]
    fn a_closed_socket_leaves_the_set_without_an_error() {
        let (a, b) = pair();
        let (c, d) = pair();
        let epoll = Epoll::new();
        let mut fds = [
            entry(b.as_raw_fd(), libc::POLLIN),
            entry(d.as_raw_fd(), libc::POLLIN),
        ];
        assert_eq!(epoll.poll_many(&mut fds, 0).expect("wait"), 0);
        drop((a, b));
        c.send(b"x").expect("send");
        let mut rest = [entry(d.as_raw_fd(), libc::POLLIN)];
        assert_eq!(epoll.poll_many(&mut rest, 5000).expect("wait"), 1);
        assert_eq!(registered(&epoll), 1);
    }

    #[test]
    fn a_forgotten_descriptor_reused_by_a_new_socket_is_registered_anew() {
        let (_a, b) = pair();
        let (c, d) = pair();
        let epoll = Epoll::new();
        let fd = b.as_raw_fd();
        let mut fds = [entry(fd, libc::POLLIN)];
        assert_eq!(epoll.poll_many(&mut fds, 0).expect("wait"), 0);
        epoll.forget(fd);
        // The number now names another socket, as a socket opened after a close may
        // (dup2 closes b's in the same call, so no other thread can take the number).
        // SAFETY: both descriptors are open and owned here; `b` owns the result.
        assert_eq!(unsafe { libc::dup2(c.as_raw_fd(), fd) }, fd);
        d.send(b"x").expect("send");
        assert_eq!(epoll.poll_many(&mut fds, 5000).expect("wait"), 1);
        assert_eq!(fds[0].revents, libc::POLLIN);
    }

    #[test]
    fn a_clone_waits_in_an_instance_of_its_own() {
        let (a, b) = pair();
        let epoll = Epoll::new();
        a.send(b"x").expect("send");
        assert!(epoll
            .poll_one(b.as_raw_fd(), libc::POLLIN, 0)
            .expect("wait"));
        let copy = epoll.clone();
        assert_eq!(registered(&copy), 0);
        assert!(copy.poll_one(b.as_raw_fd(), libc::POLLIN, 0).expect("wait"));
        let fd = |e: &Epoll| e.instance.borrow().as_ref().map(|i| i.epfd.as_raw_fd());
        assert_ne!(fd(&epoll), fd(&copy));
    }
}
