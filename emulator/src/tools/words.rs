//! Which tools a user's text mentions, and the word of it a place or search argument takes.

use super::schema::name_parts;

/// Words of a tool's name or description that say nothing about what it does.
const COMMON: &str = "
    about after also before being call calls could current data does each from function
    gets give given have here information into just know like make more most much name need
    only other over please provided return returns should some specified such tell than
    that their them then there they this tool used uses using value values very want were
    what when where which will with would your
";

/// Words of the user's text that are never the subject of a call.
const STOP: &str = "
    a an and are at be can do for give how i i'd i'll i'm i've in is it it's me my now of
    on or please show tell the there to today what what's whats when where which who will
    with you your
";

fn is_common(word: &str) -> bool {
    COMMON.split_whitespace().any(|c| c == word)
}

fn is_stop(word: &str) -> bool {
    let lower = word.to_lowercase();
    STOP.split_whitespace().any(|s| s == lower)
}

/// Whether `text` mentions the tool of this name and description.
pub(super) fn mentions(text: &str, name: &str, description: &str) -> bool {
    let lower = text.to_lowercase();
    let words: Vec<String> = lower
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_owned)
        .collect();
    lower.contains(&name.to_lowercase())
        || name_parts(name)
            .into_iter()
            .chain(name_parts(description))
            .filter(|w| w.chars().count() >= 4 && !is_common(w))
            .any(|w| words.contains(&w))
}

/// The word of the user's text a place or search argument takes: the first capitalised
/// word that does not start a sentence ("Paris" in "What's the weather in Paris?"), else
/// the last word that is not a common one ("tokyo" in "weather in tokyo"), else none.
pub(super) fn subject_word(text: &str) -> Option<String> {
    let mut words: Vec<(String, bool)> = Vec::new();
    let mut sentence_start = true;
    for token in text.split_whitespace() {
        let w = token.trim_matches(|c: char| !c.is_alphanumeric());
        let starts = sentence_start;
        sentence_start = token.ends_with(['.', '!', '?', ':', '\n']);
        if !w.is_empty() {
            words.push((w.to_owned(), starts));
        }
    }
    let plain = |w: &str| !is_stop(w);
    let capitalised = words.iter().find(|(w, starts)| {
        !starts && plain(w) && w.chars().next().is_some_and(char::is_uppercase)
    });
    capitalised
        .or_else(|| {
            words
                .iter()
                .rev()
                .find(|(w, _)| plain(w) && w.chars().count() >= 3)
        })
        .map(|(w, _)| w.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_subject_is_a_capitalised_word_or_the_last_plain_one() {
        assert_eq!(
            subject_word("What's the weather in Paris?").as_deref(),
            Some("Paris")
        );
        assert_eq!(
            subject_word("Weather. In Rome, please").as_deref(),
            Some("Rome")
        );
        assert_eq!(subject_word("weather in tokyo").as_deref(), Some("tokyo"));
        assert_eq!(subject_word("I'm in Oslo").as_deref(), Some("Oslo"));
        assert_eq!(subject_word("is it").as_deref(), None);
    }

    #[test]
    fn a_tool_is_mentioned_by_its_name_or_a_telling_word_of_it() {
        let tools = [
            ("get_weather", "The current weather in a city."),
            ("lookupStock", "Returns the given ticker's price."),
        ];
        let names = |text: &str| -> Vec<&str> {
            tools
                .iter()
                .filter(|(name, description)| mentions(text, name, description))
                .map(|(name, _)| *name)
                .collect()
        };
        assert_eq!(names("Weather in Rome?"), ["get_weather"]);
        assert_eq!(names("call lookupstock please"), ["lookupStock"]);
        assert_eq!(names("What is the price of ACME?"), ["lookupStock"]);
        assert!(names("What is the current time? Return it.").is_empty());
    }
}
