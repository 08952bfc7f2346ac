//! CPU-only kernels that ggml runs as custom ops, where ggml's own CPU kernels leave
//! much of the machine unused:
//!
//! - [`PackedQ8`]: q8_0 weight times f32 activation products with AVX-512 VNNI
//!   (`vpdpbusd`, 64 byte products per instruction; ggml's q8_0 GEMM uses 256-bit
//!   vectors), or AVX2 (`vpmaddubsw`) on the same packed weights. The numerics are
//!   ggml's: activations are quantized to q8_0 blocks (an f16 scale per 32 values,
//!   rounded to nearest even), block products are exact integers, scaled per block
//!   and summed in f32; both instruction sets give the same bits.
//! - The encoder's self-attention (heads of 64): each query's whole score row stays in
//!   cache, so the softmax is exact in one pass, with keys chunked in L1. Written once
//!   over [`AttentionSimd`] and compiled for AVX-512 and for AVX2.
//! - [`gelu_erf`]: the exact (erf) GELU with a vectorisable rational erf instead of a
//!   libm call per element.
//!
//! Each kernel runs at the widest [`SimdLevel`] the CPU has, checked at run time, so
//! the portable builds carry them too.
//!
//! Custom ops run only on the CPU backend: callers use them when the model runs there
//! and fall back to ggml's ops otherwise.

use std::cell::RefCell;

use llama_cpp_sys_2 as sys;

/// Values per q8_0 block.
const QK: usize = 32;
/// Bytes of one ggml q8_0 block: an f16 scale, then 32 signed bytes.
const Q8_BLOCK_BYTES: usize = 34;
/// Output columns (weight rows) one packed group holds: one 512-bit vector of i32.
pub const GROUP_COLS: usize = 16;
/// Bytes of one packed (group, block) cell: 32x16 weight bytes interleaved by 4, then
/// 16 f32 scales, then 16 i32 compensations (-128 x the weight row's block sum).
pub const CELL_BYTES: usize = QK * GROUP_COLS + 4 * GROUP_COLS + 4 * GROUP_COLS;
const SCALES_AT: usize = QK * GROUP_COLS;
const COMP_AT: usize = SCALES_AT + 4 * GROUP_COLS;
/// Activation rows one micro-kernel call computes.
const TILE_ROWS: usize = 4;
/// Output columns one pass over the activations covers (keeps that slice of the
/// packed weights in cache while every row tile streams past it).
const CHUNK_GROUPS: usize = 16;

/// The vector instruction sets the kernels are written for, in order of width.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum SimdLevel {
    /// AVX2 and FMA, 256-bit vectors (x86-64 CPUs since 2013-2015).
    Avx2,
    /// AVX-512, 512-bit vectors (the q8_0 product also needs BW and VNNI).
    Avx512,
}

impl SimdLevel {
    /// The level as `AUDIOCPP_CPU_KERNELS` and `--list-devices` spell it.
    pub fn name(self) -> &'static str {
        match self {
            SimdLevel::Avx2 => "avx2",
            SimdLevel::Avx512 => "avx512",
        }
    }

    /// The widest level this CPU has for float work (AVX-512 F, or AVX2 with FMA).
    fn detected() -> Option<Self> {
        #[cfg(target_arch = "x86_64")]
        {
            // The AVX-512 level runs AVX2 code too (the q8_0 product without VNNI).
            let avx2 = std::arch::is_x86_feature_detected!("avx2")
                && std::arch::is_x86_feature_detected!("fma");
            if avx2 && std::arch::is_x86_feature_detected!("avx512f") {
                return Some(SimdLevel::Avx512);
            }
            if avx2 {
                return Some(SimdLevel::Avx2);
            }
        }
        None
    }

    /// The level the kernels may use: [`SimdLevel::detected`], capped at AVX2 when
    /// `AUDIOCPP_CPU_KERNELS=avx2` (to measure and test what AVX2-only CPUs run on a
    /// machine with AVX-512). Read once per process.
    pub fn allowed() -> Option<Self> {
        static ALLOWED: std::sync::OnceLock<Option<SimdLevel>> = std::sync::OnceLock::new();
        *ALLOWED.get_or_init(|| {
            let cap = match kernels_setting() {
                KernelsSetting::Cap(level) => level,
                KernelsSetting::Ggml => SimdLevel::Avx512,
            };
            Self::detected().map(|level| level.min(cap))
        })
    }
}

/// What `AUDIOCPP_CPU_KERNELS` asks for: `ggml` (ggml's ops everywhere), `avx2` (the
/// kernels capped at AVX2), anything else or unset (the widest level).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum KernelsSetting {
    Ggml,
    Cap(SimdLevel),
}

/// [`KernelsSetting`] from the environment, read once per process.
fn kernels_setting() -> KernelsSetting {
    static SETTING: std::sync::OnceLock<KernelsSetting> = std::sync::OnceLock::new();
    *SETTING.get_or_init(|| match std::env::var("AUDIOCPP_CPU_KERNELS").as_deref() {
        Ok("ggml") => KernelsSetting::Ggml,
        Ok("avx2") => KernelsSetting::Cap(SimdLevel::Avx2),
        _ => KernelsSetting::Cap(SimdLevel::Avx512),
    })
}

/// True when `AUDIOCPP_CPU_KERNELS=ggml` asks for ggml's own CPU ops everywhere, to
/// compare the two.
pub fn kernels_switched_off() -> bool {
    kernels_setting() == KernelsSetting::Ggml
}

/// The level the packed q8_0 product runs at on this CPU: AVX-512 with BW and VNNI
/// (`vpdpbusd`), else AVX2 (`vpmaddubsw`), else none (ggml's own product).
pub fn q8_kernel_level() -> Option<SimdLevel> {
    match SimdLevel::allowed()? {
        #[cfg(target_arch = "x86_64")]
        SimdLevel::Avx512
            if std::arch::is_x86_feature_detected!("avx512bw")
                && std::arch::is_x86_feature_detected!("avx512vnni") =>
        {
            Some(SimdLevel::Avx512)
        }
        _ => Some(SimdLevel::Avx2),
    }
}

/// True when this CPU runs the packed q8_0 kernel ([`q8_kernel_level`]).
pub fn q8_kernel_available() -> bool {
    q8_kernel_level().is_some()
}

/// A q8_0 weight matrix of `n` rows of `k` values, re-laid out for the VNNI kernel:
/// groups of 16 rows, each split into 32-value blocks, each block stored as 8 vectors
/// of (16 rows x 4 bytes) so that one broadcast 4-byte activation group multiplies
/// 16 outputs at once.
#[derive(Debug, Clone, PartialEq)]
pub struct PackedQ8 {
    /// Values per weight row (the product's inner dimension).
    pub k: usize,
    /// Weight rows (the product's output columns).
    pub n: usize,
    /// `n / 16` groups of `k / 32` cells of [`CELL_BYTES`].
    pub bytes: Vec<u8>,
}

impl PackedQ8 {
    /// Packs ggml q8_0 rows (`n` rows of `k / 32` blocks). `None` when the shape does
    /// not fit the kernel (`k` not whole blocks, `n` not whole groups) or the data is
    /// not exactly that size.
    pub fn pack(q8: &[u8], k: usize, n: usize) -> Option<Self> {
        if k == 0 || n == 0 || !k.is_multiple_of(QK) || !n.is_multiple_of(GROUP_COLS) {
            return None;
        }
        let nb = k / QK;
        if q8.len() != n * nb * Q8_BLOCK_BYTES {
            return None;
        }
        let mut bytes = vec![0u8; n / GROUP_COLS * nb * CELL_BYTES];
        for (cell_index, cell) in bytes.chunks_exact_mut(CELL_BYTES).enumerate() {
            let (g, b) = (cell_index / nb, cell_index % nb);
            for lane in 0..GROUP_COLS {
                let row = g * GROUP_COLS + lane;
                let block = &q8[(row * nb + b) * Q8_BLOCK_BYTES..][..Q8_BLOCK_BYTES];
                let d = f16_to_f32(u16::from_le_bytes([block[0], block[1]]));
                let qs = &block[2..];
                for k4 in 0..QK / 4 {
                    let at = k4 * 4 * GROUP_COLS + lane * 4;
                    cell[at..at + 4].copy_from_slice(&qs[k4 * 4..k4 * 4 + 4]);
                }
                let sum: i32 = qs.iter().map(|&q| q as i8 as i32).sum();
                cell[SCALES_AT + 4 * lane..][..4].copy_from_slice(&d.to_le_bytes());
                cell[COMP_AT + 4 * lane..][..4].copy_from_slice(&(-128 * sum).to_le_bytes());
            }
        }
        Some(PackedQ8 { k, n, bytes })
    }

    /// The shape the packed bytes are stored in as a ggml i8 tensor.
    pub fn tensor_shape(&self) -> [i64; 3] {
        [
            CELL_BYTES as i64,
            (self.k / QK) as i64,
            (self.n / GROUP_COLS) as i64,
        ]
    }
}

fn f16_to_f32(h: u16) -> f32 {
    // SAFETY: a pure conversion.
    unsafe { sys::ggml_fp16_to_fp32(h) }
}

fn f32_to_f16(f: f32) -> u16 {
    // SAFETY: a pure conversion.
    unsafe { sys::ggml_fp32_to_fp16(f) }
}

/// Quantizes one row of activations the way ggml's x86 q8_0 quantizer does (scale
/// `max|x| / 127` stored as f16, values `x * 127 / max|x|` rounded to nearest even),
/// storing the values offset by 128 as unsigned bytes for `vpdpbusd`. The plain form
/// of `quantize_row_u8_avx512`, which the tests hold it to.
#[cfg(test)]
fn quantize_row_u8(x: &[f32], q: &mut [u8], d: &mut [f32]) {
    for ((xb, qb), db) in x
        .chunks_exact(QK)
        .zip(q.chunks_exact_mut(QK))
        .zip(d.iter_mut())
    {
        let amax = xb.iter().fold(0f32, |m, v| m.max(v.abs()));
        let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
        *db = f16_to_f32(f32_to_f16(amax / 127.0));
        for (qv, &xv) in qb.iter_mut().zip(xb) {
            *qv = ((xv * id).round_ties_even() as i32 + 128) as u8;
        }
    }
}

/// The product the kernel computes, written plainly: `y[m][n] = sum over blocks of
/// d_w * d_x * (integer block dot)`, from the packed weights and quantized rows.
/// The reference the kernel is tested against.
#[cfg(test)]
fn gemm_reference(w: &PackedQ8, xq: &[u8], xd: &[f32], m: usize, y: &mut [f32]) {
    let nb = w.k / QK;
    for row in 0..m {
        for col in 0..w.n {
            let (g, lane) = (col / GROUP_COLS, col % GROUP_COLS);
            let mut acc = 0f32;
            for b in 0..nb {
                let cell = &w.bytes[(g * nb + b) * CELL_BYTES..][..CELL_BYTES];
                let mut dot = 0i32;
                for kk in 0..QK {
                    let wv = cell[(kk / 4) * 4 * GROUP_COLS + lane * 4 + kk % 4] as i8 as i32;
                    dot += (xq[row * w.k + b * QK + kk] as i32 - 128) * wv;
                }
                let dw = f32::from_le_bytes(cell[SCALES_AT + 4 * lane..][..4].try_into().unwrap());
                acc += dot as f32 * (dw * xd[row * nb + b]);
            }
            y[row * w.n + col] = acc;
        }
    }
}

