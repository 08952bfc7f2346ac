//! The voices the voices API keeps (`voices`): one JSON file per voice in server.json's
//! `voices_dir`, holding its id, name, model, creation time and what it speaks with:
//! the engine's voice file (base64) of a cloned voice, or a blend of the model's preset
//! voices (Kokoro's `af_heart:0.7+af_bella:0.3`). A voice is written to a temporary file in the same folder, flushed to
//! disk and renamed into place, so a crash mid-upload leaves no half voice; temporary
//! files left by one are removed at start. The ids are made here (`voice_` and 16 hex
//! digits), so no client text ever becomes a path.

use std::collections::BTreeMap;
use std::hash::{BuildHasher, Hasher};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use base64::Engine as _;
use serde::{Deserialize, Serialize};

/// The start of every stored voice's id.
pub const ID_PREFIX: &str = "voice_";

/// The start of a voice file being written.
const TEMP_PREFIX: &str = ".tmp-";

/// The largest stored voice file read back: the engine's largest voice file in base64,
/// with room for the metadata.
const MAX_STORED_BYTES: u64 =
    (audiocpp_engine::tts::MAX_VOICE_FILE_BYTES as u64).div_ceil(3) * 4 + (64 << 10);

/// What the API shows of a stored voice.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct VoiceMeta {
    /// `voice_` and 16 hex digits.
    pub id: String,
    /// The client's name for it.
    pub name: String,
    /// The served model it was made with, the only one it speaks with.
    pub model: String,
    /// When it was stored (Unix seconds).
    pub created: u64,
    /// The blend of preset voices it speaks with; none for a cloned voice.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blend: Option<String>,
}

/// What a stored voice speaks with.
pub enum VoiceData<'a> {
    /// The engine's voice file of a cloned voice.
    Cloned(&'a [u8]),
    /// A blend of the model's preset voices, as a speech request's `voice` names it.
    Blend(&'a str),
}

/// A stored voice's file.
#[derive(Serialize, Deserialize)]
struct VoiceFile {
    #[serde(flatten)]
    meta: VoiceMeta,
    /// The engine's voice file ([`audiocpp_engine::tts::TtsModel::clone_voice`]) of a
    /// cloned voice; a blend ([`VoiceMeta::blend`]) has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    voice_base64: Option<String>,
}

/// Why a voice was not stored.
pub enum CreateError {
    /// `max_voices` are stored already.
    Full(usize),
    /// The disk refused (the message names the file).
    Io(String),
}

/// The stored voices: the folder and an index of what is in it.
pub struct VoiceStore {
    dir: PathBuf,
    max: usize,
    voices: BTreeMap<String, VoiceMeta>,
}

impl VoiceStore {
    /// Opens (making it if needed) the folder `dir`: removes the temporary files an
    /// interrupted upload left and reads every voice file; one that cannot be read is
    /// logged and left out.
    pub fn open(dir: &Path, max: usize) -> Result<VoiceStore, String> {
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("voices_dir '{}': cannot create it: {e}", dir.display()))?;
        let entries = std::fs::read_dir(dir)
            .map_err(|e| format!("voices_dir '{}': cannot read it: {e}", dir.display()))?;
        let mut voices = BTreeMap::new();
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let path = entry.path();
            if name.starts_with(TEMP_PREFIX) {
                match std::fs::remove_file(&path) {
                    Ok(()) => eprintln!(
                        "warning: removed '{}', a voice upload that did not finish",
                        path.display()
                    ),
                    Err(e) => eprintln!("warning: cannot remove '{}': {e}", path.display()),
                }
                continue;
            }
            let Some(id) = name.strip_suffix(".json").filter(|id| is_id(id)) else {
                continue;
            };
            match read_file(&path) {
                Ok(f) if f.voice_base64.is_some() == f.meta.blend.is_some() => eprintln!(
                    "warning: '{}' holds neither a voice file nor a blend, or both; left out",
                    path.display()
                ),
                Ok(f) if f.meta.id == id => {
                    voices.insert(f.meta.id.clone(), f.meta);
                }
                Ok(_) => eprintln!(
                    "warning: '{}' holds another voice's id; left out",
                    path.display()
                ),
                Err(e) => eprintln!("warning: {e}; left out"),
            }
        }
        Ok(VoiceStore {
            dir: dir.to_path_buf(),
            max,
            voices,
        })
    }

    /// The stored voices, of `model` only when given, oldest first.
    pub fn list(&self, model: Option<&str>) -> Vec<VoiceMeta> {
        let mut v: Vec<VoiceMeta> = self
            .voices
            .values()
            .filter(|m| model.is_none_or(|id| m.model == id))
            .cloned()
            .collect();
        v.sort_by(|a, b| (a.created, &a.id).cmp(&(b.created, &b.id)));
        v
    }

    /// How many voices are stored.
    pub fn len(&self) -> usize {
        self.voices.len()
    }

    /// The most voices stored at once (`max_voices`).
    pub fn max(&self) -> usize {
        self.max
    }

    /// A stored voice's metadata.
    pub fn get(&self, id: &str) -> Option<&VoiceMeta> {
        self.voices.get(id)
    }

    /// A stored voice's engine voice file.
    pub fn voice_bytes(&self, id: &str) -> Result<Vec<u8>, String> {
        if !self.voices.contains_key(id) {
            return Err(format!("voice '{id}' is not stored"));
        }
        let f = read_file(&self.path(id))?;
        let b64 = f
            .voice_base64
            .ok_or_else(|| format!("voice '{id}' is a blend, not a cloned voice"))?;
        base64::engine::general_purpose::STANDARD
            .decode(b64.as_bytes())
            .map_err(|e| format!("voice file of '{id}': voice_base64 is not base64: {e}"))
    }

    /// Stores a voice: written to a temporary file, flushed, renamed into place.
    pub fn create(
        &mut self,
        name: &str,
        model: &str,
        voice: VoiceData<'_>,
    ) -> Result<VoiceMeta, CreateError> {
        if self.voices.len() >= self.max {
            return Err(CreateError::Full(self.max));
        }
        let mut id = new_id();
        while self.voices.contains_key(&id) || self.path(&id).exists() {
            id = new_id();
        }
        let meta = VoiceMeta {
            id: id.clone(),
            name: name.to_string(),
            model: model.to_string(),
            created: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0),
            blend: match voice {
                VoiceData::Blend(b) => Some(b.to_string()),
                VoiceData::Cloned(_) => None,
            },
        };
        let text = serde_json::to_vec(&VoiceFile {
            meta: meta.clone(),
            voice_base64: match voice {
                VoiceData::Cloned(v) => Some(base64::engine::general_purpose::STANDARD.encode(v)),
                VoiceData::Blend(_) => None,
            },
        })
        .map_err(|e| CreateError::Io(format!("cannot encode voice '{id}': {e}")))?;
        let tmp = self.dir.join(format!("{TEMP_PREFIX}{id}.json"));
        let done = self.path(&id);
        let write = || -> std::io::Result<()> {
            let mut f = std::fs::File::create_new(&tmp)?;
            f.write_all(&text)?;
            f.sync_all()?;
            drop(f);
            std::fs::rename(&tmp, &done)?;
            sync_dir(&self.dir)
        };
        if let Err(e) = write() {
            let _ = std::fs::remove_file(&tmp);
            return Err(CreateError::Io(format!(
                "cannot write voice file '{}': {e}",
                done.display()
            )));
        }
        self.voices.insert(id, meta.clone());
        Ok(meta)
    }

    /// Deletes a stored voice; false when there is none of that id.
    pub fn delete(&mut self, id: &str) -> Result<bool, String> {
        if !self.voices.contains_key(id) {
            return Ok(false);
        }
        let path = self.path(id);
        std::fs::remove_file(&path)
            .and_then(|()| sync_dir(&self.dir))
            .map_err(|e| format!("cannot delete voice file '{}': {e}", path.display()))?;
        self.voices.remove(id);
        Ok(true)
    }

    /// The file of voice `id` (an id this store made).
    fn path(&self, id: &str) -> PathBuf {
        self.dir.join(format!("{id}.json"))
    }
}

