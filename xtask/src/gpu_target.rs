//! GPU targets: the one type every validator of a GPU target name uses ([`ArchToken`]
//! for AMD `gfx*` targets, in packaging/tracks.toml, `build --gpu-targets` and the kernel
//! filter; [`check_cuda_arch`] for CUDA architectures), and the pure classification of
//! kernel-library paths by GPU architecture token.
//!
//! rocBLAS and hipBLASLt name their per-arch files after the LLVM processor
//! (`TensileLibrary_lazy_gfx1100.dat`, `Kernels.so-000-gfx90a-xnack+.hsaco`,
//! `..._CU104_gfx90a.co`), newer trees add per-arch folders (`library/gfx942/`),
//! `.dat.zlib` files and family tokens (`gfx9`) inside such folders. Everything else
//! (`*_fallback.dat`, `hipblasltExtOpLibrary.dat`, `TensileManifest.txt`, ...) is
//! arch-independent and must always ship.
//!
//! Rules, in order:
//! - A token starts at `gfx` preceded by the start of a path component or a
//!   non-alphanumeric character, and runs over the following ASCII letters and digits,
//!   so it is delimiter-anchored on both sides: `gfx110` is never read out of `gfx1100`.
//! - A token may carry `-N-generic`/`-generic` and feature suffixes `-xnack±`,
//!   `-sramecc±` (`:` is accepted for target IDs typed by people).
//! - Every token must be in [`KNOWN_ARCHES`], [`KNOWN_FAMILIES`] or [`KNOWN_GENERICS`];
//!   anything else is an error naming the file, never a silent keep.
//! - A directory component that is exactly one token (`library/gfx942/`) owns the file
//!   whatever the file name says.
//! - Otherwise a file belongs to every arch its tokens name, and is selected for a target
//!   list when any token serves any target (a family token `gfx11` serves every `gfx11xx`
//!   target, a generic token its listed members).

use std::fmt;
use std::path::{Component, Path};

use serde::Serialize;

/// LLVM processors that ROCm math libraries ship kernels for (or have shipped).
///
/// Built from the real rocBLAS/hipBLASLt listings (`xtask/tests/fixtures/`) and the
/// ROCm arch lists; a name outside this set in a kernel file is an error.
pub const KNOWN_ARCHES: &[&str] = &[
    "gfx803", "gfx900", "gfx902", "gfx904", "gfx906", "gfx908", "gfx909", "gfx90a", "gfx90c",
    "gfx940", "gfx941", "gfx942", "gfx950", "gfx1010", "gfx1011", "gfx1012", "gfx1013", "gfx1030",
    "gfx1031", "gfx1032", "gfx1033", "gfx1034", "gfx1035", "gfx1100", "gfx1101", "gfx1102",
    "gfx1103", "gfx1150", "gfx1151", "gfx1152", "gfx1153", "gfx1200", "gfx1201",
];

/// Family tokens seen inside per-arch folders (`gfx942/..._gfx9.dat`); a family token
/// serves every processor whose name extends it by two characters.
pub const KNOWN_FAMILIES: &[&str] = &["gfx9", "gfx10", "gfx11", "gfx12"];

/// LLVM generic targets and the processors each one runs on.
pub const KNOWN_GENERICS: &[(&str, &[&str])] = &[
    (
        "gfx9-generic",
        &["gfx900", "gfx902", "gfx904", "gfx906", "gfx909", "gfx90c"],
    ),
    ("gfx9-4-generic", &["gfx940", "gfx941", "gfx942", "gfx950"]),
    (
        "gfx10-1-generic",
        &["gfx1010", "gfx1011", "gfx1012", "gfx1013"],
    ),
    (
        "gfx10-3-generic",
        &[
            "gfx1030", "gfx1031", "gfx1032", "gfx1033", "gfx1034", "gfx1035",
        ],
    ),
    (
        "gfx11-generic",
        &[
            "gfx1100", "gfx1101", "gfx1102", "gfx1103", "gfx1150", "gfx1151", "gfx1152", "gfx1153",
        ],
    ),
    ("gfx12-generic", &["gfx1200", "gfx1201"]),
];