/// [`quantize_row_u8`] with AVX-512 intrinsics (the same arithmetic, 16 values per
/// instruction).
///
/// # Safety
/// The CPU must have AVX-512 F; `q` and `x` hold `d.len()` whole blocks.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn quantize_row_u8_avx512(x: &[f32], q: &mut [u8], d: &mut [f32]) {
    use std::arch::x86_64::*;
    for (b, db) in d.iter_mut().enumerate() {
        // SAFETY: block b lies inside x and q (caller's guarantee).
        unsafe {
            let lo = _mm512_loadu_ps(x.as_ptr().add(b * QK));
            let hi = _mm512_loadu_ps(x.as_ptr().add(b * QK + 16));
            let amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(lo), _mm512_abs_ps(hi)));
            let id = _mm512_set1_ps(if amax != 0.0 { 127.0 / amax } else { 0.0 });
            *db = f16_to_f32(f32_to_f16(amax / 127.0));
            let offset = _mm512_set1_epi32(128);
            for (half, v) in [lo, hi].into_iter().enumerate() {
                let r = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
                    _mm512_mul_ps(v, id),
                );
                let i = _mm512_add_epi32(_mm512_cvtps_epi32(r), offset);
                _mm_storeu_si128(
                    q.as_mut_ptr().add(b * QK + half * 16).cast(),
                    _mm512_cvtepi32_epi8(i),
                );
            }
        }
    }
}

/// [`quantize_row_u8`] with AVX2 intrinsics (the same arithmetic, 8 values per
/// instruction).
///
/// # Safety
/// The CPU must have AVX2; `q` and `x` hold `d.len()` whole blocks.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn quantize_row_u8_avx2(x: &[f32], q: &mut [u8], d: &mut [f32]) {
    use std::arch::x86_64::*;
    let sign = _mm256_set1_ps(-0.0);
    // packs then packus leave the four 8-value groups interleaved by 128-bit lane.
    let order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (b, db) in d.iter_mut().enumerate() {
        // SAFETY: block b lies inside x and q (caller's guarantee).
        unsafe {
            let v: [__m256; 4] =
                std::array::from_fn(|i| _mm256_loadu_ps(x.as_ptr().add(b * QK + 8 * i)));
            let m = v.iter().fold(_mm256_setzero_ps(), |m, &vi| {
                _mm256_max_ps(m, _mm256_andnot_ps(sign, vi))
            });
            let m = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps::<1>(m));
            let m = _mm_max_ps(m, _mm_movehl_ps(m, m));
            let amax = _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
            let id = _mm256_set1_ps(if amax != 0.0 { 127.0 / amax } else { 0.0 });
            *db = f16_to_f32(f32_to_f16(amax / 127.0));
            let offset = _mm256_set1_epi32(128);
            let i: [__m256i; 4] = std::array::from_fn(|j| {
                let r = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
                    _mm256_mul_ps(v[j], id),
                );
                // Keep the low byte, as AVX-512's vpmovdb does (it matters only for
                // NaN, whose conversion is out of range: both then give x = 0).
                _mm256_and_si256(
                    _mm256_add_epi32(_mm256_cvtps_epi32(r), offset),
                    _mm256_set1_epi32(0xff),
                )
            });
            let bytes = _mm256_packus_epi16(
                _mm256_packs_epi32(i[0], i[1]),
                _mm256_packs_epi32(i[2], i[3]),
            );
            _mm256_storeu_si256(
                q.as_mut_ptr().add(b * QK).cast(),
                _mm256_permutevar8x32_epi32(bytes, order),
            );
        }
    }
}

/// Quantizes activation rows for the product at `level` (the same bytes either way).
///
/// # Safety
/// The CPU must have `level`; `q` and `x` hold `d.len()` whole blocks.
#[cfg(target_arch = "x86_64")]
unsafe fn quantize_row(level: SimdLevel, x: &[f32], q: &mut [u8], d: &mut [f32]) {
    // SAFETY: the caller's guarantees.
    unsafe {
        match level {
            SimdLevel::Avx512 => quantize_row_u8_avx512(x, q, d),
            SimdLevel::Avx2 => quantize_row_u8_avx2(x, q, d),
        }
    }
}

/// Computes `y` rows `rows` (all columns of groups `groups`) from quantized rows with
/// the micro-kernels of `level`, plus `bias` (one value per output column) unless it is
/// null. `xq`/`xd` hold the quantized rows starting at `rows.start`.
///
/// # Safety
/// The CPU must have `level` as [`q8_kernel_level`] requires it; `packed` must hold
/// the groups `groups` of `nb` cells; `y` must have room for `rows.end` rows of
/// `y_stride` floats; a non-null `bias` must hold a value for every column of the
/// groups.
#[cfg(target_arch = "x86_64")]
#[allow(clippy::too_many_arguments)]
unsafe fn gemm_rows(
    level: SimdLevel,
    packed: *const u8,
    nb: usize,
    xq: &[u8],
    xd: &[f32],
    rows: std::ops::Range<usize>,
    groups: std::ops::Range<usize>,
    y: *mut f32,
    y_stride: usize,
    bias: *const f32,
) {
    let k = nb * QK;
    let mut g0 = groups.start;
    while g0 < groups.end {
        let g1 = (g0 + CHUNK_GROUPS).min(groups.end);
        let mut r = rows.start;
        while r < rows.end {
            let tile = (rows.end - r).min(TILE_ROWS);
            let local = r - rows.start;
            let xq_t = xq[local * k..].as_ptr();
            let xd_t = xd[local * nb..].as_ptr();
            let mut g = g0;
            while g < g1 {
                let pair = g + 2 <= g1;
                // SAFETY: group g, row r and group g's bias lie inside the buffers the
                // caller describes.
                let t = unsafe {
                    Q8Tile {
                        w: packed.add(g * nb * CELL_BYTES),
                        nb,
                        xq: xq_t,
                        xd: xd_t,
                        k,
                        y: y.add(r * y_stride + g * GROUP_COLS),
                        y_stride,
                        bias: if bias.is_null() {
                            bias
                        } else {
                            bias.add(g * GROUP_COLS)
                        },
                    }
                };
                // SAFETY: the caller's guarantees cover every pointer formed here.
                let done = unsafe {
                    match (level, tile, pair) {
                        (SimdLevel::Avx512, 4, true) => tile_kernel::<4, 2>(t),
                        (SimdLevel::Avx512, 4, false) => tile_kernel::<4, 1>(t),
                        (SimdLevel::Avx512, 3, true) => tile_kernel::<3, 2>(t),
                        (SimdLevel::Avx512, 3, false) => tile_kernel::<3, 1>(t),
                        (SimdLevel::Avx512, 2, true) => tile_kernel::<2, 2>(t),
                        (SimdLevel::Avx512, 2, false) => tile_kernel::<2, 1>(t),
                        (SimdLevel::Avx512, _, true) => tile_kernel::<1, 2>(t),
                        (SimdLevel::Avx512, _, false) => tile_kernel::<1, 1>(t),
                        (SimdLevel::Avx2, 4, _) => tile_kernel_avx2::<4>(t),
                        (SimdLevel::Avx2, 3, _) => tile_kernel_avx2::<3>(t),
                        (SimdLevel::Avx2, 2, _) => tile_kernel_avx2::<2>(t),
                        (SimdLevel::Avx2, _, _) => tile_kernel_avx2::<1>(t),
                    }
                };
                g += done;
            }
            r += tile;
        }
        g0 = g1;
    }
}

/// One micro-kernel call's operands: the packed weight at its first group's first cell
/// (groups `nb * CELL_BYTES` apart), the quantized rows (`xq`, `k` bytes each) and their
/// scales (`xd`, `nb` each), the output tile (rows `y_stride` floats apart) and the
/// bias of its columns (or null).
#[derive(Clone, Copy)]
struct Q8Tile {
    w: *const u8,
    nb: usize,
    xq: *const u8,
    xd: *const f32,
    k: usize,
    y: *mut f32,
    y_stride: usize,
    bias: *const f32,
}

/// `R` activation rows times `C` groups of 16 output columns over all `nb` blocks, with
/// AVX-512 VNNI; returns `C`, the groups done.
///
/// # Safety
/// As [`gemm_rows`]; `w` points at the first group's first cell, groups are
/// `nb * CELL_BYTES` apart.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn tile_kernel<const R: usize, const C: usize>(t: Q8Tile) -> usize {
    let Q8Tile {
        w,
        nb,
        xq,
        xd,
        k,
        y,
        y_stride,
        bias,
    } = t;
    use std::arch::x86_64::*;
    let group_stride = nb * CELL_BYTES;
    let mut acc = [[_mm512_setzero_ps(); C]; R];
    for b in 0..nb {
        let mut dots = [[_mm512_setzero_si512(); C]; R];
        for c in 0..C {
            // SAFETY: inside the cell (caller's guarantee).
            let comp = unsafe {
                _mm512_loadu_si512(w.add(c * group_stride + b * CELL_BYTES + COMP_AT).cast())
            };
            for row in dots.iter_mut() {
                row[c] = comp;
            }
        }
        for k4 in 0..QK / 4 {
            let mut wv = [_mm512_setzero_si512(); C];
            for (c, v) in wv.iter_mut().enumerate() {
                // SAFETY: as above.
                *v = unsafe {
                    _mm512_loadu_si512(w.add(c * group_stride + b * CELL_BYTES + k4 * 64).cast())
                };
            }
            for (r, row) in dots.iter_mut().enumerate() {
                // SAFETY: row r of the quantized activations has k bytes.
                let x4 = unsafe {
                    xq.add(r * k + b * QK + k4 * 4)
                        .cast::<i32>()
                        .read_unaligned()
                };
                let xv = _mm512_set1_epi32(x4);
                for c in 0..C {
                    row[c] = _mm512_dpbusd_epi32(row[c], xv, wv[c]);
                }
            }
        }
        for c in 0..C {
            // SAFETY: inside the cell.
            let dw = unsafe {
                _mm512_loadu_ps(w.add(c * group_stride + b * CELL_BYTES + SCALES_AT).cast())
            };
            for r in 0..R {
                // SAFETY: row r has nb scales.
                let dx = _mm512_set1_ps(unsafe { *xd.add(r * nb + b) });
                acc[r][c] = _mm512_fmadd_ps(
                    _mm512_cvtepi32_ps(dots[r][c]),
                    _mm512_mul_ps(dw, dx),
                    acc[r][c],
                );
            }
        }
    }
    // The bias is added after the sum, as ggml's separate add would.
    let bias: [__m512; C] = std::array::from_fn(|c| {
        if bias.is_null() {
            _mm512_setzero_ps()
        } else {
            // SAFETY: a non-null bias covers the groups (caller's guarantee).
            unsafe { _mm512_loadu_ps(bias.add(c * GROUP_COLS)) }
        }
    });
    for (r, row) in acc.iter().enumerate() {
        for (c, v) in row.iter().enumerate() {
            // SAFETY: the output tile lies inside y.
            unsafe {
                _mm512_storeu_ps(
                    y.add(r * y_stride + c * GROUP_COLS),
                    _mm512_add_ps(*v, bias[c]),
                )
            };
        }
    }
    C
}