/// True for an id this store makes: `voice_` and 16 lowercase hex digits.
pub fn is_id(s: &str) -> bool {
    s.strip_prefix(ID_PREFIX).is_some_and(|hex| {
        hex.len() == 16 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    })
}

/// A fresh id: 64 bits hashed with std's randomly keyed hasher (its keys come from the
/// OS) from the time and a counter; [`VoiceStore::create`] skips one in use.
fn new_id() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    format!("{ID_PREFIX}{:016x}", h.finish())
}

/// Reads and parses a stored voice's file, at most [`MAX_STORED_BYTES`].
fn read_file(path: &Path) -> Result<VoiceFile, String> {
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX_STORED_BYTES + 1).read_to_end(&mut bytes))
        .map_err(|e| format!("cannot read voice file '{}': {e}", path.display()))?;
    if bytes.len() as u64 > MAX_STORED_BYTES {
        return Err(format!(
            "voice file '{}' is larger than {MAX_STORED_BYTES} bytes",
            path.display()
        ));
    }
    serde_json::from_slice(&bytes)
        .map_err(|e| format!("voice file '{}' is not a stored voice: {e}", path.display()))
}

/// Flushes a folder's entries (a rename or a removal in it) to disk; a no-op where
/// folders cannot be opened as files.
fn sync_dir(dir: &Path) -> std::io::Result<()> {
    #[cfg(unix)]
    std::fs::File::open(dir)?.sync_all()?;
    #[cfg(not(unix))]
    let _ = dir;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_fresh_and_safe_file_names() {
        let a = new_id();
        let b = new_id();
        assert!(is_id(&a) && is_id(&b), "{a} {b}");
        assert_ne!(a, b);
        for bad in [
            "voice_",
            "voice_../../etc/passwd",
            "voice_0123456789ABCDEF",
            "x_0123456789abcdef",
        ] {
            assert!(!is_id(bad), "{bad}");
        }
    }
}
