//! Listening: the running [`Emulator`] handle, its builder, and a listener whose connections
//! can be reset on purpose (a fault drops the TCP connection with an RST, no response).

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::extract::connect_info::Connected;
use axum::serve::IncomingStream;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::bulk::{BatchItemFault, BatchLog, BatchOrder, BatchTiming};
use crate::config::{
    AwsCredentials, EmulatorConfig, Kind, Limits, ProviderConfig, ServiceAccountKey,
};
use crate::faults::{Fault, WeightedFault};
use crate::routes::{ConnHandle, Listener, handle};
use crate::state::{App, Counters, LogEntry, ProviderState, TimeSource};

/// A TCP connection whose handler can ask for it to be reset.
#[derive(Debug)]
pub(crate) struct EmuIo {
    stream: TcpStream,
    reset: Arc<AtomicBool>,
}

fn reset_error() -> io::Error {
    io::Error::new(io::ErrorKind::ConnectionReset, "emulated connection reset")
}

impl AsyncRead for EmuIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.reset.load(Ordering::Acquire) {
            return Poll::Ready(Err(reset_error()));
        }
        Pin::new(&mut this.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for EmuIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.reset.load(Ordering::Acquire) {
            return Poll::Ready(Err(reset_error()));
        }
        Pin::new(&mut this.stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.reset.load(Ordering::Acquire) {
            return Poll::Ready(Err(reset_error()));
        }
        Pin::new(&mut this.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.reset.load(Ordering::Acquire) {
            return Poll::Ready(Err(reset_error()));
        }
        Pin::new(&mut this.stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.reset.load(Ordering::Acquire) {
            return Poll::Ready(Err(reset_error()));
        }
        Pin::new(&mut this.stream).poll_shutdown(cx)
    }
}

impl Drop for EmuIo {
    fn drop(&mut self) {
        if self.reset.load(Ordering::Acquire) {
            // Linger 0: closing sends an RST instead of a FIN, like a crashed peer.
            let _ = self.stream.set_zero_linger();
        }
    }
}

impl Connected<IncomingStream<'_, EmuListener>> for ConnHandle {
    fn connect_info(stream: IncomingStream<'_, EmuListener>) -> Self {
        ConnHandle(Arc::clone(&stream.io().reset))
    }
}

/// A loopback TCP listener handing out resettable connections.
#[derive(Debug)]
pub(crate) struct EmuListener(TcpListener);

impl axum::serve::Listener for EmuListener {
    type Io = EmuIo;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            match self.0.accept().await {
                Ok((stream, addr)) => {
                    let _ = stream.set_nodelay(true);
                    let io = EmuIo {
                        stream,
                        reset: Arc::new(AtomicBool::new(false)),
                    };
                    return (io, addr);
                }
                // Out of file descriptors and the like: give the system a moment.
                Err(_) => tokio::time::sleep(Duration::from_millis(5)).await,
            }
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.0.local_addr()
    }
}

fn serve(
    listener: TcpListener,
    state: Listener,
    mut stop: watch::Receiver<bool>,
) -> JoinHandle<()> {
    let router = axum::Router::new().fallback(handle).with_state(state);
    let svc = router.into_make_service_with_connect_info::<ConnHandle>();
    tokio::spawn(async move {
        let _ = axum::serve(EmuListener(listener), svc)
            .with_graceful_shutdown(async move {
                let _ = stop.wait_for(|s| *s).await;
            })
            .await;
    })
}

