//! The q8_0 product: q8_0 weights packed at upload ([`PackedQ8`]) times f32
//! activations, with AVX-512 VNNI (`vpdpbusd`, 64 byte products per instruction;
//! ggml's q8_0 GEMM uses 256-bit vectors) or AVX2 (`vpmaddubsw`) on the same packed
//! weights. The numerics are ggml's: activations are quantized to q8_0 blocks (an f16
//! scale per 32 values, rounded to nearest even), block products are exact integers,
//! scaled per block and summed in f32; both instruction sets give the same bits.

use std::cell::RefCell;

use super::{
    expect_eq, f16_to_f32, f32_to_f16, q8_kernel_level, KernelResult, Matrix, Output, Part,
};
#[cfg(target_arch = "x86_64")]
use super::{split_range, SimdLevel};

/// Values per q8_0 block.
pub(super) const QK: usize = 32;
/// Bytes of one ggml q8_0 block: an f16 scale, then 32 signed bytes.
const Q8_BLOCK_BYTES: usize = 34;
/// Output columns (weight rows) one packed group holds: one 512-bit vector of i32.
pub const GROUP_COLS: usize = 16;
/// Bytes of one packed (group, block) cell: 32x16 weight bytes interleaved by 4, then
/// the 16 rows' f16 scales (the q8_0 blocks' own), then their 16 negated block sums
/// (i16; the VNNI kernel's compensation is 128 times one). Both halve what f32 and i32
/// took: a decoder step reads every cell of its weights once.
pub const CELL_BYTES: usize = QK * GROUP_COLS + 2 * GROUP_COLS + 2 * GROUP_COLS;
const SCALES_AT: usize = QK * GROUP_COLS;
const COMP_AT: usize = SCALES_AT + 2 * GROUP_COLS;
/// Activation rows one AVX2 micro-kernel call computes, and the unit rows are shared
/// out among threads in.
const TILE_ROWS: usize = 4;
/// Activation rows one AVX-512 micro-kernel call computes: with two groups, twelve
/// independent `vpdpbusd` chains, enough to cover the instruction's latency.
const TILE_ROWS_AVX512: usize = 6;
/// Output columns one pass over the activations covers (keeps that slice of the
/// packed weights in cache while every row tile streams past it).
const CHUNK_GROUPS: usize = 16;

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
                let qs = &block[2..];
                for k4 in 0..QK / 4 {
                    let at = k4 * 4 * GROUP_COLS + lane * 4;
                    cell[at..at + 4].copy_from_slice(&qs[k4 * 4..k4 * 4 + 4]);
                }
                // At most 32 x 128 in magnitude: an i16 holds it.
                let sum: i16 = qs.iter().map(|&q| q as i8 as i16).sum();
                cell[SCALES_AT + 2 * lane..][..2].copy_from_slice(&block[..2]);
                cell[COMP_AT + 2 * lane..][..2].copy_from_slice(&(-sum).to_le_bytes());
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

/// Quantizes one row of activations the way ggml's x86 q8_0 quantizer does (scale
/// `max|x| / 127` stored as f16, values `x * 127 / max|x|` rounded to nearest even),
/// storing the values offset by 128 as unsigned bytes for `vpdpbusd`. The plain form
/// of `quantize_row_u8_avx512`, which the tests hold it to; the logits' error bound
/// (`refine`) reads the rounding from it.
pub(super) fn quantize_row_u8(x: &[f32], q: &mut [u8], d: &mut [f32]) {
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
                let dw = f16_to_f32(u16::from_le_bytes(
                    cell[SCALES_AT + 2 * lane..][..2].try_into().unwrap(),
                ));
                acc += dot as f32 * (dw * xd[row * nb + b]);
            }
            y[row * w.n + col] = acc;
        }
    }
}