/// What kind of arch a token names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TokenKind {
    /// One LLVM processor (`gfx1100`).
    Processor,
    /// A family prefix (`gfx11`).
    Family,
    /// An LLVM generic target (`gfx11-generic`).
    Generic,
}

/// One GPU arch token: a processor, family or generic target plus feature settings.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ArchToken {
    base: &'static str,
    kind: TokenKind,
    sramecc: Option<bool>,
    xnack: Option<bool>,
}

impl ArchToken {
    /// Parses a whole token such as `gfx1100`, `gfx90a-xnack+`, `gfx90a:xnack-` or
    /// `gfx11-generic` (case-insensitive).
    pub fn parse(text: &str) -> Result<Self, TokenError> {
        let lower = text.to_ascii_lowercase();
        match scan_at(&lower, 0) {
            Ok((token, end)) if end == lower.len() => Ok(token),
            Ok(_) | Err(_) if !lower.starts_with("gfx") => Err(TokenError::NotAToken(text.into())),
            Ok(_) => Err(TokenError::Unknown(text.into())),
            Err(err) => Err(err.with_spelling(text)),
        }
    }

    /// Parses a `--gpu-targets` entry: a known processor, optionally with features.
    pub fn parse_target(text: &str) -> Result<Self, TokenError> {
        let token = Self::parse(text.trim())?;
        if token.kind != TokenKind::Processor {
            return Err(TokenError::NotAProcessor(text.into()));
        }
        Ok(token)
    }

    /// The processor, family or generic name without features (`gfx90a`).
    pub fn base(&self) -> &'static str {
        self.base
    }

    /// Whether this is a processor, family or generic token.
    pub fn kind(&self) -> TokenKind {
        self.kind
    }

    /// The token without feature suffixes (the lazy index of `gfx90a` serves
    /// `gfx90a-xnack+` and `gfx90a-xnack-`).
    pub fn without_features(&self) -> Self {
        Self {
            sramecc: None,
            xnack: None,
            ..self.clone()
        }
    }

    /// Whether a file carrying this token serves `target` (a processor token): same
    /// processor with compatible features, or a family/generic token containing it.
    pub fn serves(&self, target: &ArchToken) -> bool {
        let features_agree = |a: Option<bool>, b: Option<bool>| match (a, b) {
            (Some(x), Some(y)) => x == y,
            _ => true,
        };
        match self.kind {
            TokenKind::Processor => {
                self.base == target.base
                    && features_agree(self.xnack, target.xnack)
                    && features_agree(self.sramecc, target.sramecc)
            }
            TokenKind::Family => family_of(target.base) == Some(self.base),
            TokenKind::Generic => KNOWN_GENERICS
                .iter()
                .any(|(name, members)| *name == self.base && members.contains(&target.base)),
        }
    }
}

/// Checks a CUDA architecture as CMake's `CMAKE_CUDA_ARCHITECTURES` takes it (`86`,
/// `89-real`, `90a-virtual`); the error says what was expected.
pub fn check_cuda_arch(text: &str) -> Result<(), String> {
    let (number, suffix) = match text.split_once('-') {
        Some((n, s)) => (n, Some(s)),
        None => (text, None),
    };
    let digits = number.trim_end_matches(|c: char| c.is_ascii_lowercase());
    let letters = number.len() - digits.len();
    let ok = (2..=3).contains(&digits.len())
        && digits.bytes().all(|b| b.is_ascii_digit())
        && letters <= 1
        && matches!(suffix, None | Some("real") | Some("virtual"));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "'{text}' is not a CUDA architecture (e.g. 86, 89-real, 90-virtual)"
        ))
    }
}

