//! One loaded-model type for every task: a family's model behind its task contract
//! ([`crate::vad::SpeechDetector`], [`crate::asr::Recognizer`], [`crate::tts::Synthesizer`]),
//! with the family's name and where its spec came from. `VadModel`, `AsrModel` and
//! `TtsModel` are this type for each contract; each task module adds its run methods and
//! [`crate::tasks`] the one generic `load`.

use crate::spec::SpecSource;

/// A family's model loaded for the task its contract `T` names, reusable across requests.
pub struct Loaded<T: ?Sized> {
    /// The family's model.
    pub(crate) model: Box<T>,
    /// The family's name.
    pub(crate) family: &'static str,
    /// Where its spec came from.
    pub(crate) spec_source: SpecSource,
}

impl<T: ?Sized> Loaded<T> {
    /// A loaded model of `family`, its spec found at `spec_source`.
    pub(crate) fn new(model: Box<T>, family: &'static str, spec_source: SpecSource) -> Self {
        Loaded {
            model,
            family,
            spec_source,
        }
    }

    /// The family it is.
    pub fn family(&self) -> &'static str {
        self.family
    }

    /// Where its spec came from.
    pub fn spec_source(&self) -> &SpecSource {
        &self.spec_source
    }
}
