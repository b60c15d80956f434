//! A realistic, mixed, deterministic prompt set: short questions, long paragraphs to
//! summarise, code to review, and non-English text (Latin, Cyrillic, CJK, Arabic and
//! Devanagari scripts), each with the `max_tokens` such a request would carry.
//!
//! Item `i` of seed `s` is a pure function of `(s, i)`, so a 100,000-item batch can be
//! streamed without holding it, and every client of a benchmark sees the same items.

use llm_failover::ChatRequest;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// The model every benchmark asks for (OpenAI's `o200k_base` encoding).
pub const MODEL: &str = "gpt-4o-mini";

/// The shape of a prompt.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// A one-line question (40 % of items).
    Short,
    /// A paragraph or several to summarise (25 %).
    Long,
    /// A function to review (20 %).
    Code,
    /// Text in another language and script (15 %).
    NonEnglish,
}

impl Kind {
    /// Every kind, in table order.
    pub const ALL: [Kind; 4] = [Kind::Short, Kind::Long, Kind::Code, Kind::NonEnglish];

    /// A short name for tables.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Short => "short question",
            Kind::Long => "long paragraph",
            Kind::Code => "code",
            Kind::NonEnglish => "non-English",
        }
    }
}

/// One item of the set.
#[derive(Clone, Debug)]
pub struct Item {
    /// Its index.
    pub index: u64,
    /// Its shape.
    pub kind: Kind,
    /// The request.
    pub request: ChatRequest,
}

impl Item {
    /// Characters over every message (what the server's `ceil(chars / 4)` counts).
    pub fn chars(&self) -> u64 {
        self.request
            .messages
            .iter()
            .map(|m| m.content.chars().count() as u64)
            .sum()
    }

    /// The emulator's server-side cost of this request: `ceil(chars / 4)` + `max_tokens`
    /// (`llm_failover_emulator::text::estimate_tokens`, as OpenAI documents its limiter's count).
    pub fn server_cost(&self) -> u64 {
        llm_failover_emulator::text::estimate_tokens(self.chars())
            + u64::from(self.request.max_tokens.unwrap_or(1024))
    }
}

/// The first `n` items of seed `seed`.
pub fn set(seed: u64, n: usize) -> Vec<Item> {
    (0..n as u64).map(|i| item(seed, i)).collect()
}

/// Item `index` of seed `seed`.
pub fn item(seed: u64, index: u64) -> Item {
    let mut rng = SmallRng::seed_from_u64(seed ^ index.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let roll = rng.random_range(0..100);
    let kind = match roll {
        0..40 => Kind::Short,
        40..65 => Kind::Long,
        65..85 => Kind::Code,
        _ => Kind::NonEnglish,
    };
    let request = match kind {
        Kind::Short => short(&mut rng),
        Kind::Long => long(&mut rng),
        Kind::Code => code(&mut rng),
        Kind::NonEnglish => non_english(&mut rng),
    };
    Item {
        index,
        kind,
        request,
    }
}

fn pick<'a>(rng: &mut SmallRng, xs: &[&'a str]) -> &'a str {
    xs[rng.random_range(0..xs.len())]
}

fn short(rng: &mut SmallRng) -> ChatRequest {
    const COUNTRIES: &[&str] = &[
        "Portugal", "Kenya", "Vietnam", "Chile", "Norway", "Morocco", "Canada", "Nepal",
    ];
    const TOPICS: &[&str] = &[
        "a hash map",
        "TCP slow start",
        "a Bloom filter",
        "photosynthesis",
        "compound interest",
        "a B-tree",
        "the Doppler effect",
        "garbage collection",
    ];
    const LANGS: &[&str] = &["Rust", "Python", "Go", "TypeScript", "SQL", "Bash"];
    let prompt = match rng.random_range(0..5) {
        0 => format!("What is the capital of {}?", pick(rng, COUNTRIES)),
        1 => format!("Explain {} in one sentence.", pick(rng, TOPICS)),
        2 => format!("How do I read a file line by line in {}?", pick(rng, LANGS)),
        3 => format!(
            "Give me three name ideas for a {} library.",
            pick(rng, LANGS)
        ),
        _ => format!(
            "Is {} a good fit for caching user sessions? Answer yes or no, then why.",
            pick(rng, TOPICS)
        ),
    };
    ChatRequest::from_prompt(prompt)
        .model(MODEL)
        .max_tokens(rng.random_range(64..=256))
}

const SUBJECTS: &[&str] = &[
    "The river delta",
    "Our quarterly revenue",
    "The migration plan",
    "Each regional warehouse",
    "The committee",
    "A small team of engineers",
    "The new scheduling policy",
    "The survey of 2,400 customers",
];
const VERBS: &[&str] = &[
    "shifted noticeably after",
    "depends almost entirely on",
    "was reviewed in light of",
    "grew by 14 percent despite",
    "remains sensitive to",
    "was postponed because of",
];
const OBJECTS: &[&str] = &[
    "the seasonal floods that reshape the lower channels every spring",
    "a sharp increase in shipping costs across the northern routes",
    "the feedback collected during the pilot in three cities",
    "the outage on the 14th, which lasted a little under four hours",
    "changes to how sediment is carried toward the coast",
    "the hiring freeze announced at the start of the fiscal year",
];