/// Checks an AMD GPU target as tracks.toml and `--gpu-targets` take it: a known processor
/// with optional features (`gfx1100`, `gfx90a:xnack-`), written in lower case.
pub fn check_gfx_target(text: &str) -> Result<ArchToken, String> {
    if text != text.to_ascii_lowercase() {
        return Err(format!(
            "'{text}' is not a GPU target as ROCm spells them: use lower case (e.g. gfx1100)"
        ));
    }
    ArchToken::parse_target(text).map_err(|e| e.to_string())
}

impl fmt::Display for ArchToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.base)?;
        let sign = |on: bool| if on { '+' } else { '-' };
        if let Some(on) = self.sramecc {
            write!(f, "-sramecc{}", sign(on))?;
        }
        if let Some(on) = self.xnack {
            write!(f, "-xnack{}", sign(on))?;
        }
        Ok(())
    }
}

impl Serialize for ArchToken {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// The family prefix of a processor (`gfx1151` -> `gfx11`, `gfx90a` -> `gfx9`).
pub fn family_of(processor: &str) -> Option<&'static str> {
    let digits = processor.strip_prefix("gfx")?;
    let prefix_len = match digits.len() {
        3 => 4,
        4 => 5,
        _ => return None,
    };
    KNOWN_FAMILIES
        .iter()
        .copied()
        .find(|family| *family == &processor[..prefix_len])
}

/// Why a token could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// `gfx` followed by a name outside the known sets.
    #[error("unknown GPU arch token '{0}'")]
    Unknown(String),
    /// A feature suffix without `+`/`-` (`gfx90a-xnack`).
    #[error("malformed feature suffix in GPU arch token '{0}' (expected -xnack+/-xnack-/-sramecc+/-sramecc-)")]
    BadFeature(String),
    /// Text that does not start with `gfx`.
    #[error("'{0}' is not a GPU arch token (expected e.g. gfx1100)")]
    NotAToken(String),
    /// A family or generic token where a processor is needed.
    #[error("'{0}' is a family or generic token; name the processors (e.g. gfx1100,gfx1101)")]
    NotAProcessor(String),
}

impl TokenError {
    fn with_spelling(self, text: &str) -> Self {
        match self {
            Self::Unknown(_) => Self::Unknown(text.into()),
            other => other,
        }
    }
}

/// The arch class of one file in a kernel library folder.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "class", rename_all = "snake_case")]
pub enum ArchClass {
    /// No arch token anywhere: always shipped.
    Independent,
    /// Belongs to the arches named by a per-arch folder or by the tokens in its name.
    Specific {
        /// The innermost per-arch folder (`library/gfx942/`), which decides alone.
        folder: Option<ArchToken>,
        /// Tokens found in the file name (and other folder names), in order, deduplicated.
        tokens: Vec<ArchToken>,
    },
}

impl ArchClass {
    /// Whether a filter for `targets` keeps this file: arch-independent files always,
    /// a per-arch folder when it serves a target, otherwise any name token serving one.
    pub fn selected_by(&self, targets: &[ArchToken]) -> bool {
        self.matching_target(targets).is_some() || *self == ArchClass::Independent
    }

    /// The first target this file serves (None for arch-independent files).
    pub fn matching_target<'t>(&self, targets: &'t [ArchToken]) -> Option<&'t ArchToken> {
        targets
            .iter()
            .find(|target| self.owners().iter().any(|token| token.serves(target)))
    }

    /// The tokens that decide ownership: the folder if any, else the name tokens.
    pub fn owners(&self) -> &[ArchToken] {
        match self {
            ArchClass::Independent => &[],
            ArchClass::Specific {
                folder: Some(folder),
                ..
            } => std::slice::from_ref(folder),
            ArchClass::Specific {
                folder: None,
                tokens,
            } => tokens,
        }
    }

    /// A row label for size tables: `gfx90a` (features folded), `gfx11` for a family
    /// file, `gfx1100+gfx1101` for a file naming several arches, `arch-independent`.
    pub fn label(&self) -> String {
        let owners = self.owners();
        if owners.is_empty() {
            return INDEPENDENT_LABEL.to_string();
        }
        let mut bases: Vec<&str> = owners.iter().map(ArchToken::base).collect();
        bases.sort_by(|a, b| arch_order(a, b));
        bases.dedup();
        bases.join("+")
    }
}

