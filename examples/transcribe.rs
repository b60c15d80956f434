//! Speech to text through the transcription failover order.
//!
//! ```sh
//! cargo run --example transcribe -- [--config providers.toml] [--env NAME] [--file AUDIO] [--language CODE]
//! ```
//!
//! The default file is `examples/memo.wav` (4.7 s of synthesised speech, mono 16 kHz). In
//! `demo` (the default) the emulator runs in this process; its Whisper-style provider
//! answers the first request with a 503, so the same audio is re-sent to the Deepgram-style
//! one. The emulator is not a speech recogniser: its transcript is placeholder text derived
//! from the audio; real providers (`--env prod`) transcribe.

mod common;

use std::process::ExitCode;

use llm_failover::{AudioInput, TranscriptionRequest};
use llm_failover_emulator::Fault;

#[derive(clap::Parser, Debug)]
#[command(about = "Transcribe an audio file through llm-failover")]
struct Args {
    #[command(flatten)]
    target: common::Target,
    /// The audio file (wav, mp3, m4a, flac, ogg, webm…).
    #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/memo.wav"))]
    file: String,
    /// The spoken language (ISO 639-1), if known.
    #[arg(long)]
    language: Option<String>,
}

#[tokio::main]
async fn main() -> ExitCode {
    common::main(run).await
}

async fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    let setup = args.target.setup(|_, p| p.with_latency(200, 100)).await?;
    if let Some(emu) = &setup.emulator {
        emu.script("openai", [Fault::Status { status: 503 }]);
        eprintln!("demo: the emulated Whisper provider will answer this request with a 503");
    }
    let client = setup.builder.build()?;
    common::print_order(client.environment(), &client.transcription_providers());

    let audio = AudioInput::from_path(&args.file).await?;
    eprintln!(
        "{}: {} bytes{}",
        audio.file_name(),
        audio.len(),
        audio
            .duration()
            .map(|d| format!(", {:.1} s", d.as_secs_f64()))
            .unwrap_or_default()
    );
    let mut request = TranscriptionRequest::new(audio);
    if let Some(lang) = &args.language {
        request = request.language(lang);
    }
    let transcript = client.transcribe(request).await?;
    println!("{}", transcript.text);
    eprintln!(
        "transcribed by {} ({}) after {} attempt(s)",
        transcript.provider, transcript.model, transcript.attempts
    );
    eprintln!("why:");
    for line in common::explain(&client.stats(), &client.transcription_providers()) {
        eprintln!("{line}");
    }
    Ok(())
}
