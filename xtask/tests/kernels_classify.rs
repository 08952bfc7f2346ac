//! Table tests of the pure kernel-file classifier over real rocBLAS/hipBLASLt names.

use std::path::Path;

use xtask::kernels::classify::{
    classify, family_of, lazy_index_arch, scan_tokens, ArchClass, ArchToken, TokenError, TokenKind,
    KNOWN_ARCHES, KNOWN_GENERICS,
};
use xtask::kernels::fixtures::{
    listed_arch, listing_entries, HIPBLASLT_711_LISTING, ROCBLAS_644_LISTING, ROCBLAS_724_LISTING,
};

fn label(path: &str) -> String {
    classify(Path::new(path))
        .unwrap_or_else(|e| panic!("{path}: {e}"))
        .label()
}

fn targets(list: &[&str]) -> Vec<ArchToken> {
    list.iter()
        .map(|t| ArchToken::parse_target(t).unwrap())
        .collect()
}

fn kept(path: &str, list: &[&str]) -> bool {
    classify(Path::new(path))
        .unwrap()
        .selected_by(&targets(list))
}

#[test]
fn real_name_patterns_get_their_arch() {
    let table: &[(&str, &str)] = &[
        ("TensileLibrary_lazy_gfx1100.dat", "gfx1100"),
        ("TensileLibrary_lazy_gfx90a.dat", "gfx90a"),
        ("Kernels.so-000-gfx1030.hsaco", "gfx1030"),
        ("Kernels.so-000-gfx90a-xnack+.hsaco", "gfx90a"),
        ("Kernels.so-000-gfx90a-xnack-.hsaco", "gfx90a"),
        ("TensileLibrary_gfx1102.co", "gfx1102"),
        ("TensileLibrary_Type_HH_Contraction_l_Alik_Bljk_Cijk_Dijk_gfx1101.co", "gfx1101"),
        ("TensileLibrary_Type_HH_Contraction_l_Alik_Bljk_Cijk_Dijk_gfx1101.dat", "gfx1101"),
        ("TensileLibrary_Type_DD_Contraction_l_Ailk_Bjlk_Cijk_Dijk_fallback_gfx906.hsaco", "gfx906"),
        (
            "TensileLibrary_Type_4xi8I_HPA_Contraction_l_Ailk_Bjlk_Cijk_Dijk_CU104_gfx90a-xnack+.hsaco",
            "gfx90a",
        ),
        ("TensileLibrary_Type_BB_HPA_Contraction_l_Alik_Bljk_Cijk_Dijk_CU80_XPU_gfx942.co", "gfx942"),
        ("TensileLibrary_Type_HH_HPA_Contraction_l_Alik_Bljk_Cijk_Dijk_CU104_gfx90a.dat", "gfx90a"),
        ("TensileLibrary_Type_HS_HPA_Fp16AltRnz_Fp16Alt_Contraction_l_Alik_Bljk_Cijk_Dijk_gfx90a.co", "gfx90a"),
        ("TensileLibrary_HH_HH_HA_Bias_SAV_UA_Type_HH_HPA_Contraction_l_Alik_Bljk_Cijk_Dijk_gfx1200.co", "gfx1200"),
        ("extop_gfx1151.co", "gfx1151"),
        ("extop_gfx1150.co", "gfx1150"),
        ("Kernels.so-000-gfx803.hsaco", "gfx803"),
        // Per-arch folders and .dat.zlib.
        ("gfx942/TensileLibrary_lazy_gfx942.dat.zlib", "gfx942"),
        ("gfx1150/TensileLibrary_Type_HH_Contraction_l_Alik_Bljk_Cijk_Dijk_gfx1150.dat.zlib", "gfx1150"),
        // Family token in a name under a per-arch folder: the folder decides.
        ("gfx942/TensileLibrary_Type_HH_HPA_Contraction_l_Alik_Bljk_Cijk_Dijk_gfx9.dat", "gfx942"),
        ("gfx942/TensileLibrary_Type_HH_Contraction_l_Alik_Bljk_Cijk_Dijk_gfx1100.co", "gfx942"),
        // Family and multi-token names outside a folder.
        ("TensileLibrary_Type_HH_Contraction_l_Alik_Bljk_Cijk_Dijk_gfx12.dat", "gfx12"),
        ("extop_gfx1100_gfx1101.co", "gfx1100+gfx1101"),
        ("Kernels.so-000-gfx1101-gfx1100.hsaco", "gfx1100+gfx1101"),
        ("kernels_gfx11-generic.hsaco", "gfx11-generic"),
        ("kernels_gfx10-3-generic.hsaco", "gfx10-3-generic"),
        ("GFX1100_upper.co", "gfx1100"),
    ];
    for (path, want) in table {
        assert_eq!(label(path), *want, "{path}");
    }
}