/// [`quantize_row_u8`] with AVX-512 intrinsics (the same arithmetic, 16 values per
/// instruction). Blocks go sixteen at a time: their maxima are reduced together (15
/// shuffle steps instead of sixteen reductions) and their scales rounded to f16 in one
/// conversion, which rounds to nearest even as the scalar one does.
///
/// # Safety
/// The CPU must have AVX-512 F; `q` and `x` hold `d.len()` whole blocks.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn quantize_row_u8_avx512(x: &[f32], q: &mut [u8], d: &mut [f32]) {
    use std::arch::x86_64::*;
    let nb = d.len();
    let mut b0 = 0;
    while b0 + 16 <= nb {
        // SAFETY: blocks b0..b0 + 16 lie inside x (caller's guarantee).
        let m: [__m512; 16] = std::array::from_fn(|i| unsafe {
            let at = x.as_ptr().add((b0 + i) * QK);
            _mm512_max_ps(
                _mm512_abs_ps(_mm512_loadu_ps(at)),
                _mm512_abs_ps(_mm512_loadu_ps(at.add(16))),
            )
        });
        // Halve the lanes per block four times; lane j then holds block
        // [0, 4, 8, 12, 1, 5, ..]'s maximum, which the permute puts back in order.
        let n: [__m512; 8] = std::array::from_fn(|i| {
            let (a, b) = (m[2 * i], m[2 * i + 1]);
            _mm512_max_ps(
                _mm512_shuffle_f32x4::<0x44>(a, b),
                _mm512_shuffle_f32x4::<0xEE>(a, b),
            )
        });
        let r: [__m512; 4] = std::array::from_fn(|i| {
            let (a, b) = (n[2 * i], n[2 * i + 1]);
            _mm512_max_ps(
                _mm512_shuffle_f32x4::<0x88>(a, b),
                _mm512_shuffle_f32x4::<0xDD>(a, b),
            )
        });
        let t: [__m512; 2] = std::array::from_fn(|i| {
            let (a, b) = (r[2 * i], r[2 * i + 1]);
            _mm512_max_ps(
                _mm512_shuffle_ps::<0x44>(a, b),
                _mm512_shuffle_ps::<0xEE>(a, b),
            )
        });
        let u = _mm512_max_ps(
            _mm512_shuffle_ps::<0x88>(t[0], t[1]),
            _mm512_shuffle_ps::<0xDD>(t[0], t[1]),
        );
        let order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
        let amax = _mm512_permutexvar_ps(order, u);
        let scale = _mm512_div_ps(amax, _mm512_set1_ps(127.0));
        let rounded = _mm512_cvtph_ps(_mm512_cvtps_ph::<
            { _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC },
        >(scale));
        let nonzero = _mm512_cmp_ps_mask::<_CMP_NEQ_OQ>(amax, _mm512_setzero_ps());
        let inverse = _mm512_maskz_div_ps(nonzero, _mm512_set1_ps(127.0), amax);
        let mut ids = [0f32; 16];
        // SAFETY: d holds blocks b0..b0 + 16; ids holds 16 floats.
        unsafe {
            _mm512_storeu_ps(d.as_mut_ptr().add(b0), rounded);
            _mm512_storeu_ps(ids.as_mut_ptr(), inverse);
        }
        for (i, &id) in ids.iter().enumerate() {
            // SAFETY: block b0 + i lies inside x and q.
            unsafe { quantize_block_avx512(x, q, b0 + i, _mm512_set1_ps(id)) };
        }
        b0 += 16;
    }
    for (b, db) in d.iter_mut().enumerate().skip(b0) {
        // SAFETY: block b lies inside x (caller's guarantee).
        let amax = unsafe {
            let lo = _mm512_loadu_ps(x.as_ptr().add(b * QK));
            let hi = _mm512_loadu_ps(x.as_ptr().add(b * QK + 16));
            _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(lo), _mm512_abs_ps(hi)))
        };
        *db = f16_to_f32(f32_to_f16(amax / 127.0));
        let id = _mm512_set1_ps(if amax != 0.0 { 127.0 / amax } else { 0.0 });
        // SAFETY: block b lies inside x and q.
        unsafe { quantize_block_avx512(x, q, b, id) };
    }
}