/// `R` activation rows times one group of 16 output columns over all `nb` blocks, with
/// AVX2 (two 8-column halves); returns 1, the groups done. The same packed weights:
/// `vpmaddubsw` multiplies |w| (unsigned) by x with w's sign (signed), so pairs of
/// products stay within i16 (at most 2 x 128 x 127), and the sums are exactly the
/// AVX-512 kernel's.
///
/// # Safety
/// As [`gemm_rows`]; `w` points at the group's first cell.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn tile_kernel_avx2<const R: usize>(t: Q8Tile) -> usize {
    let Q8Tile {
        w,
        nb,
        xq,
        xd,
        k,
        y,
        y_stride,
        bias,
    } = t;
    use std::arch::x86_64::*;
    let ones = _mm256_set1_epi16(1);
    let mut acc = [[_mm256_setzero_ps(); 2]; R];
    for b in 0..nb {
        let cell = w.wrapping_add(b * CELL_BYTES);
        let mut dots = [[_mm256_setzero_si256(); 2]; R];
        for k4 in 0..QK / 4 {
            // SAFETY: inside the cell (caller's guarantee).
            let wv: [__m256i; 2] = std::array::from_fn(|h| unsafe {
                _mm256_loadu_si256(cell.add(k4 * 64 + 32 * h).cast())
            });
            let aw = wv.map(|v| _mm256_sign_epi8(v, v));
            for (r, row) in dots.iter_mut().enumerate() {
                // SAFETY: row r of the quantized activations has k bytes; the stored
                // bytes are x + 128, flipping the top bits gives x.
                let x4 = unsafe {
                    xq.add(r * k + b * QK + k4 * 4)
                        .cast::<i32>()
                        .read_unaligned()
                } ^ 0x8080_8080u32 as i32;
                let xv = _mm256_set1_epi32(x4);
                for h in 0..2 {
                    let p = _mm256_maddubs_epi16(aw[h], _mm256_sign_epi8(xv, wv[h]));
                    row[h] = _mm256_add_epi32(row[h], _mm256_madd_epi16(p, ones));
                }
            }
        }
        // SAFETY: inside the cell.
        let dw: [__m256; 2] = std::array::from_fn(|h| unsafe {
            _mm256_loadu_ps(cell.add(SCALES_AT + 32 * h).cast())
        });
        for r in 0..R {
            // SAFETY: row r has nb scales.
            let dx = _mm256_set1_ps(unsafe { *xd.add(r * nb + b) });
            for h in 0..2 {
                acc[r][h] = _mm256_fmadd_ps(
                    _mm256_cvtepi32_ps(dots[r][h]),
                    _mm256_mul_ps(dw[h], dx),
                    acc[r][h],
                );
            }
        }
    }
    for (r, row) in acc.iter().enumerate() {
        for (h, v) in row.iter().enumerate() {
            let bias = if bias.is_null() {
                _mm256_setzero_ps()
            } else {
                // SAFETY: a non-null bias covers the group (caller's guarantee).
                unsafe { _mm256_loadu_ps(bias.add(8 * h)) }
            };
            // SAFETY: the output tile lies inside y.
            unsafe { _mm256_storeu_ps(y.add(r * y_stride + 8 * h), _mm256_add_ps(*v, bias)) };
        }
    }
    1
}

thread_local! {
    /// Each worker thread's quantized activation rows and their scales, reused across
    /// calls (ggml's worker threads live as long as the backend).
    static SCRATCH: RefCell<(Vec<u8>, Vec<f32>)> = const { RefCell::new((Vec::new(), Vec::new())) };
}

/// Splits `0..len` into `nth` near-equal ranges whose starts are multiples of `unit`;
/// returns thread `ith`'s.
pub fn split_range(len: usize, unit: usize, ith: usize, nth: usize) -> std::ops::Range<usize> {
    let units = len.div_ceil(unit);
    let per = units.div_ceil(nth.max(1));
    let start = (ith * per * unit).min(len);
    let end = ((ith + 1) * per * unit).min(len);
    start..end
}

/// Thread `ith`'s share of an `m`-row product over `n_groups` output groups: rows when
/// there are enough of them (the encoder), else output groups (a decoder step).
fn q8_work(
    m: usize,
    n_groups: usize,
    ith: usize,
    nth: usize,
) -> (std::ops::Range<usize>, std::ops::Range<usize>) {
    if m >= TILE_ROWS * nth {
        (split_range(m, TILE_ROWS, ith, nth), 0..n_groups)
    } else {
        (0..m, split_range(n_groups, 1, ith, nth))
    }
}

/// The custom op: `dst` [n, m] = packed weight (src 0) times activations (src 1,
/// [k, m], rows contiguous), plus the bias (src 2, [n] contiguous) when given. Rows
/// are split among threads when there are enough of them (the encoder); otherwise
/// output columns are (the decoder's single token).
///
/// # Safety
/// Called by [`super::custom_op`]'s callback on a tensor made by
/// [`super::Context::mul_mat_q8_packed`], after it checked every operand.
pub(super) unsafe fn q8_packed_op(
    dst: *mut sys::ggml_tensor,
    ith: usize,
    nth: usize,
    _param: usize,
) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: ggml passes the live tensor made by mul_mat_q8_packed, whose sources are
    // the packed weight and contiguous-row f32 activations of matching k.
    unsafe {
        let w = &*(*dst).src[0];
        let x = &*(*dst).src[1];
        let nb = w.ne[1] as usize;
        let k = nb * QK;
        let n_groups = w.ne[2] as usize;
        let m = x.ne[1] as usize;
        let y_stride = (*dst).nb[1] / 4;
        let bias = match (*dst).src[2] {
            b if b.is_null() => std::ptr::null(),
            b => (*b).data as *const f32,
        };
        let (rows, groups) = q8_work(m, n_groups, ith, nth);
        let Some(level) = q8_kernel_level() else {
            return;
        };
        if rows.is_empty() || groups.is_empty() {
            return;
        }
        SCRATCH.with_borrow_mut(|(xq, xd)| {
            xq.resize(rows.len() * k, 0);
            xd.resize(rows.len() * nb, 0.0);
            for (i, row) in rows.clone().enumerate() {
                let src = std::slice::from_raw_parts(
                    (x.data as *const u8).add(row * x.nb[1]).cast::<f32>(),
                    k,
                );
                quantize_row(level, src, &mut xq[i * k..][..k], &mut xd[i * nb..][..nb]);
            }
            gemm_rows(
                level,
                w.data as *const u8,
                nb,
                xq,
                xd,
                rows,
                groups,
                (*dst).data as *mut f32,
                y_stride,
                bias,
            );
        });
    }
}

/// erf(x) for |x| <= 4 as x P(x^2) / Q(x^2), fitted to erf (engine/tools/fit_erf.py);
/// beyond 4, erf is 1 in f32. Largest error in f32 arithmetic: 3.7e-7.
const ERF_P: [f32; 8] = [
    std::f32::consts::FRAC_2_SQRT_PI,
    0.148_040_92,
    0.045_036_23,
    0.001_842_802_5,
    0.000_137_404_48,
    -3.508_369e-6,
    7.461_862e-8,
    -7.455_283_6e-10,
];
const ERF_Q: [f32; 5] = [
    1.0,
    0.464_530_05,
    0.094_760_2,
    0.010_568_029,
    0.000_607_782_45,
];

/// erf(x) with the rational approximation above: branch-free, so loops over it
/// vectorise.
#[inline(always)]
pub fn erf_approx(x: f32) -> f32 {
    let x = x.clamp(-4.0, 4.0);
    let t = x * x;
    let p = ERF_P.iter().rev().fold(0.0, |acc, &c| acc * t + c);
    let q = ERF_Q.iter().rev().fold(0.0, |acc, &c| acc * t + c);
    (x * p / q).clamp(-1.0, 1.0)
}

