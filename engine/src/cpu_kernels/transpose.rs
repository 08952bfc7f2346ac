//! A transposed copy of an f32 matrix, a block at a time. ggml's copy of a transposed
//! view reads or writes one element per row of the other side, which made it 3% of a
//! one-thread Whisper run (the encoder's time-major input, and the cross-attention
//! values it stores with positions adjacent).

use super::{expect_eq, split_range, KernelResult, Matrix, Output, Part};

/// Side of the square blocks copied at once: 32 x 32 floats, 4 KiB read and written.
const BLOCK: usize = 32;

/// `y` (`x`'s columns as rows: `cols` rows of `rows` floats) = `x` (`rows` rows of
/// `cols`, one batch) transposed, `y[c][r] = x[r][c]`: the output rows `part` names, in
/// runs of [`BLOCK`]. Refuses batches or an output of another length.
pub fn transpose(x: Matrix<'_, f32>, y: &Output<'_>, part: Part) -> KernelResult {
    let [cols, rows, batches] = x.dims();
    expect_eq("the batches", batches, 1)?;
    y.expect_len("the transposed copy", cols * rows)?;
    let outs = split_range(cols, BLOCK, part.ith, part.nth);
    if outs.is_empty() || rows == 0 {
        return Ok(());
    }
    // SAFETY: output rows `outs` lie inside y (its length was checked above), and no
    // other part's rows overlap them (split_range).
    let out =
        unsafe { std::slice::from_raw_parts_mut(y.ptr.add(outs.start * rows), outs.len() * rows) };
    let mut tile = [[0f32; BLOCK]; BLOCK];
    for c0 in outs.clone().step_by(BLOCK) {
        let c1 = (c0 + BLOCK).min(outs.end);
        for r0 in (0..rows).step_by(BLOCK) {
            let r1 = (r0 + BLOCK).min(rows);
            for (t, r) in tile.iter_mut().zip(r0..r1) {
                let at = r * x.row_stride;
                t[..c1 - c0].copy_from_slice(&x.data[at + c0..at + c1]);
            }
            for c in c0..c1 {
                let row = &mut out[(c - outs.start) * rows..][r0..r1];
                for (o, t) in row.iter_mut().zip(&tile) {
                    *o = t[c - c0];
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every element lands at its transposed place, from a strided source, in every
    /// split into parts (blocks whole and cut short on both sides).
    #[test]
    fn transposes_in_every_split() {
        for (cols, rows, stride) in [(1, 1, 1), (70, 45, 70), (33, 100, 40), (384, 64, 768)] {
            let x: Vec<f32> = (0..rows * stride).map(|i| i as f32).collect();
            let m = Matrix::new(&x, [cols, rows, 1], [stride, rows * stride]).unwrap();
            for nth in [1, 2, 3] {
                let mut y = vec![f32::NAN; cols * rows];
                let out = Output::new(&mut y);
                for ith in 0..nth {
                    transpose(m, &out, Part::new(ith, nth).unwrap()).unwrap();
                }
                for c in 0..cols {
                    for r in 0..rows {
                        assert_eq!(y[c * rows + r], x[r * stride + c], "{cols}x{rows} {nth}");
                    }
                }
            }
        }
        let x = vec![0f32; 12];
        let m = Matrix::new(&x, [4, 3, 1], [4, 12]).unwrap();
        let mut short = vec![0f32; 11];
        assert!(transpose(m, &Output::new(&mut short), Part::WHOLE).is_err());
        let batched = Matrix::new(&x, [2, 3, 2], [2, 6]).unwrap();
        let mut y = vec![0f32; 12];
        assert!(transpose(batched, &Output::new(&mut y), Part::WHOLE).is_err());
    }
}
