//! The transport over real loopback HTTP: bodies, caps, redirects, timeouts.

use std::time::Duration;

use llm_failover::ErrorKind;
use llm_failover::http::{FormPart, HttpRequest, HttpTransport, Transport, TransportOptions};
use llm_failover_emulator::scripted::{Reply, ReplyBody, ScriptedServer};

fn transport(cap: usize) -> HttpTransport {
    let mut opts = TransportOptions::default();
    opts.max_response_bytes = cap;
    HttpTransport::new(&opts).unwrap()
}

fn url(server: &ScriptedServer, path: &str) -> url::Url {
    format!("{}{path}", server.url()).parse().unwrap()
}

#[tokio::test]
async fn sends_json_and_reads_the_response() {
    let server = ScriptedServer::start().await;
    server.push(
        "/x",
        Reply::json(200, r#"{"ok":true}"#).header("x-request-id", "req_1"),
    );
    let req = HttpRequest::post_json(url(&server, "/x"), &serde_json::json!({"a": 1}))
        .unwrap()
        .secret_header("authorization", "Bearer sk-sentinel")
        .unwrap();
    assert!(!format!("{req:?}").contains("sk-sentinel"));
    let resp = transport(1 << 20)
        .send(req, Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(resp.status, 200);
    assert_eq!(&resp.body[..], br#"{"ok":true}"#);
    let got = &server.requests()[0];
    assert_eq!(got.json(), serde_json::json!({"a": 1}));
    assert_eq!(got.header("authorization"), Some("Bearer sk-sentinel"));
    assert_eq!(got.header("content-type"), Some("application/json"));
}

#[tokio::test]
async fn multipart_forms_can_be_sent_twice() {
    let server = ScriptedServer::start().await;
    server.push("/up", Reply::status(200));
    server.push("/up", Reply::status(200));
    let mut req = HttpRequest::new(reqwest::Method::POST, url(&server, "/up"));
    req.body = llm_failover::http::Body::Multipart(vec![
        FormPart::text("model", "whisper-1"),
        FormPart::file(
            "file",
            bytes::Bytes::from_static(b"RIFF"),
            "a.wav",
            "audio/wav",
        ),
    ]);
    let t = transport(1 << 20);
    t.send(req.clone(), Duration::from_secs(5)).await.unwrap();
    t.send(req, Duration::from_secs(5)).await.unwrap();
    for got in server.requests() {
        assert_eq!(got.field_text("model").as_deref(), Some("whisper-1"));
        let file = got.field("file").unwrap();
        assert_eq!(file.file_name.as_deref(), Some("a.wav"));
        assert_eq!(file.content_type.as_deref(), Some("audio/wav"));
        assert_eq!(&file.data[..], b"RIFF");
    }
}

#[tokio::test]
async fn a_body_over_the_cap_is_a_decode_error() {
    let server = ScriptedServer::start().await;
    server.push("/big", Reply::status(200).body(vec![b'a'; 2048]));
    let req = HttpRequest::new(reqwest::Method::GET, url(&server, "/big"));
    let err = transport(1024)
        .send(req, Duration::from_secs(5))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Decode);
    assert!(err.message().contains("1024-byte cap"), "{err}");
}

#[tokio::test]
async fn redirects_are_not_followed() {
    let server = ScriptedServer::start().await;
    server.push(
        "/r",
        Reply::status(307).header("location", "http://127.0.0.2:9/steal"),
    );
    let req = HttpRequest::new(reqwest::Method::GET, url(&server, "/r"));
    let err = transport(1024)
        .send(req, Duration::from_secs(5))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Config);
    assert!(err.message().contains("redirect"), "{err}");
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn a_hanging_server_times_out() {
    let server = ScriptedServer::start().await;
    server.push(
        "/slow",
        Reply::status(200).with_body(ReplyBody::Hang(Duration::from_secs(5))),
    );
    let req = HttpRequest::new(reqwest::Method::GET, url(&server, "/slow"));
    let err = transport(1024)
        .send(req, Duration::from_millis(150))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
}

#[tokio::test]
async fn a_silence_limit_when_set_ends_a_stalled_send_before_its_timeout() {
    let server = ScriptedServer::start().await;
    server.push(
        "/slow",
        Reply::status(200).with_body(ReplyBody::Hang(Duration::from_secs(5))),
    );
    let mut opts = TransportOptions::default();
    assert_eq!(opts.read_timeout, None, "no silence limit unless asked for");
    opts.read_timeout = Some(Duration::from_millis(150));
    let req = HttpRequest::new(reqwest::Method::GET, url(&server, "/slow"));
    // The overall timeout is far away: only the silence limit can end this send.
    let err = HttpTransport::new(&opts)
        .unwrap()
        .send(req, Duration::from_secs(30))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
}

#[tokio::test]
async fn a_cut_body_is_a_connection_error() {
    let server = ScriptedServer::start().await;
    server.push(
        "/cut",
        Reply::status(200).with_body(ReplyBody::Truncated(bytes::Bytes::from_static(b"{\"par"))),
    );
    let req = HttpRequest::new(reqwest::Method::GET, url(&server, "/cut"));
    let err = transport(1024)
        .send(req, Duration::from_secs(5))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Connect, "{err}");
}

#[tokio::test]
async fn nothing_listening_is_a_connect_error() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let req = HttpRequest::new(
        reqwest::Method::GET,
        format!("http://{addr}/").parse().unwrap(),
    );
    let err = transport(1024)
        .send(req, Duration::from_secs(5))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Connect, "{err}");
}
