//! The tasks a model family runs, as one typed name: the engine, the CLI and the server
//! pass a [`Task`], never a string, so a task is spelled once (here) and a misspelling
//! is a compile error or one parse error listing the tasks.

use serde::{Deserialize, Serialize};

/// What a family does with a model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Task {
    /// Voice activity detection: audio in, speech probabilities and segments out.
    Vad,
    /// Speech recognition: audio in, a transcript out.
    Asr,
    /// Speech synthesis: text in, audio out.
    Tts,
    /// Conversion of a released model to the engine's GGUF.
    Convert,
}

impl Task {
    /// Every task, in the order listings print them.
    pub const ALL: [Task; 4] = [Task::Vad, Task::Asr, Task::Tts, Task::Convert];

    /// The task's name (`--task NAME`, the server's `task` keys, specs).
    pub fn name(self) -> &'static str {
        match self {
            Task::Vad => "vad",
            Task::Asr => "asr",
            Task::Tts => "tts",
            Task::Convert => "convert",
        }
    }

    /// True for the tasks that run a loaded model (all but [`Task::Convert`]).
    pub fn runs_a_model(self) -> bool {
        self != Task::Convert
    }
}

impl std::fmt::Display for Task {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Task {
    type Err = String;

    /// Parses a task name; the error lists the names.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Task::ALL
            .into_iter()
            .find(|t| t.name() == s)
            .ok_or_else(|| format!("'{s}' is not a task (tasks: {})", names(&Task::ALL)))
    }
}

/// `tasks` as a comma-separated list of names.
pub fn names(tasks: &[Task]) -> String {
    tasks
        .iter()
        .map(|t| t.name())
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_back_and_serialise_as_themselves() {
        for t in Task::ALL {
            assert_eq!(t.name().parse::<Task>(), Ok(t));
            assert_eq!(serde_json::to_value(t).unwrap(), t.name());
        }
        let err = "speak".parse::<Task>().unwrap_err();
        assert!(err.contains("vad, asr, tts, convert"), "{err}");
    }
}