/// A running emulator: loopback listeners plus an in-process handle on its state.
///
/// Dropping it stops the listeners (connections still open finish their current answer).
///
/// # Examples
///
/// Two providers of different wire formats:
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> std::io::Result<()> {
/// let emu = llm_failover_emulator::Emulator::builder().openai("openai").anthropic("anthropic").start().await?;
/// assert!(emu.base_url("openai").ends_with("/openai/v1"));
/// assert!(emu.base_url("anthropic").ends_with("/anthropic"));
/// assert_eq!(emu.key("openai"), "emulator-key");
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Emulator {
    addr: SocketAddr,
    own_ports: HashMap<String, SocketAddr>,
    app: Arc<App>,
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

/// Builds an [`Emulator`]; see [`Emulator::builder`].
#[derive(Debug, Default)]
#[must_use]
pub struct EmulatorBuilder {
    cfg: EmulatorConfig,
    time: Option<TimeSource>,
}

impl EmulatorBuilder {
    /// Starts from a whole configuration (providers added later join it).
    pub fn config(mut self, cfg: EmulatorConfig) -> Self {
        self.cfg = cfg;
        self
    }

    /// Adds a provider.
    pub fn provider(mut self, provider: ProviderConfig) -> Self {
        self.cfg = self.cfg.with_provider(provider);
        self
    }

    /// Adds an OpenAI provider under `prefix` with defaults.
    pub fn openai(self, prefix: &str) -> Self {
        self.provider(ProviderConfig::openai(prefix))
    }

    /// Adds an Azure OpenAI resource under `prefix` with defaults.
    pub fn azure(self, prefix: &str) -> Self {
        self.provider(ProviderConfig::azure(prefix))
    }

    /// Adds an Anthropic provider under `prefix` with defaults.
    pub fn anthropic(self, prefix: &str) -> Self {
        self.provider(ProviderConfig::anthropic(prefix))
    }

    /// Adds a Gemini provider under `prefix` with defaults.
    pub fn gemini(self, prefix: &str) -> Self {
        self.provider(ProviderConfig::gemini(prefix))
    }

    /// Adds an AWS Bedrock Runtime provider under `prefix` with defaults (credentials derived
    /// from the prefix: [`Emulator::aws_credentials`] gives them).
    pub fn bedrock(self, prefix: &str) -> Self {
        self.provider(ProviderConfig::bedrock(prefix))
    }

    /// Adds a Google Vertex AI provider under `prefix` with defaults (project
    /// `emulator-project`, the demo service-account key: [`Emulator::service_account_key`]
    /// gives its key file).
    pub fn vertex(self, prefix: &str) -> Self {
        self.provider(ProviderConfig::vertex(prefix))
    }

    /// Adds a Deepgram provider under `prefix` with defaults.
    pub fn deepgram(self, prefix: &str) -> Self {
        self.provider(ProviderConfig::deepgram(prefix))
    }

    /// The length of a rate-limit minute.
    pub fn minute_ms(mut self, ms: u64) -> Self {
        self.cfg.minute_ms = ms;
        self
    }

    /// The seed of fault mixes and jitter.
    pub fn seed(mut self, seed: u64) -> Self {
        self.cfg.seed = seed;
        self
    }

    /// The port on 127.0.0.1 (0 = any free port, the default).
    pub fn port(mut self, port: u16) -> Self {
        self.cfg.port = Some(port);
        self
    }

    /// Reads time from `time` instead of the real clocks: a test shares the SDK's manual
    /// clock with the emulator, so the buckets on both sides see the same instants.
    pub fn time_source(mut self, time: TimeSource) -> Self {
        self.time = Some(time);
        self
    }

    /// Binds and starts serving.
    ///
    /// # Errors
    ///
    /// An invalid configuration (`InvalidInput`, saying which field), or a port that cannot
    /// be bound.
    pub async fn start(self) -> io::Result<Emulator> {
        Emulator::start_with(self.cfg, self.time).await
    }
}

impl Emulator {
    /// A builder with no providers, a real-time minute and port 0.
    pub fn builder() -> EmulatorBuilder {
        EmulatorBuilder::default()
    }

    /// Binds `127.0.0.1` (the configured port, else any free one) and serves `cfg`.
    ///
    /// # Errors
    ///
    /// An invalid configuration (`InvalidInput`), or a port that cannot be bound.
    pub async fn start(cfg: EmulatorConfig) -> io::Result<Emulator> {
        Self::start_with(cfg, None).await
    }

    async fn start_with(cfg: EmulatorConfig, time: Option<TimeSource>) -> io::Result<Emulator> {
        cfg.validate()
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let (stop, rx) = watch::channel(false);
        let app = Arc::new(
            App::new(&cfg, rx.clone(), time)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?,
        );
        let listener = TcpListener::bind(("127.0.0.1", cfg.port.unwrap_or(0))).await?;
        let addr = listener.local_addr()?;
        let mut tasks = vec![serve(
            listener,
            Listener {
                app: Arc::clone(&app),
                fixed: None,
            },
            rx.clone(),
        )];
        let mut own_ports = HashMap::new();
        for p in cfg.providers.values() {
            let Some(port) = p.port else { continue };
            let l = TcpListener::bind(("127.0.0.1", port)).await?;
            own_ports.insert(p.prefix.clone(), l.local_addr()?);
            let fixed = app.provider(&p.prefix).cloned();
            tasks.push(serve(
                l,
                Listener {
                    app: Arc::clone(&app),
                    fixed,
                },
                rx.clone(),
            ));
        }
        tracing::debug!(%addr, providers = cfg.providers.len(), "emulator listening");
        Ok(Emulator {
            addr,
            own_ports,
            app,
            stop,
            tasks,
        })
    }

    /// The main listener's address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT` (no trailing slash); `/_admin/…` lives here.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn provider(&self, prefix: &str) -> &Arc<ProviderState> {
        match self.app.provider(prefix) {
            Some(p) => p,
            None => panic!("the emulator serves no provider {prefix:?}"),
        }
    }

    /// Where `prefix`'s routes start: `http://127.0.0.1:PORT/{prefix}`, or the root of its
    /// own port.
    ///
    /// # Panics
    ///
    /// If no provider has that prefix (a test bug).
    pub fn root_url(&self, prefix: &str) -> String {
        self.provider(prefix);
        match self.own_ports.get(prefix) {
            Some(a) => format!("http://{a}"),
            None => format!("http://{}/{prefix}", self.addr),
        }
    }

    /// The base URL to configure a client with: what the provider's official SDK takes as its
    /// base URL — OpenAI `…/{prefix}/v1` (like `https://api.openai.com/v1`), Anthropic,
    /// Azure, Gemini, Bedrock, Vertex and Deepgram `…/{prefix}` (like
    /// `https://api.anthropic.com`, `https://{resource}.openai.azure.com`,
    /// `https://generativelanguage.googleapis.com`,
    /// `https://bedrock-runtime.us-east-1.amazonaws.com` — boto3's `endpoint_url` —,
    /// `https://us-central1-aiplatform.googleapis.com` — google-genai's
    /// `http_options.base_url` in Vertex mode —, `https://api.deepgram.com`).
    ///
    /// # Panics
    ///
    /// If no provider has that prefix (a test bug).
    pub fn base_url(&self, prefix: &str) -> String {
        let kind = self.provider(prefix).cfg.kind;
        format!("{}{}", self.root_url(prefix), kind.base_path())
    }

    /// The key `prefix` accepts (a Bedrock provider signs with
    /// [`aws_credentials`](Self::aws_credentials) instead).
    ///
    /// # Panics
    ///
    /// If no provider has that prefix (a test bug).
    pub fn key(&self, prefix: &str) -> &str {
        &self.provider(prefix).cfg.key
    }

    /// The AWS credentials and region a Bedrock provider accepts signatures of (see
    /// [`ProviderConfig::aws_credentials`]).
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> std::io::Result<()> {
    /// let emu = llm_failover_emulator::Emulator::builder().bedrock("bedrock").start().await?;
    /// let creds = emu.aws_credentials("bedrock");
    /// assert!(creds.access_key_id.starts_with("AKIA"));
    /// assert_eq!(creds.region, "us-east-1");
    /// assert!(emu.base_url("bedrock").ends_with("/bedrock")); // boto3's endpoint_url
    /// # Ok(()) }
    /// ```
    ///
    /// # Panics
    ///
    /// If no provider has that prefix, or it is not a Bedrock provider (test bugs).
    pub fn aws_credentials(&self, prefix: &str) -> AwsCredentials {
        let cfg = &self.provider(prefix).cfg;
        if cfg.kind != Kind::Bedrock {
            panic!("{prefix:?} is a {} provider, not bedrock", cfg.kind);
        }
        cfg.aws_credentials()
    }

    fn google(&self, prefix: &str) -> &crate::oauth::Identity {
        match &self.provider(prefix).google {
            Some(id) => id,
            None => panic!(
                "{prefix:?} is a {} provider, not vertex",
                self.provider(prefix).cfg.kind
            ),
        }
    }

    /// The service-account key a Vertex provider accepts JWTs of, as the JSON key file
    /// Google issues holds it ([`ServiceAccountKey::to_json`]), its `token_uri` the
    /// provider's token endpoint (`…/{prefix}/token`).
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> std::io::Result<()> {
    /// let emu = llm_failover_emulator::Emulator::builder().vertex("vertex").start().await?;
    /// let key_file = emu.service_account_key("vertex").to_json();
    /// // google-genai: genai.Client(vertexai=True, project=…, location="us-central1",
    /// //     credentials=service_account.Credentials.from_service_account_info(
    /// //         json.loads(key_file), scopes=["https://www.googleapis.com/auth/cloud-platform"]),
    /// //     http_options=types.HttpOptions(base_url=emu.base_url("vertex")))
    /// assert!(key_file.contains("\"token_uri\""));
    /// assert!(emu.base_url("vertex").ends_with("/vertex"));
    /// # Ok(()) }
    /// ```
    ///
    /// # Panics
    ///
    /// If no provider has that prefix, or it is not a Vertex provider (test bugs).
    pub fn service_account_key(&self, prefix: &str) -> ServiceAccountKey {
        let mut key = self.google(prefix).key().clone();
        key.token_uri = format!("{}/token", self.root_url(prefix));
        key
    }

    /// A fresh access token of a Vertex provider, valid for 3599 s on the emulator's clock:
    /// for a test of the API routes that skips the JWT exchange (`Authorization: Bearer …`).
    ///
    /// # Panics
    ///
    /// If no provider has that prefix, or it is not a Vertex provider (test bugs).
    pub fn access_token(&self, prefix: &str) -> String {
        self.google(prefix).issue(self.app.now().1)
    }

    /// Every provider served: (prefix, kind, base URL), by prefix.
    pub fn providers(&self) -> Vec<(String, Kind, String)> {
        let mut out: Vec<_> = self
            .app
            .providers
            .values()
            .map(|p| {
                (
                    p.cfg.prefix.clone(),
                    p.cfg.kind,
                    self.base_url(&p.cfg.prefix),
                )
            })
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    /// Every request so far (up to the log capacity), oldest first.
    pub fn log(&self) -> Vec<LogEntry> {
        self.app.log()
    }

    /// The counters of one provider.
    ///
    /// # Panics
    ///
    /// If no provider has that prefix (a test bug).
    pub fn counters(&self, prefix: &str) -> Counters {
        self.provider(prefix).counters.read()
    }

    /// Requests of `prefix` holding a concurrency slot now (counted only while the provider
    /// has a concurrency limit): lets a test wait for a request to be in flight instead of
    /// guessing with a sleep.
    pub fn in_flight(&self, prefix: &str) -> u32 {
        self.provider(prefix)
            .inflight
            .load(std::sync::atomic::Ordering::Acquire)
    }

    /// The counters of every provider.
    pub fn all_counters(&self) -> BTreeMap<String, Counters> {
        self.app.counters()
    }

    /// Zero counters, empty log, full buckets, no pending scripts, no batches or files
    /// (limits, mixes and batch settings stay).
    pub fn reset(&self) {
        self.app.reset();
    }

    /// Appends steps to `prefix`'s fault script: the next requests get them in order.
    ///
    /// # Panics
    ///
    /// If no provider has that prefix (a test bug).
    pub fn script(&self, prefix: &str, steps: impl IntoIterator<Item = Fault>) {
        self.provider(prefix).push_script(steps);
    }

    /// Script steps not yet consumed.
    ///
    /// # Panics
    ///
    /// If no provider has that prefix (a test bug).
    pub fn pending_faults(&self, prefix: &str) -> usize {
        self.provider(prefix).pending_script()
    }

    /// Replaces `prefix`'s random fault mix (an empty one turns it off).
    ///
    /// # Panics
    ///
    /// If no provider has that prefix, or a probability is out of 0..=1 or they add up to
    /// more than 1 (test bugs).
    pub fn set_fault_mix(
        &self,
        prefix: &str,
        seed: u64,
        mix: impl IntoIterator<Item = (f64, Fault)>,
    ) {
        let mix: Vec<WeightedFault> = mix
            .into_iter()
            .map(|(p, fault)| WeightedFault { p, fault })
            .collect();
        let check = crate::faults::FaultConfig {
            mix: mix.clone(),
            ..Default::default()
        };
        if let Err(e) = check.validate() {
            panic!("fault mix for {prefix:?}: {e}");
        }
        self.provider(prefix).set_mix(mix, Some(seed));
    }

    /// Replaces the limits of `prefix` (or of one of its models). Buckets keep their level,
    /// clamped to the new capacity.
    ///
    /// # Panics
    ///
    /// If no provider has that prefix (a test bug).
    pub fn set_limits(&self, prefix: &str, model: Option<&str>, limits: Limits) {
        self.provider(prefix)
            .set_limits(model, limits, None, self.app.now().0);
    }

    /// How long `prefix`'s batches take from now on (batches already created keep theirs),
    /// on the emulator's time source: a test on a manual clock advances through them.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use llm_failover_emulator::{BatchTiming, Emulator};
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> std::io::Result<()> {
    /// let emu = Emulator::builder().openai("openai").start().await?;
    /// // An hour of processing, then expiry after 30 minutes: half the items answered.
    /// emu.set_batch_timing(
    ///     "openai",
    ///     BatchTiming::new(Duration::from_secs(3600)).with_window(Duration::from_secs(1800)),
    /// );
    /// # Ok(()) }
    /// ```
    ///
    /// # Panics
    ///
    /// If no provider has that prefix (a test bug).
    pub fn set_batch_timing(&self, prefix: &str, timing: BatchTiming) {
        self.provider(prefix)
            .bulk
            .with(|s| s.settings.timing = timing);
    }

    /// The order in which `prefix`'s batches answer their items (OpenAI's output file and
    /// Anthropic's results follow it; Gemini's responses are in input order whatever it is).
    ///
    /// # Panics
    ///
    /// If no provider has that prefix (a test bug).
    pub fn set_batch_order(&self, prefix: &str, order: BatchOrder) {
        self.provider(prefix)
            .bulk
            .with(|s| s.settings.order = order);
    }

    /// Makes the item `custom_id` (Gemini: `metadata.key`) of every later batch of `prefix`
    /// fail with `fault` — a line of OpenAI's error file, an Anthropic `errored` result, a
    /// Gemini inline `error` — while the batch's other items are answered.
    ///
    /// # Panics
    ///
    /// If no provider has that prefix (a test bug).
    pub fn fail_batch_item(&self, prefix: &str, custom_id: &str, fault: BatchItemFault) {
        self.provider(prefix).bulk.with(|s| {
            s.settings.item_faults.insert(custom_id.to_owned(), fault);
        });
    }

    /// Forgets every [`fail_batch_item`](Self::fail_batch_item) of `prefix`.
    ///
    /// # Panics
    ///
    /// If no provider has that prefix (a test bug).
    pub fn clear_batch_item_faults(&self, prefix: &str) {
        self.provider(prefix)
            .bulk
            .with(|s| s.settings.item_faults.clear());
    }

    /// OpenAI's enqueued-token limit of `prefix`'s batches, for one model or (`None`) every
    /// model without its own; `limit: None` removes it. A batch whose input tokens, with
    /// those of the model's batches not yet ended, exceed it is created and then `failed`
    /// with `errors.data[0].code = "token_limit_exceeded"`, as OpenAI's are.
    ///
    /// # Panics
    ///
    /// If no provider has that prefix (a test bug).
    pub fn set_enqueued_token_limit(&self, prefix: &str, model: Option<&str>, limit: Option<u64>) {
        self.provider(prefix).bulk.with(|s| match (model, limit) {
            (None, l) => s.settings.token_limit = l,
            (Some(m), Some(l)) => {
                s.settings.model_token_limits.insert(m.to_owned(), l);
            }
            (Some(m), None) => {
                s.settings.model_token_limits.remove(m);
            }
        });
    }

    /// Anthropic's limit of batch requests in the processing queue of `prefix` (`None`: no
    /// limit): a create whose requests, with those of batches still processing, exceed it is
    /// refused with a 429 `rate_limit_error`.
    ///
    /// # Panics
    ///
    /// If no provider has that prefix (a test bug).
    pub fn set_batch_queue_limit(&self, prefix: &str, limit: Option<u64>) {
        self.provider(prefix)
            .bulk
            .with(|s| s.settings.queue_limit = limit);
    }

    /// What `prefix`'s Batch API saw: creates (and refused ones), polls, downloads, and each
    /// batch with its items' ids and where it is now.
    ///
    /// # Panics
    ///
    /// If no provider has that prefix (a test bug).
    pub fn batch_log(&self, prefix: &str) -> BatchLog {
        self.provider(prefix).bulk.log(self.app.now().0)
    }

    /// Stops listening and waits for the listeners to finish.
    pub async fn shutdown(mut self) {
        let _ = self.stop.send(true);
        for t in std::mem::take(&mut self.tasks) {
            let _ = t.await;
        }
    }
}

impl Drop for Emulator {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}