/// The label of arch-independent files in tables and JSON.
pub const INDEPENDENT_LABEL: &str = "arch-independent";

/// Orders arch names the way people list them: gfx803 < gfx90a < gfx942 < gfx1030.
pub fn arch_order(a: &str, b: &str) -> std::cmp::Ordering {
    let key = |s: &str| {
        let digits = s.strip_prefix("gfx").unwrap_or(s);
        let numeric = digits.bytes().take_while(u8::is_ascii_alphanumeric).count();
        (numeric, s.to_string())
    };
    key(a).cmp(&key(b))
}

/// A path component carried a token that is not known, or is malformed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{kind} in {path}: add it to KNOWN_ARCHES (xtask/src/kernels/classify.rs) if real")]
pub struct ClassifyError {
    /// What was wrong with the token.
    pub kind: TokenError,
    /// The path that carried it, as given.
    pub path: String,
}

/// Classifies a path relative to a kernel library folder (`TensileLibrary_lazy_gfx1100.dat`
/// or `gfx942/TensileLibrary_..._gfx9.dat.zlib`).
///
/// Pass the path relative to the `library` folder: components above it (an SDK installed
/// under `/opt/rocm-gfx1100/`) would otherwise be read as per-arch folders.
pub fn classify(relative: &Path) -> Result<ArchClass, ClassifyError> {
    let components: Vec<&str> = relative
        .components()
        .filter_map(|c| match c {
            Component::Normal(name) => name.to_str(),
            _ => None,
        })
        .collect();
    let error = |kind: TokenError| ClassifyError {
        kind,
        path: relative.display().to_string(),
    };
    let Some((file_name, dirs)) = components.split_last() else {
        return Ok(ArchClass::Independent);
    };
    let mut folder = None;
    let mut tokens: Vec<ArchToken> = Vec::new();
    for dir in dirs {
        match ArchToken::parse(dir) {
            Ok(token) => folder = Some(token),
            Err(_) => push_unique(&mut tokens, scan_tokens(dir).map_err(error)?),
        }
    }
    push_unique(&mut tokens, scan_tokens(file_name).map_err(error)?);
    if folder.is_none() && tokens.is_empty() {
        return Ok(ArchClass::Independent);
    }
    Ok(ArchClass::Specific { folder, tokens })
}

fn push_unique(into: &mut Vec<ArchToken>, tokens: Vec<ArchToken>) {
    for token in tokens {
        if !into.contains(&token) {
            into.push(token);
        }
    }
}

/// All delimiter-anchored arch tokens in one path component, in order.
pub fn scan_tokens(component: &str) -> Result<Vec<ArchToken>, TokenError> {
    let lower = component.to_ascii_lowercase();
    let bytes = lower.as_bytes();
    let mut tokens = Vec::new();
    let mut from = 0;
    while let Some(offset) = lower[from..].find("gfx") {
        let start = from + offset;
        if start > 0 && bytes[start - 1].is_ascii_alphanumeric() {
            from = start + 3;
            continue;
        }
        let (token, end) = scan_at(&lower, start).map_err(|err| {
            let end = start + 3 + alnum_len(&bytes[start + 3..]);
            err.with_spelling(&component[start..end])
        })?;
        tokens.push(token);
        from = end;
    }
    Ok(tokens)
}

fn alnum_len(bytes: &[u8]) -> usize {
    bytes
        .iter()
        .take_while(|b| b.is_ascii_alphanumeric())
        .count()
}

