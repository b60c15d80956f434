//! Deepgram (placeholder while the adapter is written).
