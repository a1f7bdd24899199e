//! The page where the person types a secret: a small HTTP server on this machine's loopback
//! interface, started at the first secret question.
//!
//! 1. The listener binds `127.0.0.1` on a port the kernel picks. Nothing else listens there.
//! 2. `GET /secret/LINK` shows the page of an open question: its message, a password field, a
//!    hidden form token, "Give" and "Decline". A link that is unknown, expired or used up gets
//!    a page saying so.
//! 3. `POST /secret/LINK` takes the form. It is accepted only when:
//!    - the `Host` header names this listener (a page reached through another name, as in DNS
//!      rebinding, is refused);
//!    - the `Origin` header is this listener's own, or `null` with `Sec-Fetch-Site:
//!      same-origin` (a form posted from another site is refused);
//!    - the body is a form of at most [`MAX_BODY`] bytes carrying the page's form token.
//! 4. The secret goes into [`SecretPages`]; the link is used up. The round waiting for it
//!    takes it from there ([`secrets`](super::secrets)).
//!
//! Every answer forbids caching, framing and referrers, and runs no script.
//! The link is the only key: anyone who can reach loopback on this machine and knows the link
//! can give the secret, so the link goes only to the MCP client that asked.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::sync::{OnceCell, Semaphore};

use super::Secret;
use super::secrets::{SecretPages, SubmitError};

/// The most bytes a form's body may have.
pub(crate) const MAX_BODY: usize = 64 * 1024;

/// The longest secret, in bytes: the scrubbing of a command's output holds back at most this
/// much, and its work grows with it.
pub(crate) const MAX_SECRET: usize = 4096;

/// The most connections served at once; more wait to be accepted.
const MAX_CONNECTIONS: usize = 64;

/// Longest a request head may take to arrive.
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// Longest a whole request body may take to arrive.
const BODY_TIMEOUT: Duration = Duration::from_secs(10);

/// The path every link starts with.
const PREFIX: &str = "/secret/";

/// The pages and, once started, the server that shows them. Clones share both.
#[derive(Clone, Default)]
pub struct PageServer {
    pages: SecretPages,
    /// `http://127.0.0.1:PORT`, once the listener is bound; the error if it could not be.
    origin: Arc<OnceCell<Result<String, String>>>,
}

impl PageServer {
    /// The pages.
    pub(crate) fn pages(&self) -> &SecretPages {
        &self.pages
    }

    /// Open a page for `message`, owned by `owner`, open for `lasting`: its id and its link
    /// (the whole URL). Starts the server at the first call.
    pub(crate) async fn open(
        &self,
        message: &str,
        owner: super::secrets::Owner,
        lasting: Duration,
    ) -> Result<(String, String), String> {
        let origin = self.origin().await?;
        let (id, link) = self
            .pages
            .open(message, owner, lasting)
            .map_err(|e| e.to_string())?;
        Ok((id, format!("{origin}{PREFIX}{link}")))
    }

    /// The server's origin (`http://127.0.0.1:PORT`), binding its listener at the first call.
    /// Inside a Tokio runtime.
    pub(crate) async fn origin(&self) -> Result<String, String> {
        self.origin
            .get_or_init(|| async {
                let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
                    .await
                    .map_err(|e| {
                        format!("the page for secrets could not listen on loopback: {e}")
                    })?;
                let port = listener
                    .local_addr()
                    .map_err(|e| format!("the page for secrets has no address: {e}"))?
                    .port();
                let origin = format!("http://127.0.0.1:{port}");
                tracing::info!(%origin, "serving the page for secrets on loopback");
                tokio::spawn(accept(listener, self.pages.clone(), origin.clone()));
                tokio::spawn(sweep(self.pages.clone()));
                Ok(origin)
            })
            .await
            .clone()
    }
}

/// How often expired pages are dropped, so that a secret given on a page nobody takes does
/// not stay in memory.
const SWEEP_EVERY: Duration = Duration::from_secs(15);

/// Drop expired pages every [`SWEEP_EVERY`], for as long as the host lives.
async fn sweep(pages: SecretPages) {
    let mut ticks = tokio::time::interval(SWEEP_EVERY);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        pages.sweep();
    }
}