/// The exact GELU, `x/2 (1 + erf(x / sqrt 2))`, over a slice.
#[inline(always)]
fn gelu_erf_slice(x: &[f32], y: &mut [f32]) {
    for (yv, &xv) in y.iter_mut().zip(x) {
        *yv = 0.5 * xv * (1.0 + erf_approx(xv * std::f32::consts::FRAC_1_SQRT_2));
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn gelu_erf_avx2(x: &[f32], y: &mut [f32]) {
    gelu_erf_slice(x, y)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn gelu_erf_avx512(x: &[f32], y: &mut [f32]) {
    gelu_erf_slice(x, y)
}

/// The exact GELU over a slice, vectorised for the widest vectors the kernels may use
/// ([`SimdLevel::allowed`]).
pub fn gelu_erf(x: &[f32], y: &mut [f32]) {
    match SimdLevel::allowed() {
        // SAFETY: the CPU has the function's target features.
        #[cfg(target_arch = "x86_64")]
        Some(SimdLevel::Avx512) => unsafe { gelu_erf_avx512(x, y) },
        // SAFETY: as above.
        #[cfg(target_arch = "x86_64")]
        Some(SimdLevel::Avx2) => unsafe { gelu_erf_avx2(x, y) },
        _ => gelu_erf_slice(x, y),
    }
}

/// The custom op: `dst` = GELU(src 0), both contiguous f32 of the same shape, split
/// among threads in 4 KiB runs.
///
/// # Safety
/// Called by [`super::custom_op`]'s callback on a tensor made by
/// [`super::Context::gelu_erf_cpu`], after it checked every operand.
pub(super) unsafe fn gelu_erf_op(
    dst: *mut sys::ggml_tensor,
    ith: usize,
    nth: usize,
    _param: usize,
) {
    // SAFETY: ggml passes the live tensor made by gelu_erf_cpu; source and destination
    // are contiguous f32 tensors of the same element count.
    unsafe {
        let x = &*(*dst).src[0];
        let len = sys::ggml_nelements(dst) as usize;
        let range = split_range(len, 1024, ith, nth);
        if range.is_empty() {
            return;
        }
        let src = std::slice::from_raw_parts((x.data as *const f32).add(range.start), range.len());
        let out =
            std::slice::from_raw_parts_mut(((*dst).data as *mut f32).add(range.start), range.len());
        gelu_erf(src, out);
    }
}

/// Head width the attention kernel supports: 64, every Whisper size's.
pub const ATTENTION_HEAD_DIM: usize = 64;
/// Query rows one work unit of the attention kernel covers: its scores (rows of all
/// keys) stay in L2, so the softmax is exact in one pass.
const ATT_BLOCK: usize = 32;

/// True when this CPU runs the encoder attention kernel (AVX-512 F, or AVX2 with
/// FMA: [`SimdLevel::allowed`]).
pub fn attention_kernel_available() -> bool {
    SimdLevel::allowed().is_some()
}

/// e^x for x <= 0 (softmax arguments), branch-free so loops vectorise: 2^n times a
/// degree-6 polynomial on the reduced argument; relative error below 3e-7 (2 ulp). Arguments
/// below -87 give (nearly) 0. The plain form of `exp_nonpositive_avx512`.
#[cfg(test)]
fn exp_nonpositive(x: f32) -> f32 {
    let x = x.max(-87.0);
    let n = (x * std::f32::consts::LOG2_E).round_ties_even();
    // x - n ln 2 in two steps, so the reduced argument keeps full precision.
    let r = (x - n * EXP_LN2_HI) - n * EXP_LN2_LO;
    let p = EXP_POLY.iter().rev().fold(0.0, |acc, &c| acc * r + c);
    p * f32::from_bits(((n as i32 + 127) << 23) as u32)
}

/// ln 2 split so that `n * EXP_LN2_HI` is exact for the exponents softmax meets.
const EXP_LN2_HI: f32 = 0.693_145_75;
const EXP_LN2_LO: f32 = 1.428_606_8e-6;
/// Taylor coefficients of e^r, |r| <= ln(2)/2.
const EXP_POLY: [f32; 7] = [
    1.0,
    1.0,
    0.5,
    0.166_666_67,
    0.041_666_668,
    0.008_333_334,
    0.001_388_889,
];

/// The vector operations the attention kernel (and the f32 product) are written with,
/// once per instruction set: one vector of f32 lanes, from which a run of four held in
/// registers is built, and one softmax row. The loops are generic over it and are
/// compiled inside one `target_feature` entry point per set ([`attention_items`]).
#[cfg(target_arch = "x86_64")]
trait AttentionSimd {
    /// f32 lanes of one vector.
    const LANES: usize;
    /// Columns one pass keeps in registers: a run of four vectors.
    const COLS: usize = 4 * Self::LANES;
    /// Query rows one micro-kernel call handles: `TILE_ROWS` runs fill the accumulator
    /// registers.
    const TILE_ROWS: usize;
    /// One vector.
    type V: Copy;
    /// # Safety
    /// The set's features; `LANES` readable floats at `p`.
    unsafe fn load1(p: *const f32) -> Self::V;
    /// # Safety
    /// The set's features; `LANES` writable floats at `p`.
    unsafe fn store1(p: *mut f32, v: Self::V);
    /// # Safety
    /// The set's features.
    unsafe fn splat(a: f32) -> Self::V;
    /// `a * b + c`, fused.
    ///
    /// # Safety
    /// The set's features.
    unsafe fn mul_add(a: Self::V, b: Self::V, c: Self::V) -> Self::V;
    /// # Safety
    /// The set's features.
    unsafe fn mul(a: Self::V, b: Self::V) -> Self::V;
    /// Replaces the first `t` scores with `exp(score - max)` and returns 1 / their sum.
    ///
    /// # Safety
    /// The set's features; `s` has `t` rounded up to 64 floats.
    unsafe fn softmax_row(s: *mut f32, t: usize) -> f32;

    /// A run of `COLS` floats at `p`, written without closures: a closure would not
    /// inherit the caller's target features, and the intrinsics would stay calls.
    ///
    /// # Safety
    /// The set's features; `COLS` readable floats at `p`.
    #[inline(always)]
    unsafe fn load(p: *const f32) -> [Self::V; 4] {
        // SAFETY: caller's guarantee.
        let mut run = unsafe { Self::zero() };
        for (u, v) in run.iter_mut().enumerate() {
            // SAFETY: the caller's guarantee covers the run's four vectors.
            *v = unsafe { Self::load1(p.add(Self::LANES * u)) };
        }
        run
    }

    /// Stores a run times `scale`.
    ///
    /// # Safety
    /// The set's features; `COLS` writable floats at `p`.
    #[inline(always)]
    unsafe fn store(p: *mut f32, run: [Self::V; 4], scale: f32) {
        // SAFETY: caller's guarantee.
        unsafe {
            let scale = Self::splat(scale);
            for (u, v) in run.iter().enumerate() {
                Self::store1(p.add(Self::LANES * u), Self::mul(*v, scale));
            }
        }
    }

    /// # Safety
    /// The set's features.
    #[inline(always)]
    unsafe fn zero() -> [Self::V; 4] {
        // SAFETY: caller's guarantee.
        [unsafe { Self::splat(0.0) }; 4]
    }

    /// `acc += a * b` over a run.
    ///
    /// # Safety
    /// The set's features.
    #[inline(always)]
    unsafe fn fma(acc: &mut [Self::V; 4], a: f32, b: &[Self::V; 4]) {
        // SAFETY: caller's guarantee.
        unsafe {
            let a = Self::splat(a);
            for (acc_u, b_u) in acc.iter_mut().zip(b) {
                *acc_u = Self::mul_add(a, *b_u, *acc_u);
            }
        }
    }
}

/// An [`AttentionSimd`] instruction set from its intrinsics: one vector type and its
/// load, store, broadcast, fused multiply-add and multiply, and the softmax row.
macro_rules! attention_simd {
    ($(#[$doc:meta])* $name:ident, lanes $lanes:expr, rows $rows:expr, $v:ty,
     $load:ident, $store:ident, $set1:ident, $fmadd:ident, $mul:ident, $softmax:ident) => {
        $(#[$doc])*
        #[cfg(target_arch = "x86_64")]
        struct $name;

        #[cfg(target_arch = "x86_64")]
        impl AttentionSimd for $name {
            const LANES: usize = $lanes;
            const TILE_ROWS: usize = $rows;
            type V = $v;

            #[inline(always)]
            unsafe fn load1(p: *const f32) -> Self::V {
                // SAFETY: caller's guarantee.
                unsafe { std::arch::x86_64::$load(p) }
            }

            #[inline(always)]
            unsafe fn store1(p: *mut f32, v: Self::V) {
                // SAFETY: caller's guarantee.
                unsafe { std::arch::x86_64::$store(p, v) }
            }

            #[inline(always)]
            unsafe fn splat(a: f32) -> Self::V {
                // SAFETY: caller's guarantee.
                unsafe { std::arch::x86_64::$set1(a) }
            }

            #[inline(always)]
            unsafe fn mul_add(a: Self::V, b: Self::V, c: Self::V) -> Self::V {
                // SAFETY: caller's guarantee.
                unsafe { std::arch::x86_64::$fmadd(a, b, c) }
            }

            #[inline(always)]
            unsafe fn mul(a: Self::V, b: Self::V) -> Self::V {
                // SAFETY: caller's guarantee.
                unsafe { std::arch::x86_64::$mul(a, b) }
            }

            #[inline(always)]
            unsafe fn softmax_row(s: *mut f32, t: usize) -> f32 {
                // SAFETY: caller's guarantee.
                unsafe { $softmax(s, t) }
            }
        }
    };
}

attention_simd!(
    /// AVX-512 F: runs of 64 columns, tiles of 4 rows.
    Avx512Attention, lanes 16, rows 4, std::arch::x86_64::__m512,
    _mm512_loadu_ps, _mm512_storeu_ps, _mm512_set1_ps, _mm512_fmadd_ps, _mm512_mul_ps,
    softmax_row_avx512
);

attention_simd!(
    /// AVX2 with FMA: runs of 32 columns, tiles of 2 rows, so that the accumulators and
    /// one run of keys fit the 16 registers.
    Avx2Attention, lanes 8, rows 2, std::arch::x86_64::__m256,
    _mm256_loadu_ps, _mm256_storeu_ps, _mm256_set1_ps, _mm256_fmadd_ps, _mm256_mul_ps,
    softmax_row_avx2
);

/// Defines `$name(level, args)`: the generic `$generic::<S>(args)` compiled once per
/// [`SimdLevel`] inside a `target_feature` function (with the [`AttentionSimd`] set of
/// that level), and the call of the one `level` names.
macro_rules! by_level {
    ($(#[$doc:meta])* fn $name:ident($($arg:ident: $ty:ty),*) => $generic:ident) => {
        $(#[$doc])*
        ///
        /// # Safety
        /// The CPU must have `level`; the arguments as the generic function requires.
        #[cfg(target_arch = "x86_64")]
        unsafe fn $name(level: SimdLevel, $($arg: $ty),*) {
            #[target_feature(enable = "avx512f")]
            unsafe fn avx512($($arg: $ty),*) {
                // SAFETY: the caller's guarantees, and this function's features.
                unsafe { $generic::<Avx512Attention>($($arg),*) }
            }
            #[target_feature(enable = "avx2,fma")]
            unsafe fn avx2($($arg: $ty),*) {
                // SAFETY: as above.
                unsafe { $generic::<Avx2Attention>($($arg),*) }
            }
            // SAFETY: the caller's guarantees.
            unsafe {
                match level {
                    SimdLevel::Avx512 => avx512($($arg),*),
                    SimdLevel::Avx2 => avx2($($arg),*),
                }
            }
        }
    };
}

/// Calls tile function `$f::<S, R>` for `$rows` rows (at most 4) with the arguments.
macro_rules! by_tile {
    ($rows:expr, $f:ident, $($arg:expr),*) => {
        match $rows {
            4 => $f::<S, 4>($($arg),*),
            3 => $f::<S, 3>($($arg),*),
            2 => $f::<S, 2>($($arg),*),
            _ => $f::<S, 1>($($arg),*),
        }
    };
}

/// Keys one pass covers: their transposed keys (16 KiB) and values stay in L1 while
/// every query tile of the block uses them.
const KEY_CHUNK: usize = 64;

/// `R` rows of `a` times `b` over `k`, for 64 output columns: `out[r][j] = scale *
/// sum over c of a[r][c] * b[c][j]`, `S::COLS` columns per pass, summed in c order
/// (so every instruction set gives the same bits). The attention's scores (queries
/// times transposed keys, k = 64) and the f32 product ([`f32_rows`]) are made of it.
///
/// # Safety
/// `S`'s features; `a` `R` rows `a_stride` apart with `k` values; `b` `k` rows
/// `b_stride` apart with 64 floats from it; `out` `R` rows `out_stride` apart with 64
/// floats from it.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn product_tile<S: AttentionSimd, const R: usize>(
    a: *const f32,
    a_stride: usize,
    k: usize,
    b: *const f32,
    b_stride: usize,
    out: *mut f32,
    out_stride: usize,
    scale: f32,
) {
    // SAFETY: caller's guarantee.
    unsafe {
        for j in (0..64).step_by(S::COLS) {
            let mut acc = [S::zero(); R];
            for c in 0..k {
                let bv = S::load(b.add(c * b_stride + j));
                for (r, acc_r) in acc.iter_mut().enumerate() {
                    S::fma(acc_r, *a.add(r * a_stride + c), &bv);
                }
            }
            for (r, acc_r) in acc.iter().enumerate() {
                S::store(out.add(r * out_stride + j), *acc_r, scale);
            }
        }
    }
}

/// Adds probabilities times values of `keys` keys (at most 64) to `R` rows of 64
/// running outputs in `o` (rows 64 apart), `S::COLS` outputs per pass.
///
/// # Safety
/// `S`'s features; `p` `R` rows `tp` apart with `keys` floats; `v` `keys` rows
/// `x_stride` apart with 64 values; `o` `R * 64` floats.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn values_tile<S: AttentionSimd, const R: usize>(
    p: *const f32,
    tp: usize,
    v: *const f32,
    x_stride: usize,
    keys: usize,
    o: *mut f32,
) {
    // SAFETY: caller's guarantee.
    unsafe {
        for c in (0..ATTENTION_HEAD_DIM).step_by(S::COLS) {
            let mut acc = [S::zero(); R];
            for (r, a) in acc.iter_mut().enumerate() {
                *a = S::load(o.add(r * 64 + c));
            }
            for j in 0..keys {
                let vv = S::load(v.add(j * x_stride + c));
                for (r, a) in acc.iter_mut().enumerate() {
                    S::fma(a, *p.add(r * tp + j), &vv);
                }
            }
            for (r, a) in acc.iter().enumerate() {
                S::store(o.add(r * 64 + c), *a, 1.0);
            }
        }
    }
}

/// Replaces the first `t` scores with `exp(score - max)` and returns 1 / their sum.
///
/// # Safety
/// AVX-512 F; `s` has at least `t.div_ceil(16) * 16` floats.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn softmax_row_avx512(s: *mut f32, t: usize) -> f32 {
    use std::arch::x86_64::*;
    let chunks = t.div_ceil(16);
    let mask = |i: usize| -> __mmask16 {
        let n = (t - i * 16).min(16);
        ((1u32 << n) - 1) as __mmask16
    };
    let neg_inf = _mm512_set1_ps(f32::NEG_INFINITY);
    let mut mx = neg_inf;
    for i in 0..chunks {
        // SAFETY: caller's guarantee; masked lanes are not read.
        mx = _mm512_max_ps(mx, unsafe {
            _mm512_mask_loadu_ps(neg_inf, mask(i), s.add(i * 16))
        });
    }
    let m = _mm512_set1_ps(_mm512_reduce_max_ps(mx));
    let mut sum = _mm512_setzero_ps();
    for i in 0..chunks {
        // SAFETY: as above.
        let x = unsafe { _mm512_mask_loadu_ps(neg_inf, mask(i), s.add(i * 16)) };
        let e = exp_nonpositive_avx512(_mm512_sub_ps(x, m));
        sum = _mm512_add_ps(sum, _mm512_maskz_mov_ps(mask(i), e));
        // SAFETY: as above.
        unsafe { _mm512_mask_storeu_ps(s.add(i * 16), mask(i), e) };
    }
    let mut lanes = [0f32; 16];
    // SAFETY: 16 floats.
    unsafe { _mm512_storeu_ps(lanes.as_mut_ptr(), sum) };
    1.0 / sum_lanes(lanes)
}

/// [`exp_nonpositive`] on 16 lanes.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn exp_nonpositive_avx512(x: std::arch::x86_64::__m512) -> std::arch::x86_64::__m512 {
    use std::arch::x86_64::*;
    let x = _mm512_max_ps(x, _mm512_set1_ps(-87.0));
    let n = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
        _mm512_mul_ps(x, _mm512_set1_ps(std::f32::consts::LOG2_E)),
    );
    let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(EXP_LN2_HI), x);
    let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(EXP_LN2_LO), r);
    let mut p = _mm512_set1_ps(EXP_POLY[EXP_POLY.len() - 1]);
    for &c in EXP_POLY.iter().rev().skip(1) {
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(c));
    }
    _mm512_scalef_ps(p, n)
}

