//! Who holds the sockets bound to an abstract name: `/proc/net/unix` and the command's tree
//! (step 6 of the supervision).

/// Whether an abstract name is bound only by sockets held by the command's tree (and by at
/// least one). `/proc/net/unix` prints names raw, so a name holding a newline could add a line
/// of its choosing: every line naming `name` must be the tree's, so an added line cannot hide
/// the real one.
pub(super) fn abstract_in_tree(name: &[u8]) -> bool {
    let Ok(table) = std::fs::read("/proc/self/net/unix") else {
        return false;
    };
    let shown: Vec<u8> = std::iter::once(b'@')
        .chain(name.iter().map(|&b| if b == 0 { b'@' } else { b }))
        .collect();
    let inodes = abstract_inodes(&table, &shown);
    if inodes.is_empty() {
        return false;
    }
    let held = crate::tree::held_sockets();
    inodes.iter().all(|inode| held.contains(inode))
}

/// The socket inodes `/proc/net/unix` (`table`) lists under the name `shown`.
pub(crate) fn abstract_inodes(table: &[u8], shown: &[u8]) -> Vec<u64> {
    table
        .split(|&b| b == b'\n')
        .skip(1)
        .filter_map(|line| {
            // Num RefCount Protocol Flags Type St Inode Path
            let mut fields = line.splitn(8, |&b| b == b' ');
            let inode = fields.nth(6)?;
            let path = fields.next()?;
            (path == shown)
                .then(|| std::str::from_utf8(inode).ok()?.parse().ok())
                .flatten()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_line_naming_an_abstract_socket_is_found() {
        let table = b"Num       RefCount Protocol Flags    Type St Inode Path\n\
            0000000000000000: 00000002 00000000 00010000 0001 01 1234 @victim\n\
            0000000000000000: 00000002 00000000 00010000 0001 01 99 @victim\n\
            0000000000000000: 00000002 00000000 00010000 0001 01 7 @other name\n\
            0000000000000000: 00000002 00000000 00000000 0001 03 8\n";
        assert_eq!(abstract_inodes(table, b"@victim"), vec![1234, 99]);
        assert_eq!(abstract_inodes(table, b"@other name"), vec![7]);
        assert!(abstract_inodes(table, b"@nobody").is_empty());
    }
}