/// Accept and serve connections, at most [`MAX_CONNECTIONS`] at once.
async fn accept(listener: tokio::net::TcpListener, pages: SecretPages, origin: String) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let site = Arc::new(Site { pages, origin });
    loop {
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(error) => {
                tracing::debug!(%error, "the page for secrets could not accept a connection");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let site = site.clone();
        tokio::spawn(async move {
            let _slot = slot;
            let service = hyper::service::service_fn(move |request| {
                let site = site.clone();
                async move { Ok::<_, Infallible>(site.handle(request).await) }
            });
            let served = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .keep_alive(false)
                .serve_connection(TokioIo::new(stream), service)
                .await;
            if let Err(error) = served {
                tracing::debug!(%error, "a connection to the page for secrets ended with an error");
            }
        });
    }
}

/// What the handler needs.
struct Site {
    pages: SecretPages,
    /// `http://127.0.0.1:PORT`.
    origin: String,
}

impl Site {
    /// Answer one request (see the module documentation).
    async fn handle(&self, request: Request<Incoming>) -> Response<Full<Bytes>> {
        let host_ok = request
            .headers()
            .get(header::HOST)
            .is_some_and(|host| self.origin.strip_prefix("http://") == host.to_str().ok());
        if !host_ok {
            return page(
                StatusCode::MISDIRECTED_REQUEST,
                "Not this page",
                "<p>Open the link exactly as it was given.</p>",
            );
        }
        let Some(link) = request.uri().path().strip_prefix(PREFIX).map(str::to_owned) else {
            return not_found();
        };
        match *request.method() {
            Method::GET | Method::HEAD => self.show(&link),
            Method::POST => self.submit(&link, request).await,
            _ => {
                let mut response = page(
                    StatusCode::METHOD_NOT_ALLOWED,
                    "Not allowed",
                    "<p>This page takes GET and POST only.</p>",
                );
                response
                    .headers_mut()
                    .insert(header::ALLOW, HeaderValue::from_static("GET, HEAD, POST"));
                response
            }
        }
    }

    /// The page of an open question.
    fn show(&self, link: &str) -> Response<Full<Bytes>> {
        let Some(view) = self.pages.view(link) else {
            return not_found();
        };
        if view.used {
            return page(
                StatusCode::GONE,
                "Already answered",
                "<p>This link was used already. Nothing more is needed here.</p>",
            );
        }
        let body = format!(
            "<p>A tool of <b>toolhost</b> asks you for a secret:</p>\
             <blockquote>{message}</blockquote>\
             <p>It goes to that one command as a variable. toolhost does not pass it to the \
             tool, the model or the MCP client, and replaces it with <code>[secret]</code> in \
             the command's output. The command itself can still reveal it (encoded, or \
             written to a file): give it only to a command you trust.</p>\
             <form method=\"post\" action=\"{PREFIX}{link}\">\
             <input type=\"hidden\" name=\"form\" value=\"{token}\">\
             <p><input type=\"password\" name=\"secret\" autocomplete=\"off\" autofocus \
             aria-label=\"secret\" size=\"40\"></p>\
             <p><button type=\"submit\" name=\"action\" value=\"give\">Give</button> \
             <button type=\"submit\" name=\"action\" value=\"decline\">Decline</button></p>\
             </form>",
            message = escape(&view.message),
            link = escape(link),
            token = escape(&view.form_token),
        );
        page(StatusCode::OK, "A secret for toolhost", &body)
    }

