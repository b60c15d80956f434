//! Transcriptions: multipart fields; `json`, `verbose_json` and `text` answers.

use super::*;

fn audio_request() -> TranscriptionRequest {
    TranscriptionRequest::new(AudioInput::from_bytes(wav(), "memo.wav").unwrap())
        .language("en")
        .prompt("Names: Zoë, Jörg.")
        .temperature(0.2)
}

#[tokio::test]
async fn transcribes_json_and_sends_every_multipart_field() {
    let h = Harness::new().await;
    h.server.push(
        AUDIO,
        Reply::json(
            200,
            include_str!("../../fixtures/openai/transcription.json"),
        )
        .header("x-request-id", "req_t"),
    );
    let t = h.transcribe(&audio_request()).await.result.unwrap();
    assert!(t.text.starts_with("Imagine the wildest idea"), "{t:?}");
    assert_eq!(t.model, "whisper-1");
    assert_eq!(t.request_id.as_deref(), Some("req_t"));
    assert!(t.segments.is_empty());

    let got = h.only_request();
    assert_eq!(got.method, "POST");
    assert_eq!(got.path, AUDIO);
    assert_eq!(
        got.header("authorization"),
        Some(&*format!("Bearer {SENTINEL}"))
    );
    assert!(
        got.header("content-type")
            .unwrap()
            .starts_with("multipart/form-data; boundary=")
    );
    let file = got.field("file").expect("file part");
    assert_eq!(file.file_name.as_deref(), Some("memo.wav"));
    assert_eq!(file.content_type.as_deref(), Some("audio/wav"));
    assert_eq!(&file.data[..], &wav()[..]);
    assert_eq!(got.field_text("model").as_deref(), Some("whisper-1"));
    assert_eq!(got.field_text("language").as_deref(), Some("en"));
    assert_eq!(
        got.field_text("prompt").as_deref(),
        Some("Names: Zoë, Jörg.")
    );
    assert_eq!(got.field_text("response_format").as_deref(), Some("json"));
    assert_eq!(got.field_text("temperature").as_deref(), Some("0.2"));
}

#[tokio::test]
async fn transcribes_verbose_json_with_language_duration_and_segments() {
    let h = Harness::new().await;
    h.server.push(
        AUDIO,
        Reply::json(
            200,
            include_str!("../../fixtures/openai/transcription_verbose.json"),
        ),
    );
    let req = audio_request().response_format(TranscriptFormat::VerboseJson);
    let t = h.transcribe(&req).await.result.unwrap();
    assert_eq!(t.language.as_deref(), Some("english"));
    assert_eq!(t.duration, Some(Duration::from_secs_f64(8.470000267028809)));
    assert_eq!(t.segments.len(), 2);
    assert_eq!(t.segments[0].start, Duration::ZERO);
    assert_eq!(
        t.segments[0].end,
        Duration::from_secs_f64(3.319999933242798)
    );
    assert_eq!(
        t.segments[1].text,
        " People were swimming in the ocean, building sandcastles, and playing beach volleyball."
    );
    assert_eq!(
        h.only_request().field_text("response_format").as_deref(),
        Some("verbose_json")
    );
}

#[tokio::test]
async fn transcribes_plain_text() {
    let h = Harness::new().await;
    h.server.push(
        AUDIO,
        Reply::status(200)
            .header("content-type", "text/plain; charset=utf-8")
            .body(include_str!("../../fixtures/openai/transcription.txt")),
    );
    let req = TranscriptionRequest::new(AudioInput::from_bytes(wav(), "memo.wav").unwrap())
        .response_format(TranscriptFormat::Text);
    let t = h.transcribe(&req).await.result.unwrap();
    assert_eq!(t.text, "Imagine the wildest idea that you have ever had.");
    let got = h.only_request();
    assert_eq!(got.field_text("response_format").as_deref(), Some("text"));
    assert!(got.field("language").is_none());
    assert!(got.field("prompt").is_none());
    assert!(got.field("temperature").is_none());
}

#[tokio::test]
async fn the_same_transcription_request_can_be_sent_again() {
    let h = Harness::new().await;
    for _ in 0..2 {
        h.server.push(
            AUDIO,
            Reply::json(
                200,
                include_str!("../../fixtures/openai/transcription.json"),
            ),
        );
    }
    let req = audio_request();
    h.transcribe(&req).await.result.unwrap();
    h.transcribe(&req).await.result.unwrap();
    for got in h.server.requests() {
        assert_eq!(&got.field("file").unwrap().data[..], &wav()[..]);
    }
}

#[tokio::test]
async fn transcription_errors_and_bad_bodies() {
    let h = Harness::new().await;
    h.server.push(AUDIO, Reply::json(413, r#"{"error":{"message":"Maximum content size limit (26214400) exceeded (26289999 bytes read)","type":"server_error","param":null,"code":null}}"#));
    h.server.push(
        AUDIO,
        Reply::status(200)
            .header("content-type", "text/html")
            .body("<html>maintenance</html>"),
    );
    h.server
        .push(AUDIO, Reply::json(200, r#"{"language":"en"}"#));
    let err = h.transcribe(&audio_request()).await.result.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::PayloadTooLarge);
    for needle in ["text/html", "no `text`"] {
        let err = h.transcribe(&audio_request()).await.result.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Decode, "{err}");
        assert!(err.message().contains(needle), "{err}");
    }
}