/// The softmax row with AVX2, in the AVX-512 version's order: 16-value chunks, two
/// 8-lane accumulators standing for its one 16-lane accumulator, and the same final
/// sum, so that both give the same bits. Lanes past `t` are read as -inf and their
/// exponentials zeroed (the row's padding may be overwritten).
///
/// # Safety
/// AVX2 and FMA; `s` has at least `t.div_ceil(16) * 16` floats.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn softmax_row_avx2(s: *mut f32, t: usize) -> f32 {
    use std::arch::x86_64::*;
    let eights = 2 * t.div_ceil(16);
    let lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    let mask = |i: usize| {
        _mm256_castsi256_ps(_mm256_cmpgt_epi32(
            _mm256_set1_epi32(t as i32 - (i * 8) as i32),
            lanes,
        ))
    };
    let neg_inf = _mm256_set1_ps(f32::NEG_INFINITY);
    // SAFETY: caller's guarantee.
    let load =
        |i: usize| _mm256_blendv_ps(neg_inf, unsafe { _mm256_loadu_ps(s.add(i * 8)) }, mask(i));
    let mut mx = neg_inf;
    for i in 0..eights {
        mx = _mm256_max_ps(mx, load(i));
    }
    let m = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps::<1>(mx));
    let m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    let m = _mm256_set1_ps(_mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m))));
    let mut sum = [_mm256_setzero_ps(); 2];
    for i in 0..eights {
        let e = _mm256_and_ps(exp_nonpositive_avx2(_mm256_sub_ps(load(i), m)), mask(i));
        sum[i % 2] = _mm256_add_ps(sum[i % 2], e);
        // SAFETY: caller's guarantee.
        unsafe { _mm256_storeu_ps(s.add(i * 8), e) };
    }
    let mut lanes = [0f32; 16];
    // SAFETY: 16 floats.
    unsafe {
        _mm256_storeu_ps(lanes.as_mut_ptr(), sum[0]);
        _mm256_storeu_ps(lanes.as_mut_ptr().add(8), sum[1]);
    }
    1.0 / sum_lanes(lanes)
}

/// The 16 lane sums of a softmax row added in one fixed order (halving), so that every
/// instruction set's kernel gives the same bits.
#[inline(always)]
fn sum_lanes(mut v: [f32; 16]) -> f32 {
    let mut w = 8;
    while w > 0 {
        for i in 0..w {
            v[i] += v[i + w];
        }
        w /= 2;
    }
    v[0]
}

/// [`exp_nonpositive`] on 8 lanes; 2^n is built in the exponent bits (n >= -126).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn exp_nonpositive_avx2(x: std::arch::x86_64::__m256) -> std::arch::x86_64::__m256 {
    use std::arch::x86_64::*;
    let x = _mm256_max_ps(x, _mm256_set1_ps(-87.0));
    let n = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(_mm256_mul_ps(
        x,
        _mm256_set1_ps(std::f32::consts::LOG2_E),
    ));
    let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(EXP_LN2_HI), x);
    let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(EXP_LN2_LO), r);
    let mut p = _mm256_set1_ps(EXP_POLY[EXP_POLY.len() - 1]);
    for &c in EXP_POLY.iter().rev().skip(1) {
        p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(c));
    }
    let two_n = _mm256_slli_epi32::<23>(_mm256_add_epi32(
        _mm256_cvtps_epi32(n),
        _mm256_set1_epi32(127),
    ));
    _mm256_mul_ps(p, _mm256_castsi256_ps(two_n))
}

/// Attention of query rows `r0..r0 + rows` (at most [`ATT_BLOCK`]) of one head: scores
/// in key chunks, an exact softmax per row, values in key chunks, then the rows
/// normalised into `y`.
///
/// # Safety
/// `S`'s features; `q`, `v` and `y` point at row 0 of the head's slices (rows
/// `x_stride`, `x_stride` and `y_stride` apart, `t` rows); `kt` the head's keys
/// transposed (64 rows of `tp` floats); `s` `ATT_BLOCK * tp` floats, `o` `ATT_BLOCK * 64`.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn attention_block<S: AttentionSimd>(
    q: *const f32,
    v: *const f32,
    x_stride: usize,
    kt: &[f32],
    tp: usize,
    t: usize,
    r0: usize,
    rows: usize,
    s: &mut [f32],
    o: &mut [f32],
    y: *mut f32,
    y_stride: usize,
) {
    // SAFETY: every pointer stays inside the buffers the caller describes.
    unsafe {
        for jc in (0..tp).step_by(KEY_CHUNK) {
            for tr in (0..rows).step_by(S::TILE_ROWS) {
                let n = (rows - tr).min(S::TILE_ROWS);
                let qp = q.add((r0 + tr) * x_stride);
                by_tile!(
                    n,
                    product_tile,
                    qp,
                    x_stride,
                    ATTENTION_HEAD_DIM,
                    kt.as_ptr().add(jc),
                    tp,
                    s.as_mut_ptr().add(tr * tp + jc),
                    tp,
                    1.0 / (ATTENTION_HEAD_DIM as f32).sqrt()
                );
            }
        }
        let mut inv = [0f32; ATT_BLOCK];
        for (r, i) in inv.iter_mut().enumerate().take(rows) {
            *i = S::softmax_row(s.as_mut_ptr().add(r * tp), t);
        }
        o[..rows * 64].fill(0.0);
        for jc in (0..t).step_by(KEY_CHUNK) {
            let keys = (t - jc).min(KEY_CHUNK);
            for tr in (0..rows).step_by(S::TILE_ROWS) {
                let n = (rows - tr).min(S::TILE_ROWS);
                let pp = s.as_ptr().add(tr * tp + jc);
                let vp = v.add(jc * x_stride);
                by_tile!(
                    n,
                    values_tile,
                    pp,
                    tp,
                    vp,
                    x_stride,
                    keys,
                    o.as_mut_ptr().add(tr * 64)
                );
            }
        }
        for r in 0..rows {
            let out = std::slice::from_raw_parts_mut(y.add((r0 + r) * y_stride), 64);
            for (dst, &val) in out.iter_mut().zip(&o[r * 64..(r + 1) * 64]) {
                *dst = val * inv[r];
            }
        }
    }
}

/// A worker thread's transposed keys of one head, its score rows and its output rows.
type AttentionScratch = (Vec<f32>, Vec<f32>, Vec<f32>);

thread_local! {
    /// Each worker thread's [`AttentionScratch`], reused across calls.
    static ATT_SCRATCH: RefCell<AttentionScratch> =
        const { RefCell::new((Vec::new(), Vec::new(), Vec::new())) };
}

/// The attention op's tensors: `t` rows `x_stride` floats apart of stacked queries,
/// keys and values (`3 d` floats each, `d = heads * 64`), and the output, `t` rows
/// `y_stride` apart of `d` floats.
#[derive(Clone, Copy)]
struct AttentionTensors {
    x: *const f32,
    x_stride: usize,
    y: *mut f32,
    y_stride: usize,
    heads: usize,
    t: usize,
}

/// Attention of query rows `items` (head-major units of [`ATT_BLOCK`] rows).
///
/// # Safety
/// `S`'s features; `a` describes live tensors of those sizes.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn attention_items_with<S: AttentionSimd>(
    a: AttentionTensors,
    items: std::ops::Range<usize>,
    (kt, s, o): &mut AttentionScratch,
) {
    const DH: usize = ATTENTION_HEAD_DIM;
    let (t, x) = (a.t, a.x);
    let d = a.heads * DH;
    let tiles = t.div_ceil(ATT_BLOCK);
    let tp = t.div_ceil(64) * 64;
    kt.resize(DH * tp, 0.0);
    s.resize(ATT_BLOCK * tp, 0.0);
    o.resize(ATT_BLOCK * DH, 0.0);
    let mut loaded = None;
    for item in items {
        let (h, tile) = (item / tiles, item % tiles);
        if loaded != Some(h) {
            for j in 0..tp {
                for c in 0..DH {
                    kt[c * tp + j] = if j < t {
                        // SAFETY: key row j of head h lies inside x.
                        unsafe { *x.add(j * a.x_stride + d + h * DH + c) }
                    } else {
                        0.0
                    };
                }
            }
            loaded = Some(h);
        }
        let r0 = tile * ATT_BLOCK;
        let rows = (t - r0).min(ATT_BLOCK);
        // SAFETY: the caller's guarantees cover these rows and this head.
        unsafe {
            let q = x.add(h * DH);
            let v = x.add(2 * d + h * DH);
            let yh = a.y.add(h * DH);
            attention_block::<S>(q, v, a.x_stride, kt, tp, t, r0, rows, s, o, yh, a.y_stride);
        }
    }
}

by_level!(
    /// [`attention_items_with`] at a level.
    fn attention_items_at(
        a: AttentionTensors,
        items: std::ops::Range<usize>,
        scratch: &mut AttentionScratch
    ) => attention_items_with
);

/// Attention of query rows `items` at `level` (see [`attention_items_with`]).
///
/// # Safety
/// The CPU must have `level`; `a` describes live tensors.
#[cfg(target_arch = "x86_64")]
unsafe fn attention_items(level: SimdLevel, a: AttentionTensors, items: std::ops::Range<usize>) {
    // Passed in, so that the generic body holds no closure: a closure there would be
    // compiled without the entry points' target features.
    let mut scratch = ATT_SCRATCH.take();
    // SAFETY: the caller's guarantees.
    unsafe { attention_items_at(level, a, items, &mut scratch) };
    ATT_SCRATCH.set(scratch);
}

/// The custom op: `dst` [d, t] = multi-head self-attention (no mask, scale 1/8) of
/// src 0, [3d, t] rows of stacked queries, keys and values; `param` is the number
/// of heads. Threads split (head, block of [`ATT_BLOCK`] rows) units.
///
/// # Safety
/// Called by [`super::custom_op`]'s callback on a tensor made by
/// [`super::Context::self_attention_cpu`], after it checked every operand.
pub(super) unsafe fn attention_op(
    dst: *mut sys::ggml_tensor,
    ith: usize,
    nth: usize,
    param: usize,
) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: ggml passes the live tensor made by self_attention_cpu: a contiguous
    // [3d, t] f32 source and a [d, t] f32 destination with d = heads * 64.
    unsafe {
        let heads = param;
        let x = &*(*dst).src[0];
        let t = (*dst).ne[1] as usize;
        let items = split_range(heads * t.div_ceil(ATT_BLOCK), 1, ith, nth);
        let Some(level) = SimdLevel::allowed() else {
            return;
        };
        let tensors = AttentionTensors {
            x: x.data as *const f32,
            x_stride: x.nb[1] / 4,
            y: (*dst).data as *mut f32,
            y_stride: (*dst).nb[1] / 4,
            heads,
            t,
        };
        attention_items(level, tensors, items);
    }
}