    /// A form posted to the page.
    async fn submit(&self, link: &str, request: Request<Incoming>) -> Response<Full<Bytes>> {
        let headers = request.headers();
        let header_is = |name: &str, value: &str| {
            headers
                .get(name)
                .is_some_and(|given| given.to_str().ok() == Some(value))
        };
        // A browser may send `Origin: null` for its own page's form; it then says the form is
        // this page's own in `Sec-Fetch-Site`, which no other site's page can set.
        let same_origin = header_is("origin", &self.origin)
            || (header_is("origin", "null") && header_is("sec-fetch-site", "same-origin"));
        if !same_origin {
            return page(
                StatusCode::FORBIDDEN,
                "Refused",
                "<p>The form was not sent from this page. Open the link again.</p>",
            );
        }
        let is_form = headers
            .get(header::CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .is_some_and(|value| {
                value
                    .split(';')
                    .next()
                    .is_some_and(|kind| kind.trim() == "application/x-www-form-urlencoded")
            });
        if !is_form {
            return page(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "Refused",
                "<p>The page takes its own form only.</p>",
            );
        }
        let body = Limited::new(request.into_body(), MAX_BODY).collect();
        let bytes = match tokio::time::timeout(BODY_TIMEOUT, body).await {
            Ok(Ok(collected)) => zeroize::Zeroizing::new(collected.to_bytes().to_vec()),
            Ok(Err(_)) => {
                return page(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "Refused",
                    "<p>The form is too large.</p>",
                );
            }
            Err(_) => {
                return page(
                    StatusCode::REQUEST_TIMEOUT,
                    "Refused",
                    "<p>The form took too long to arrive.</p>",
                );
            }
        };
        let mut form_token = None;
        let mut secret = None;
        let mut action = None;
        for (name, value) in form_urlencoded::parse(&bytes) {
            match &*name {
                "form" => form_token = Some(value.into_owned()),
                "secret" => secret = Some(Secret::new(value.into_owned())),
                "action" => action = Some(value.into_owned()),
                _ => {}
            }
        }
        let given = match action.as_deref() {
            Some("decline") => None,
            Some("give") => match secret {
                Some(secret) if secret.expose().len() > MAX_SECRET => {
                    return page(
                        StatusCode::BAD_REQUEST,
                        "Refused",
                        &format!("<p>A secret may have at most {MAX_SECRET} bytes.</p>"),
                    );
                }
                Some(secret) if secret.expose().contains('\0') => {
                    return page(
                        StatusCode::BAD_REQUEST,
                        "Refused",
                        "<p>A secret cannot hold a NUL character: no variable can.</p>",
                    );
                }
                Some(secret) if !secret.expose().is_empty() => Some(secret),
                _ => {
                    return page(
                        StatusCode::BAD_REQUEST,
                        "Nothing given",
                        "<p>The field was empty. Go back and type the secret, or decline.</p>",
                    );
                }
            },
            _ => {
                return page(
                    StatusCode::BAD_REQUEST,
                    "Refused",
                    "<p>The form has no action of give or decline.</p>",
                );
            }
        };
        let declined = given.is_none();
        match self
            .pages
            .submit(link, form_token.as_deref().unwrap_or(""), given)
        {
            Ok(()) if declined => page(
                StatusCode::OK,
                "Declined",
                "<p>The tool is told you declined. You can close this page.</p>",
            ),
            Ok(()) => page(
                StatusCode::OK,
                "Received",
                "<p>The secret was received. You can close this page.</p>",
            ),
            Err(SubmitError::Unknown) => not_found(),
            Err(error @ (SubmitError::Used | SubmitError::Declined)) => page(
                StatusCode::CONFLICT,
                "Already answered",
                &format!("<p>{}.</p>", escape(&capitalized(&error.to_string()))),
            ),
            Err(error @ SubmitError::WrongForm) => page(
                StatusCode::FORBIDDEN,
                "Refused",
                &format!("<p>{}.</p>", escape(&capitalized(&error.to_string()))),
            ),
        }
    }
}

/// The answer for a link that is not (or no longer) a page.
fn not_found() -> Response<Full<Bytes>> {
    page(
        StatusCode::NOT_FOUND,
        "No such page",
        "<p>This link is unknown, has expired, or its question was answered.</p>",
    )
}

/// An HTML answer with the headers every answer gets.
fn page(status: StatusCode, title: &str, body: &str) -> Response<Full<Bytes>> {
    let html = format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width\">\
         <title>{title}</title>\
         <style>body{{font-family:sans-serif;max-width:40em;margin:3em auto;padding:0 1em}}\
         blockquote{{border-left:3px solid #888;margin-left:0;padding-left:1em;\
         white-space:pre-wrap;overflow-wrap:anywhere;font-family:monospace}}</style>\
         </head><body><h1>{title}</h1>{body}</body></html>\n",
        title = escape(title),
    );
    let mut response = Response::new(Full::new(Bytes::from(html)));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    for (name, value) in [
        (header::CONTENT_TYPE, "text/html; charset=utf-8"),
        (header::CACHE_CONTROL, "no-store"),
        // `no-referrer` would make a browser send `Origin: null` with the page's own form.
        (header::REFERRER_POLICY, "same-origin"),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (
            header::CONTENT_SECURITY_POLICY,
            "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'",
        ),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    response
}

/// `text` with its first letter in upper case.
fn capitalized(text: &str) -> String {
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

/// `text` safe inside HTML text and attribute values.
fn escape(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => escaped.push_str("&amp;"),
            '<' => escaped.push_str("&lt;"),
            '>' => escaped.push_str("&gt;"),
            '"' => escaped.push_str("&quot;"),
            '\'' => escaped.push_str("&#39;"),
            c => escaped.push(c),
        }
    }
    escaped
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ask::secrets::{Owner, Taken};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// Send `request` (a whole HTTP/1.1 request) to `origin`; the answer's status and text.
    async fn send(origin: &str, request: String) -> (u16, String) {
        let address = origin.strip_prefix("http://").expect("an http origin");
        let mut stream = tokio::net::TcpStream::connect(address)
            .await
            .expect("connect");
        stream.write_all(request.as_bytes()).await.expect("write");
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await.expect("read");
        let status = answer
            .split(' ')
            .nth(1)
            .and_then(|code| code.parse().ok())
            .unwrap_or(0);
        (status, answer)
    }