#[test]
fn arch_independent_files() {
    for path in [
        "TensileLibrary_Type_HH_Contraction_l_Alik_Bljk_Cijk_Dijk_fallback.dat",
        "TensileLibrary_Type_4xi8I_HPA_Contraction_l_Ailk_Bjlk_Cijk_Dijk_fallback.dat",
        "hipblasltExtOpLibrary.dat",
        "hipblasltTransform.hsaco",
        "TensileLiteLibrary_lazy_Mapping.dat",
        "TensileManifest.txt",
        "TensileLibrary.dat",
        "libgfxstuff.dat",
        "nested/TensileLibrary_Type_SS_Contraction_l_Ailk_Bljk_Cijk_Dijk_fallback.dat",
    ] {
        assert_eq!(
            classify(Path::new(path)).unwrap(),
            ArchClass::Independent,
            "{path}"
        );
        assert!(kept(path, &["gfx1100"]), "{path} is always kept");
    }
}

#[test]
fn tokens_are_delimiter_anchored() {
    // `gfx110` is a prefix of gfx1100; a substring filter for gfx110 or gfx1030 is wrong.
    let tokens = scan_tokens("TensileLibrary_lazy_gfx1100.dat").unwrap();
    assert_eq!(tokens.len(), 1);
    assert_eq!(tokens[0].base(), "gfx1100");
    assert!(!kept("TensileLibrary_lazy_gfx1101.dat", &["gfx1100"]));
    assert!(!kept(
        "TensileLibrary_lazy_gfx1103.dat",
        &["gfx1100", "gfx1102"]
    ));
    assert!(!kept("Kernels.so-000-gfx1151.hsaco", &["gfx1150"]));
    assert!(kept("Kernels.so-000-gfx1151.hsaco", &["gfx1151"]));
    assert!(!kept("Kernels.so-000-gfx906.hsaco", &["gfx90a"]));
    // `gfx` inside a word is not a token.
    assert!(scan_tokens("Libgfx1100stuff.dat").unwrap().is_empty());
    assert!(ArchToken::parse_target("gfx110").is_err());
}

#[test]
fn xnack_and_sramecc_suffixes() {
    let plus = "Kernels.so-000-gfx90a-xnack+.hsaco";
    let minus = "Kernels.so-000-gfx90a-xnack-.hsaco";
    assert!(kept(plus, &["gfx90a"]) && kept(minus, &["gfx90a"]));
    assert!(kept(plus, &["gfx90a:xnack+"]) && !kept(minus, &["gfx90a:xnack+"]));
    assert!(kept(minus, &["gfx90a-xnack-"]) && !kept(plus, &["gfx90a-xnack-"]));
    assert!(kept("TensileLibrary_lazy_gfx90a.dat", &["gfx90a:xnack+"]));
    let token = ArchToken::parse("gfx942:sramecc+:xnack-").unwrap();
    assert_eq!(token.to_string(), "gfx942-sramecc+-xnack-");
    assert!(kept("k_gfx942-sramecc+-xnack-.hsaco", &["gfx942"]));
    assert!(!kept("k_gfx942-sramecc-.hsaco", &["gfx942:sramecc+"]));
    assert!(matches!(
        scan_tokens("k_gfx90a-xnack.hsaco"),
        Err(TokenError::BadFeature(_))
    ));
    assert!(matches!(
        scan_tokens("k_gfx90a-xnack+-xnack-.co"),
        Err(TokenError::BadFeature(_))
    ));
}

#[test]
fn per_arch_folder_decides() {
    let family =
        "gfx942/TensileLibrary_Type_HH_HPA_Contraction_l_Alik_Bljk_Cijk_Dijk_gfx9.dat.zlib";
    assert!(kept(family, &["gfx942"]));
    assert!(
        !kept(family, &["gfx90a", "gfx908"]),
        "gfx9 in the name does not reach past gfx942/"
    );
    let odd = "gfx942/TensileLibrary_Type_HH_Contraction_l_Alik_Bljk_Cijk_Dijk_gfx1100.co";
    assert!(!kept(odd, &["gfx1100"]));
    assert!(kept(odd, &["gfx942"]));
    let class = classify(Path::new(family)).unwrap();
    let ArchClass::Specific { folder, tokens } = class else {
        panic!("not specific")
    };
    assert_eq!(folder.unwrap().base(), "gfx942");
    assert_eq!(tokens[0].kind(), TokenKind::Family);
}