/// Block `b` of `x` times `id`, rounded to nearest even, as bytes offset by 128 into
/// `q` (the second half of [`quantize_row_u8_avx512`]'s work).
///
/// # Safety
/// The CPU must have AVX-512 F; block `b` lies inside `x` and `q`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn quantize_block_avx512(x: &[f32], q: &mut [u8], b: usize, id: std::arch::x86_64::__m512) {
    use std::arch::x86_64::*;
    let offset = _mm512_set1_epi32(128);
    for half in 0..2 {
        // SAFETY: block b lies inside x and q (caller's guarantee).
        unsafe {
            let v = _mm512_loadu_ps(x.as_ptr().add(b * QK + half * 16));
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
    let tile_rows = match level {
        SimdLevel::Avx512 => TILE_ROWS_AVX512,
        SimdLevel::Avx2 => TILE_ROWS,
    };
    let mut g0 = groups.start;
    while g0 < groups.end {
        let g1 = (g0 + CHUNK_GROUPS).min(groups.end);
        let mut r = rows.start;
        while r < rows.end {
            let tile = (rows.end - r).min(tile_rows);
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
                        (SimdLevel::Avx512, 6, true) => tile_kernel::<6, 2>(t),
                        (SimdLevel::Avx512, 6, false) => tile_kernel::<6, 1>(t),
                        (SimdLevel::Avx512, 5, true) => tile_kernel::<5, 2>(t),
                        (SimdLevel::Avx512, 5, false) => tile_kernel::<5, 1>(t),
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
                let sums =
                    _mm256_loadu_si256(w.add(c * group_stride + b * CELL_BYTES + COMP_AT).cast());
                _mm512_slli_epi32::<7>(_mm512_cvtepi16_epi32(sums))
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
                _mm512_cvtph_ps(_mm256_loadu_si256(
                    w.add(c * group_stride + b * CELL_BYTES + SCALES_AT).cast(),
                ))
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
#[target_feature(enable = "avx2,fma,f16c")]
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
            _mm256_cvtph_ps(_mm_loadu_si128(cell.add(SCALES_AT + 16 * h).cast()))
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

#[cfg(target_arch = "x86_64")]
thread_local! {
    /// Each worker thread's quantized activation rows and their scales, reused across
    /// calls (ggml's worker threads live as long as the backend).
    static SCRATCH: RefCell<(Vec<u8>, Vec<f32>)> = const { RefCell::new((Vec::new(), Vec::new())) };
}

/// Thread `ith`'s share of an `m`-row product over `n_groups` output groups: rows when
/// there are enough of them (the encoder), else output groups (a decoder step).
#[cfg(target_arch = "x86_64")]
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

/// A packed q8_0 weight as the product reads it: the cells of a `k` x `n`
/// [`PackedQ8`] over a byte slice (its bytes, or a tensor that holds them).
#[derive(Debug, Clone, Copy)]
pub struct PackedQ8View<'a> {
    bytes: &'a [u8],
    k: usize,
    n: usize,
}

impl<'a> PackedQ8View<'a> {
    /// `None` unless `bytes` holds exactly the cells of a packed weight of `n` rows of
    /// `k` values (`k` whole blocks, `n` whole groups).
    pub fn new(bytes: &'a [u8], k: usize, n: usize) -> Option<Self> {
        let fits = k > 0
            && n > 0
            && k.is_multiple_of(QK)
            && n.is_multiple_of(GROUP_COLS)
            && bytes.len() == n / GROUP_COLS * (k / QK) * CELL_BYTES;
        fits.then_some(PackedQ8View { bytes, k, n })
    }
}

impl PackedQ8 {
    /// The weight as [`product`] reads it.
    pub fn view(&self) -> PackedQ8View<'_> {
        PackedQ8View {
            bytes: &self.bytes,
            k: self.k,
            n: self.n,
        }
    }
}

/// `y` [m rows of n] = `x` (m rows of k, one batch) times the packed weight, plus
/// `bias` (n values) when given: the share `part` names. Rows are split among the
/// parts when there are enough of them (the encoder); otherwise output columns are (a
/// decoder step). Refuses lengths that do not fit, or a CPU without the kernel.
pub fn product(
    w: PackedQ8View<'_>,
    x: Matrix<'_, f32>,
    bias: Option<&[f32]>,
    y: &Output<'_>,
    part: Part,
) -> KernelResult {
    let [k, m, batches] = x.dims();
    expect_eq("the activations' row length", k, w.k)?;
    expect_eq("the activations' batches", batches, 1)?;
    if let Some(bias) = bias {
        expect_eq("the bias length", bias.len(), w.n)?;
    }
    y.expect_len("the q8_0 product", m * w.n)?;
    let Some(level) = q8_kernel_level() else {
        return Err("this CPU lacks the vector instructions the q8_0 product needs".into());
    };
    #[cfg(target_arch = "x86_64")]
    {
        let nb = k / QK;
        let (rows, groups) = q8_work(m, w.n / GROUP_COLS, part.ith, part.nth);
        if rows.is_empty() || groups.is_empty() {
            return Ok(());
        }
        let bias = bias.map_or(std::ptr::null(), <[f32]>::as_ptr);
        SCRATCH.with_borrow_mut(|(xq, xd)| {
            xq.resize(rows.len() * k, 0);
            xd.resize(rows.len() * nb, 0.0);
            for (i, row) in rows.clone().enumerate() {
                let src = &x.data[row * x.row_stride..][..k];
                // SAFETY: the CPU has `level` (q8_kernel_level); k is whole blocks.
                unsafe { quantize_row(level, src, &mut xq[i * k..][..k], &mut xd[i * nb..][..nb]) };
            }
            // SAFETY: the CPU has `level`; the weight holds every group's cells
            // (PackedQ8View::new); y holds m rows of n floats (checked above), of which
            // this part writes its rows and groups, which no other part's overlap
            // (q8_work); a non-null bias has n values (checked above).
            unsafe {
                gemm_rows(
                    level,
                    w.bytes.as_ptr(),
                    nb,
                    xq,
                    xd,
                    rows,
                    groups,
                    y.ptr,
                    w.n,
                    bias,
                )
            };
        });
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (level, part, x, bias, y);
    Ok(())
}

/// The steps of a 1-D convolution (PyTorch's cross-correlation over one sequence, one
/// group): what [`conv_time_major`] needs besides its operands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConvSteps {
    /// Taps of the kernel (K).
    pub kernel_width: usize,
    /// Input samples between two outputs.
    pub stride: usize,
    /// Zeros before and after the input.
    pub pad: usize,
    /// Input samples between two taps.
    pub dilation: usize,
}

impl ConvSteps {
    /// The steps of a kernel `kernel_width` taps wide and `[stride, pad, dilation]` as
    /// the graph gives them (signed), or the reason they are not steps: a width, stride
    /// or dilation below 1 or a negative padding.
    pub fn checked(kernel_width: i64, [stride, pad, dilation]: [i32; 3]) -> Result<Self, String> {
        if kernel_width < 1 || stride < 1 || pad < 0 || dilation < 1 {
            return Err(format!(
                "a step is not positive or the padding negative (width {kernel_width}, \
                 stride {stride}, padding {pad}, dilation {dilation})"
            ));
        }
        Ok(ConvSteps {
            kernel_width: kernel_width as usize,
            stride: stride as usize,
            pad: pad as usize,
            dilation: dilation as usize,
        })
    }

    /// Outputs for an input of `input_len` samples, as PyTorch and ggml's im2col count
    /// them; `None` when a step is 0 or the kernel reaches past the padded input.
    pub fn output_len(&self, input_len: usize) -> Option<usize> {
        if self.kernel_width == 0 || self.stride == 0 || self.dilation == 0 {
            return None;
        }
        let reach = self.dilation.checked_mul(self.kernel_width - 1)?;
        let padded = input_len.checked_add(self.pad.checked_mul(2)?)?;
        (padded > reach).then(|| (padded - reach - 1) / self.stride + 1)
    }
}

/// Output positions whose rows one pass of the fused convolutions ([`conv_time_major`],
/// [`super::conv_f32::conv_time_major`]) builds and multiplies (their samples, rows and
/// results stay in cache).
pub(super) const CONV_CHUNK: usize = 64;

/// Asks the CPU to bring the cache lines of `values` closer (a hint: no effect on
/// results).
#[inline(always)]
fn prefetch(values: &[f32]) {
    #[cfg(target_arch = "x86_64")]
    for line in values.chunks(16) {
        // SAFETY: a prefetch reads nothing architecturally; the address is inside the
        // slice.
        unsafe {
            std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T1 }>(
                line.as_ptr().cast(),
            )
        };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = values;
}

/// The input samples a chunk of outputs reads, channel by channel: `span` samples (at
/// least those read, rounded up to whole runs of 16) from input position `first`
/// (which may lie in the padding) of every channel, zeros outside the input, so
/// building a row needs no bounds test per tap.
pub(super) struct ChunkInput<'a> {
    samples: &'a mut Vec<f32>,
    span: usize,
}

impl<'a> ChunkInput<'a> {
    /// Copies channel by channel the samples outputs `outputs` read.
    pub(super) fn gather(
        samples: &'a mut Vec<f32>,
        x: &Matrix<'_, f32>,
        steps: ConvSteps,
        outputs: std::ops::Range<usize>,
    ) -> Self {
        let [len, channels, _] = x.dims();
        let reach = steps.dilation * (steps.kernel_width - 1);
        // Whole runs of 16 samples, so that the q8_0 convolution's transposes of the
        // chunk take the AVX-512 path (the extra samples are read but not used).
        let span = ((outputs.len() - 1) * steps.stride + reach + 1).next_multiple_of(16);
        let first = (outputs.start * steps.stride) as isize - steps.pad as isize;
        // Every value is written below, so the buffer is only grown, never cleared.
        samples.resize(channels * span, 0.0);
        // The part of [first, first + span) inside the input, and the padding around it.
        // (A window may lie wholly in the padding, before or after the input.)
        let len_i = len as isize;
        let from = first.clamp(0, len_i);
        let to = (first + span as isize).clamp(from, len_i);
        let at = (from - first).clamp(0, span as isize) as usize;
        let inside = ((to - from) as usize).min(span - at);
        let from = from as usize;
        for (c, local) in samples.chunks_exact_mut(span).take(channels).enumerate() {
            let (before, rest) = local.split_at_mut(at);
            before.fill(0.0);
            let (values, after) = rest.split_at_mut(inside);
            values.copy_from_slice(&x.data[c * x.row_stride + from..][..inside]);
            after.fill(0.0);
            // The next chunk's new samples of this channel, asked for now: with a
            // hundred or more channels far apart, the hardware prefetcher follows too
            // few of them.
            let ahead = c * x.row_stride + from + inside;
            let next = (outputs.len() * steps.stride).min(x.data.len().saturating_sub(ahead));
            prefetch(&x.data[ahead.min(x.data.len())..][..next]);
        }
        ChunkInput { samples, span }
    }

    /// Writes the im2col row of the chunk's output `r` (the [IC][K] values the kernel's
    /// row multiplies) into `row`, with AVX-512 when `level` has it and the kernel is at
    /// most 16 taps (one masked load or gather per channel).
    pub(super) fn row(&self, level: SimdLevel, steps: ConvSteps, r: usize, row: &mut [f32]) {
        let k = steps.kernel_width;
        let reach = steps.dilation * (k - 1) + 1;
        let channels = row.len() / k;
        assert!(
            channels * self.span <= self.samples.len() && r * steps.stride + reach <= self.span,
            "im2col row {r} outside the chunk's samples"
        );
        #[cfg(target_arch = "x86_64")]
        if level == SimdLevel::Avx512 && k <= 16 {
            // SAFETY: AVX-512 F is present; every channel's window of `reach` samples
            // lies inside `samples` (asserted above) and `row` holds `channels * k`.
            unsafe { self.row_avx512(steps, r, channels, row) };
            return;
        }
        let _ = level;
        for (taps, local) in row
            .chunks_exact_mut(k)
            .zip(self.samples.chunks_exact(self.span))
        {
            let window = &local[r * steps.stride..][..reach];
            for (v, &s) in taps.iter_mut().zip(window.iter().step_by(steps.dilation)) {
                *v = s;
            }
        }
    }

    /// [`ChunkInput::row`] for a kernel of at most 16 taps with AVX-512.
    ///
    /// # Safety
    /// The CPU has AVX-512 F; `row` holds `channels * K` floats and every channel's
    /// window (`dilation * (K - 1) + 1` samples from `r * stride`) lies in `samples`.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f")]
    unsafe fn row_avx512(&self, steps: ConvSteps, r: usize, channels: usize, row: &mut [f32]) {
        use std::arch::x86_64::*;
        let k = steps.kernel_width;
        let mask: __mmask16 = ((1u32 << k) - 1) as __mmask16;
        let at = r * steps.stride;
        let src = self.samples.as_ptr();
        let dst = row.as_mut_ptr();
        if steps.dilation == 1 {
            for c in 0..channels {
                // SAFETY: the masked lanes stay inside the channel's window and the
                // row's taps (the caller's guarantee).
                unsafe {
                    let v = _mm512_maskz_loadu_ps(mask, src.add(c * self.span + at));
                    _mm512_mask_storeu_ps(dst.add(c * k), mask, v);
                }
            }
        } else {
            let index = _mm512_mullo_epi32(
                _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                _mm512_set1_epi32(steps.dilation as i32),
            );
            for c in 0..channels {
                // SAFETY: as above; the gathered lanes are the window's taps.
                unsafe {
                    let v = _mm512_mask_i32gather_ps::<4>(
                        _mm512_setzero_ps(),
                        mask,
                        index,
                        src.add(c * self.span + at).cast(),
                    );
                    _mm512_mask_storeu_ps(dst.add(c * k), mask, v);
                }
            }
        }
    }
}

/// Runs `chunk` on each run of at most [`CONV_CHUNK`] output positions of `positions`,
/// with its first position, its length and the input samples it reads (gathered into
/// `samples`): the loop both fused convolutions share.
pub(super) fn for_each_chunk(
    samples: &mut Vec<f32>,
    x: &Matrix<'_, f32>,
    steps: ConvSteps,
    positions: std::ops::Range<usize>,
    mut chunk: impl FnMut(usize, usize, &ChunkInput<'_>),
) {
    let mut start = positions.start;
    while start < positions.end {
        let rows = (positions.end - start).min(CONV_CHUNK);
        let input = ChunkInput::gather(samples, x, steps, start..start + rows);
        chunk(start, rows, &input);
        start += rows;
    }
}

#[cfg(target_arch = "x86_64")]
thread_local! {
    /// Each worker thread's input samples (channel-major, then position-major) and
    /// product results of one chunk of [`conv_time_major`].
    static CONV_SCRATCH: RefCell<(Vec<f32>, Vec<f32>, Vec<f32>)> =
        const { RefCell::new((Vec::new(), Vec::new(), Vec::new())) };
}

/// Writes `tile` (`rows` rows of `n` results, one row per output position) into `out`
/// at positions `start..start + rows` of each of the `n` channel rows, `out_len` apart:
/// blocks of 16 x 16 transposed in registers with AVX-512 (when `n` is whole blocks of
/// 16), the rest value by value.
///
/// # Safety
/// The CPU has `level`; `tile.len()` is a multiple of `n`; `out` is valid
/// for writes at `c * out_len + start + r` for every channel `c < n` and row `r`, and
/// nothing else accesses those floats meanwhile.
#[cfg(target_arch = "x86_64")]
pub(super) unsafe fn store_transposed(
    level: SimdLevel,
    tile: &[f32],
    n: usize,
    out: *mut f32,
    out_len: usize,
    start: usize,
) {
    let rows = tile.len() / n;
    let mut done = 0;
    if level == SimdLevel::Avx512 && n.is_multiple_of(16) {
        done = rows - rows % 16;
        // SAFETY: the caller's guarantees; rows 0..done are whole blocks of 16.
        unsafe { store_transposed_avx512(&tile[..done * n], n, out, out_len, start) };
    }
    for c in 0..n {
        for r in done..rows {
            // SAFETY: the caller's guarantee on `out`.
            unsafe { *out.add(c * out_len + start + r) = tile[r * n + c] };
        }
    }
}

/// [`store_transposed`] for whole blocks of 16 rows with AVX-512: 16 rows of 16
/// channels in, 16 channel runs of 16 positions out (unpack, then 32- and 128-bit
/// shuffles).
///
/// # Safety
/// As [`store_transposed`], with `tile.len()` a multiple of `16 n` and AVX-512 F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn store_transposed_avx512(
    tile: &[f32],
    n: usize,
    out: *mut f32,
    out_len: usize,
    start: usize,
) {
    use std::arch::x86_64::*;
    let rows = tile.len() / n;
    // Channels outer: each of the 16 channel rows a block writes then fills in order.
    for c0 in (0..n).step_by(16) {
        for r0 in (0..rows).step_by(16) {
            // SAFETY: rows r0..r0 + 16 and channels c0..c0 + 16 lie in the tile.
            let r: [__m512; 16] = std::array::from_fn(|i| unsafe {
                _mm512_loadu_ps(tile.as_ptr().add((r0 + i) * n + c0))
            });
            let mut a = [_mm512_setzero_ps(); 16];
            for i in 0..8 {
                a[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
                a[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
            }
            let mut b = [_mm512_setzero_ps(); 16];
            for g in 0..4 {
                b[4 * g] = _mm512_shuffle_ps::<0x44>(a[4 * g], a[4 * g + 2]);
                b[4 * g + 1] = _mm512_shuffle_ps::<0xEE>(a[4 * g], a[4 * g + 2]);
                b[4 * g + 2] = _mm512_shuffle_ps::<0x44>(a[4 * g + 1], a[4 * g + 3]);
                b[4 * g + 3] = _mm512_shuffle_ps::<0xEE>(a[4 * g + 1], a[4 * g + 3]);
            }
            let mut c = [_mm512_setzero_ps(); 16];
            for h in [0, 8] {
                for i in 0..4 {
                    c[h + i] = _mm512_shuffle_f32x4::<0x88>(b[h + i], b[h + i + 4]);
                    c[h + i + 4] = _mm512_shuffle_f32x4::<0xDD>(b[h + i], b[h + i + 4]);
                }
            }
            for i in 0..8 {
                // Channel c0 + k's 16 positions: k = i and k = i + 8.
                let lo = _mm512_shuffle_f32x4::<0x88>(c[i], c[i + 8]);
                let hi = _mm512_shuffle_f32x4::<0xDD>(c[i], c[i + 8]);
                // SAFETY: the caller's guarantee on `out`.
                unsafe {
                    _mm512_storeu_ps(out.add((c0 + i) * out_len + start + r0), lo);
                    _mm512_storeu_ps(out.add((c0 + i + 8) * out_len + start + r0), hi);
                }
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
thread_local! {
    /// Each worker thread's quantized input positions of one chunk of
    /// [`conv_time_major`]: every position's channels as bytes, then their block scales.
    static POSITION_SCRATCH: RefCell<(Vec<u8>, Vec<f32>)> =
        const { RefCell::new((Vec::new(), Vec::new())) };
}

/// A 1-D convolution with a packed q8_0 kernel in tap-major order (`w`, [K * IC] values
/// per output channel: tap `k` of input channel `c` at `k * IC + c`), `x` [L, IC] (time
/// fastest, one batch, IC whole blocks of 32), plus `bias` (one value per output
/// channel) when given; `y` is [OL, OC], time fastest. The same values as ggml's
/// im2col with its [IC][K] rows reordered to [K][IC], then [`product`], then a
/// transpose, to the bit: a row's blocks of 32 are then each 32 channels of one input
/// position, so each position is quantized once and every row that reads it copies its
/// bytes (instead of quantizing K times its values). The positions are quantized and
/// the rows built a chunk at a time in cache and the results land in place, so the
/// im2col matrix and the transpose never go through memory. Output positions are split
/// among the parts. Refuses lengths that do not fit, or a CPU without the kernel.
pub fn conv_time_major(
    w: PackedQ8View<'_>,
    x: Matrix<'_, f32>,
    steps: ConvSteps,
    bias: Option<&[f32]>,
    y: &Output<'_>,
    part: Part,
) -> KernelResult {
    let [len, channels, batches] = x.dims();
    expect_eq("the input's batches", batches, 1)?;
    expect_eq(
        "the kernel row (taps x input channels)",
        channels * steps.kernel_width,
        w.k,
    )?;
    if channels % QK != 0 {
        return Err(format!(
            "{channels} input channels are not whole q8_0 blocks of {QK} (the tap-major \
             kernel quantizes each position's channels)"
        ));
    }
    if let Some(bias) = bias {
        expect_eq("the bias length", bias.len(), w.n)?;
    }
    let out_len = steps
        .output_len(len)
        .ok_or_else(|| format!("no output for an input of {len} samples with {steps:?}"))?;
    y.expect_len("the q8_0 convolution", out_len * w.n)?;
    let Some(level) = q8_kernel_level() else {
        return Err("this CPU lacks the vector instructions the q8_0 product needs".into());
    };
    #[cfg(target_arch = "x86_64")]
    {
        let (k, n) = (w.k, w.n);
        let nb = k / QK;
        let channel_blocks = channels / QK;
        let positions = split_range(out_len, TILE_ROWS, part.ith, part.nth);
        let bias = bias.map_or(std::ptr::null(), <[f32]>::as_ptr);
        SCRATCH.with_borrow_mut(|(xq, xd)| {
            CONV_SCRATCH.with_borrow_mut(|(samples, by_position, tile)| {
                POSITION_SCRATCH.with_borrow_mut(|(pq, pd)| {
                    xq.resize(CONV_CHUNK * k, 0);
                    xd.resize(CONV_CHUNK * nb, 0.0);
                    tile.resize(CONV_CHUNK * n, 0.0);
                    for_each_chunk(samples, &x, steps, positions, |start, rows, input| {
                        // The output lines this chunk will write, asked for (for
                        // writing) before the product, so their reads from memory
                        // overlap it.
                        for oc in 0..n {
                            for at in (0..rows).step_by(16) {
                                // SAFETY: a prefetch reads nothing architecturally;
                                // the address lies inside y (out_len x n floats).
                                unsafe {
                                    std::arch::x86_64::_mm_prefetch::<
                                        { std::arch::x86_64::_MM_HINT_ET1 },
                                    >(
                                        y.ptr.add(oc * out_len + start + at).cast()
                                    )
                                };
                            }
                        }
                        // Position-major samples: each position's channels in a row.
                        let span = input.span;
                        by_position.resize(span * channels, 0.0);
                        // SAFETY: the CPU has `level`; the samples are `channels` rows
                        // of `span` values and `by_position` holds span x channels
                        // floats, position p's channel c at p * channels + c.
                        unsafe {
                            store_transposed(
                                level,
                                &input.samples[..channels * span],
                                span,
                                by_position.as_mut_ptr(),
                                channels,
                                0,
                            )
                        };
                        let used = (rows - 1) * steps.stride
                            + steps.dilation * (steps.kernel_width - 1)
                            + 1;
                        pq.resize(used * channels, 0);
                        pd.resize(used * channel_blocks, 0.0);
                        for p in 0..used {
                            // SAFETY: the CPU has `level` (q8_kernel_level); a position's
                            // channels are whole blocks (checked above) and position p's
                            // bytes and scales fit the buffers.
                            unsafe {
                                quantize_row(
                                    level,
                                    &by_position[p * channels..][..channels],
                                    &mut pq[p * channels..][..channels],
                                    &mut pd[p * channel_blocks..][..channel_blocks],
                                )
                            };
                        }
                        for r in 0..rows {
                            for tap in 0..steps.kernel_width {
                                let p = r * steps.stride + tap * steps.dilation;
                                xq[r * k + tap * channels..][..channels]
                                    .copy_from_slice(&pq[p * channels..][..channels]);
                                xd[r * nb + tap * channel_blocks..][..channel_blocks]
                                    .copy_from_slice(&pd[p * channel_blocks..][..channel_blocks]);
                            }
                        }
                        // SAFETY: the CPU has `level`; the weight holds every group's
                        // cells; `tile` holds `rows` rows of n floats; a non-null bias
                        // has n values.
                        unsafe {
                            gemm_rows(
                                level,
                                w.bytes.as_ptr(),
                                nb,
                                xq,
                                xd,
                                0..rows,
                                0..n / GROUP_COLS,
                                tile.as_mut_ptr(),
                                n,
                                bias,
                            )
                        };
                        // SAFETY: y holds out_len x n floats (checked above) and this
                        // part alone writes positions start..start + rows
                        // (split_range); the tile holds rows x n results.
                        unsafe {
                            store_transposed(level, &tile[..rows * n], n, y.ptr, out_len, start)
                        };
                    });
                })
            })
        });
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (level, part, x, bias, y, steps);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::test_support::*;
    use super::*;

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
        // 37 blocks: two runs of sixteen and five alone, with an all-zero block, a
        // block of wide range and one of tiny values among them.
        const BLOCKS: usize = 37;
        let mut x = values(BLOCKS * QK, 4, 3.0);
        x[5 * QK..6 * QK].fill(0.0);
        x[20 * QK..21 * QK].iter_mut().for_each(|v| *v *= 4.0e4);
        x[33 * QK..34 * QK].iter_mut().for_each(|v| *v *= 1.0e-6);
        let (mut q, mut d) = (vec![0u8; x.len()], vec![0f32; BLOCKS]);
        quantize_row_u8(&x, &mut q, &mut d);
        let ggml = crate::ggml::quantize_rows(crate::ggml::DType::Q8_0, &x, x.len()).unwrap();
        for b in 0..BLOCKS {
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
            let (mut q2, mut d2) = (vec![0u8; x.len()], vec![0f32; BLOCKS]);
            // SAFETY: the CPU has the level's features; whole blocks.
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
            (48, 96, 11),
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
    fn the_safe_product_computes_in_parts_and_refuses_what_does_not_fit() {
        let (n, k, m) = (48, 64, 7);
        let w = PackedQ8::pack(&q8_rows(n, k, 21), k, n).unwrap();
        let x = values(m * k, 22, 1.5);
        let bias = values(n, 23, 1.0);
        let xm = Matrix::rows(&x, k, m).unwrap();
        let mut want = vec![0f32; m * n];
        let (xq, xd) = quantize_rows_u8(&x, k);
        gemm_reference(&w, &xq, &xd, m, &mut want);
        for (i, v) in want.iter_mut().enumerate() {
            *v += bias[i % n];
        }
        if q8_kernel_level().is_none() {
            fail_under_ci("this CPU cannot run the q8_0 product");
            return;
        }
        for nth in 1..=3 {
            let mut y = vec![f32::NAN; m * n];
            let out = Output::new(&mut y);
            for ith in 0..nth {
                product(
                    w.view(),
                    xm,
                    Some(&bias),
                    &out,
                    Part::new(ith, nth).unwrap(),
                )
                .unwrap();
            }
            for (g, w) in y.iter().zip(&want) {
                assert!(
                    (g - w).abs() <= 1e-5 * (1.0 + w.abs()),
                    "nth {nth}: {g} vs {w}"
                );
            }
        }
        let mut y = vec![0f32; m * n];
        let out = Output::new(&mut y);
        let short_x = Matrix::rows(&x, k - 32, m).unwrap();
        let err = product(w.view(), short_x, None, &out, Part::WHOLE).unwrap_err();
        assert!(err.contains("row length"), "{err}");
        let err = product(w.view(), xm, Some(&bias[1..]), &out, Part::WHOLE).unwrap_err();
        assert!(err.contains("bias length"), "{err}");
        let mut small = vec![0f32; m * n - 1];
        let err = product(w.view(), xm, None, &Output::new(&mut small), Part::WHOLE).unwrap_err();
        assert!(err.contains("output holds"), "{err}");
        assert!(
            PackedQ8View::new(&w.bytes[1..], k, n).is_none(),
            "short weight"
        );
        assert!(
            PackedQ8View::new(&w.bytes, k, n - 16).is_none(),
            "wrong shape"
        );
    }

    #[test]
    fn the_fused_convolution_gives_the_bits_of_im2col_then_the_product() {
        if q8_kernel_level().is_none() {
            fail_under_ci("this CPU cannot run the q8_0 product");
            return;
        }
        // (IC, K, OC, L, stride, pad, dilation): "same" paddings as Kokoro's residual
        // blocks, a strided one, and lengths that leave partial chunks and tiles.
        for &(ic, kw, oc, len, stride, pad, dilation) in &[
            (32, 3, 16, 37, 1, 1, 1),
            (32, 7, 32, 70, 1, 9, 3),
            (64, 11, 48, 45, 1, 25, 5),
            (32, 5, 16, 50, 2, 3, 1),
            (96, 1, 16, 3, 1, 0, 1),
            // Padding wider than the kernel's reach: the last outputs read only zeros.
            (32, 1, 16, 5, 1, 2, 1),
            (32, 3, 16, 40, 3, 4, 1),
        ] {
            let steps = ConvSteps {
                kernel_width: kw,
                stride,
                pad,
                dilation,
            };
            let k = ic * kw;
            let w = PackedQ8::pack(&q8_rows(oc, k, (k + oc) as u64), k, oc).unwrap();
            let x = values(len * ic, len as u64, 2.0);
            let xm = Matrix::rows(&x, len, ic).unwrap();
            let bias = values(oc, 31, 1.0);
            let ol = steps.output_len(len).unwrap();
            assert_eq!(ol, (len + 2 * pad - dilation * (kw - 1) - 1) / stride + 1);
            // The plain route: every im2col row (tap-major), one product, a transpose.
            let mut cols = vec![0f32; ol * k];
            for t in 0..ol {
                for c in 0..ic {
                    for j in 0..kw {
                        let at = (t * stride + j * dilation) as isize - pad as isize;
                        cols[t * k + j * ic + c] = if (0..len as isize).contains(&at) {
                            x[c * len + at as usize]
                        } else {
                            0.0
                        };
                    }
                }
            }
            let mut rows_major = vec![0f32; ol * oc];
            product(
                w.view(),
                Matrix::rows(&cols, k, ol).unwrap(),
                Some(&bias),
                &Output::new(&mut rows_major),
                Part::WHOLE,
            )
            .unwrap();
            let want: Vec<u32> = (0..ol * oc)
                .map(|i| rows_major[(i % ol) * oc + i / ol].to_bits())
                .collect();
            for nth in 1..=3 {
                let mut y = vec![f32::NAN; ol * oc];
                let out = Output::new(&mut y);
                for ith in 0..nth {
                    let part = Part::new(ith, nth).unwrap();
                    conv_time_major(w.view(), xm, steps, Some(&bias), &out, part).unwrap();
                }
                let got: Vec<u32> = y.iter().map(|v| v.to_bits()).collect();
                assert!(got == want, "{ic}x{kw}->{oc} over {len} (nth {nth})");
            }
        }
        let steps = ConvSteps {
            kernel_width: 3,
            stride: 1,
            pad: 0,
            dilation: 1,
        };
        let w = PackedQ8::pack(&q8_rows(16, 96, 5), 96, 16).unwrap();
        let x = values(2 * 32, 6, 1.0);
        let mut y = vec![0f32; 16];
        let out = Output::new(&mut y);
        let short = Matrix::rows(&x, 2, 32).unwrap();
        let err = conv_time_major(w.view(), short, steps, None, &out, Part::WHOLE).unwrap_err();
        assert!(err.contains("no output"), "{err}");
        let narrow = Matrix::rows(&x, 4, 16).unwrap();
        let err = conv_time_major(w.view(), narrow, steps, None, &out, Part::WHOLE).unwrap_err();
        assert!(err.contains("kernel row"), "{err}");
        // Six taps over 16 channels fill the kernel row, but a position's 16 channels
        // are not a block.
        let half_blocks = ConvSteps {
            kernel_width: 6,
            ..steps
        };
        let narrow = Matrix::rows(&x, 4, 16).unwrap();
        let err =
            conv_time_major(w.view(), narrow, half_blocks, None, &out, Part::WHOLE).unwrap_err();
        assert!(err.contains("not whole q8_0 blocks"), "{err}");
        assert_eq!(ConvSteps { stride: 0, ..steps }.output_len(10), None);
    }

    #[test]
    fn im2col_rows_are_the_same_with_and_without_avx512() {
        let levels = float_levels();
        report_missing("im2col row builder", &levels);
        let (len, channels) = (40, 5);
        let x = values(len * channels, 41, 1.0);
        let xm = Matrix::rows(&x, len, channels).unwrap();
        for (kw, stride, pad, dilation) in
            [(3, 1, 1, 1), (11, 1, 25, 5), (7, 2, 3, 3), (17, 1, 8, 1)]
        {
            let steps = ConvSteps {
                kernel_width: kw,
                stride,
                pad,
                dilation,
            };
            let outputs = 2..steps.output_len(len).unwrap();
            let mut samples = Vec::new();
            let input = ChunkInput::gather(&mut samples, &xm, steps, outputs.clone());
            for r in 0..outputs.len() {
                let rows: Vec<Vec<f32>> = levels
                    .iter()
                    .map(|&level| {
                        let mut row = vec![f32::NAN; channels * kw];
                        input.row(level, steps, r, &mut row);
                        row
                    })
                    .collect();
                for (c, taps) in rows[0].chunks(kw).enumerate() {
                    for (j, &v) in taps.iter().enumerate() {
                        let at =
                            ((outputs.start + r) * stride + j * dilation) as isize - pad as isize;
                        let want = if (0..len as isize).contains(&at) {
                            x[c * len + at as usize]
                        } else {
                            0.0
                        };
                        assert_eq!(
                            v.to_bits(),
                            want.to_bits(),
                            "{steps:?} row {r} channel {c} tap {j}"
                        );
                    }
                }
                assert!(rows.windows(2).all(|w| w[0] == w[1]), "{steps:?} row {r}");
            }
        }
    }
}
