//! Which process listens on a TCP port, read from Linux's `/proc`.
//!
//! A launcher picks a free port, closes it and hands it to a child that
//! needs a second or more to bind it. In that window another test's
//! listener can take the same port; the child then fails to bind and exits,
//! but a plain connect already succeeded against the other listener, and
//! the test talks to someone else's server (seen in CI as "connection
//! closed before message completed" and "reset by peer" when that server's
//! own test ended). So a launcher waits until the listening socket is one of
//! its child's open file descriptors.

use std::fs;

/// Whether process `pid` holds a socket listening on `port` (IPv4 or IPv6,
/// any address). Errs when `/proc` cannot be read, so a caller can tell
/// "not yet" from "cannot know".
pub fn process_listens_on(pid: u32, port: u16) -> std::io::Result<bool> {
    let inodes = listening_inodes(port)?;
    if inodes.is_empty() {
        return Ok(false);
    }
    let descriptors = match fs::read_dir(format!("/proc/{pid}/fd")) {
        Ok(entries) => entries,
        // The process is gone or not ours to read: it holds nothing we can see.
        Err(_) => return Ok(false),
    };
    Ok(descriptors.flatten().any(|entry| {
        fs::read_link(entry.path())
            .ok()
            .and_then(|target| socket_inode(&target.to_string_lossy()))
            .is_some_and(|inode| inodes.contains(&inode))
    }))
}

/// Inodes of the sockets in state LISTEN on `port`, over IPv4 and IPv6.
fn listening_inodes(port: u16) -> std::io::Result<Vec<u64>> {
    let mut inodes = Vec::new();
    let mut read_any = false;
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = fs::read_to_string(table) else {
            continue;
        };
        read_any = true;
        inodes.extend(
            text.lines()
                .skip(1)
                .filter_map(|line| listener_on(line, port)),
        );
    }
    if read_any {
        Ok(inodes)
    } else {
        Err(std::io::Error::other(
            "neither /proc/net/tcp nor /proc/net/tcp6 is readable",
        ))
    }
}

/// The inode of one `/proc/net/tcp*` row when it is a listener on `port`.
/// Row: `sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode …`,
/// the local address as `HEXADDR:HEXPORT`, state `0A` for LISTEN.
fn listener_on(row: &str, port: u16) -> Option<u64> {
    const LISTEN: &str = "0A";
    let fields: Vec<&str> = row.split_whitespace().collect();
    let (_, local_port) = fields.get(1)?.rsplit_once(':')?;
    if u16::from_str_radix(local_port, 16).ok()? != port || *fields.get(3)? != LISTEN {
        return None;
    }
    fields.get(9)?.parse().ok()
}

/// `socket:[12345]` → 12345.
fn socket_inode(link: &str) -> Option<u64> {
    link.strip_prefix("socket:[")?
        .strip_suffix(']')?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    #[test]
    fn a_row_is_a_listener_only_on_its_port_and_in_state_listen() {
        let listen = "   3: 00000000000000000000000000000000:9BDF 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 4242 1 0000000000000000 100 0 0 10 0";
        let established = listen.replace(" 0A ", " 01 ");
        assert_eq!(listener_on(listen, 0x9BDF), Some(4242));
        assert_eq!(listener_on(listen, 0x9BE0), None);
        assert_eq!(listener_on(&established, 0x9BDF), None);
        assert_eq!(socket_inode("socket:[4242]"), Some(4242));
        assert_eq!(socket_inode("pipe:[4242]"), None);
    }

    #[test]
    fn this_process_is_seen_on_its_own_listener_and_not_on_another_port() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        assert!(process_listens_on(std::process::id(), port).unwrap());
        drop(listener);
        assert!(!process_listens_on(std::process::id(), port).unwrap());
    }

    #[test]
    fn another_process_is_not_seen_on_this_processs_listener() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let mut other = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        let seen = process_listens_on(other.id(), port).unwrap();
        let _ = other.kill();
        let _ = other.wait();
        assert!(
            !seen,
            "the listener belongs to the test process, not to `sleep`"
        );
    }
}