#[test]
fn family_and_multi_token_rules() {
    let family = "TensileLibrary_Type_HH_Contraction_l_Alik_Bljk_Cijk_Dijk_gfx12.dat";
    assert!(kept(family, &["gfx1201"]));
    assert!(!kept(family, &["gfx1100", "gfx1151"]));
    let multi = "extop_gfx1100_gfx1101.co";
    assert!(kept(multi, &["gfx1101"]) && kept(multi, &["gfx1100"]));
    assert!(!kept(multi, &["gfx1102"]));
    assert!(kept("k_gfx11-generic.hsaco", &["gfx1151"]));
    assert!(!kept("k_gfx11-generic.hsaco", &["gfx1030"]));
    assert_eq!(family_of("gfx90a"), Some("gfx9"));
    assert_eq!(family_of("gfx1151"), Some("gfx11"));
    assert_eq!(family_of("gfx803"), None);
    for (_, members) in KNOWN_GENERICS {
        for member in *members {
            assert!(KNOWN_ARCHES.contains(member), "{member}");
        }
    }
}

#[test]
fn unknown_tokens_are_errors_naming_the_file() {
    for (path, token) in [
        ("TensileLibrary_lazy_gfx1036.dat", "gfx1036"),
        ("Kernels.so-000-gfx110.hsaco", "gfx110"),
        ("gfx1105/TensileLibrary_lazy_gfx1105.dat", "gfx1105"),
        ("extop_gfx.co", "gfx"),
        ("k_GFX9999.co", "GFX9999"),
    ] {
        let err = classify(Path::new(path)).unwrap_err();
        assert_eq!(err.kind, TokenError::Unknown(token.into()), "{path}");
        let text = err.to_string();
        assert!(
            text.contains(&format!("unknown GPU arch token '{token}' in {path}"))
                && text.contains("add it to KNOWN_ARCHES"),
            "{text}"
        );
    }
}

#[test]
fn targets_must_be_known_processors() {
    assert!(ArchToken::parse_target("gfx1100").is_ok());
    assert!(ArchToken::parse_target(" GFX1151 ").is_ok());
    assert!(matches!(
        ArchToken::parse_target("gfx11"),
        Err(TokenError::NotAProcessor(_))
    ));
    assert!(matches!(
        ArchToken::parse_target("gfx11-generic"),
        Err(TokenError::NotAProcessor(_))
    ));
    assert!(matches!(
        ArchToken::parse_target("sm_89"),
        Err(TokenError::NotAToken(_))
    ));
    assert!(matches!(
        ArchToken::parse_target("gfx1100x"),
        Err(TokenError::Unknown(_))
    ));
    assert!(matches!(
        ArchToken::parse_target("gfx1100,gfx1101"),
        Err(TokenError::Unknown(_))
    ));
}

#[test]
fn lazy_index_names() {
    assert_eq!(
        lazy_index_arch("TensileLibrary_lazy_gfx1100.dat"),
        Some("gfx1100")
    );
    assert_eq!(
        lazy_index_arch("TensileLibrary_lazy_gfx942.dat.zlib"),
        Some("gfx942")
    );
    assert_eq!(lazy_index_arch("TensileLiteLibrary_lazy_Mapping.dat"), None);
    assert_eq!(
        lazy_index_arch("TensileLibrary_Type_HH_Contraction_l_Alik_Bljk_Cijk_Dijk_gfx1100.dat"),
        None
    );
    assert_eq!(lazy_index_arch("TensileLibrary_lazy_gfx1100.co"), None);
}

/// Every name in the real listings classifies to the arch its naive reading gives.
#[test]
fn every_listed_name_classifies() {
    let mut checked = 0;
    for listing in [
        ROCBLAS_644_LISTING,
        ROCBLAS_724_LISTING,
        HIPBLASLT_711_LISTING,
    ] {
        for (name, _) in listing_entries(listing) {
            let class = classify(Path::new(name)).unwrap_or_else(|e| panic!("{e}"));
            match listed_arch(name) {
                None => assert_eq!(class, ArchClass::Independent, "{name}"),
                Some(arch) => assert_eq!(class.label(), arch, "{name}"),
            }
            checked += 1;
        }
    }
    assert!(checked > 4_000, "{checked}");
}