    fn get(origin: &str, path: &str, host: &str) -> String {
        let _ = origin;
        format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n")
    }

    fn post(path: &str, host: &str, from: Option<&str>, body: &str) -> String {
        let origin = from.map_or(String::new(), |o| format!("Origin: {o}\r\n"));
        format!(
            "POST {path} HTTP/1.1\r\nHost: {host}\r\n{origin}\
             Content-Type: application/x-www-form-urlencoded\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
    }

    /// The form token in a page's HTML.
    fn form_token(html: &str) -> String {
        let start = html.find("name=\"form\" value=\"").expect("a form token") + 19;
        html[start..].split('"').next().expect("its end").to_owned()
    }

    #[tokio::test]
    async fn the_page_takes_a_secret_only_from_its_own_form() {
        let server = PageServer::default();
        let owner = Owner {
            principal: None,
            scope: "s".into(),
        };
        let (id, url) = server
            .open(
                "A token for <b>gh</b>",
                owner.clone(),
                Duration::from_secs(60),
            )
            .await
            .expect("opened");
        let origin = server.origin().await.expect("origin");
        let host = origin.strip_prefix("http://").expect("host").to_owned();
        let path = url.strip_prefix(&origin).expect("a path").to_owned();

        // The page shows the message, escaped, with its form.
        let (status, html) = send(&origin, get(&origin, &path, &host)).await;
        assert_eq!(status, 200, "{html}");
        assert!(html.contains("A token for &lt;b&gt;gh&lt;/b&gt;"), "{html}");
        assert!(
            html.to_ascii_lowercase()
                .contains("cache-control: no-store"),
            "{html}"
        );
        let token = form_token(&html);

        // Another name for the host, another site's form, a wrong form token, an unknown
        // link: each refused, and the page stays open.
        let (status, _) = send(&origin, get(&origin, &path, "localhost.example:80")).await;
        assert_eq!(status, 421);
        let body = format!("form={token}&secret=hunter2&action=give");
        let (status, _) = send(
            &origin,
            post(&path, &host, Some("http://evil.example"), &body),
        )
        .await;
        assert_eq!(status, 403);
        let (status, _) = send(&origin, post(&path, &host, None, &body)).await;
        assert_eq!(status, 403);
        let wrong = "form=nope&secret=hunter2&action=give";
        let (status, _) = send(&origin, post(&path, &host, Some(&origin), wrong)).await;
        assert_eq!(status, 403);
        let (status, _) = send(
            &origin,
            post("/secret/unknown", &host, Some(&origin), &body),
        )
        .await;
        assert_eq!(status, 404);

        // Another site's page may send `Origin: null` too, but not `Sec-Fetch-Site: same-origin`.
        let (status, _) = send(&origin, post(&path, &host, Some("null"), &body)).await;
        assert_eq!(status, 403);

        // Its own form, as a browser may send it: received once; the link is used up.
        let browser = post(&path, &host, Some("null"), &body).replacen(
            "Origin: null\r\n",
            "Origin: null\r\nSec-Fetch-Site: same-origin\r\n",
            1,
        );
        let (status, html) = send(&origin, browser).await;
        assert_eq!(status, 200, "{html}");
        assert!(!html.contains("hunter2"));
        let (status, _) = send(&origin, post(&path, &host, Some(&origin), &body)).await;
        assert_eq!(status, 409);
        let (status, _) = send(&origin, get(&origin, &path, &host)).await;
        assert_eq!(status, 410);

        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        match server.pages().take(&id, &owner, deadline).await {
            Taken::Given(secret) => assert_eq!(secret.expose(), "hunter2"),
            other => panic!("not given: {other:?}"),
        }
    }
}