/// Rows `rows` of `y = x W^T` for an f32 weight packed transposed (`wt`: `k` rows of
/// `n` floats, `n` a multiple of 64), 64 output columns at a time so that one panel
/// of the weight stays in L2 while every row tile passes.
///
/// # Safety
/// `S`'s features; `x` holds rows `rows` of `k` floats `x_stride` apart, `y` the same
/// rows of `n` floats `y_stride` apart.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn f32_rows_with<S: AttentionSimd>(p: F32Product, rows: std::ops::Range<usize>) {
    let F32Product {
        x,
        x_stride,
        k,
        wt,
        n,
        y,
        y_stride,
    } = p;
    // SAFETY: the caller's guarantees cover every tile.
    unsafe {
        for col in (0..n).step_by(64) {
            for r in rows.clone().step_by(S::TILE_ROWS) {
                let tile = (rows.end - r).min(S::TILE_ROWS);
                by_tile!(
                    tile,
                    product_tile,
                    x.add(r * x_stride),
                    x_stride,
                    k,
                    wt.add(col),
                    n,
                    y.add(r * y_stride + col),
                    y_stride,
                    1.0
                );
            }
        }
    }
}

/// The f32 product's operands: `m` rows of `k` activations `x_stride` floats apart,
/// the weight packed transposed (`k` rows of `n`), and `m` output rows of `n`.
#[derive(Clone, Copy)]
struct F32Product {
    x: *const f32,
    x_stride: usize,
    k: usize,
    wt: *const f32,
    n: usize,
    y: *mut f32,
    y_stride: usize,
}

by_level!(
    /// Rows `rows` of the f32 product ([`f32_rows_with`]) at a level.
    fn f32_rows(p: F32Product, rows: std::ops::Range<usize>) => f32_rows_with
);

/// Output columns of the f32 product must come in these (one run of 64 per tile).
pub const F32_PRODUCT_COLS: usize = 64;

/// An f32 weight (`n` rows of `k`, ggml's `[k, n]`) transposed for [`f32_rows`]:
/// `k` rows of `n`. `None` unless `n` is a multiple of [`F32_PRODUCT_COLS`] and the
/// data holds `n * k` values.
pub fn pack_f32_transposed(w: &[f32], k: usize, n: usize) -> Option<Vec<f32>> {
    if k == 0 || n == 0 || !n.is_multiple_of(F32_PRODUCT_COLS) || w.len() != n * k {
        return None;
    }
    let mut wt = vec![0f32; n * k];
    for (row, values) in w.chunks_exact(k).enumerate() {
        for (c, &v) in values.iter().enumerate() {
            wt[c * n + row] = v;
        }
    }
    Some(wt)
}

/// The custom op: `dst` [n, m] = activations (src 1, [k, m], rows contiguous) times
/// the transposed f32 weight (src 0, [n, k] from [`pack_f32_transposed`]). Threads
/// split the rows.
///
/// # Safety
/// Called by [`super::custom_op`]'s callback on a tensor made by
/// [`super::Context::mul_mat_f32_packed`], after it checked every operand.
pub(super) unsafe fn f32_product_op(
    dst: *mut sys::ggml_tensor,
    ith: usize,
    nth: usize,
    _param: usize,
) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: ggml passes the live tensor made by mul_mat_f32_packed: an [n, k] f32
    // weight, [k, m] f32 activations with contiguous rows, an [n, m] f32 result.
    unsafe {
        let (w, x) = (&*(*dst).src[0], &*(*dst).src[1]);
        let m = x.ne[1] as usize;
        let rows = split_range(m, 4, ith, nth);
        let Some(level) = SimdLevel::allowed() else {
            return;
        };
        if rows.is_empty() {
            return;
        }
        let p = F32Product {
            x: x.data as *const f32,
            x_stride: x.nb[1] / 4,
            k: x.ne[0] as usize,
            wt: w.data as *const f32,
            n: w.ne[0] as usize,
            y: (*dst).data as *mut f32,
            y_stride: (*dst).nb[1] / 4,
        };
        f32_rows(level, p, rows);
    }
}

/// Values one step of the f16 product covers: one 512-bit vector, two 256-bit ones.
const F16_STEP: usize = 16;

/// The part of a row past its whole 16-value steps, added after the lane sums in one
/// plain loop, so every level adds it the same way.
///
/// # Safety
/// `k` readable values at `w` and `x`.
#[inline(always)]
unsafe fn f16_dot_tail(w: *const u16, x: *const f32, k: usize) -> f32 {
    let mut sum = 0f32;
    for c in k - k % F16_STEP..k {
        // SAFETY: caller's guarantee.
        sum += unsafe { f16_to_f32(*w.add(c)) * *x.add(c) };
    }
    sum
}

/// Four rows of f16 weights (`w`, rows `stride` values apart) times one row of `k` f32
/// activations, with AVX-512 F: per-lane sums in `k` order, then [`sum_lanes`], then
/// the tail ([`f16_dot_tail`]).
///
/// # Safety
/// AVX-512 F; 4 rows of `k` f16 at `w`, `stride` apart; `k` floats at `x`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn f16_dot4_avx512(w: *const u16, stride: usize, k: usize, x: *const f32) -> [f32; 4] {
    use std::arch::x86_64::*;
    let mut acc = [_mm512_setzero_ps(); 4];
    for c in (0..k - k % F16_STEP).step_by(F16_STEP) {
        // SAFETY: caller's guarantee.
        let xv = unsafe { _mm512_loadu_ps(x.add(c)) };
        for (i, a) in acc.iter_mut().enumerate() {
            // SAFETY: row i's 16 values at c lie inside the caller's rows.
            let wv = unsafe { _mm512_cvtph_ps(_mm256_loadu_si256(w.add(i * stride + c).cast())) };
            *a = _mm512_fmadd_ps(wv, xv, *a);
        }
    }
    let mut dots = [0f32; 4];
    for (i, (d, a)) in dots.iter_mut().zip(acc).enumerate() {
        let mut lanes = [0f32; 16];
        // SAFETY: 16 floats; the row as the caller describes it.
        unsafe {
            _mm512_storeu_ps(lanes.as_mut_ptr(), a);
            *d = sum_lanes(lanes) + f16_dot_tail(w.add(i * stride), x, k);
        }
    }
    dots
}

/// [`f16_dot4_avx512`] with AVX2, F16C and FMA: two 8-lane accumulators per row stand
/// for the 16-lane one, so both give the same bits.
///
/// # Safety
/// AVX2, F16C, FMA; as [`f16_dot4_avx512`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn f16_dot4_avx2(w: *const u16, stride: usize, k: usize, x: *const f32) -> [f32; 4] {
    use std::arch::x86_64::*;
    let mut acc = [[_mm256_setzero_ps(); 2]; 4];
    for c in (0..k - k % F16_STEP).step_by(F16_STEP) {
        // SAFETY: caller's guarantee.
        let xv = unsafe { [_mm256_loadu_ps(x.add(c)), _mm256_loadu_ps(x.add(c + 8))] };
        for (i, a) in acc.iter_mut().enumerate() {
            for h in 0..2 {
                // SAFETY: row i's 8 values at c + 8h lie inside the caller's rows.
                let wv = unsafe {
                    _mm256_cvtph_ps(_mm_loadu_si128(w.add(i * stride + c + 8 * h).cast()))
                };
                a[h] = _mm256_fmadd_ps(wv, xv[h], a[h]);
            }
        }
    }
    let mut dots = [0f32; 4];
    for (i, (d, a)) in dots.iter_mut().zip(acc).enumerate() {
        let mut lanes = [0f32; 16];
        // SAFETY: 16 floats; the row as the caller describes it.
        unsafe {
            _mm256_storeu_ps(lanes.as_mut_ptr(), a[0]);
            _mm256_storeu_ps(lanes.as_mut_ptr().add(8), a[1]);
            *d = sum_lanes(lanes) + f16_dot_tail(w.add(i * stride), x, k);
        }
    }
    dots
}

/// The f16 product's operands, per batch `b`: `n` weight rows of `k` f16 (rows
/// `w_row` values apart, batches `w_batch`), `m` activation rows of `k` f32 (`x_row`,
/// `x_batch` floats apart) and `m` output rows of `n` f32 (`y_row`, `y_batch`).
#[derive(Clone, Copy)]
struct F16Product {
    w: *const u16,
    w_row: usize,
    w_batch: usize,
    k: usize,
    n: usize,
    x: *const f32,
    x_row: usize,
    x_batch: usize,
    m: usize,
    y: *mut f32,
    y_row: usize,
    y_batch: usize,
}

/// Weight rows `rows` (starting at a multiple of 4) of batch `b` of the f16 product at
/// `level`, for every activation row while the 4 weight rows are in cache. A trailing
/// group of fewer than 4 rows re-reads the rows before it (`n >= 4`), so every call
/// covers 4 whole rows.
///
/// # Safety
/// The CPU must have `level`'s features (and F16C); `p` describes live buffers and
/// `n >= 4`.
#[cfg(target_arch = "x86_64")]
unsafe fn f16_rows(level: SimdLevel, p: F16Product, b: usize, rows: std::ops::Range<usize>) {
    let mut v = rows.start;
    while v < rows.end {
        let first = v.min(p.n - 4);
        for row in 0..p.m {
            // SAFETY: the caller's guarantees; rows first..first + 4 exist.
            unsafe {
                let wp = p.w.add(b * p.w_batch + first * p.w_row);
                let xp = p.x.add(b * p.x_batch + row * p.x_row);
                let dots = match level {
                    SimdLevel::Avx512 => f16_dot4_avx512(wp, p.w_row, p.k, xp),
                    SimdLevel::Avx2 => f16_dot4_avx2(wp, p.w_row, p.k, xp),
                };
                let yp = p.y.add(b * p.y_batch + row * p.y_row);
                for (i, d) in dots.iter().enumerate() {
                    if first + i >= v && first + i < rows.end {
                        *yp.add(first + i) = *d;
                    }
                }
            }
        }
        v += 4;
    }
}

/// The level the f16 product runs at: AVX2 level CPUs need F16C too (every AVX2 CPU
/// has it).
fn f16_product_level() -> Option<SimdLevel> {
    let level = SimdLevel::allowed()?;
    #[cfg(target_arch = "x86_64")]
    if level == SimdLevel::Avx2 && !std::arch::is_x86_feature_detected!("f16c") {
        return None;
    }
    Some(level)
}

/// True when this CPU runs [`super::Context::mul_mat_f16_cpu`].
pub fn f16_product_available() -> bool {
    f16_product_level().is_some()
}

