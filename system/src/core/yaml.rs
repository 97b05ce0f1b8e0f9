//! YAML into typed values with a position on failure: what the scenario parser and the
//! permissions file share, so a mistake in either names its line, column and field.

/// Why a YAML text did not deserialise, and where.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct YamlError {
    /// Line, from 1 (0: unknown).
    pub line: usize,
    /// Column, from 1.
    pub column: usize,
    /// The serde path of the field (`faults[1].partiton: `), with its separator, or empty.
    pub field: String,
    /// The parser's message, without the snippet.
    pub message: String,
}

/// Deserialises `text`, tracking the serde path of the field a failure is about.
pub fn from_str<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, YamlError> {
    use serde_saphyr::MessageFormatter;
    let mut field = String::new();
    serde_saphyr::with_deserializer_from_str(text, |deserializer| {
        let mut track = serde_path_to_error::Track::new();
        let tracked = serde_path_to_error::Deserializer::new(deserializer, &mut track);
        T::deserialize(tracked).inspect_err(|_| field = track.path().to_string())
    })
    .map_err(|error| {
        let (line, column) = error
            .location()
            .map(|l| (l.line() as usize, l.column() as usize))
            .unwrap_or((0, 0));
        let message = serde_saphyr::DefaultMessageFormatter
            .format_message(error.without_snippet())
            .to_string();
        let field = match field.as_str() {
            "" | "." => String::new(),
            field => format!("{field}: "),
        };
        YamlError {
            line,
            column,
            field,
            message,
        }
    })
}