fn sentence(rng: &mut SmallRng) -> String {
    format!(
        "{} {} {}.",
        pick(rng, SUBJECTS),
        pick(rng, VERBS),
        pick(rng, OBJECTS)
    )
}

fn long(rng: &mut SmallRng) -> ChatRequest {
    let paragraphs = rng.random_range(1..=4);
    let mut text = String::new();
    for p in 0..paragraphs {
        if p > 0 {
            text.push_str("\n\n");
        }
        for s in 0..rng.random_range(4..=9) {
            if s > 0 {
                text.push(' ');
            }
            text.push_str(&sentence(rng));
        }
    }
    ChatRequest::new()
        .system("You are a concise assistant. Answer in plain prose.")
        .user(format!(
            "Summarise the following in three bullet points:\n\n{text}"
        ))
        .model(MODEL)
        .max_tokens(rng.random_range(200..=400))
}

fn code(rng: &mut SmallRng) -> ChatRequest {
    const NAMES: &[&str] = &[
        "parse_header",
        "merge_ranges",
        "retry_with_backoff",
        "load_config",
        "dedupe_events",
        "flush_buffer",
    ];
    const TYPES: &[&str] = &["u64", "usize", "i32", "String", "Vec<u8>"];
    let name = pick(rng, NAMES);
    let ty = pick(rng, TYPES);
    let mut body = String::new();
    for i in 0..rng.random_range(3..=12) {
        let line = match rng.random_range(0..5) {
            0 => format!("    let v{i} = input.get({i}).copied().unwrap_or_default(); // {ty}\n"),
            1 => format!(
                "    if v{} > limit {{ return Err(Error::TooLarge({i})); }}\n",
                i.max(1) - 1
            ),
            2 => format!(
                "    for (k, x) in items.iter().enumerate().skip({i}) {{\n        acc = acc.wrapping_add(*x as {ty}) ^ k as {ty};\n    }}\n"
            ),
            3 => format!(
                "    out.push_str(&format!(\"{{:>8}}|{{}}\", v{}, acc));\n",
                i.max(1) - 1
            ),
            _ => format!("    debug_assert!(acc != {i}, \"unexpected state in {name}\");\n"),
        };
        body.push_str(&line);
    }
    let src = format!(
        "fn {name}(input: &[{ty}], items: &[u8], limit: {ty}) -> Result<String, Error> {{\n    let mut acc: {ty} = Default::default();\n    let mut out = String::new();\n{body}    Ok(out)\n}}\n"
    );
    ChatRequest::from_prompt(format!(
        "Review this Rust function. List bugs and suggest fixes.\n\n```rust\n{src}```"
    ))
    .model(MODEL)
    .max_tokens(rng.random_range(300..=600))
}

fn non_english(rng: &mut SmallRng) -> ChatRequest {
    const TEXTS: &[(&str, &str)] = &[
        (
            "Résume ce texte en français :",
            "Le comité a reporté la décision jusqu'à la fin du trimestre, faute de données fiables sur les coûts de transport.",
        ),
        (
            "Fasse diesen Text auf Deutsch zusammen:",
            "Die Umstellung auf das neue Abrechnungssystem verzögerte sich, weil mehrere Schnittstellen nicht dokumentiert waren.",
        ),
        (
            "Resume este texto en español:",
            "Las lluvias de primavera cambiaron el curso del río y obligaron a trasladar dos almacenes.",
        ),
        (
            "Кратко перескажи этот текст по-русски:",
            "Команда выпустила обновление, которое сократило время отклика сервиса почти вдвое.",
        ),
        (
            "この文章を日本語で要約してください：",
            "新しい物流センターは来年の春に稼働を開始し、配送時間を大幅に短縮する予定です。",
        ),
        (
            "请用中文总结这段文字：",
            "由于运输成本上升，公司决定推迟在北方地区开设新仓库的计划。",
        ),
        (
            "لخّص هذا النص باللغة العربية:",
            "أعلنت الشركة عن خطة جديدة لتقليل استهلاك الطاقة في مراكز البيانات بحلول نهاية العام.",
        ),
        (
            "इस पाठ का हिंदी में सारांश लिखिए:",
            "नई नीति के तहत सभी क्षेत्रीय कार्यालयों को अपनी रिपोर्ट हर महीने जमा करनी होगी।",
        ),
    ];
    let (ask, sentence) = TEXTS[rng.random_range(0..TEXTS.len())];
    let repeats = rng.random_range(1..=8);
    let text = vec![sentence; repeats].join(" ");
    ChatRequest::from_prompt(format!("{ask}\n\n{text}"))
        .model(MODEL)
        .max_tokens(rng.random_range(128..=300))
}