/// The custom op: `dst` [n, m, b] = f16 weight (src 0, [k, n, b], rows contiguous)
/// times f32 activations (src 1, [k, m, b], rows contiguous). Threads split the work
/// in (batch, four weight rows) units: the product is a read of the weight, so that is
/// what is shared out.
///
/// # Safety
/// Called by [`super::custom_op`]'s callback on a tensor made by
/// [`super::Context::mul_mat_f16_cpu`], after it checked every operand.
pub(super) unsafe fn f16_product_op(
    dst: *mut sys::ggml_tensor,
    ith: usize,
    nth: usize,
    _param: usize,
) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: ggml passes the live tensor made by mul_mat_f16_cpu: an f16 weight and
    // f32 activations whose rows are contiguous, and a contiguous f32 result of
    // matching shape.
    unsafe {
        let (w, x, y) = (&*(*dst).src[0], &*(*dst).src[1], &*dst);
        let p = F16Product {
            w: w.data as *const u16,
            w_row: w.nb[1] / 2,
            w_batch: w.nb[2] / 2,
            k: w.ne[0] as usize,
            n: w.ne[1] as usize,
            x: x.data as *const f32,
            x_row: x.nb[1] / 4,
            x_batch: x.nb[2] / 4,
            m: x.ne[1] as usize,
            y: y.data as *mut f32,
            y_row: y.nb[1] / 4,
            y_batch: y.nb[2] / 4,
        };
        let groups = p.n.div_ceil(4);
        let units = split_range(groups * w.ne[2] as usize, 1, ith, nth);
        let Some(level) = f16_product_level() else {
            return;
        };
        for unit in units {
            let (b, g) = (unit / groups, unit % groups);
            f16_rows(level, p, b, 4 * g..(4 * g + 4).min(p.n));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Deterministic pseudo-random values in [-scale, scale).
    fn values(n: usize, seed: u64, scale: f32) -> Vec<f32> {
        let mut s = seed;
        (0..n)
            .map(|_| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((s >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale
            })
            .collect()
    }

    /// The levels this CPU can run for float work (attention, GELU), each tested.
    fn float_levels() -> Vec<SimdLevel> {
        let top = SimdLevel::detected();
        [SimdLevel::Avx2, SimdLevel::Avx512]
            .into_iter()
            .filter(|l| top.is_some_and(|t| *l <= t))
            .collect()
    }

    /// The levels this CPU can run the q8_0 product at.
    fn q8_levels() -> Vec<SimdLevel> {
        #[cfg(target_arch = "x86_64")]
        let vnni = std::arch::is_x86_feature_detected!("avx512bw")
            && std::arch::is_x86_feature_detected!("avx512vnni");
        #[cfg(not(target_arch = "x86_64"))]
        let vnni = false;
        float_levels()
            .into_iter()
            .filter(|l| *l == SimdLevel::Avx2 || vnni)
            .collect()
    }

    /// Asserts that runs of the same case at different levels gave the same bits (the
    /// kernels keep one order of float operations across instruction sets, so a
    /// transcript does not depend on the CPU).
    fn assert_same_bits<C: PartialEq + std::fmt::Debug, L: std::fmt::Debug>(
        runs: &[(C, L, Vec<f32>)],
        what: &str,
    ) {
        for (case, level, got) in runs {
            for (case2, level2, got2) in runs {
                if case == case2 {
                    let same = got
                        .iter()
                        .zip(got2)
                        .all(|(a, b)| a.to_bits() == b.to_bits());
                    assert!(same, "{level:?} and {level2:?} differ on {what} {case:?}");
                }
            }
        }
    }

    /// Says loudly which levels a test could not run on this CPU; with none at all the
    /// test would assert nothing, which fails under CI (`CI` set).
    fn report_missing(what: &str, levels: &[SimdLevel]) {
        for l in [SimdLevel::Avx2, SimdLevel::Avx512] {
            if !levels.contains(&l) {
                eprintln!("SKIPPED LOUDLY: this CPU cannot run the {l:?} {what}");
            }
        }
        if levels.is_empty() {
            fail_under_ci(&format!("no level of the {what} runs on this CPU"));
        }
    }

    /// Reports a test that could not check anything here, and fails it when `CI` is
    /// set: CI machines must run what they claim to test.
    fn fail_under_ci(why: &str) {
        eprintln!("NOTHING TESTED: {why}");
        assert!(
            std::env::var_os("CI").is_none(),
            "{why}, and CI is set: run CI on a CPU with AVX2, FMA and F16C"
        );
    }

    fn q8_rows(n: usize, k: usize, seed: u64) -> Vec<u8> {
        crate::ggml::quantize_rows(crate::ggml::DType::Q8_0, &values(n * k, seed, 0.5), k).unwrap()
    }

    /// Rows of `k` activations quantized with [`quantize_row_u8`]: bytes and scales.
    fn quantize_rows_u8(x: &[f32], k: usize) -> (Vec<u8>, Vec<f32>) {
        let nb = k / QK;
        let (mut xq, mut xd) = (vec![0u8; x.len()], vec![0f32; x.len() / QK]);
        for ((xr, qr), dr) in x.chunks(k).zip(xq.chunks_mut(k)).zip(xd.chunks_mut(nb)) {
            quantize_row_u8(xr, qr, dr);
        }
        (xq, xd)
    }

    #[test]
    fn packing_refuses_shapes_the_kernel_cannot_run() {
        let q = q8_rows(16, 64, 1);
        assert!(PackedQ8::pack(&q, 64, 16).is_some());
        assert!(PackedQ8::pack(&q, 60, 16).is_none(), "k not whole blocks");
        assert!(PackedQ8::pack(&q, 64, 15).is_none(), "n not whole groups");
        assert!(PackedQ8::pack(&q[1..], 64, 16).is_none(), "short data");
        assert!(PackedQ8::pack(&[], 0, 0).is_none());
    }

    #[test]
    fn packed_reference_matches_the_plain_q8_0_product() {
        // The reference computes from the packed layout; check it against the ggml
        // q8_0 blocks read directly, so both the packing and the reference are right.
        let (n, k, m) = (32, 96, 3);
        let q = q8_rows(n, k, 2);
        let w = PackedQ8::pack(&q, k, n).unwrap();
        let x = values(m * k, 3, 2.0);
        let nb = k / QK;
        let (xq, xd) = quantize_rows_u8(&x, k);
        let mut y = vec![0f32; m * n];
        gemm_reference(&w, &xq, &xd, m, &mut y);
        for r in 0..m {
            for col in 0..n {
                let mut want = 0f32;
                for b in 0..nb {
                    let blk = &q[(col * nb + b) * Q8_BLOCK_BYTES..][..Q8_BLOCK_BYTES];
                    let dw = f16_to_f32(u16::from_le_bytes([blk[0], blk[1]]));
                    let dot: i32 = (0..QK)
                        .map(|i| (blk[2 + i] as i8 as i32) * (xq[r * k + b * QK + i] as i32 - 128))
                        .sum();
                    want += dot as f32 * (dw * xd[r * nb + b]);
                }
                assert_eq!(y[r * n + col], want, "row {r} col {col}");
                // And the product is close to the float product of the same values.
                let exact: f32 = (0..k)
                    .map(|i| {
                        let blk = &q[(col * nb + i / QK) * Q8_BLOCK_BYTES..];
                        let dw = f16_to_f32(u16::from_le_bytes([blk[0], blk[1]]));
                        dw * (blk[2 + i % QK] as i8 as f32) * x[r * k + i]
                    })
                    .sum();
                assert!(
                    (want - exact).abs() < 0.02 * (1.0 + exact.abs()),
                    "{want} vs {exact}"
                );
            }
        }
    }

    #[test]
    fn activations_quantize_like_ggml() {
        let x = values(4 * QK, 4, 3.0);
        let (mut q, mut d) = (vec![0u8; x.len()], vec![0f32; 4]);
        quantize_row_u8(&x, &mut q, &mut d);
        let ggml = crate::ggml::quantize_rows(crate::ggml::DType::Q8_0, &x, x.len()).unwrap();
        for b in 0..4 {
            let blk = &ggml[b * Q8_BLOCK_BYTES..][..Q8_BLOCK_BYTES];
            assert_eq!(d[b], f16_to_f32(u16::from_le_bytes([blk[0], blk[1]])));
            for i in 0..QK {
                let ours = q[b * QK + i] as i32 - 128;
                let theirs = blk[2 + i] as i8 as i32;
                // ggml's reference quantizer rounds halves away from zero; ties differ by one.
                assert!(
                    (ours - theirs).abs() <= 1,
                    "block {b} value {i}: {ours} vs {theirs}"
                );
            }
        }
        let levels = float_levels();
        report_missing("activation quantizer", &levels);
        #[cfg(target_arch = "x86_64")]
        for level in levels {
            let (mut q2, mut d2) = (vec![0u8; x.len()], vec![0f32; 4]);
            // SAFETY: the CPU has the level's features; four whole blocks.
            unsafe { quantize_row(level, &x, &mut q2, &mut d2) };
            assert_eq!(
                (q2, d2),
                (q.clone(), d.clone()),
                "{level:?} and plain quantizers agree"
            );
        }
        let (mut q0, mut d0) = (vec![0u8; QK], vec![1f32]);
        quantize_row_u8(&[0.0; QK], &mut q0, &mut d0);
        assert!(
            q0.iter().all(|&v| v == 128) && d0[0] == 0.0,
            "an all-zero block"
        );
    }

    #[test]
    fn q8_kernels_match_the_reference_and_each_other_on_every_tile_shape() {
        let levels = q8_levels();
        report_missing("packed q8_0 product", &levels);
        #[cfg(target_arch = "x86_64")]
        for &(n, k, m) in &[
            (16, 32, 1),
            (48, 64, 7),
            (80, 384, 13),
            (64, 96, 4),
            (32, 32, 2),
        ] {
            let q = q8_rows(n, k, (n * k + m) as u64);
            let w = PackedQ8::pack(&q, k, n).unwrap();
            let nb = k / QK;
            let (xq, xd) = quantize_rows_u8(&values(m * k, 9, 1.5), k);
            let mut want = vec![0f32; m * n];
            gemm_reference(&w, &xq, &xd, m, &mut want);
            let bias = values(n, 11, 1.0);
            let mut by_level = Vec::new();
            for (level, nth, with_bias) in levels.iter().flat_map(|&l| {
                [(1, false), (2, true), (3, false), (3, true)].map(|(nth, b)| (l, nth, b))
            }) {
                let want: Vec<f32> = want
                    .iter()
                    .enumerate()
                    .map(|(i, w)| if with_bias { w + bias[i % n] } else { *w })
                    .collect();
                let bias_ptr = if with_bias {
                    bias.as_ptr()
                } else {
                    std::ptr::null()
                };
                let mut got = vec![f32::NAN; m * n];
                for ith in 0..nth {
                    let (rows, groups) = q8_work(m, n / GROUP_COLS, ith, nth);
                    if rows.is_empty() || groups.is_empty() {
                        continue;
                    }
                    // SAFETY: the CPU has the features; buffers are sized for the shape.
                    unsafe {
                        gemm_rows(
                            level,
                            w.bytes.as_ptr(),
                            nb,
                            &xq[rows.start * k..],
                            &xd[rows.start * nb..],
                            rows,
                            groups,
                            got.as_mut_ptr(),
                            n,
                            bias_ptr,
                        )
                    };
                }
                for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                    assert!(
                        (g - w).abs() <= 1e-5 * (1.0 + w.abs()),
                        "{level:?} {n}x{k}x{m} nth {nth} at {i}: {g} vs {w}"
                    );
                }
                by_level.push(((nth, with_bias), level, got));
            }
            // Exact integer sums and the same float steps: the levels agree to the bit.
            assert_same_bits(&by_level, &format!("{n}x{k}x{m}"));
        }
    }

    #[test]
    fn split_ranges_cover_everything_once_in_units() {
        for len in [0, 1, 5, 16, 1500] {
            for nth in 1..=5 {
                let ranges: Vec<_> = (0..nth).map(|i| split_range(len, 4, i, nth)).collect();
                let mut next = 0;
                for r in &ranges {
                    if r.is_empty() {
                        continue;
                    }
                    assert_eq!(r.start, next);
                    assert!(r.start % 4 == 0);
                    next = r.end;
                }
                assert_eq!(next, len, "len {len} nth {nth}");
            }
        }
    }

    #[test]
    fn rational_erf_is_within_4e_7_of_libm() {
        let mut worst = 0f64;
        for i in -600_000..=600_000 {
            let x = i as f32 * 1e-5;
            let want = libm_erf(x as f64);
            worst = worst.max((erf_approx(x) as f64 - want).abs());
        }
        assert!(worst < 4e-7, "worst error {worst}");
        let x = values(4096, 5, 8.0);
        let mut y = vec![0f32; x.len()];
        gelu_erf(&x, &mut y);
        let levels = float_levels();
        report_missing("GELU", &levels);
        let mut by_level = vec![((), None, y.clone())];
        #[cfg(target_arch = "x86_64")]
        for level in levels {
            let mut yl = vec![0f32; x.len()];
            // SAFETY: the CPU has the level's features.
            unsafe {
                match level {
                    SimdLevel::Avx512 => gelu_erf_avx512(&x, &mut yl),
                    SimdLevel::Avx2 => gelu_erf_avx2(&x, &mut yl),
                }
            }
            by_level.push(((), Some(level), yl));
        }
        let mut plain = vec![0f32; x.len()];
        gelu_erf_slice(&x, &mut plain);
        by_level.push(((), None, plain));
        assert_same_bits(&by_level, "GELU");
        for (xv, yv) in x.iter().zip(&y) {
            let want = 0.5 * *xv as f64 * (1.0 + libm_erf(*xv as f64 / std::f64::consts::SQRT_2));
            assert!(
                (*yv as f64 - want).abs() < 2e-6,
                "gelu({xv}) = {yv}, want {want}"
            );
        }
    }

    #[test]
    fn exp_is_within_3e_7_relative_for_softmax_arguments() {
        let mut worst = 0f64;
        for i in 0..=870_000 {
            let x = -(i as f32) * 1e-4;
            let want = (x as f64).exp();
            worst = worst.max((exp_nonpositive(x) as f64 - want).abs() / want);
        }
        assert!(worst < 3e-7, "worst relative error {worst}");
        let levels = float_levels();
        report_missing("exp", &levels);
        #[cfg(target_arch = "x86_64")]
        for level in levels {
            use std::arch::x86_64::*;
            let mut worst = 0f64;
            for i in (0..=870_000).step_by(16) {
                let x: [f32; 16] = std::array::from_fn(|l| -((i + l).min(870_000) as f32) * 1e-4);
                let mut e = [0f32; 16];
                // SAFETY: the CPU has the level's features; 16 floats each side.
                unsafe {
                    match level {
                        SimdLevel::Avx512 => _mm512_storeu_ps(
                            e.as_mut_ptr(),
                            exp_nonpositive_avx512(_mm512_loadu_ps(x.as_ptr())),
                        ),
                        SimdLevel::Avx2 => {
                            for h in 0..2 {
                                _mm256_storeu_ps(
                                    e.as_mut_ptr().add(8 * h),
                                    exp_nonpositive_avx2(_mm256_loadu_ps(x.as_ptr().add(8 * h))),
                                )
                            }
                        }
                    }
                }
                for (xv, ev) in x.iter().zip(e) {
                    let want = (*xv as f64).exp();
                    worst = worst.max((ev as f64 - want).abs() / want);
                }
            }
            assert!(worst < 3e-7, "{level:?}: worst relative error {worst}");
        }
    }

    #[test]
    fn attention_kernels_match_plain_attention() {
        let levels = float_levels();
        report_missing("attention kernel", &levels);
        #[cfg(target_arch = "x86_64")]
        for (heads, t) in [(1, 1), (2, 7), (3, 64), (2, 150)] {
            let d = heads * ATTENTION_HEAD_DIM;
            let x = values(3 * d * t, (heads * t) as u64, 2.0);
            let mut want = vec![0f64; d * t];
            for h in 0..heads {
                for i in 0..t {
                    let q = |c: usize| x[i * 3 * d + h * 64 + c] as f64;
                    let scores: Vec<f64> = (0..t)
                        .map(|j| {
                            (0..64)
                                .map(|c| q(c) * x[j * 3 * d + d + h * 64 + c] as f64)
                                .sum::<f64>()
                                / 8.0
                        })
                        .collect();
                    let max = scores.iter().cloned().fold(f64::MIN, f64::max);
                    let e: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
                    let sum: f64 = e.iter().sum();
                    for c in 0..64 {
                        want[i * d + h * 64 + c] = (0..t)
                            .map(|j| e[j] * x[j * 3 * d + 2 * d + h * 64 + c] as f64)
                            .sum::<f64>()
                            / sum;
                    }
                }
            }
            let mut by_level = Vec::new();
            for (level, nth) in levels.iter().flat_map(|&l| [1, 2, 3].map(|n| (l, n))) {
                let mut got = vec![f32::NAN; d * t];
                let units = heads * t.div_ceil(ATT_BLOCK);
                for ith in 0..nth {
                    // SAFETY: the CPU has the level's features; buffers match the shapes.
                    unsafe {
                        let tensors = AttentionTensors {
                            x: x.as_ptr(),
                            x_stride: 3 * d,
                            y: got.as_mut_ptr(),
                            y_stride: d,
                            heads,
                            t,
                        };
                        attention_items(level, tensors, split_range(units, 1, ith, nth))
                    };
                }
                for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                    assert!(
                        (*g as f64 - w).abs() < 1e-5 * (1.0 + w.abs()),
                        "{level:?} heads {heads} t {t} nth {nth} at {i}: {g} vs {w}"
                    );
                }
                by_level.push((nth, level, got));
            }
            assert_same_bits(&by_level, &format!("{heads} heads, t {t}"));
        }
    }

    #[test]
    fn f32_products_match_the_plain_product_and_each_other() {
        assert!(pack_f32_transposed(&[0.0; 64 * 3], 3, 64).is_some());
        assert!(
            pack_f32_transposed(&[0.0; 32 * 3], 3, 32).is_none(),
            "n not whole runs"
        );
        assert!(
            pack_f32_transposed(&[0.0; 10], 3, 64).is_none(),
            "short data"
        );
        let levels = float_levels();
        report_missing("f32 product", &levels);
        #[cfg(target_arch = "x86_64")]
        for (n, k, m) in [(64, 3, 1), (128, 240, 7), (192, 97, 13)] {
            let w = values(n * k, (n + k) as u64, 1.0);
            let x = values(m * k, 77, 2.0);
            let wt = pack_f32_transposed(&w, k, n).unwrap();
            let mut by_level = Vec::new();
            for (level, nth) in levels.iter().flat_map(|&l| [1, 2, 3].map(|t| (l, t))) {
                let mut y = vec![f32::NAN; m * n];
                let p = F32Product {
                    x: x.as_ptr(),
                    x_stride: k,
                    k,
                    wt: wt.as_ptr(),
                    n,
                    y: y.as_mut_ptr(),
                    y_stride: n,
                };
                for ith in 0..nth {
                    // SAFETY: the CPU has the level's features; buffers match the shapes.
                    unsafe { f32_rows(level, p, split_range(m, 4, ith, nth)) };
                }
                for r in 0..m {
                    for c in 0..n {
                        let want: f64 = (0..k)
                            .map(|i| w[c * k + i] as f64 * x[r * k + i] as f64)
                            .sum();
                        let got = y[r * n + c] as f64;
                        assert!(
                            (got - want).abs() < 1e-5 * (1.0 + want.abs()),
                            "{level:?} {n}x{k}x{m} nth {nth} at {r},{c}: {got} vs {want}"
                        );
                    }
                }
                by_level.push((nth, level, y));
            }
            assert_same_bits(&by_level, &format!("{n}x{k}x{m}"));
        }
    }

    #[test]
    fn f16_products_match_the_plain_product_and_each_other() {
        let levels = float_levels();
        report_missing("f16 product", &levels);
        #[cfg(target_arch = "x86_64")]
        if !std::arch::is_x86_feature_detected!("f16c") {
            fail_under_ci("this CPU has no F16C; the f16 product cannot run");
            return;
        }
        // (n, k, m, batches, weight row stride): whole steps and tails, strided rows
        // as in the decoder's per-head views of its caches, several batches.
        #[cfg(target_arch = "x86_64")]
        for (n, k, m, batches, w_row) in [
            (4, 16, 1, 1, 16),
            (11, 64, 2, 1, 64),
            (1001, 384, 1, 1, 384),
            (150, 64, 1, 6, 384),
            (64, 150, 3, 2, 160),
            (5, 7, 1, 1, 7),
        ] {
            let w_batch = if batches > 1 && w_row > k {
                k
            } else {
                n * w_row
            };
            let w_len = (batches - 1) * w_batch + (n - 1) * w_row + k;
            let w: Vec<u16> = values(w_len, n as u64, 1.0)
                .iter()
                .map(|&v| f32_to_f16(v))
                .collect();
            let x = values(batches * m * k, 5, 2.0);
            let wv = |b: usize, r: usize, c: usize| f16_to_f32(w[b * w_batch + r * w_row + c]);
            let mut by_level = Vec::new();
            for (level, nth) in levels.iter().flat_map(|&l| [1, 2, 3].map(|t| (l, t))) {
                let mut y = vec![f32::NAN; batches * m * n];
                let p = F16Product {
                    w: w.as_ptr(),
                    w_row,
                    w_batch,
                    k,
                    n,
                    x: x.as_ptr(),
                    x_row: k,
                    x_batch: m * k,
                    m,
                    y: y.as_mut_ptr(),
                    y_row: n,
                    y_batch: m * n,
                };
                let groups = n.div_ceil(4);
                for ith in 0..nth {
                    for unit in split_range(groups * batches, 1, ith, nth) {
                        let (b, g) = (unit / groups, unit % groups);
                        // SAFETY: the CPU has the level's features and F16C; the
                        // buffers hold every row the strides reach.
                        unsafe { f16_rows(level, p, b, 4 * g..(4 * g + 4).min(n)) };
                    }
                }
                for b in 0..batches {
                    for r in 0..m {
                        for c in 0..n {
                            let want: f64 = (0..k)
                                .map(|i| wv(b, c, i) as f64 * x[(b * m + r) * k + i] as f64)
                                .sum();
                            let got = y[(b * m + r) * n + c] as f64;
                            assert!(
                                (got - want).abs() < 1e-5 * (1.0 + want.abs()),
                                "{level:?} {n}x{k}x{m}x{batches} nth {nth} at {b},{r},{c}: {got} vs {want}"
                            );
                        }
                    }
                }
                by_level.push((nth, level, y));
            }
            assert_same_bits(&by_level, &format!("{n}x{k}x{m}x{batches}"));
        }
    }

    /// erf in f64 by its Taylor series (|x| < 3) and continued fraction (beyond):
    /// accurate to 1e-12 over the tested range, independent of the approximation.
    fn libm_erf(x: f64) -> f64 {
        let a = x.abs();
        let v = if a < 3.0 {
            let (mut term, mut sum, mut n) = (a, a, 0.0);
            while term.abs() > 1e-17 * sum.abs().max(1e-300) {
                n += 1.0;
                term *= -a * a / n;
                sum += term / (2.0 * n + 1.0);
            }
            sum * 2.0 / std::f64::consts::PI.sqrt()
        } else {
            let mut f = 0.0;
            for n in (1..60).rev() {
                f = n as f64 / 2.0 / (a + f);
            }
            1.0 - (-a * a).exp() / std::f64::consts::PI.sqrt() / (a + f)
        };
        v.copysign(x)
    }
}
