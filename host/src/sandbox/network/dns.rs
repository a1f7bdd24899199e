//! The gate's resolver stub: it answers every DNS query from the session's network namespace
//! with `REFUSED` and records the name asked for. Commands reach hosts only through the proxy,
//! which resolves names itself; a program that ignores the proxy variables and looks a name up
//! fails at once, and the model is told why.

use std::sync::Arc;

use super::Shared;
use super::allow::Host;

/// `REFUSED`, the answer's response code.
const RCODE_REFUSED: u8 = 5;

/// Answer queries on `socket` until the gate ends.
pub(super) async fn serve(socket: tokio::net::UdpSocket, shared: Arc<Shared>) {
    let mut buffer = [0u8; 1500];
    loop {
        let Ok((length, peer)) = socket.recv_from(&mut buffer).await else {
            continue;
        };
        let Some((reply, name)) = refuse(&buffer[..length]) else {
            continue;
        };
        if let Some(name) = name {
            let list = shared.allowed();
            let allowed = Host::parse(&name)
                .is_some_and(|host| [443, 80].into_iter().any(|port| list.allows(&host, port)));
            let reason = if allowed {
                "allowed, but only through the proxy in HTTPS_PROXY and HTTP_PROXY: this program \
                 looked the name up itself (DNS) and ignored the proxy variables"
            } else {
                "looked up directly (DNS); confined commands reach hosts only through the proxy \
                 in HTTPS_PROXY and HTTP_PROXY"
            };
            shared
                .refuse(
                    name,
                    reason.to_owned(),
                    super::owner::Protocol::Udp,
                    peer.port(),
                )
                .await;
        }
        let _ = socket.send_to(&reply, peer).await;
    }
}

/// The `REFUSED` answer to `query`, and the name it asks for (`None` when it cannot be read);
/// `None` for something that is no query.
fn refuse(query: &[u8]) -> Option<(Vec<u8>, Option<String>)> {
    // Header: id (2), flags (2), 4 counts (2 each).
    if query.len() < 12 || query[2] & 0x80 != 0 {
        return None;
    }
    let questions = u16::from_be_bytes([query[4], query[5]]);
    let (name, end) = match (questions >= 1).then(|| question(query)).flatten() {
        Some((name, end)) => (Some(name), end),
        None => (None, 12),
    };
    let mut reply = Vec::with_capacity(end);
    reply.extend_from_slice(&query[..2]);
    // QR, the query's opcode and RD; no RA; REFUSED.
    reply.push(0x80 | (query[2] & 0x79));
    reply.push(RCODE_REFUSED);
    let echoed: u16 = if name.is_some() { 1 } else { 0 };
    reply.extend_from_slice(&echoed.to_be_bytes());
    reply.extend_from_slice(&[0, 0, 0, 0, 0, 0]);
    reply.extend_from_slice(&query[12..end]);
    Some((reply, name))
}

/// The first question's name (dotted, lower case) and where the question ends (after its type
/// and class).
fn question(query: &[u8]) -> Option<(String, usize)> {
    let mut at = 12;
    let mut labels: Vec<String> = Vec::new();
    loop {
        let length = usize::from(*query.get(at)?);
        at += 1;
        if length == 0 {
            break;
        }
        // No compression in a question's name; labels of at most 63 bytes.
        if length > 63 {
            return None;
        }
        let label = query.get(at..at + length)?;
        labels.push(String::from_utf8_lossy(label).to_ascii_lowercase());
        at += length;
    }
    let end = at + 4;
    (end <= query.len() && !labels.is_empty()).then(|| (labels.join("."), end))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A query for `name` (type A, class IN) with id 0x1234 and RD set.
    fn query(name: &str) -> Vec<u8> {
        let mut bytes = vec![0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
        for label in name.split('.') {
            bytes.push(label.len() as u8);
            bytes.extend_from_slice(label.as_bytes());
        }
        bytes.extend_from_slice(&[0, 0, 1, 0, 1]);
        bytes
    }

    #[test]
    fn every_query_is_refused_with_its_question_and_its_name_recorded() {
        let asked = query("Denied.TEST");
        let (reply, name) = refuse(&asked).expect("a reply");
        assert_eq!(name.as_deref(), Some("denied.test"));
        assert_eq!(&reply[..2], &[0x12, 0x34], "the query's id");
        assert_eq!(reply[2] & 0x80, 0x80, "a response");
        assert_eq!(reply[2] & 0x01, 0x01, "recursion desired, as asked");
        assert_eq!(reply[3] & 0x0f, RCODE_REFUSED);
        assert_eq!(&reply[4..6], &[0, 1], "the question is echoed");
        assert_eq!(&reply[12..], &asked[12..]);
    }

    #[test]
    fn responses_and_garbage_get_no_answer_or_one_without_a_name() {
        assert!(refuse(&[0; 5]).is_none());
        let mut response = query("a.test");
        response[2] |= 0x80;
        assert!(refuse(&response).is_none(), "a response is not answered");
        let mut cut = query("a.test");
        cut.truncate(15);
        let (reply, name) = refuse(&cut).expect("a reply");
        assert_eq!(name, None);
        assert_eq!(reply.len(), 12);
        assert_eq!(&reply[4..6], &[0, 0]);
    }
}