/// Reads one token starting at `start` (which holds `gfx`) in lowercase `text`;
/// returns it and the index just past it.
fn scan_at(text: &str, start: usize) -> Result<(ArchToken, usize), TokenError> {
    let bytes = text.as_bytes();
    if !text[start..].starts_with("gfx") {
        return Err(TokenError::NotAToken(text[start..].into()));
    }
    let mut end = start + 3 + alnum_len(&bytes[start + 3..]);
    // Generic suffix: `-generic` or `-<digit>-generic`.
    let rest = &text[end..];
    let generic_len = if rest.starts_with("-generic") {
        Some(8)
    } else if rest.len() > 2
        && rest.as_bytes()[0] == b'-'
        && rest.as_bytes()[1].is_ascii_digit()
        && rest[2..].starts_with("-generic")
    {
        Some(10)
    } else {
        None
    };
    if let Some(len) = generic_len {
        end += len;
    }
    let base_text = &text[start..end];
    let (base, kind) = if let Some(base) = KNOWN_ARCHES.iter().find(|a| **a == base_text) {
        (*base, TokenKind::Processor)
    } else if let Some(base) = KNOWN_FAMILIES.iter().find(|a| **a == base_text) {
        (*base, TokenKind::Family)
    } else if let Some((base, _)) = KNOWN_GENERICS.iter().find(|(a, _)| *a == base_text) {
        (*base, TokenKind::Generic)
    } else {
        return Err(TokenError::Unknown(text[start..end].into()));
    };
    let mut token = ArchToken {
        base,
        kind,
        sramecc: None,
        xnack: None,
    };
    loop {
        let rest = &text[end..];
        let Some(sep) = rest.chars().next().filter(|c| *c == '-' || *c == ':') else {
            break;
        };
        let feature = &rest[sep.len_utf8()..];
        let (slot, name_len) = if feature.starts_with("xnack") {
            (&mut token.xnack, 5)
        } else if feature.starts_with("sramecc") {
            (&mut token.sramecc, 7)
        } else {
            break;
        };
        let after_name = &feature[name_len..];
        let on = match after_name.as_bytes().first() {
            Some(b'+') => true,
            Some(b'-') => false,
            _ => {
                return Err(TokenError::BadFeature(
                    text[start..end + 1 + name_len].into(),
                ))
            }
        };
        if slot.replace(on).is_some() {
            return Err(TokenError::BadFeature(
                text[start..end + 2 + name_len].into(),
            ));
        }
        end += 1 + name_len + 1;
    }
    Ok((token, end))
}

/// If `file_name` is a Tensile lazy index (`TensileLibrary_lazy_<gfx>.dat` or
/// `.dat.zlib`), the arch text it names; `TensileLiteLibrary_lazy_Mapping.dat` is not one.
pub fn lazy_index_arch(file_name: &str) -> Option<&str> {
    let lower = file_name.to_ascii_lowercase();
    let prefix = "tensilelibrary_lazy_";
    if !lower.starts_with(prefix) {
        return None;
    }
    let stem_len = lower
        .strip_suffix(".dat.zlib")
        .or_else(|| lower.strip_suffix(".dat"))
        .map(str::len)?;
    let arch = &file_name[prefix.len()..stem_len];
    arch.to_ascii_lowercase().starts_with("gfx").then_some(arch)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuda_architectures_take_cmake_spellings_only() {
        for ok in ["86", "89-real", "90a-virtual", "120-real", "50-virtual"] {
            assert!(check_cuda_arch(ok).is_ok(), "{ok}");
        }
        for bad in ["sm_90", "9", "1200", "86-fake", "86ab", "", "gfx1100"] {
            assert!(check_cuda_arch(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn gfx_targets_are_known_lower_case_processors() {
        assert!(check_gfx_target("gfx1151").is_ok());
        assert!(check_gfx_target("gfx90a:xnack-").is_ok());
        assert!(check_gfx_target("GFX1100")
            .unwrap_err()
            .contains("lower case"));
        assert!(check_gfx_target("gfx11").unwrap_err().contains("family"));
        assert!(check_gfx_target("gfx1199").unwrap_err().contains("unknown"));
        assert!(check_gfx_target("sm_86")
            .unwrap_err()
            .contains("not a GPU arch"));
    }
}
